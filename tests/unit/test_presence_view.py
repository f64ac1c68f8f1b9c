"""What a worker makes of its namespace's registrations: no Redis, no clock."""

from __future__ import annotations

import math

import pytest

from lockworker.model.presence import (
    NOBODY,
    Member,
    Registered,
    View,
    acting_until,
    decode_member,
    presence_keys,
    primary_until,
    registered,
)
from lockworker.model.state import Role

PRIMARY = Member(Role.PRIMARY, "host-a", "r1", "a.example", 11, 3000)
OTHER_PRIMARY = Member(Role.PRIMARY, "host-c", "r3", "c.example", 33, 3000)
BACKUP = Member(Role.BACKUP, "host-b|x", "r2", "b.example", 22, 3000)


def test_a_member_round_trips_and_foreign_members_are_left_out() -> None:
    for member in (PRIMARY, BACKUP):
        assert decode_member(member.encode()) == member
    found = registered([
        (PRIMARY.encode(), 2000), ("not json", 5000), ('{"role": "boss"}', 5000),
        (BACKUP.encode(), 0),  # ended
    ])
    assert found == [Registered(PRIMARY, 2.0)]
    assert found[0].last_seen == pytest.approx(1.0)


def test_presence_keys_share_the_namespaces_hash_tag() -> None:
    keys = presence_keys("bill{ing")
    assert keys.extra("members") == "lw:presence:workers:{bill%7Bing}:members"
    assert keys.wake == "lw:presence:workers:{bill%7Bing}:wake"


def test_primary_until_is_the_longest_primary_registration() -> None:
    found = [Registered(BACKUP, 9.0), Registered(PRIMARY, 1.0), Registered(OTHER_PRIMARY, 2.5)]
    assert primary_until(found, 100.0) == 102.5
    assert primary_until([Registered(BACKUP, 9.0)], 100.0) == NOBODY


def test_a_backup_reads_again_when_the_primary_it_saw_ends_and_says_when_it_is_gone() -> None:
    view = View(3.0, watch=True)
    assert view.defer_until == NOBODY  # nothing read yet: nobody to defer to
    assert not view.read([Registered(PRIMARY, 2.0), Registered(BACKUP, 3.0)], 100.0)
    assert view.primary_until == 102.0
    assert view.defer_until == math.inf
    assert view.next_read() == pytest.approx(101.0)  # its own refresh (ttl / 3) first
    assert not view.read([Registered(PRIMARY, 1.5)], 101.0)  # refreshed meanwhile
    assert view.next_read() == pytest.approx(102.0)
    # a clean stop: the next reading shows no primary: the waiting jobs look again
    assert view.read([Registered(BACKUP, 3.0)], 101.2)
    assert view.primary_until == view.defer_until == NOBODY
    assert view.next_read() == pytest.approx(102.2)


def test_a_crashed_primary_is_noticed_by_the_read_at_its_registrations_end() -> None:
    view = View(9.0, watch=True)
    view.read([Registered(PRIMARY, 1.0)], 100.0)
    assert view.next_read() == pytest.approx(101.001)  # not the own refresh at 103
    # a loop running late still defers: only a reading says the primary is gone
    assert view.defer_until == math.inf
    assert view.read([], 101.3)
    assert view.defer_until == NOBODY
    assert view.next_read() == pytest.approx(104.3)


def test_a_failed_refresh_is_tried_again_soon_and_never_in_a_busy_loop() -> None:
    view = View(9.0, watch=True)
    view.read([Registered(PRIMARY, 1.0)], 100.0)
    view.failed(101.001)
    assert view.defer_until == math.inf  # kept until a reading says otherwise
    assert view.next_read() == pytest.approx(102.001)


def test_a_primary_only_refreshes_its_own_registration() -> None:
    view = View(3.0, watch=False)
    view.read([Registered(OTHER_PRIMARY, 0.2)], 100.0)
    assert view.next_read() == pytest.approx(101.0)


def test_a_presence_sets_key_parses_back_to_its_namespace() -> None:
    from lockworker.model.presence import parse_members_key

    for namespace in ("billing", "a}b{c", "%7B", "x:{y"):
        assert parse_members_key(presence_keys(namespace).extra("members")) == namespace
    for key in ("lw:presence:workers:{}:members", "lw:job:workers:{a}:members",
                "lw:presence:workers:{a}:wake", "lw:presence:workers:{a}b}:members"):
        assert parse_members_key(key) is None


BACKUP_A = Member(Role.BACKUP, "backup-a", "r4", "a.example", 44, 3000)
BACKUP_B = Member(Role.BACKUP, "backup-b", "r5", "b.example", 55, 3000)
BACKUP_B_AGAIN = Member(Role.BACKUP, "backup-b", "r6", "b.example", 66, 3000)


