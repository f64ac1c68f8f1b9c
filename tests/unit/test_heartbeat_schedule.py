"""The heartbeat's schedule, stepped by hand with a FakeClock: renew about every third of
the lease, stay valid while renewals succeed, lose the lease the moment they cannot."""

from __future__ import annotations

import itertools

import pytest

import lockworker
from lockworker.errors import RedisUnavailable
from lockworker.runtime.lease import Heartbeat, Lease, valid_until
from lockworker.testing import FakeClock

LEASE = 3.0


def granted(clock: FakeClock, outcomes: list[object]) -> tuple[Lease, list[float], list[str]]:
    """A lease whose renewals return (or raise) the given outcomes in turn."""
    renewals: list[float] = []
    lost: list[str] = []

    def renew(deadline: float) -> bool:
        renewals.append(clock.monotonic())
        outcome = outcomes.pop(0) if outcomes else True
        if isinstance(outcome, Exception):
            raise outcome
        return bool(outcome)

    lease = Lease.granted(renew, LEASE, clock.monotonic(),
                          on_lost=lambda _l, reason: lost.append(reason))
    return lease, renewals, lost


def test_the_first_renewal_is_due_a_third_of_the_lease_after_the_grant() -> None:
    clock = FakeClock()
    sent = clock.monotonic()
    lease, _, _ = granted(clock, [])
    assert lease.next_renewal == pytest.approx(sent + LEASE / 3)
    assert lease.valid_until == pytest.approx(valid_until(sent, LEASE))


def test_renewing_every_third_keeps_a_lease_valid_far_past_its_length() -> None:
    clock = FakeClock()
    heartbeat = Heartbeat(clock, interval=LEASE / 3)
    lease, renewals, lost = granted(clock, [])
    start = clock.monotonic()
    for _ in range(30):  # ten leases long
        clock.advance(lease.next_renewal - clock.monotonic())
        heartbeat.beat(lease)
        assert lease.is_valid(clock.monotonic())
    assert not lost and len(renewals) == 30
    gaps = [b - a for a, b in itertools.pairwise([start, *renewals])]
    assert all(g == pytest.approx(LEASE / 3) for g in gaps)


def test_missing_renewals_lose_the_lease_exactly_when_validity_passes() -> None:
    clock = FakeClock()
    lease, renewals, lost = granted(clock, [])
    clock.advance(lease.valid_until - clock.monotonic() - 0.001)
    assert lease.is_valid(clock.monotonic())
    clock.advance(0.001)
    assert not lease.is_valid(clock.monotonic())
    Heartbeat(clock, interval=1.0).beat(lease)
    assert lease.lost and renewals == [] and len(lost) == 1


@pytest.mark.parametrize("failure", [False, RedisUnavailable("unreachable")])
def test_a_failed_renewal_after_good_ones_loses_the_lease_once(failure: object) -> None:
    clock = FakeClock()
    heartbeat = Heartbeat(clock, interval=1.0)
    lease, _, lost = granted(clock, [True, True, failure, True])
    for _ in range(4):
        clock.advance(1.0)
        heartbeat.beat(lease)
    assert lease.lost and len(lost) == 1  # reported once, never revived


def test_a_jobs_lost_flag_follows_the_local_clock_without_the_heartbeat() -> None:
    """``job.lost`` turns true on time even while the heartbeat is stuck in a call."""
    clock = FakeClock()
    lease, _, _ = granted(clock, [])
    job = lockworker.Job(id="j", payload=None, attempt=1, token=1, max_attempts=3,
                         holder="me", _clock=clock, _lease=lease)
    job.check()
    clock.advance(LEASE)
    assert job.lost
    with pytest.raises(lockworker.LockLost):
        job.check()
