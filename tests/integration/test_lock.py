"""Lock on a real server: exclusion, fencing tokens, wake-ups, loss, renewal, validation."""

from __future__ import annotations

import itertools
import threading
import time
from typing import Any

import pytest
import redis
from helpers import wait_for

from lockworker import AcquireTimeout, InvalidConfig, LockLost, NotHeld
from lockworker.primitives import AlreadyHeld, Lock
from lockworker.testing import RedisServer, capture_events


def make(client: redis.Redis, namespace: str, **kwargs: Any) -> Lock:
    return Lock(client, "res", namespace=namespace, **kwargs)


def test_acquire_release_and_tokens_grow(redis_client: redis.Redis, namespace: str) -> None:
    a, b = make(redis_client, namespace), make(redis_client, namespace)
    assert not a.locked()
    assert a.acquire()
    first = a.token
    assert first is not None and a.locked() and a.owned() and not b.owned()
    assert not b.acquire(blocking=False)
    a.release()
    assert a.token == first and not a.held and not a.locked()
    assert b.acquire(blocking=False)
    assert b.token is not None and b.token > first
    b.release()


def test_token_is_kept_after_the_hold_ends(redis_client: redis.Redis, namespace: str) -> None:
    """None before the first acquisition; then the last hold's token, even once lost."""
    lock = make(redis_client, namespace)
    assert lock.token is None
    assert lock.acquire()
    first = lock.token
    lock.release()
    assert lock.token == first and not lock.held
    assert lock.acquire()
    second = lock.token
    assert second is not None and first is not None and second > first
    redis_client.delete(lock.keys.lock)  # as if it had expired
    with pytest.raises(LockLost) as info:
        lock.release()
    assert info.value.token == second and lock.token == second and not lock.held


def test_release_without_acquire_is_not_held(redis_client: redis.Redis, namespace: str) -> None:
    lock = make(redis_client, namespace)
    with pytest.raises(NotHeld):
        lock.release()
    with pytest.raises(NotHeld):
        lock.extend()


def test_not_reentrant(redis_client: redis.Redis, namespace: str) -> None:
    lock = make(redis_client, namespace)
    assert lock.acquire()
    with pytest.raises(AlreadyHeld):
        lock.acquire()
    lock.release()


def test_release_after_expiry_raises_lock_lost(redis_client: redis.Redis, namespace: str) -> None:
    lock = make(redis_client, namespace, ttl=0.1)
    other = make(redis_client, namespace, ttl=5.0)
    assert lock.acquire()
    token = lock.token
    assert other.acquire(timeout=5.0)  # woken by the expiry, on its own clock
    assert lock.lost
    with capture_events() as logged, pytest.raises(LockLost) as info:
        lock.release()
    assert info.value.token == token
    assert [e["event"] for e in logged] == ["lock.lost"]
    assert not lock.held and other.owned()
    other.release()


def test_extend_keeps_it_and_lost_extend_raises(
    redis_client: redis.Redis, namespace: str
) -> None:
    lock = make(redis_client, namespace, ttl=2.0)
    assert lock.acquire()
    lock.extend(5.0)
    assert redis_client.pttl(lock.keys.lock) > 3000
    redis_client.delete(lock.keys.lock)  # as if it had expired
    with pytest.raises(LockLost):
        lock.extend()
    assert not lock.held


def test_context_manager_raises_acquire_timeout(
    redis_client: redis.Redis, namespace: str
) -> None:
    holder = make(redis_client, namespace)
    assert holder.acquire()
    started = time.monotonic()
    with pytest.raises(AcquireTimeout), make(redis_client, namespace, timeout=0.2):
        pytest.fail("entered a held lock")
    assert 0.15 <= time.monotonic() - started < 3.0
    holder.release()
    with make(redis_client, namespace, timeout=1.0) as lock:
        assert lock.owned()
    assert not lock.held


def test_release_wakes_waiter_at_once(redis_client: redis.Redis, namespace: str) -> None:
    """A waiter on a lock with a 30 s TTL gets it right after the release, not at expiry."""
    holder = make(redis_client, namespace, ttl=30.0)
    waiter = make(redis_client, namespace, ttl=30.0)
    assert holder.acquire()
    got = threading.Event()
    times: dict[str, float] = {}

    def wait() -> None:
        assert waiter.acquire(timeout=20.0)
        times["got"] = time.monotonic()
        got.set()

    thread = threading.Thread(target=wait)
    thread.start()
    # Wait until the waiter queued (server-side fact).
    wait_for(lambda: redis_client.zcard(holder.keys.extra("queue")) == 1, timeout=10)
    released = time.monotonic()
    holder.release()
    assert got.wait(10.0)
    thread.join()
    assert times["got"] - released < 2.0  # generous on a shared 2-core machine
    waiter.release()
    waiter.close()


def test_waiter_takes_over_a_dead_holder_at_ttl(
    redis_client: redis.Redis, namespace: str
) -> None:
    dead = make(redis_client, namespace, ttl=0.4)
    assert dead.acquire()
    started = time.monotonic()
    waiter = make(redis_client, namespace)
    assert waiter.acquire(timeout=10.0)
    took = time.monotonic() - started
    assert 0.2 <= took < 3.0
    waiter.release()


def test_auto_renew_outlives_ttl(redis_client: redis.Redis, namespace: str) -> None:
    lock = make(redis_client, namespace, ttl=0.8, auto_renew=True)
    other = make(redis_client, namespace)
    assert lock.acquire()
    assert not other.acquire(timeout=2.0)  # 2.5 TTLs: it must have been renewed
    assert lock.owned() and not lock.lost
    lock.release()
    assert lock._heartbeat is None  # renewal stopped with the release
    assert other.acquire(blocking=False)
    other.release()


