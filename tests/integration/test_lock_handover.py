"""Lock handover: grants never missed, FIFO order, dead waiters skipped, no leftovers.

Every lock here has a 30 s TTL, so a waiter that missed its wake-up would wait out the
TTL; each test's deadline is far below it, which is how they tell a wake-up by the
release from one by the timer.
"""

from __future__ import annotations

import itertools
import threading
import time
from typing import Any

import pytest
import redis
from helpers import in_thread, wait_for

from lockworker.model.codec import Holder, new_run
from lockworker.model.state import Grant, Snapshot
from lockworker.primitives import Lock, Semaphore
from lockworker.primitives.lockqueue import LockSteps

TTL = 30.0
PROMPT = 10.0
"""Generous bound for what should take milliseconds, far below the TTL."""


def make(client: redis.Redis, namespace: str, **kwargs: Any) -> Lock:
    return Lock(client, "res", namespace=namespace, ttl=TTL, **kwargs)


def wake_threads() -> int:
    return sum(1 for t in threading.enumerate() if t.name == "lockworker-wake")


def test_a_new_lock_per_use_hands_over_promptly(
    redis_client: redis.Redis, namespace: str
) -> None:
    """4 threads, ``with Lock(...)`` anew each time: all done well before one TTL."""
    rounds, log, errors = 15, [], []
    guard = threading.Lock()

    def run(me: int) -> None:
        try:
            for _ in range(rounds):
                with make(redis_client, namespace, timeout=PROMPT), guard:
                    log.append(me)
        except Exception as exc:  # reported below, not lost in the thread
            errors.append(exc)

    threads_before = wake_threads()  # other tests' idle hubs may still be closing
    started = time.monotonic()
    threads = [threading.Thread(target=run, args=(i,)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(2 * PROMPT)
    assert not errors
    assert len(log) == 4 * rounds
    assert time.monotonic() - started < 2 * PROMPT < TTL
    handovers = sum(1 for a, b in itertools.pairwise(log) if a != b)
    assert handovers >= rounds  # the lock changed hands, not one thread after another
    assert wake_threads() <= threads_before  # waiters block on their grant, no reader


class _Racing(Lock):
    """A Lock that lets another party release right after one of its looks."""

    after_look: int = 0
    on_look: Any = None

    def _look(self, who: Holder, deadline: float | None, *, queue: bool) -> Any:
        seen = super()._look(who, deadline, queue=queue)
        self.after_look -= 1
        if not isinstance(seen, Grant) and self.after_look == 0:
            self.on_look()
        return seen


def test_a_release_between_a_look_and_the_wait_still_grants(
    redis_client: redis.Redis, namespace: str
) -> None:
    """Released just after the waiter queued, before it blocks: the grant waits in its
    list, so the waiter gets the lock at once, not after the TTL."""
    holder = make(redis_client, namespace)
    assert holder.acquire()
    waiter = _Racing(redis_client, "res", namespace=namespace, ttl=TTL)
    waiter.after_look, waiter.on_look = 1, holder.release
    started = time.monotonic()
    assert waiter.acquire(timeout=PROMPT)
    assert time.monotonic() - started < PROMPT < TTL
    assert not holder.held and waiter.owned()
    assert waiter.token == holder.token + 1  # type: ignore[operator]
    waiter.release()


def test_release_grants_the_waiter_before_the_releaser_can_return(
    redis_client: redis.Redis, namespace: str
) -> None:
    """The releaser cannot take the lock straight back while another waits for it."""
    holder = make(redis_client, namespace)
    waiter = make(redis_client, namespace)
    assert holder.acquire()
    thread, box = in_thread(lambda: waiter.acquire(timeout=PROMPT))
    wait_for(lambda: redis_client.zcard(holder.keys.extra("queue")) == 1)
    holder.release()
    assert not holder.acquire(blocking=False)  # granted already: the waiter holds it
    thread.join(PROMPT)
    assert box.get("result") is True and waiter.owned()
    waiter.release()
    assert holder.acquire(blocking=False)  # nobody waits: taken in one round trip
    holder.release()
    assert _leftovers(redis_client, holder) == []


def _leftovers(client: redis.Redis, lock: Lock) -> list[str]:
    """Keys of ``lock`` other than its token counter: none once nobody holds or waits."""
    keys = sorted(str(k) for k in client.scan_iter(match=lock.keys.extra("*")))
    return [k for k in keys if k != lock.keys.state]


def test_waiters_are_served_in_order_of_arrival(
    redis_client: redis.Redis, namespace: str
) -> None:
    """Queue 4 waiters one after another, then release: they get it in that order, and
    the releaser, coming back at once, only after all of them."""
    holder = make(redis_client, namespace)
    queue = holder.keys.extra("queue")
    assert holder.acquire()
    order: list[int] = []
    threads = []

    def wait(me: int, lock: Lock) -> None:
        assert lock.acquire(timeout=PROMPT)
        order.append(me)
        lock.release()

    for me in range(4):
        lock = make(redis_client, namespace)
        thread = threading.Thread(target=wait, args=(me, lock))
        thread.start()
        threads.append(thread)
        wait_for(lambda n=me + 1: redis_client.zcard(queue) == n)  # queued: next one
    holder.release()
    wait_for(lambda: redis_client.zcard(queue) < 4)  # the first holds it
    assert holder.acquire(timeout=PROMPT)  # behind the 3 still queued
    order.append(-1)
    holder.release()
    for thread in threads:
        thread.join(PROMPT)
    assert order == [0, 1, 2, 3, -1]
    assert _leftovers(redis_client, holder) == []


def test_contending_threads_are_served_in_order_of_arrival(
    redis_client: redis.Redis, namespace: str
) -> None:
    """4 threads that each come straight back: every release goes to the waiter at the
    head of the queue, so each holder, looking at the queue while it holds, names the
    next holder. (A thread the machine is slow to schedule may queue late and lose a
    round: shares are the benchmark's to measure, order is this test's.)"""
    stop = threading.Event()
    turns: list[tuple[str, list[str]]] = []  # (holder's run, the queue it saw)
    start = threading.Barrier(4)
    probe = make(redis_client, namespace)

    def run(me: int) -> None:
        lock = make(redis_client, namespace)
        start.wait(PROMPT)
        while not stop.is_set():
            assert lock.acquire(timeout=PROMPT)
            value = redis_client.get(probe.keys.lock)
            queue = redis_client.zrange(probe.keys.extra("queue"), 0, -1)
            assert value is not None
            turns.append((str(value).split("|")[3], [str(run) for run in queue]))
            if len(turns) >= 240:
                stop.set()
            lock.release()

    threads = [threading.Thread(target=run, args=(i,)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(3 * PROMPT)
    assert len(turns) >= 240
    queued = [(now, after) for (_, queue), (after, _) in itertools.pairwise(turns)
              for now in queue[:1]]
    assert len(queued) >= 200  # the others were waiting nearly every time
    assert all(now == after for now, after in queued), [
        (i, now, after) for i, (now, after) in enumerate(queued) if now != after
    ]


def test_a_waiter_that_times_out_leaves_the_queue(
    redis_client: redis.Redis, namespace: str
) -> None:
    holder = make(redis_client, namespace)
    assert holder.acquire()
    waiter = make(redis_client, namespace)
    assert not waiter.acquire(timeout=0.2)
    assert redis_client.zcard(holder.keys.extra("queue")) == 0
    holder.release()
    assert waiter.acquire(blocking=False)  # nobody queued ahead: taken at once
    waiter.release()
    assert _leftovers(redis_client, holder) == []


def test_a_grant_to_a_waiter_that_leaves_passes_on(
    redis_client: redis.Redis, namespace: str
) -> None:
    """Granted while it leaves (its timeout, an interrupt): the lock goes to the next
    waiter unused, it is not held by nobody until its TTL."""
    holder = make(redis_client, namespace)
    assert holder.acquire()
    steps = LockSteps(redis_client, holder.keys)
    early = Holder("early", new_run())
    assert not isinstance(steps.acquire(early, 30_000, 10**6, 60_000, queue=True), Grant)
    late = make(redis_client, namespace)
    thread, box = in_thread(lambda: late.acquire(timeout=PROMPT))
    wait_for(lambda: redis_client.zcard(holder.keys.extra("queue")) == 2)
    holder.release()  # granted to "early", which is not looking
    assert steps.leave(early, 10**6)  # it had the lock; passes it on
    thread.join(PROMPT)
    assert box.get("result") is True and late.owned()
    late.release()
    assert _leftovers(redis_client, holder) == []


def test_a_dead_waiters_place_expires_and_is_skipped(
    redis_client: redis.Redis, namespace: str
) -> None:
    """A waiter that stopped looking (killed) is not granted the lock once its place
    has expired: the next live waiter is."""
    holder = make(redis_client, namespace)
    assert holder.acquire()
    steps = LockSteps(redis_client, holder.keys)
    dead = Holder("dead", new_run())
    assert not isinstance(steps.acquire(dead, 30_000, 10**6, 50, queue=True), Grant)
    live = make(redis_client, namespace)
    thread, box = in_thread(lambda: live.acquire(timeout=PROMPT))
    wait_for(lambda: redis_client.zcard(holder.keys.extra("queue")) == 2)
    wait_for(lambda: _place_expired(redis_client, holder, dead.run))
    holder.release()
    thread.join(PROMPT)
    assert box.get("result") is True and live.owned()
    live.release()
    assert _leftovers(redis_client, holder) == []


def _place_expired(client: redis.Redis, lock: Lock, run: str) -> bool:
    raw = client.hget(lock.keys.extra("waiters"), run)
    seconds, micros = client.time()
    return raw is not None and int(str(raw).split("|")[0]) < seconds * 1000 + micros // 1000


def test_waiters_take_over_a_dead_holders_lock_in_order(
    redis_client: redis.Redis, namespace: str
) -> None:
    """The holder dies (never releases): at its TTL's end the first waiter takes it,
    then the next, in order of arrival."""
    dead = Lock(redis_client, "res", namespace=namespace, ttl=0.3)
    assert dead.acquire()
    order: list[int] = []
    threads = []
    for me in range(2):
        lock = make(redis_client, namespace)
        thread = threading.Thread(
            target=lambda lk=lock, m=me: lk.acquire(timeout=PROMPT)
            and (order.append(m), lk.release())
        )
        thread.start()
        threads.append(thread)
        wait_for(lambda n=me + 1: redis_client.zcard(dead.keys.extra("queue")) == n)
    for thread in threads:
        thread.join(PROMPT)
    assert order == [0, 1]


def test_steps_report_what_to_wait_for(redis_client: redis.Redis, namespace: str) -> None:
    """A held lock answers with its PTTL; a free one with nobody queued is granted."""
    holder = make(redis_client, namespace)
    assert holder.acquire()
    who = Holder("x", "run1")
    seen = holder._steps.acquire(who, 1000, 10**6, 3000, queue=False)
    assert isinstance(seen, Snapshot) and seen.pttl_ms is not None
    holder.release()
    assert isinstance(holder._steps.acquire(who, 1000, 10**6, 3000, queue=False), Grant)


def test_the_wake_reader_survives_an_unexpected_error_and_still_wakes_waiters(
    redis_client: redis.Redis, namespace: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A redis-py failure that is not a connection error (a reply consumed out of turn
    once raised KeyError there) replaces the pub/sub connection; waiters still wake."""
    holder = Semaphore(redis_client, "res", 1, namespace=namespace, ttl=TTL)
    waiter = Semaphore(redis_client, "res", 1, namespace=namespace, ttl=TTL)
    assert holder.acquire()
    original = redis.client.PubSub.get_message
    failures = itertools.count()

    def flaky(self: Any, *args: Any, **kwargs: Any) -> Any:
        if next(failures) == 3:
            raise KeyError(0)
        return original(self, *args, **kwargs)

    monkeypatch.setattr(redis.client.PubSub, "get_message", flaky)
    acquired = threading.Event()
    thread = threading.Thread(target=lambda: waiter.acquire() and acquired.set(), daemon=True)
    thread.start()
    wait_for(lambda: _calls(failures) > 6, timeout=PROMPT)
    started = time.monotonic()
    holder.release()
    assert acquired.wait(PROMPT), "the waiter was not woken"
    assert time.monotonic() - started < PROMPT
    waiter.release()


def _calls(counter: itertools.count[int]) -> int:
    """How many times the patched get_message ran (peeks by copying the counter)."""
    return int(repr(counter)[len("count(") : -1])
