"""What a worker makes of its namespace's registrations: no Redis, no clock."""

from __future__ import annotations

import math

import pytest

from lockworker.model.presence import (
    NOBODY,
    Member,
    Registered,
    View,
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
