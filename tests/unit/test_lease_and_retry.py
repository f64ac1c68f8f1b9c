"""Leases, the heartbeat and bounded retries, driven by a FakeClock."""

from __future__ import annotations

import random
import threading
from collections.abc import Callable

import pytest
import redis

from lockworker.config import retry_delay, scheduled_delay
from lockworker.errors import RedisUnavailable
from lockworker.runtime.lease import (
    DRIFT_FIXED,
    EXPIRED_IN_HOOK,
    REFUSED_AT_END,
    Heartbeat,
    Lease,
    ended,
    let_go,
    lose,
    valid_until,
)
from lockworker.runtime.retry import RetryPolicy, call
from lockworker.testing import FakeClock


def make_lease(clock: FakeClock, renew: object, lease: float = 3.0) -> tuple[Lease, list[str]]:
    lost: list[str] = []
    now = clock.monotonic()
    held = Lease(
        renew=renew,  # type: ignore[arg-type]
        lease=lease, valid_until=valid_until(now, lease), next_renewal=now + lease / 3,
        on_lost=lambda _lease, reason: lost.append(reason),
    )
    return held, lost


def test_validity_ends_before_the_server_lease_by_the_drift_margin() -> None:
    assert valid_until(100.0, 10.0) == pytest.approx(100.0 + 10.0 * 0.99 - DRIFT_FIXED)
    assert valid_until(100.0, 10.0) < 110.0


def test_a_renewal_extends_validity_from_the_time_it_was_sent() -> None:
    clock = FakeClock()
    beat = Heartbeat(clock, interval=1.0)
    lease, lost = make_lease(clock, lambda deadline: True)
    clock.advance(1.0)
    sent = clock.monotonic()
    beat.beat(lease)
    assert lease.valid_until == pytest.approx(valid_until(sent, 3.0))
    assert lease.next_renewal == pytest.approx(sent + 1.0)
    assert not lost and lease.is_valid(clock.monotonic())


def test_a_lease_past_its_validity_is_lost_without_asking_redis() -> None:
    clock = FakeClock()
    calls: list[float] = []
    lease, lost = make_lease(clock, lambda deadline: calls.append(deadline) or True)
    clock.advance(3.0)  # a pause longer than the lease
    Heartbeat(clock, interval=1.0).beat(lease)
    assert lease.lost and calls == [] and "paused" in lost[0]


def test_a_refused_renewal_loses_the_lease() -> None:
    clock = FakeClock()
    lease, lost = make_lease(clock, lambda deadline: False)
    Heartbeat(clock, interval=1.0).beat(lease)
    assert lease.lost and not lease.is_valid(clock.monotonic()) and len(lost) == 1


def test_an_unreachable_redis_loses_the_lease() -> None:
    clock = FakeClock()

    def unreachable(deadline: float) -> bool:
        raise RedisUnavailable("down")

    lease, lost = make_lease(clock, unreachable)
    Heartbeat(clock, interval=1.0).beat(lease)
    assert lease.lost and "down" in lost[0]


def test_a_dropped_lease_is_never_reported_lost() -> None:
    clock = FakeClock()
    lease, lost = make_lease(clock, lambda deadline: False)
    heartbeat = Heartbeat(clock, interval=1.0)
    heartbeat.drop(lease)
    heartbeat.beat(lease)
    assert not lost


def test_letting_go_of_a_valid_lease_releases_it_and_reports_nothing() -> None:
    clock = FakeClock()
    lease, lost = make_lease(clock, lambda deadline: True)
    assert Heartbeat(clock, interval=1.0).end(lease) is True
    assert lease.released and not lease.lost and lost == []
    assert lose(lease, "late heartbeat") is False and lost == []


def test_letting_go_of_a_lease_that_ran_out_reports_the_loss_once() -> None:
    """The holder's hook saw the lease lost and returned before the heartbeat said so."""
    clock = FakeClock()
    lease, lost = make_lease(clock, lambda deadline: True)
    clock.advance(3.0)
    heartbeat = Heartbeat(clock, interval=1.0)
    assert heartbeat.end(lease) is False
    assert lease.lost and lost == [EXPIRED_IN_HOOK]
    heartbeat.beat(lease)  # the heartbeat wakes late: nothing more
    ended(lease, refused=True)  # the server refuses the release: nothing more
    assert lost == [EXPIRED_IN_HOOK]


def test_a_refusal_after_a_clean_let_go_is_a_loss_reported_once() -> None:
    clock = FakeClock()
    lease, lost = make_lease(clock, lambda deadline: True)
    assert let_go(lease, clock.monotonic()) is True
    ended(lease, refused=False)
    assert lost == []
    ended(lease, refused=True)
    ended(lease, refused=True)
    assert lost == [REFUSED_AT_END]


def test_the_heartbeat_and_the_holder_noticing_at_once_report_once() -> None:
    """Both paths race in two threads, many times: exactly one report each time."""
    for _ in range(300):
        clock = FakeClock()
        lease, lost = make_lease(clock, lambda deadline: True)
        clock.advance(3.0)
        start = threading.Barrier(2)

        def heartbeat(lease: Lease = lease, start: threading.Barrier = start) -> None:
            start.wait()
            lose(lease, "heartbeat")

        racer = threading.Thread(target=heartbeat)
        racer.start()
        start.wait()
        let_go(lease, clock.monotonic())
        racer.join()
        assert len(lost) == 1, lost


def failing(times: int, tries: list[int]) -> Callable[[], str]:
    """A step that fails with a connection error ``times`` times, then answers "ok"
    (each call appended to ``tries``)."""

    def flaky() -> str:
        tries.append(1)
        if len(tries) <= times:
            raise redis.ConnectionError("refused")
        return "ok"

    return flaky


