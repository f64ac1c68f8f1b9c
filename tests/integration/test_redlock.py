"""Redlock over five real servers: quorum, dead masters, killed and restarted masters.

The masters keep their keys across a crash (``appendfsync always``), which is one of
the two ways Redlock's safety survives a restart (the other: stay down for ``ttl``).
"""

from __future__ import annotations

import contextlib
import itertools
import random
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from helpers import in_thread, leftovers, wait_for
from redis.backoff import NoBackoff
from redis.retry import Retry

from lockworker import (
    AcquireTimeout,
    InvalidConfig,
    LockLost,
    NotHeld,
    QuorumNotReached,
    RedisUnavailable,
)
from lockworker.clock import SystemClock
from lockworker.primitives import Redlock
from lockworker.testing import RedisServer, capture_events

DURABLE = ("--appendonly", "yes", "--appendfsync", "always")


class Masters:
    def __init__(self, count: int) -> None:
        self.servers = [RedisServer(extra_args=DURABLE).start() for _ in range(count)]

    def clients(self) -> list[redis.Redis]:
        """Fresh clients: a dead master costs a refused connection, never a retry."""
        return [
            s.client(
                decode_responses=True, socket_timeout=0.5, socket_connect_timeout=0.5,
                retry=Retry(NoBackoff(), 0),
            )
            for s in self.servers
        ]

    def heal(self) -> None:
        for s in self.servers:
            if not s.running:
                s.start(port=s.port)

    def close(self) -> None:
        for s in self.servers:
            s.close()


@pytest.fixture(scope="module")
def masters() -> Iterator[Masters]:
    m = Masters(5)
    yield m
    m.close()


@pytest.fixture
def healed(masters: Masters) -> Iterator[Masters]:
    masters.heal()
    yield masters
    masters.heal()


def test_acquire_release_and_exclusion(healed: Masters, namespace: str) -> None:
    a = Redlock(healed.clients(), "r", ttl=5.0, namespace=namespace)
    b = Redlock(healed.clients(), "r", ttl=5.0, namespace=namespace, retry_count=0)
    assert a.acquire()
    first = a.token
    assert first is not None and a.owned() and a.locked() and 0 < a.validity <= 5.0
    assert not b.acquire(blocking=False)
    assert not b.acquire()  # one attempt, retry_count=0
    a.release()
    assert not a.locked()
    assert b.acquire(blocking=False)
    assert b.token is not None and b.token > first
    b.extend(3.0)
    b.release()
    with pytest.raises(NotHeld):
        b.release()


def test_token_is_kept_after_the_hold_ends(healed: Masters, namespace: str) -> None:
    """As ``Lock``: None before the first acquisition; then the last hold's token, after
    a release, a refused acquisition and a loss, until the next acquisition replaces it."""
    clients = healed.clients()
    lock = Redlock(clients, "r", ttl=5.0, namespace=namespace, retry_count=0)
    assert lock.token is None
    assert lock.acquire()
    first = lock.token
    lock.release()
    assert first is not None and lock.token == first and not lock.held
    assert "token=None" not in repr(lock)
    other = Redlock(clients, "r", ttl=5.0, namespace=namespace)
    assert other.acquire(blocking=False)
    assert not lock.acquire()  # held elsewhere: the last token stays
    assert lock.token == first
    other.release()
    assert lock.acquire()
    second = lock.token
    assert second is not None and second > first
    for c in clients:
        c.delete(lock.keys.lock)  # as if it had expired everywhere
    with pytest.raises(LockLost) as info:
        lock.release()
    assert info.value.token == second and lock.token == second and not lock.held


def test_works_with_two_masters_killed(healed: Masters, namespace: str) -> None:
    healed.servers[0].kill()
    healed.servers[3].kill()
    lock = Redlock(healed.clients(), "r", ttl=5.0, namespace=namespace)
    with lock:
        assert lock.owned() and lock.token is not None


