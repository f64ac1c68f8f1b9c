"""Primitives across real OS processes: exclusion, SIGKILLed holders and computers.

Times are ``time.monotonic()``, one clock for every process of the machine on Linux,
so children's records compare directly.
"""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import pytest
from helpers import in_thread, wait_for

from lockworker.primitives import Lock, Semaphore, compute_once
from lockworker.testing import RedisServer

pytestmark = pytest.mark.processes

HAMMER = r"""
import json, sys, time
import redis
from lockworker.primitives import Lock

url, namespace, duration = sys.argv[1], sys.argv[2], float(sys.argv[3])
client = redis.Redis.from_url(url, socket_timeout=5)
lock = Lock(client, "hammer", namespace=namespace, ttl=5.0)
sections = []
client.rpush(namespace + ":ready", 1)
while client.llen(namespace + ":ready") < 5:
    pass  # start together: a barrier across processes
stop_at = time.monotonic() + duration
while time.monotonic() < stop_at:
    assert lock.acquire(timeout=10.0)
    enter = time.monotonic()
    token = lock.token
    exit_ = time.monotonic()
    lock.release()
    sections.append((enter, exit_, token))
client.rpush(namespace + ":out", json.dumps(sections))
"""

HOLD = r"""
import sys, threading
import redis
from lockworker.primitives import Lock, Semaphore, compute_once

url, namespace, what = sys.argv[1:4]
client = redis.Redis.from_url(url, socket_timeout=5)
if what == "semaphore":
    sem = Semaphore(client, "pool", 1, namespace=namespace, ttl=1.0)
    assert sem.acquire(timeout=10)
    client.rpush(namespace + ":log", "holding")
    threading.Event().wait()
else:
    def fn():
        client.rpush(namespace + ":log", "computing")
        threading.Event().wait()
    compute_once(client, "k", fn, ttl=10.0, lock_timeout=0.6, namespace=namespace)
"""


@pytest.fixture
def procs() -> Iterator[list[subprocess.Popen[bytes]]]:
    started: list[subprocess.Popen[bytes]] = []
    yield started
    for p in started:
        if p.poll() is None:
            p.kill()
        p.wait(10)


def test_five_processes_never_hold_the_lock_at_once(
    redis_server: RedisServer, namespace: str, procs: list[subprocess.Popen[bytes]]
) -> None:
    """The five-clients test with processes, shortened to 2 s (the duration is an argument)."""
    for _ in range(5):
        procs.append(subprocess.Popen(
            [sys.executable, "-c", HAMMER, redis_server.url, namespace, "2.0"],
            stdout=subprocess.DEVNULL,  # a full pipe would stall a holder
        ))
    for p in procs:
        assert p.wait(60) == 0
    client = redis_server.client(decode_responses=True)
    sections = [
        tuple(s) for out in client.lrange(f"{namespace}:out", 0, -1) for s in json.loads(out)
    ]
    client.close()
    assert len(sections) > 100
    by_token = sorted(sections, key=lambda s: s[2])
    assert len({s[2] for s in sections}) == len(sections)
    for before, after in itertools.pairwise(by_token):
        assert before[1] <= after[0], f"overlap: {before} and {after}"


def spawn_holder(
    server: RedisServer, namespace: str, what: str, procs: list[subprocess.Popen[bytes]]
) -> subprocess.Popen[bytes]:
    p = subprocess.Popen(
        [sys.executable, "-c", HOLD, server.url, namespace, what], stdout=subprocess.DEVNULL
    )
    procs.append(p)
    return p


def test_sigkilled_holder_gives_its_permit_back(
    redis_server: RedisServer, namespace: str, procs: list[subprocess.Popen[bytes]]
) -> None:
    client = redis_server.client(decode_responses=True)
    holder = spawn_holder(redis_server, namespace, "semaphore", procs)
    wait_for(lambda: client.lrange(f"{namespace}:log", 0, -1) == ["holding"], timeout=20)
    sem = Semaphore(client, "pool", 1, namespace=namespace, ttl=1.0)
    assert not sem.acquire(timeout=2.0)  # alive: it renews past its ttl
    holder.kill()
    holder.wait(10)
    killed = time.monotonic()
    assert sem.acquire(timeout=10.0)
    assert time.monotonic() - killed < 4.0
    sem.release()
    client.close()


def test_another_process_takes_over_a_killed_computation(
    redis_server: RedisServer, namespace: str, procs: list[subprocess.Popen[bytes]]
) -> None:
    client = redis_server.client(decode_responses=True)
    computing = spawn_holder(redis_server, namespace, "compute", procs)
    wait_for(lambda: client.lrange(f"{namespace}:log", 0, -1) == ["computing"], timeout=20)
    computing.kill()
    computing.wait(10)
    killed = time.monotonic()
    value = compute_once(client, "k", lambda: "taken over", ttl=5.0, namespace=namespace)
    assert value == "taken over"
    assert time.monotonic() - killed < 4.0
    client.close()


WAIT = r"""
import sys
import redis
from lockworker.primitives import Lock, Semaphore

url, namespace, what = sys.argv[1:4]
client = redis.Redis.from_url(url, socket_timeout=5)
if what == "lock":
    Lock(client, "fair", namespace=namespace, ttl=10.0).acquire()
else:
    Semaphore(client, "fair", 1, namespace=namespace, ttl=10.0).acquire()
"""


@pytest.mark.parametrize("what", ["lock", "semaphore"])
def test_a_sigkilled_waiter_is_passed_over_within_one_waiter_heartbeat(
    redis_server: RedisServer, namespace: str, procs: list[subprocess.Popen[bytes]],
    what: str,
) -> None:
    """A holder, a waiter process SIGKILLed while queued, a live waiter behind it: on
    the release the live waiter gets it within about one waiter heartbeat (a second,
    for a ttl of 10 s, plus a margin of half a second), not after the dead waiter's
    place (and, once granted to it, its lease of 10 s) ran out."""
    client = redis_server.client(decode_responses=True)

    def make() -> Any:
        if what == "lock":
            return Lock(client, "fair", namespace=namespace, ttl=10.0)
        return Semaphore(client, "fair", 1, namespace=namespace, ttl=10.0)

    holder, live = make(), make()
    queue = holder.keys.extra("queue")
    assert holder.acquire()
    dead = subprocess.Popen([sys.executable, "-c", WAIT, redis_server.url, namespace, what])
    procs.append(dead)
    wait_for(lambda: client.zcard(queue) == 1, timeout=20)
    thread, box = in_thread(lambda: (live.acquire(timeout=8.0), time.monotonic()))
    wait_for(lambda: client.zcard(queue) == 2)
    dead.kill()
    dead.wait(10)
    released = time.monotonic()
    holder.release()  # at once: the dead waiter's place is still fresh
    thread.join(15)
    got, at = box["result"]
    assert got, "the live waiter was kept waiting behind the dead one"
    assert at - released < 3.0
    live.release()
    client.close()