def test_retry_retries_connection_errors_then_succeeds() -> None:
    clock = FakeClock()
    tries: list[int] = []
    flaky = failing(2, tries)
    assert call(flaky, clock=clock, policy=RetryPolicy(), what="test") == "ok"
    assert len(tries) == 3 and clock.sleeps  # it backed off between tries


def test_retries_and_the_job_schedule_leave_the_global_random_alone() -> None:
    """Their jitter comes from the system's generator: an application that seeds
    ``random`` keeps its sequence, whatever lockworker's threads retry meanwhile (and
    forked processes still draw different jitter)."""
    clock = FakeClock()
    random.seed(20261125)
    expected = random.getstate()
    tries: list[int] = []
    assert call(failing(5, tries), clock=clock, policy=RetryPolicy(), what="test") == "ok"
    schedule = retry_delay(None)  # the default: DEFAULT_RETRY_DELAY
    delays = [scheduled_delay(schedule, attempt) for attempt in range(1, 12)]
    assert random.getstate() == expected
    assert len(tries) == 6 and len(clock.sleeps) >= 4 and all(s > 0 for s in clock.sleeps)
    assert delays[0] == 0 and all(2 ** (n - 1) <= d <= 2 ** (n - 1) + 1
                                  for n, d in enumerate(delays[1:6], start=2))
    assert len({round(d % 1, 6) for d in delays[1:]}) > 1  # jittered, not constant


def test_retry_gives_up_at_the_deadline_with_redis_unavailable() -> None:
    clock = FakeClock()
    start = clock.monotonic()

    def down() -> None:
        raise redis.TimeoutError("timeout")

    with pytest.raises(RedisUnavailable, match="renew lease"):
        call(down, clock=clock, policy=RetryPolicy(budget=10.0), what="renew lease",
             deadline=start + 1.0)
    assert clock.monotonic() - start < 1.0 + RetryPolicy().maximum + RetryPolicy().initial


class _Log:
    """Records what retry logs: (level, event, fields)."""

    def __init__(self) -> None:
        self.records: list[tuple[str, str, dict[str, object]]] = []

    def bind(self, **context: object) -> _Log:
        return self

    def debug(self, event: str, **fields: object) -> None:
        self.records.append(("debug", event, fields))

    def info(self, event: str, **fields: object) -> None:
        self.records.append(("info", event, fields))

    def warning(self, event: str, **fields: object) -> None:
        self.records.append(("warning", event, fields))

    def error(self, event: str, **fields: object) -> None:
        self.records.append(("error", event, fields))


def test_retry_logs_the_first_failure_and_every_backoff_at_warning() -> None:
    """Retrying used to be silent for the whole budget: an outage showed only when the
    step finally failed. Each failed try is now a ``redis.retry`` warning naming the
    step, and the final error names it and counts every try."""
    clock, log = FakeClock(), _Log()
    tries: list[int] = []

    def down() -> None:
        tries.append(1)
        raise redis.ConnectionError("Connection refused")

    with pytest.raises(RedisUnavailable, match=r"acquire job 'j-7'.*after (\d+) tries") as err:
        call(down, clock=clock, policy=RetryPolicy(budget=2.0), what="acquire job 'j-7'",
             log=log)
    assert f"after {len(tries)} tries" in str(err.value)
    warnings = [r for r in log.records if r[0] == "warning"]
    # Every failed try but the last is followed by a backoff, and each is reported.
    assert len(tries) >= 3
    assert [r[1] for r in warnings] == ["redis.retry"] * (len(tries) - 1)
    assert warnings[0][2]["tries"] == 1 and "Connection refused" in str(warnings[0][2]["error"])
    assert all(r[2]["step"] == "acquire job 'j-7'" for r in warnings)
    assert [r[2]["tries"] for r in warnings] == list(range(1, len(warnings) + 1))
    assert all("retry_in" in r[2] for r in warnings[1:])


def test_retry_does_not_retry_errors_in_the_reply() -> None:
    clock = FakeClock()
    tries: list[int] = []

    def bad() -> None:
        tries.append(1)
        raise redis.ResponseError("ERR wrong")

    with pytest.raises(redis.ResponseError):
        call(bad, clock=clock, policy=RetryPolicy(), what="test")
    assert tries == [1]


@pytest.mark.parametrize("field", ["budget", "initial", "maximum"])
def test_retry_policy_refuses_non_positive_values(field: str) -> None:
    with pytest.raises(ValueError, match=field):
        RetryPolicy(**{field: 0})


def test_retries_running_out_are_logged_once_at_error_as_redis_unavailable() -> None:
    """The end of the retries was only the exception, which a caller may swallow: it is
    now an event too (``redis.unavailable``: what the alert on exhausted retries counts),
    naming the step, the tries and the last error."""
    clock, log = FakeClock(), _Log()
    tries: list[int] = []

    def down() -> None:
        tries.append(1)
        raise redis.ConnectionError("Connection refused")

    with pytest.raises(RedisUnavailable):
        call(down, clock=clock, policy=RetryPolicy(budget=1.0), what="renew lease", log=log)
    errors = [r for r in log.records if r[0] == "error"]
    assert [r[1] for r in errors] == ["redis.unavailable"]
    assert errors[0][2]["step"] == "renew lease"
    assert errors[0][2]["tries"] == len(tries)
    assert "Connection refused" in str(errors[0][2]["error"])
    assert log.records[-1] == errors[0]  # after the last retry's warning