def test_three_masters_down_is_a_clear_error(healed: Masters, namespace: str) -> None:
    for i in (1, 2, 4):
        healed.servers[i].kill()
    lock = Redlock(healed.clients(), "r", ttl=5.0, namespace=namespace, retry_delay=0.01)
    with pytest.raises(QuorumNotReached, match="only 2 of 5"):
        lock.acquire(blocking=False)
    with pytest.raises(QuorumNotReached):
        lock.acquire(timeout=0.2)
    assert not lock.held


def test_failed_attempt_releases_what_it_took(healed: Masters, namespace: str) -> None:
    """Holding the lock on 3 masters by hand, an attempt gets 2 and must give them back."""
    clients = healed.clients()
    other = Redlock(clients[:3], "r", ttl=5.0, namespace=namespace)
    assert other.acquire()
    lock = Redlock(clients, "r", ttl=5.0, namespace=namespace)
    assert not lock.acquire(blocking=False)
    assert [c.exists(lock.keys.lock) for c in clients] == [1, 1, 1, 0, 0]
    other.release()


def test_release_after_expiry_raises_lock_lost(healed: Masters, namespace: str) -> None:
    lock = Redlock(healed.clients(), "r", ttl=0.2, namespace=namespace)
    assert lock.acquire()
    other = Redlock(healed.clients(), "r", ttl=5.0, namespace=namespace)
    assert other.acquire(timeout=5.0)
    with capture_events() as logged, pytest.raises(LockLost):
        lock.release()
    assert logged[0]["event"] == "lock.lost"
    assert not lock.held
    other.extend(5.0)
    other.release()


def test_auto_renew(healed: Masters, namespace: str) -> None:
    lock = Redlock(healed.clients(), "r", ttl=0.8, namespace=namespace, auto_renew=True)
    other = Redlock(healed.clients(), "r", ttl=0.8, namespace=namespace, retry_delay=0.05)
    assert lock.acquire()
    assert not other.acquire(timeout=2.0)
    assert not lock.lost
    lock.release()
    with pytest.raises(AcquireTimeout), Redlock(
        healed.clients()[:1], "held", namespace=namespace, timeout=0.0
    ), Redlock(healed.clients()[:1], "held", namespace=namespace, timeout=0.1):
        pytest.fail("two holders")


def test_never_two_holders_while_masters_die_and_return(
    healed: Masters, namespace: str
) -> None:
    """Three clients hammer one Redlock while masters are SIGKILLed and restarted.

    At most two masters are down at a time. Every critical section is recorded with
    the monotonic clock (one clock for the whole machine) and its fencing token.
    """
    duration = 4.0
    stop = threading.Event()
    sections: list[tuple[float, float, int]] = []
    record = threading.Lock()
    errors: list[BaseException] = []
    rng = random.Random(5)

    def client_loop() -> None:
        lock = Redlock(healed.clients(), "chaos", ttl=2.0, namespace=namespace,
                       retry_delay=0.01)
        try:
            while not stop.is_set():
                try:
                    if not lock.acquire(timeout=0.5):
                        continue
                except QuorumNotReached:
                    continue
                enter = time.monotonic()
                token = lock.token
                exit_ = time.monotonic()
                # As a real holder must: act only while the validity lasts. A section
                # the scheduler stalled past it is not protected, so it is not counted.
                still_valid = lock.validity > 0
                # LockLost: a master holding it died, so the release could not confirm.
                with contextlib.suppress(LockLost):
                    lock.release()
                assert token is not None
                if not still_valid:
                    continue
                with record:
                    sections.append((enter, exit_, token))
        except BaseException as exc:
            errors.append(exc)

    def chaos() -> None:
        # At least ``duration`` of faults, and on until 21 sections were recorded (a
        # loaded machine runs fewer per second), up to a cap that only a hang reaches.
        end, cap = time.monotonic() + duration, time.monotonic() + 30 * duration
        while time.monotonic() < end or (len(sections) <= 20 and time.monotonic() < cap):
            down = [s for s in healed.servers if not s.running]
            if len(down) >= 2 or (down and rng.random() < 0.5):
                server = rng.choice(down)
                server.start(port=server.port)
            else:
                rng.choice([s for s in healed.servers if s.running]).kill()
            stop.wait(0.15)  # pacing of the fault schedule, not a wait for a result
        stop.set()

    threads = [threading.Thread(target=client_loop) for _ in range(3)]
    for t in threads:
        t.start()
    chaos()
    for t in threads:
        t.join(30)
    assert not errors, errors
    assert len(sections) > 20, len(sections)
    by_token = sorted(sections, key=lambda s: s[2])
    assert len({s[2] for s in sections}) == len(sections)
    for before, after in itertools.pairwise(by_token):
        assert before[1] <= after[0], f"two holders: {before} and {after}"


