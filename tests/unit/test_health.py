"""The probes' decisions (``lockworker.model.health``), their readings (a cached PING, the
heartbeats' pulse) and their HTTP answers, on a FakeClock and without Redis."""

from __future__ import annotations

import asyncio
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from helpers import wait_for

from lockworker.cli import probes as http
from lockworker.clock import Clock, SystemClock
from lockworker.model.health import Bounds, Pulse, Verdict, alive, ready
from lockworker.runtime.health import Probes, RedisPing
from lockworker.runtime.lease import Heartbeat, Lease
from lockworker.testing import FakeClock

B = Bounds(late=1.0, call=20.0)
NOW = 1000.0


def test_an_idle_process_or_a_heartbeat_keeping_time_is_alive() -> None:
    assert alive(Pulse(1.0), NOW, B) == Verdict(True, "alive: no lease held")
    on_time = Pulse(1.0, ran_at=NOW - 1.5, due=NOW - 0.9, held=2)
    assert alive(on_time, NOW, B) == Verdict(True, "heartbeat on time: 2 lease(s) held")


def test_a_renewal_overdue_past_the_bound_is_a_stall() -> None:
    late = alive(Pulse(1.0, ran_at=NOW, due=NOW - 1.2, held=1), NOW, B)
    assert not late.ok
    assert late.reason == "heartbeat stalled: a lease renewal is 1.2s overdue (bound 1.0s)"


def test_a_loop_that_has_not_run_for_a_period_and_the_bound_is_a_stall() -> None:
    assert alive(Pulse(1.0, ran_at=NOW - 2.0), NOW, B).ok  # a period and the bound, not more
    quiet = alive(Pulse(1.0, ran_at=NOW - 2.1), NOW, B)
    assert quiet == Verdict(False, "heartbeat stalled: it has not run for 2.1s (period 1.0s)")


def test_a_renewal_in_flight_is_slow_io_until_the_call_bound_then_stuck() -> None:
    """While a renewal waits on Redis (an outage), the leases behind it are late and the
    loop does not run: that is Redis's trouble (readiness), not a stalled process."""
    waiting = Pulse(1.0, ran_at=NOW - 15.0, renewing_since=NOW - 15.0, due=NOW - 14.0, held=3)
    assert alive(waiting, NOW, B) == Verdict(True, "heartbeat renewing: 3 lease(s) held")
    stuck = Pulse(1.0, ran_at=NOW - 21.0, renewing_since=NOW - 20.5, held=1)
    verdict = alive(stuck, NOW, B)
    assert not verdict.ok
    assert verdict.reason == "heartbeat stuck: a lease renewal in flight for 20.5s (bound 20.0s)"


@pytest.mark.parametrize(
    ("stopping", "started", "redis_ok", "alive_ok", "reason"),
    [
        (True, True, False, False, "stopping: taking no new work"),
        (False, False, False, False, "starting: not serving yet"),
        (False, True, False, False, "Redis unreachable: refused"),
        (False, True, True, False, "heartbeat stalled: x"),
        (False, True, True, True, "ready: serving; Redis answered PING"),
    ],
)
def test_readiness_says_the_first_reason_it_is_not_ready(
    stopping: bool, started: bool, redis_ok: bool, alive_ok: bool, reason: str
) -> None:
    health = Verdict(alive_ok, "heartbeat on time" if alive_ok else "heartbeat stalled: x")
    pinged = Verdict(redis_ok, "Redis answered PING" if redis_ok else "Redis unreachable: refused")
    verdict = ready(health, pinged, started=started, stopping=stopping)
    assert verdict == Verdict(reason.startswith("ready"), reason)


class Pings:
    """A PING that answers or fails as the test says, counting the calls."""

    def __init__(self) -> None:
        self.fail: Exception | None = None
        self.calls = 0

    def __call__(self) -> bool:
        self.calls += 1
        if self.fail is not None:
            raise self.fail
        return True