def test_auto_renew_reports_loss(redis_client: redis.Redis, namespace: str) -> None:
    lock = make(redis_client, namespace, ttl=0.3, auto_renew=True)
    with capture_events() as logged:
        assert lock.acquire()
        redis_client.delete(lock.keys.lock)  # taken away behind its back
        wait_for(lambda: lock.lost, timeout=5)
    assert any(e["event"] == "lock.lost" for e in logged)
    with pytest.raises(LockLost):
        lock.release()


def test_events(redis_client: redis.Redis, namespace: str) -> None:
    with capture_events() as logged:
        lock = make(redis_client, namespace)
        lock.acquire()
        lock.release()
    assert [e["event"] for e in logged] == ["lock.acquired", "lock.released"]
    assert logged[0]["token"] == logged[1]["token"]


@pytest.mark.parametrize(
    ("kwargs", "argument"),
    [
        ({"ttl": 0}, "ttl"),
        ({"ttl": "1"}, "ttl"),
        ({"auto_renew": 1}, "auto_renew"),
        ({"timeout": -1}, "timeout"),
        ({"namespace": ""}, "namespace"),
    ],
)
def test_bad_arguments(
    redis_client: redis.Redis, kwargs: dict[str, Any], argument: str
) -> None:
    with pytest.raises(InvalidConfig, match=argument):
        Lock(redis_client, "x", **kwargs)


def test_bad_name_and_client(redis_client: redis.Redis) -> None:
    with pytest.raises(InvalidConfig, match="name"):
        Lock(redis_client, "")
    with pytest.raises(InvalidConfig, match="client"):
        Lock("localhost", "x")  # type: ignore[arg-type]
    with pytest.raises(InvalidConfig, match="timeout"):
        Lock(redis_client, "x").acquire(timeout="soon")  # type: ignore[arg-type]


@pytest.mark.parametrize("timeout", [1, 0, 0.5])
def test_a_timeout_without_blocking_is_refused(
    redis_client: redis.Redis, namespace: str, timeout: float
) -> None:
    """As ``threading.Lock().acquire(False, 1)`` raises: the timeout could never apply."""
    lock = make(redis_client, namespace, timeout=5.0)  # a default for blocking acquires
    with pytest.raises(InvalidConfig, match=r"timeout must be None when blocking=False") as e:
        lock.acquire(blocking=False, timeout=timeout)
    assert isinstance(e.value, ValueError) and repr(timeout) in str(e.value)
    assert not lock.held and not lock.locked()
    assert lock.acquire(blocking=False, timeout=None)  # the constructor's default is fine
    lock.release()


def five_clients_never_overlap(
    redis_server: Any, namespace: str, duration: float
) -> list[tuple[float, float, int]]:
    """Five clients (threads, each its own connection) hammer one lock for ``duration``.

    The recipe's author broke half the published locks with five clients for ten
    seconds; the duration is a parameter so the suite can run a shorter version.
    Returns every critical section as (enter, exit, token).
    """
    sections: list[tuple[float, float, int]] = []
    record = threading.Lock()
    stop_at = time.monotonic() + duration
    errors: list[BaseException] = []

    def run() -> None:
        client = redis_server.client(decode_responses=True)
        lock = Lock(client, "hammer", namespace=namespace, ttl=5.0)
        try:
            while time.monotonic() < stop_at:
                assert lock.acquire(timeout=10.0)
                enter = time.monotonic()
                token = lock.token
                exit_ = time.monotonic()
                lock.release()
                assert token is not None
                with record:
                    sections.append((enter, exit_, token))
        except BaseException as exc:
            errors.append(exc)
        finally:
            lock.close()
            client.close()

    threads = [threading.Thread(target=run) for _ in range(5)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(duration + 30)
    assert not errors, errors
    return sections


def assert_exclusive(sections: list[tuple[float, float, int]]) -> None:
    """Sorted by token, each section ended before the next began; tokens strictly grow."""
    by_token = sorted(sections, key=lambda s: s[2])
    tokens = [s[2] for s in by_token]
    assert len(set(tokens)) == len(tokens), "a fencing token was handed out twice"
    for before, after in itertools.pairwise(by_token):
        assert before[1] <= after[0], f"overlap: {before} and {after}"


def test_five_clients_ten_seconds(redis_server: Any, namespace: str) -> None:
    """The five-clients test, shortened to 3 s for the suite (the duration is a parameter)."""
    sections = five_clients_never_overlap(redis_server, namespace, duration=3.0)
    assert len(sections) > 100
    assert_exclusive(sections)
    # Tokens in order of entry are strictly increasing, too.
    by_entry = [s[2] for s in sorted(sections)]
    assert by_entry == sorted(by_entry)


def test_uncontended_cycle_is_two_round_trips(namespace: str) -> None:
    """Acquire and release are one script each: a regression to three fails here."""
    with RedisServer() as server:  # its own server: no other test's commands counted
        client = server.client(decode_responses=True)
        lock = Lock(client, "rt", namespace=namespace)
        assert lock.acquire()
        lock.release()  # loads the scripts
        client.config_resetstat()
        assert lock.acquire()
        lock.release()
        stats = client.info("commandstats")
        calls = {k.removeprefix("cmdstat_"): v["calls"] for k, v in stats.items()}
        calls.pop("config|resetstat", None)
        assert calls.pop("evalsha") == 2
        # What remains ran inside the two scripts.
        assert set(calls) <= {"get", "set", "del", "publish", "exists"}
        client.close()