class Pausing(SystemClock):
    """A waiter's clock that counts its pauses between attempts (a sleep or a wait)."""

    def __init__(self) -> None:
        self.pauses = 0

    def sleep(self, seconds: float) -> None:
        self.pauses += 1
        super().sleep(seconds)

    def wait(self, event: threading.Event, timeout: float) -> bool:
        self.pauses += 1
        return super().wait(event, timeout)


def handover(holder: Redlock, waiter: Redlock, release: Any) -> float:
    """Seconds from ``release()`` (called once ``waiter`` pauses after a refused
    attempt) until ``waiter.acquire`` returned True."""
    clock = waiter.clock
    assert isinstance(clock, Pausing)
    before = clock.pauses
    thread, box = in_thread(lambda: (waiter.acquire(timeout=10.0), time.monotonic()))
    wait_for(lambda: clock.pauses > before or "error" in box)
    released = time.monotonic()
    release()
    thread.join(15)
    assert "error" not in box, box.get("error")
    got, at = box["result"]
    assert got and waiter.held and holder.token is not None and waiter.token is not None
    assert waiter.token > holder.token
    return float(at - released)


def test_a_waiter_is_woken_by_the_release_not_by_its_retry_pause(
    healed: Masters, namespace: str
) -> None:
    """retry_delay=8.0: a pause is uniform in [0, 8 s], so five handovers each under
    2 s come from the release's wake-up (a PUBLISH on every master); waiters left to
    their pauses would all be that quick once in a thousand runs. How quick the
    wake-up is, is the benchmark's to measure."""
    a, b = (
        Redlock(healed.clients(), "w", ttl=10.0, namespace=namespace, retry_delay=8.0,
                clock=Pausing())
        for _ in range(2)
    )
    assert a.acquire()
    taken = []
    for _ in range(5):
        taken.append(handover(a, b, a.release))
        a, b = b, a
    a.release()
    assert max(taken) < 2.0, taken


def test_a_waiter_is_woken_with_a_master_down_and_does_not_spin(
    healed: Masters, namespace: str
) -> None:
    """A dead master's broken wake-up connection wakes a waiter once, not every
    reconnect: a waiter in a 1 s wait pauses a few times, and is still woken (its
    pauses are up to 8 s long)."""
    healed.servers[4].kill()
    a, b = (
        Redlock(healed.clients(), "w", ttl=10.0, namespace=namespace, retry_delay=8.0,
                clock=Pausing())
        for _ in range(2)
    )
    assert a.acquire()
    clock = b.clock
    assert isinstance(clock, Pausing)

    def release_later() -> None:
        pauses = clock.pauses
        # Let the waiter wait for a while (its pauses are what is measured).
        threading.Event().wait(1.0)
        assert clock.pauses - pauses < 8, clock.pauses - pauses
        a.release()

    assert handover(a, b, release_later) < 1.0 + 2.0
    b.release()