def test_a_ping_is_cached_for_its_ttl_and_a_failure_is_one_line() -> None:
    clock, pings = FakeClock(), Pings()
    cached = RedisPing(pings, clock, ttl=1.0)
    assert cached.reading() == Verdict(True, "Redis answered PING")
    clock.advance(0.9)
    pings.fail = redis.ConnectionError("Error 111 connecting\nto 127.0.0.1:1.")
    assert cached.reading().ok and pings.calls == 1  # still the first answer
    clock.advance(0.2)
    assert cached.reading() == Verdict(
        False, "Redis unreachable: ConnectionError: Error 111 connecting to 127.0.0.1:1."
    )
    assert pings.calls == 2
    assert not cached.reading().ok and pings.calls == 2


def test_probes_that_come_together_share_one_ping() -> None:
    clock, entered, release = FakeClock(), threading.Event(), threading.Event()
    calls: list[int] = []

    def slow() -> bool:
        calls.append(1)
        entered.set()
        release.wait(10)
        return True

    cached = RedisPing(slow, clock)
    answers: list[Verdict] = []
    threads = [threading.Thread(target=lambda: answers.append(cached.reading()))
               for _ in range(4)]
    threads[0].start()
    assert entered.wait(10)
    for t in threads[1:]:
        t.start()
    release.set()
    for t in threads:
        t.join(10)
    assert calls == [1] and len(answers) == 4 and all(a.ok for a in answers)


def lease_on(clock: Clock, renew: Any, lease: float = 3.0) -> Lease:
    return Lease.granted(renew, lease, clock.monotonic())


def test_the_heartbeat_shows_its_leases_and_its_renewal_in_flight() -> None:
    """Heartbeat.pulse: the earliest renewal due, and while a renewal is in flight its
    start, read from another thread (the probe's) while the heartbeat waits on Redis."""
    clock = FakeClock()
    heartbeat = Heartbeat(clock, 1.0, thread_factory=lambda **_: threading.Thread())
    assert heartbeat.pulse() == Pulse(1.0)
    inside, answer = threading.Event(), threading.Event()

    def renew(_deadline: float) -> bool:
        inside.set()
        return answer.wait(10)

    first, second = lease_on(clock, renew), lease_on(clock, renew)
    heartbeat.hold(first)
    clock.advance(0.5)
    heartbeat.hold(second)
    assert heartbeat.pulse() == Pulse(1.0, due=first.next_renewal, held=2)
    clock.advance(0.6)
    sent = clock.monotonic()
    beating = threading.Thread(target=heartbeat.beat, args=(first,))
    beating.start()
    assert inside.wait(10)
    shown = heartbeat.pulse()  # ``first`` is still in the queue: the loop pops it first
    assert shown.renewing_since == sent
    answer.set()
    beating.join(10)
    assert heartbeat.pulse().renewing_since is None
    heartbeat.drop(first)
    heartbeat.drop(second)
    assert heartbeat.pulse() == Pulse(1.0)


def test_a_running_heartbeat_thread_shows_when_it_last_ran_and_nothing_once_closed() -> None:
    clock = SystemClock()
    heartbeat = Heartbeat(clock, 0.05)
    heartbeat.hold(lease_on(clock, lambda _deadline: True, lease=0.15))  # type: ignore[arg-type]
    try:
        ran = wait_for(lambda: heartbeat.pulse().ran_at)
        assert ran <= clock.monotonic()
        assert alive(heartbeat.pulse(), clock.monotonic(), Bounds(late=30.0, call=30.0)).ok
    finally:
        heartbeat.close()
    assert heartbeat.pulse() == Pulse(0.05)


def test_the_asyncio_heartbeat_shows_its_leases_and_its_renewals_in_flight() -> None:
    from lockworker.aio.lease import AsyncHeartbeat

    clock = FakeClock()

    async def scenario() -> tuple[Pulse, Pulse, Pulse]:
        heartbeat = AsyncHeartbeat(clock, 1.0)
        answer = asyncio.Event()

        async def renew(_deadline: float) -> bool:
            await answer.wait()
            return True

        held = lease_on(clock, renew)
        heartbeat.hold(held)
        idle = heartbeat.pulse()
        clock.advance(1.1)
        sent = clock.monotonic()
        beat = asyncio.ensure_future(heartbeat.beat(held))
        await asyncio.sleep(0)
        busy = heartbeat.pulse()
        assert busy.renewing_since == sent
        answer.set()
        await beat
        after = heartbeat.pulse()
        await heartbeat.close()
        return idle, busy, after

    idle, busy, after = asyncio.run(scenario())
    assert idle.held == 1 and idle.due is not None and idle.renewing_since is None
    assert busy.held == 1 and busy.due is None  # the one lease is in flight
    assert after.renewing_since is None and after.due is not None


