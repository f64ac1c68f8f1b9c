"""A contended Lock's look and wait go out in one round trip (primitives/lockwait.py).

A waiter whose lock was held at its last acquisition sends its look and its blocking
pop in one pipeline. The pop must then still answer at once whenever the caller is
not to wait for a push (the look granted the lock, or the holder's lease ends sooner
than the pop), and leave nothing behind on the grant list.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import redis
from helpers import in_thread, wait_for
from redis.connection import Connection

from lockworker.primitives import Lock, lockwait
from lockworker.testing import RedisServer

TTL = 30.0


class Counting(Connection):
    """Counts its requests (one socket write per command, pipeline or transaction)."""

    writes = 0

    def send_packed_command(self, command: Any, check_health: bool = True) -> None:
        Counting.writes += 1
        super().send_packed_command(command, check_health)  # type: ignore[no-untyped-call]


def counting_client(server: RedisServer) -> redis.Redis:
    pool = redis.ConnectionPool(host="127.0.0.1", port=server.port, socket_timeout=10.0,
                                connection_class=Counting)
    return redis.Redis(connection_pool=pool)


def grant_lists(client: redis.Redis, lock: Lock) -> list[bytes]:
    return list(client.scan_iter(match=lock.keys.extra("grant:") + "*"))


def test_a_waiter_of_a_lock_held_last_time_sends_one_request_before_it_waits(
    redis_server: RedisServer, namespace: str
) -> None:
    """Two holders take turns: each acquires while the other holds (the benchmark's
    pattern). Only the first wait is a look, then a pop; every later one is one request."""
    client = counting_client(redis_server)
    probe = redis_server.client()
    locks = [Lock(client, "res", namespace=namespace, ttl=TTL) for _ in range(2)]
    assert locks[0].acquire()  # connects, loads the scripts: free, looked at alone
    assert not lockwait.likely_held(client, locks[0].keys.lock)
    holder, requests = locks[0], []
    for turn in range(4):
        waiter = locks[(turn + 1) % 2]
        before = Counting.writes
        thread, box = in_thread(lambda w=waiter: w.acquire(timeout=10.0))  # type: ignore[misc]
        # Blocked in its pop, the last of its requests before the grant.
        wait_for(lambda: probe.info("clients")["blocked_clients"] == 1)
        requests.append(Counting.writes - before)
        holder.release()
        thread.join(10)
        assert box.get("result") is True, box
        holder = waiter
    holder.release()
    assert requests == [2, 1, 1, 1], requests
    assert lockwait.likely_held(client, locks[0].keys.lock)
    assert grant_lists(probe, locks[0]) == []
    client.close()
    probe.close()


def test_a_lock_free_again_is_taken_at_once_and_leaves_no_marker(
    redis_client: redis.Redis, namespace: str
) -> None:
    lock = Lock(redis_client, "res", namespace=namespace, ttl=TTL)
    assert lock.acquire()  # looked at alone: the script is on the server
    lock.release()
    lockwait.note(redis_client, lock.keys.lock, True)  # held at its last acquisition here
    started = time.monotonic()
    assert lock.acquire(timeout=10.0)
    # The pop behind the look answered at once (not after a wait slice of 1 s).
    assert time.monotonic() - started < 0.5
    assert grant_lists(redis_client, lock) == []
    assert not lockwait.likely_held(redis_client, lock.keys.lock)  # looked at alone next time
    lock.release()


def test_a_dead_holders_lock_is_taken_at_its_lease_end_not_a_slice_later(
    redis_client: redis.Redis, namespace: str
) -> None:
    dead = Lock(redis_client, "res", namespace=namespace, ttl=0.3)
    assert dead.acquire()  # never released: its lease runs out
    waiter = Lock(redis_client, "res", namespace=namespace, ttl=TTL)  # a 1 s slice
    lockwait.note(redis_client, waiter.keys.lock, True)
    started = time.monotonic()
    assert waiter.acquire(timeout=10.0)
    took = time.monotonic() - started
    # The lease had at most 0.3 s left; waiting out the pop sent with the look would
    # have taken a whole slice (1 s).
    assert took < 0.8, took
    assert grant_lists(redis_client, waiter) == []
    waiter.release()
    dead.close()


def test_contended_handovers_with_pipelined_waits_stay_exclusive_and_clean(
    redis_client: redis.Redis, namespace: str
) -> None:
    """4 threads, a new Lock per use, each with a deadline inside its first wait."""
    inside, worst, done = [0], [0], []
    guard = threading.Lock()

    def run() -> None:
        for _ in range(25):
            lock = Lock(redis_client, "res", namespace=namespace, ttl=TTL)
            assert lock.acquire(timeout=0.9 * TTL)
            with guard:
                inside[0] += 1
                worst[0] = max(worst[0], inside[0])
            time.sleep(0.001)
            with guard:
                inside[0] -= 1
            lock.release()
        done.append(True)

    threads = [threading.Thread(target=run) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert len(done) == 4 and worst[0] == 1
    probe = Lock(redis_client, "res", namespace=namespace, ttl=TTL)
    assert grant_lists(redis_client, probe) == []
    assert redis_client.zcard(probe.keys.extra("queue")) == 0


def test_a_stale_look_marker_popped_by_a_plain_wait_is_no_grant_and_no_foreign_value() -> None:
    """A look's marker left on a grant list (its pipelined pop took a grant pushed just
    before, or was refused with its look after a server restart) is popped later by a
    plain wait: that is no grant (the waiter looks again), not a foreign value; a value
    lockworker never writes still is one."""
    import pytest

    from lockworker.errors import ForeignValueError
    from lockworker.primitives.lockqueue import MARKER, pushed_grant

    assert pushed_grant("k", (b"k", MARKER.encode())) is None
    assert pushed_grant("k", ("k", MARKER)) is None
    with pytest.raises(ForeignValueError):
        pushed_grant("k", (b"k", b"not ours"))