def test_with_no_primary_a_backup_holds_back_for_the_backups_ranked_before_it() -> None:
    found = [Registered(BACKUP_A, 2.0), Registered(BACKUP_B, 3.0), Registered(BACKUP_B_AGAIN, 1.0)]
    assert acting_until(found, 100.0, BACKUP_A) == NOBODY  # first: serves as a primary
    assert acting_until(found, 100.0, BACKUP_B) == 102.0  # behind backup-a
    assert acting_until(found, 100.0, BACKUP_B_AGAIN) == 103.0  # one owner: by run
    assert acting_until(found, 100.0, None) == NOBODY  # a primary holds back for nobody
    # A primary counts for every backup, the first one too, and for no primary.
    with_primary = [*found, Registered(PRIMARY, 5.0)]
    assert acting_until(with_primary, 100.0, BACKUP_A) == 105.0
    assert acting_until(with_primary, 100.0, PRIMARY) == 105.0
    assert primary_until(found, 100.0) == NOBODY  # contests still defer to primaries only


def test_a_backup_is_woken_when_the_backup_it_held_back_for_goes() -> None:
    view = View(9.0, watch=True, me=BACKUP_B)
    assert not view.read([Registered(PRIMARY, 2.0), Registered(BACKUP_A, 3.0)], 100.0)
    assert view.hold_until == view.defer_until == math.inf
    # The primary leaves: contests stop deferring (a wake), deliveries still held back.
    assert view.read([Registered(BACKUP_A, 2.0), Registered(BACKUP_B, 3.0)], 101.0)
    assert view.defer_until == NOBODY and view.hold_until == math.inf
    assert view.next_read() == pytest.approx(103.001)  # the end of backup-a's registration
    assert not view.read([Registered(BACKUP_A, 3.0)], 102.0)
    # backup-a leaves (or its registration ends after a crash): a wake, nothing held.
    assert view.read([Registered(BACKUP_B, 3.0)], 103.0)
    assert view.hold_until == NOBODY


def test_the_first_backup_and_a_primary_never_hold_back_for_a_backup() -> None:
    first = View(9.0, watch=True, me=BACKUP_A)
    first.read([Registered(BACKUP_A, 3.0), Registered(BACKUP_B, 3.0)], 100.0)
    assert first.hold_until == NOBODY
    primary = View(9.0, watch=False, me=PRIMARY)
    primary.read([Registered(BACKUP_A, 3.0)], 100.0)
    assert primary.hold_until == primary.defer_until == NOBODY


def test_a_backup_reads_again_at_the_primarys_end_before_a_ranked_backups() -> None:
    view = View(9.0, watch=True, me=BACKUP_B)
    view.read([Registered(PRIMARY, 1.0), Registered(BACKUP_A, 2.5)], 100.0)
    assert view.next_read() == pytest.approx(101.001)  # the primary's end: contests defer to it
    assert view.read([Registered(BACKUP_A, 1.5)], 101.001)  # gone: contests look again
    assert view.hold_until == math.inf  # still behind backup-a
    assert view.next_read() == pytest.approx(102.502)


def test_the_view_names_the_runs_it_defers_to() -> None:
    view = View(9.0, watch=True, me=BACKUP_B)
    view.read([Registered(PRIMARY, 1.0), Registered(BACKUP_A, 2.0), Registered(BACKUP_B, 2.0),
               Registered(BACKUP_B_AGAIN, 2.0)], 100.0)
    assert view.primary_runs == {PRIMARY.run}
    assert view.acting_runs == {PRIMARY.run, BACKUP_A.run}  # not itself, nor one after it
    primary = View(9.0, watch=False, me=PRIMARY)
    primary.read([Registered(OTHER_PRIMARY, 1.0), Registered(BACKUP_A, 2.0)], 100.0)
    assert primary.acting_runs == primary.primary_runs == {OTHER_PRIMARY.run}


def test_a_backup_defers_for_its_start_up_grace_whatever_its_first_reading_shows() -> None:
    view = View(3.0, watch=True, grace=0.5)
    view.begin(10.0)
    view.begin(11.0)  # the first start only
    assert not view.read([Registered(BACKUP, 3.0)], 10.0)  # nobody registered yet
    assert view.defer_until == 10.5
    assert view.hold_until == 10.5
    view.read([Registered(PRIMARY, 2.0), Registered(BACKUP, 3.0)], 10.1)  # it joined
    assert view.defer_until == math.inf  # deferring to it, past the grace too
    assert view.read([Registered(BACKUP, 3.0)], 10.2)  # it left, within the grace
    assert view.defer_until == NOBODY  # the grace ended with the primary heard of
    view.begin(10.3)  # a later start (another call) begins no grace
    assert view.defer_until == NOBODY


def test_a_backup_that_heard_of_a_primary_before_it_began_has_no_grace() -> None:
    view = View(3.0, watch=True, grace=0.5)
    view.read([Registered(PRIMARY, 2.0)], 10.0)
    view.begin(10.0)
    assert view.read([], 10.1)  # the primary left: compete at once
    assert view.defer_until == NOBODY


def test_a_primary_has_no_grace() -> None:
    view = View(3.0, watch=False)
    view.begin(10.0)
    view.read([], 10.0)
    assert view.defer_until == 10.0  # not after its start: it competes at once
