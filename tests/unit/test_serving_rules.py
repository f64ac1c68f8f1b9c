"""The serving rules both drivers call (lockworker.serving.rules): pure decisions, no
server, no thread, no task.

The sync serving (threads) and the asyncio serving (tasks) keep only their I/O; what
they decide about claims, a job id's deliveries, a backup's looks and the reports of
outcomes is decided here once, so each rule is checked here once.
"""

from __future__ import annotations

import pytest

from lockworker.errors import ForeignValueError, InvalidConfig, LockworkerError
from lockworker.model.keys import JobKeys
from lockworker.model.state import Grant, JobStatus, Outcome, Settle, Snapshot
from lockworker.serving import rules
from lockworker.serving.delivery import Delivery
from lockworker.serving.held import Held


def test_a_job_id_runs_once_at_a_time_and_its_later_deliveries_follow_it_in_order() -> None:
    running = rules.Running()
    first, second, third = Delivery("j", 1), Delivery("j", 2), Delivery("j", 3)
    other = Delivery("k", None)
    assert running.claim(first) and running.claim(other)
    assert not running.claim(second) and not running.claim(third)  # behind the first
    assert running.following(first, going_on=True) is second
    assert running.following(second, going_on=True) is third
    assert running.following(third, going_on=True) is None
    assert running.claim(Delivery("j", 4))  # no longer running: runs at once
    running.drop(other)
    assert running


def test_a_serving_that_ends_runs_no_delivery_queued_behind_a_job() -> None:
    running = rules.Running()
    first = Delivery("j", 1)
    assert running.claim(first) and not running.claim(Delivery("j", 2))
    assert running.following(first, going_on=False) is None
    assert not running  # the job no longer runs: what the serving's end waits for


def test_a_round_trip_sends_every_claim_and_completion_and_an_ending_one_no_claim() -> None:
    trips: rules.Trips[str, str] = rules.Trips()
    assert not trips
    trips.claims += ["c1", "c2"]
    trips.completes += ["d1"]
    assert trips.take(ending=False) == ([], ["c1", "c2"], ["d1"])
    assert not trips
    trips.claims += ["c3"]
    trips.completes += ["d2"]
    assert trips.take(ending=True) == (["c3"], [], ["d2"])  # a DONE due still goes
    trips.claims += ["c4"]
    trips.completes += ["d3"]
    assert trips.take_completes() == ["d3"] and trips.claims == ["c4"]


def test_only_a_grant_starts_an_attempt_and_every_other_answer_goes_to_the_contest() -> None:
    held = Snapshot(JobStatus.PENDING, 1, 5, "other")
    grant = Grant(1, 7)
    claims = ["a", "b", "c", "d"]
    answers = [grant, held, None, LockworkerError("boom")]
    assert rules.granted(claims, answers) == ([("a", grant)], ["b", "c", "d"])


@pytest.mark.parametrize(("reply", "pending", "after"), [
    (Settle.DONE, False, rules.After.COMPLETED),
    (Settle.RELEASED, False, rules.After.COMPLETED),  # refused: completed() decides
    (Settle.DONE, True, rules.After.REPORTS),
    (LockworkerError("batch"), False, rules.After.AGAIN),
    (LockworkerError("batch"), True, rules.After.AGAIN),
])
def test_a_done_answered_with_an_error_goes_again_alone(
    reply: object, pending: bool, after: rules.After
) -> None:
    assert rules.after_done(reply, reports_pending=pending) is after


def test_a_job_claimed_ahead_runs_its_hook_only_while_serving_goes_on_and_its_lease_holds() -> None:
    assert rules.turn(ending=False, lease_valid=True) is rules.Turn.HOOK
    assert rules.turn(ending=False, lease_valid=False) is rules.Turn.CONTEST
    assert rules.turn(ending=True, lease_valid=True) is rules.Turn.RELEASE
    assert rules.turn(ending=True, lease_valid=False) is rules.Turn.RELEASE


def test_only_resolved_outcomes_are_reported_and_a_job_that_gave_up_keeps_its_origin() -> None:
    assert rules.ended(Outcome.DONE) == (False, True)
    assert rules.ended(Outcome.DONE_ELSEWHERE) == (False, True)
    assert rules.ended(Outcome.GAVE_UP) == (True, True)
    for pending in set(Outcome) - rules.RESOLVED:
        assert rules.ended(pending) == (False, False)


def test_a_refused_job_is_skipped_and_any_other_error_stops_the_serving() -> None:
    assert rules.skipped(InvalidConfig("bad id"))
    assert rules.skipped(ForeignValueError("lw:job:ns:{j}:state", b"x"))
    assert not rules.skipped(LockworkerError("redis down"))
    assert not rules.skipped(KeyboardInterrupt())


class _Worker:
    def __init__(self, stopping: bool) -> None:
        self.stopping = stopping


def test_a_serving_ends_when_stopped_failed_or_cancelled() -> None:
    assert not rules.ends(_Worker(False), None)
    assert rules.ends(_Worker(True), None)
    assert rules.ends(_Worker(False), RuntimeError())
    assert rules.ends(_Worker(False), None, cancelled=True)


def test_a_look_looks_at_each_job_and_the_witness_once_and_a_failed_one_sees_nothing() -> None:
    held = Held(1.0)
    d = Delivery("j", None)
    look = rules.Look(held, [(d, JobKeys.of("ns", "j"))])
    assert len(look.steps) == 1 and look.witness is None  # no witness kept
    assert look.failed() == [None]
    assert rules.Look(held, []).steps == []