def test_a_lost_wake_up_still_ends_in_the_fallback_retry(
    healed: Masters, namespace: str
) -> None:
    """The lock vanishes without a message (as if every master's key expired): the
    waiter's random retry pause (at most retry_delay) still takes it."""
    clients = healed.clients()
    a, b = (
        Redlock(healed.clients(), "w", ttl=10.0, namespace=namespace, retry_delay=0.3,
                clock=Pausing())
        for _ in range(2)
    )
    assert a.acquire()

    def vanish() -> None:
        for c in clients:
            c.delete(a.keys.lock)

    assert handover(a, b, vanish) < 0.3 + 2.0
    b.release()


@pytest.mark.parametrize(
    ("kwargs", "argument"),
    [
        ({"ttl": 0}, "ttl"),
        ({"retry_count": -1}, "retry_count"),
        ({"retry_delay": -1}, "retry_delay"),
        ({"drift_factor": 1.5}, "drift_factor"),
    ],
)
def test_bad_arguments(healed: Masters, kwargs: dict[str, Any], argument: str) -> None:
    with pytest.raises(InvalidConfig, match=argument):
        Redlock(healed.clients(), "x", **kwargs)


def test_bad_clients() -> None:
    with pytest.raises(InvalidConfig, match="clients"):
        Redlock([], "x")
    with pytest.raises(InvalidConfig, match="clients"):
        Redlock("redis://x", "x")  # type: ignore[arg-type]
    with pytest.raises(InvalidConfig, match=r"clients\[0\]"):
        Redlock([object()], "x")  # type: ignore[list-item]


# -- ordinary clients: a dead or silent master costs no validity ----------------------


class BlackHole:
    """A master that accepts connections and never answers (hung, or cut off mid-way)."""

    def __init__(self) -> None:
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = int(self._listener.getsockname()[1])
        self._accepted: list[socket.socket] = []
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    def _accept(self) -> None:
        with contextlib.suppress(OSError):
            while True:
                self._accepted.append(self._listener.accept()[0])

    def close(self) -> None:
        """Cut every connection, accepted or not yet: closing the listener alone would
        not end the accept blocked in its thread, which takes one more connection."""
        with contextlib.suppress(OSError):
            self._listener.shutdown(socket.SHUT_RDWR)  # ends the blocked accept
        self._thread.join(timeout=5.0)
        self._listener.close()
        for conn in self._accepted:
            conn.close()


def ordinary(port: int) -> redis.Redis:
    """redis-py's defaults: no socket timeouts, retries with backoff (seconds per call)."""
    return redis.Redis(host="127.0.0.1", port=port, decode_responses=True)


def silent(hole: BlackHole) -> redis.Redis:
    """An ordinary client of ``hole``, but for redis-py's retries: without a socket
    timeout its calls hang there all the same; once the hole closes they fail at once,
    instead of retrying a closed port for many seconds after the test."""
    return redis.Redis(host="127.0.0.1", port=hole.port, decode_responses=True,
                       retry=Retry(NoBackoff(), 0))


@pytest.fixture
def trio() -> Iterator[list[RedisServer]]:
    """Three masters of this test alone (fresh ports: no state shared with other tests).

    A master the test killed comes back before the end, so that the calls of ordinary
    clients still retrying it (seconds of redis-py's backoff) end with the test, and
    the wake hubs close while their servers still answer; not after, retrying a server
    gone for good while later tests run."""
    servers = [RedisServer().start() for _ in range(3)]
    yield servers
    for s in servers:
        if not s.running:
            s.start(port=s.port)
    assert not leftovers(set(threading.enumerate()))
    for s in servers:
        s.close()


@pytest.fixture
def hole() -> Iterator[BlackHole]:
    h = BlackHole()
    yield h
    h.close()


TTL = 2.0
"""Below the seconds one refused connection costs an ordinary client (retries)."""


