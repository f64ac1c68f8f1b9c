"""``on_lost`` runs exactly once when a term or an attempt ends other than by a clean
resignation, and never after one; the log says why. Driven by hand: a FakeClock for
the holder's own judgement, and a heartbeat without a thread whose beats the test
takes (the server's lease runs on real time, well past these tests)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pytest
import redis

from lockworker import Job, Leader, Outcome, Term, Worker
from lockworker.daemons.leader import leader_keys
from lockworker.model.keys import JobKeys
from lockworker.runtime.lease import EXPIRED_IN_HOOK, REFUSED_AT_END, Heartbeat, Lease
from lockworker.testing import FakeClock, capture_events

LEASE = 3.0


def manual_heartbeat(clock: FakeClock) -> Heartbeat:
    """A heartbeat whose thread does nothing: it beats only when the test says so."""
    return Heartbeat(
        clock, LEASE / 3, thread_factory=lambda **_: threading.Thread(target=lambda: None)
    )


def beat(heartbeat: Heartbeat, lease: Lease | None) -> None:
    assert lease is not None
    heartbeat.beat(lease)


class Hand:
    """What a scenario does in ``on_acquired``: given the term or job, its lease, the
    clock and the heartbeat."""

    def __init__(self, script: Callable[[Any, Lease, FakeClock, Heartbeat], None]) -> None:
        self.script = script
        self.lost: list[Any] = []
        self.calls = 0


def lead(client: redis.Redis, name: str, hand: Hand) -> tuple[Leader, list[Any]]:
    """One term of a Leader on a FakeClock, ``hand.script`` run in it; then stopped."""
    clock = FakeClock()
    heartbeat = manual_heartbeat(clock)

    def on_acquired(term: Term) -> None:
        hand.calls += 1
        assert term._lease is not None
        try:
            hand.script(term, term._lease, clock, heartbeat)
        finally:
            leader.stop()

    leader = Leader(
        client, name=name, lock_timeout=LEASE, clock=clock, handle_signals=False,
        on_acquired=on_acquired, on_lost=hand.lost.append,
    )
    leader._heartbeat = heartbeat
    with capture_events() as logged:
        leader.run()
    return leader, logged


def losses(logged: list[Any], event: str) -> list[str]:
    return [e["reason"] for e in logged if e["event"] == event]


# -- a leader's term -----------------------------------------------------------------


def test_a_term_that_ran_out_while_the_hook_ran_is_reported_when_the_hook_returns(
    redis_client: redis.Redis, namespace: str
) -> None:
    """The hook sees ``term.lost`` and returns before the heartbeat wakes: on_lost runs
    then, once; the heartbeat's late beat adds nothing."""
    seen: list[Lease] = []

    def paused(term: Term, lease: Lease, clock: FakeClock, _hb: Heartbeat) -> None:
        clock.advance(LEASE * 2)  # a pause past the lease
        assert term.lost and not lease.lost  # noticed by the hook, not reported yet
        seen.append(lease)

    hand = Hand(paused)
    leader, logged = lead(redis_client, namespace, hand)
    assert len(hand.lost) == 1 and hand.lost[0].lost
    assert losses(logged, "leader.lost") == [EXPIRED_IN_HOOK]
    leader._heartbeat.beat(seen[0])  # the heartbeat wakes late: nothing more
    assert len(hand.lost) == 1


def test_both_paths_noticing_report_once(redis_client: redis.Redis, namespace: str) -> None:
    """The heartbeat reports the expiry while the hook runs; the hook then returns on
    the same expired lease: one on_lost, one event, the heartbeat's reason."""

    def paused(term: Term, lease: Lease, clock: FakeClock, hb: Heartbeat) -> None:
        clock.advance(LEASE * 2)
        beat(hb, lease)
        assert lease.lost

    hand = Hand(paused)
    _, logged = lead(redis_client, namespace, hand)
    assert len(hand.lost) == 1
    reasons = losses(logged, "leader.lost")
    assert len(reasons) == 1 and "expired before it could be renewed" in reasons[0]


def test_a_refused_renewal_is_reported_once(redis_client: redis.Redis, namespace: str) -> None:
    """Another hand took the lease: the renewal is refused (on_lost), and so is the
    resignation after the hook (no second on_lost)."""

    def taken(term: Term, lease: Lease, clock: FakeClock, hb: Heartbeat) -> None:
        redis_client.delete(leader_keys(namespace).lock)
        clock.advance(LEASE / 3)
        beat(hb, lease)
        assert term.lost

    hand = Hand(taken)
    _, logged = lead(redis_client, namespace, hand)
    assert len(hand.lost) == 1
    assert losses(logged, "leader.lost") == ["lease taken over or expired on the server"]