class StubPulse:
    def __init__(self) -> None:
        self.pulse = Pulse(1.0)

    def __call__(self) -> Pulse:
        return self.pulse


@pytest.fixture
def served() -> Iterator[tuple[int, StubPulse, Pings, dict[str, bool]]]:
    pulse, pings, flags = StubPulse(), Pings(), {"stopping": False}
    probes = Probes(pulse=pulse, stopping=lambda: flags["stopping"],
                    redis=RedisPing(pings, FakeClock(), ttl=0.0), clock=FakeClock(NOW),
                    bounds=B)
    probes.started()

    def metrics(environ: dict[str, Any], start_response: Any) -> list[bytes]:
        start_response("200 OK", [("Content-Type", "text/plain")])
        return [b"lockworker_leases_held 0\n"]

    server = http.serve(http.app(probes, metrics), 0, "127.0.0.1")
    try:
        yield server.server_address[1], pulse, pings, flags
    finally:
        server.shutdown()
        server.server_close()


def get(port: int, path: str, method: str = "GET") -> tuple[int, str, str]:
    request = urllib.request.Request(f"http://127.0.0.1:{port}{path}", method=method)
    try:
        with urllib.request.urlopen(request, timeout=10) as reply:
            return reply.status, reply.headers["Content-Type"], reply.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.headers["Content-Type"], err.read().decode()


def test_the_probes_answer_200_or_503_with_one_line_of_plain_text(
    served: tuple[int, StubPulse, Pings, dict[str, bool]],
) -> None:
    port, pulse, pings, flags = served
    assert get(port, "/healthz") == (200, "text/plain; charset=utf-8", "alive: no lease held\n")
    assert get(port, "/readyz")[:2] == (200, "text/plain; charset=utf-8")
    pulse.pulse = Pulse(1.0, due=NOW - 5.0, held=1)
    code, _, text = get(port, "/healthz")
    assert (code, text.count("\n")) == (503, 1) and text.startswith("heartbeat stalled")
    pulse.pulse = Pulse(1.0)
    pings.fail = redis.ConnectionError("refused")
    assert get(port, "/readyz")[::2] == (503, "Redis unreachable: ConnectionError: refused\n")
    assert get(port, "/healthz")[0] == 200  # Redis's trouble is not the process's
    flags["stopping"] = True
    assert get(port, "/readyz")[::2] == (503, "stopping: taking no new work\n")
    assert get(port, "/readyz", "HEAD")[::2] == (503, "")
    assert get(port, "/healthz", "POST")[0] == 405


def test_every_other_path_still_serves_the_metrics(
    served: tuple[int, StubPulse, Pings, dict[str, bool]],
) -> None:
    port = served[0]
    for path in ("/metrics", "/"):
        assert get(port, path)[::2] == (200, "lockworker_leases_held 0\n")


def test_the_bounds_allow_a_period_late_and_a_renewal_with_the_clients_retries() -> None:
    assert http.bounds(30.0, 5.0, 10) == Bounds(late=10.0, call=30.0 + 11 * 6.0)
    assert http.bounds(1.5, 0.75, 0) == Bounds(late=1.0, call=1.5 + 1.75)
    assert http.client_retries(redis.Redis(retry=None)) == 0


def test_the_clients_retries_are_read_from_a_redis_py_5_retry_too() -> None:
    """redis-py 5's ``Retry`` keeps its count but has no ``get_retries`` (6.0 added it)."""

    class Retry5:
        def __init__(self, retries: int) -> None:
            self._retries = retries

    class Client:
        def get_retry(self) -> Retry5:
            return Retry5(3)

    assert http.client_retries(Client()) == 3