def warnings_of(logged: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [e for e in logged if e["event"] == "redlock.unreachable"]


def test_a_stopped_master_costs_ordinary_clients_no_validity(
    trio: list[RedisServer], namespace: str
) -> None:
    trio[2].kill()
    lock = Redlock([ordinary(s.port) for s in trio], "r", ttl=TTL, namespace=namespace)
    started = time.monotonic()
    with capture_events() as logged:
        assert lock.acquire(blocking=False)
    assert time.monotonic() - started < TTL  # generous: it takes milliseconds
    assert lock.validity > 0 and lock.owned() and not lock.lost
    dead = f"127.0.0.1:{trio[2].port}"
    assert list(lock.unreachable) == [dead]
    (warning,) = warnings_of(logged)
    assert warning["log_level"] == "warning" and warning["outcome"] == "acquired"
    assert list(warning["masters"]) == [dead]
    lock.release()  # a majority confirms: no LockLost
    assert not lock.locked()


def test_a_black_holed_master_is_skipped_and_named(
    trio: list[RedisServer], hole: BlackHole, namespace: str
) -> None:
    clients = [ordinary(trio[0].port), ordinary(trio[1].port), silent(hole)]
    lock = Redlock(clients, "r", ttl=TTL, namespace=namespace)
    for _ in range(3):
        started = time.monotonic()
        assert lock.acquire(blocking=False)
        assert time.monotonic() - started < TTL
        assert list(lock.unreachable) == [f"127.0.0.1:{hole.port}"]
        assert "no reply" in lock.unreachable[f"127.0.0.1:{hole.port}"]
        assert lock.owned()
        lock.release()
    other = Redlock(clients, "r", ttl=TTL, namespace=namespace, auto_renew=True)
    with other:
        assert other.token is not None and other.owned()


def test_held_elsewhere_is_false_and_still_names_the_dead_master(
    trio: list[RedisServer], namespace: str
) -> None:
    holder = Redlock([ordinary(s.port) for s in trio[:2]], "r", ttl=5.0, namespace=namespace)
    assert holder.acquire(blocking=False)
    trio[2].kill()
    lock = Redlock([ordinary(s.port) for s in trio], "r", ttl=TTL, namespace=namespace)
    with capture_events() as logged:
        assert not lock.acquire(blocking=False)
    assert list(lock.unreachable) == [f"127.0.0.1:{trio[2].port}"]
    (warning,) = warnings_of(logged)
    assert warning["outcome"] == "held elsewhere"
    holder.release()


def test_an_unreachable_majority_is_an_error_naming_each_master(
    trio: list[RedisServer], hole: BlackHole, namespace: str
) -> None:
    trio[1].kill()
    clients = [ordinary(trio[0].port), ordinary(trio[1].port), silent(hole)]
    lock = Redlock(clients, "r", ttl=TTL, namespace=namespace, retry_delay=0.01)
    started = time.monotonic()
    with capture_events() as logged, pytest.raises(QuorumNotReached) as refused:
        lock.acquire(blocking=False)
    assert time.monotonic() - started < 2 * TTL  # one attempt: at most its validity
    assert isinstance(refused.value, RedisUnavailable)
    message = str(refused.value)
    assert "only 1 of 3 masters reachable, 2 needed" in message
    for port in (trio[1].port, hole.port):
        assert f"127.0.0.1:{port}" in message
    (warning,) = warnings_of(logged)
    assert warning["outcome"] == "no quorum" and len(warning["masters"]) == 2
    assert not lock.held and not trio[0].client().exists(lock.keys.lock)  # given back
    with pytest.raises(QuorumNotReached):  # blocking: the same verdict after its tries
        lock.acquire(timeout=0.2)


def test_a_call_a_step_stopped_waiting_for_is_pending_until_its_master_answers(
    trio: list[RedisServer], hole: BlackHole, namespace: str
) -> None:
    """What the suite's end-of-test check counts: a call to a silent master still runs
    after the step gave up on it, until the master answers or the connection ends."""
    from lockworker.primitives import masters

    lock = Redlock([ordinary(trio[0].port), ordinary(trio[1].port), silent(hole)], "r",
                   ttl=TTL, namespace=namespace)
    assert lock.acquire(blocking=False)
    lock.release()
    assert masters.pending() >= 1  # the hole's calls still hang
    hole.close()
    wait_for(lambda: masters.pending() == 0, timeout=10)