def test_a_refused_resignation_of_a_term_still_valid_here_is_reported(
    redis_client: redis.Redis, namespace: str
) -> None:
    """Locally still valid when the hook returns, but gone on the server: the refused
    release reports the loss."""

    def taken(term: Term, lease: Lease, clock: FakeClock, hb: Heartbeat) -> None:
        redis_client.delete(leader_keys(namespace).lock)

    hand = Hand(taken)
    _, logged = lead(redis_client, namespace, hand)
    assert len(hand.lost) == 1
    assert losses(logged, "leader.lost") == [REFUSED_AT_END]
    assert not [e for e in logged if e["event"] == "leader.resigned"]


def test_a_clean_resignation_never_calls_on_lost(redis_client: redis.Redis, namespace: str) -> None:
    seen: list[Lease] = []

    def resigns(term: Term, lease: Lease, clock: FakeClock, hb: Heartbeat) -> None:
        clock.advance(LEASE / 2)
        seen.append(lease)

    hand = Hand(resigns)
    leader, logged = lead(redis_client, namespace, hand)
    assert hand.calls == 1 and hand.lost == []
    assert losses(logged, "leader.lost") == []
    assert [e["event"] for e in logged if e["event"] == "leader.resigned"] == ["leader.resigned"]
    leader.clock.advance(LEASE * 2)  # type: ignore[attr-defined]
    leader._heartbeat.beat(seen[0])  # a released lease is never reported, even late
    assert hand.lost == []


# -- a worker's attempt --------------------------------------------------------------


def work(client: redis.Redis, namespace: str, hand: Hand) -> tuple[Outcome, list[Any]]:
    """``process`` one job on a FakeClock, ``hand.script`` run in its first attempt."""
    clock = FakeClock()
    heartbeat = manual_heartbeat(clock)

    def on_acquired(job: Job) -> None:
        hand.calls += 1
        if hand.calls == 1:
            assert job._lease is not None
            hand.script(job, job._lease, clock, heartbeat)

    worker = Worker(
        client, namespace=namespace, lock_timeout=LEASE, clock=clock, handle_signals=False,
        on_acquired=on_acquired, on_lost=hand.lost.append,
    )
    worker._heartbeat = heartbeat
    try:
        with capture_events() as logged:
            outcome = worker.process("job")
    finally:
        worker.close()
    return outcome, logged


def test_a_job_lease_that_ran_out_in_the_hook_is_reported_once(
    redis_client: redis.Redis, namespace: str
) -> None:
    def paused(job: Job, lease: Lease, clock: FakeClock, hb: Heartbeat) -> None:
        clock.advance(LEASE * 2)
        assert job.lost and not lease.lost

    hand = Hand(paused)
    _, logged = work(redis_client, namespace, hand)
    assert len(hand.lost) == 1
    assert losses(logged, "lease.lost") == [EXPIRED_IN_HOOK]


@pytest.mark.parametrize("renewal_first", [True, False], ids=["renewal", "completion"])
def test_a_job_lease_taken_away_is_reported_once(
    redis_client: redis.Redis, namespace: str, renewal_first: bool
) -> None:
    """Refused at the renewal and then at the completion, or only at the completion:
    one on_lost; the job is then run again in a new attempt."""

    def taken(job: Job, lease: Lease, clock: FakeClock, hb: Heartbeat) -> None:
        redis_client.delete(JobKeys.of(namespace, "job").lock)
        if renewal_first:
            clock.advance(LEASE / 3)
            beat(hb, lease)
            assert job.lost

    hand = Hand(taken)
    outcome, logged = work(redis_client, namespace, hand)
    assert outcome is Outcome.DONE and hand.calls == 2
    assert len(hand.lost) == 1 and hand.lost[0].attempt == 1
    expected = "lease taken over or expired on the server" if renewal_first else REFUSED_AT_END
    assert losses(logged, "lease.lost") == [expected]


def test_a_job_done_in_time_never_calls_on_lost(redis_client: redis.Redis, namespace: str) -> None:
    hand = Hand(lambda job, lease, clock, hb: clock.advance(LEASE / 2))
    outcome, logged = work(redis_client, namespace, hand)
    assert outcome is Outcome.DONE and hand.lost == [] and losses(logged, "lease.lost") == []
