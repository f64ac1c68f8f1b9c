"""One object, many threads: Lock, Redlock, Semaphore, Leader and compute_once shared.

A ``Lock`` or ``Redlock`` object shared by threads is their mutex (they take turns);
a ``Semaphore`` object refuses a second thread (``ConcurrentUse``); a ``Leader`` runs
once at a time; ``compute_once`` calls are independent. Every hold is recorded with
the token its holder believed it had, on entry and exit (``time.monotonic()``): no
two holds of one name may overlap, and distinct holds have distinct tokens.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest
import redis
from helpers import in_thread, wait_for
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lockworker import AlreadyHeld, ConcurrentUse, Leader, Term
from lockworker.primitives import Lock, Redlock, Semaphore, compute_once
from lockworker.testing import RedisServer


@dataclass(frozen=True)
class Hold:
    name: str
    token: int | None
    entered: float
    left: float
    who: str


def violations(holds: list[Hold]) -> list[str]:
    """Overlapping holds of one name, repeated tokens of one name, and tokens that
    changed under a holder (recorded as None)."""
    found = []
    for name, group in itertools.groupby(sorted(holds, key=lambda h: h.name), lambda h: h.name):
        ordered = sorted(group, key=lambda h: h.entered)
        found += [f"{a} overlaps {b}" for a, b in itertools.pairwise(ordered)
                  if b.entered < a.left]
        tokens = [h.token for h in ordered]
        found += [f"{name}: token changed under its holder" for t in tokens if t is None]
        if len(set(tokens)) != len(tokens):
            found.append(f"{name}: a token held twice: {tokens}")
    return found


def run_threads(bodies: list[Callable[[], None]], timeout: float = 20.0) -> None:
    """Start every body together; re-raise the first error of any."""
    start = threading.Barrier(len(bodies))
    errors: list[BaseException] = []

    def run(body: Callable[[], None]) -> None:
        try:
            start.wait()
            body()
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(b,), daemon=True) for b in bodies]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout)
        assert not thread.is_alive(), "a thread never finished"
    if errors:
        raise errors[0]


Step = tuple[int, str, float]
"""One use of a shared lock: which name, how (``with``, ``try``: one non-blocking try,
``timed``: a short timeout) and how long the critical section lasts."""

STEPS = st.tuples(
    st.integers(0, 2), st.sampled_from(["with", "try", "timed"]), st.sampled_from([0.0, 0.002])
)


def use(locks: dict[int, Any], steps: list[Step], who: str, holds: list[Hold]) -> None:
    """Take the shared locks as ``steps`` say, recording each hold."""
    for index, how, work in steps:
        lock = locks[index]
        if how == "with":
            lock.__enter__()
            got = True
        else:
            got = lock.acquire(blocking=False) if how == "try" else lock.acquire(timeout=0.05)
        if not got:
            continue
        entered, token = time.monotonic(), lock.token
        if work:
            time.sleep(work)
        same = lock.token == token and lock.held
        left = time.monotonic()
        lock.release()
        holds.append(Hold(str(index), token if same else None, entered, left, who))


@pytest.mark.parametrize("kind", ["lock", "redlock"])
@settings(max_examples=12, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(plan=st.lists(st.lists(STEPS, min_size=1, max_size=6), min_size=2, max_size=5))
def test_threads_sharing_lock_objects_never_overlap_and_never_share_a_token(
    redis_client: redis.Redis, kind: str, plan: list[list[Step]]
) -> None:
    namespace = f"shared-{time.monotonic_ns()}"

    def make(index: int) -> Any:
        if kind == "lock":
            return Lock(redis_client, f"res{index}", namespace=namespace, ttl=10.0)
        return Redlock([redis_client], f"res{index}", namespace=namespace, ttl=10.0,
                       retry_delay=0.01)

    locks = {i: make(i) for i in range(3)}
    holds: list[Hold] = []
    run_threads([lambda steps=steps, i=i: use(locks, steps, f"t{i}", holds)
                 for i, steps in enumerate(plan)])
    assert not violations(holds), violations(holds)
    assert all(not lock.held for lock in locks.values())
    # Every "with" was served: threads of one object wait their turn.
    wanted = sum(1 for steps in plan for _, how, _ in steps if how == "with")
    assert len(holds) >= wanted


def test_a_thread_holding_a_shared_lock_cannot_take_it_again_but_others_wait(
    redis_client: redis.Redis, namespace: str
) -> None:
    lock = Lock(redis_client, "res", namespace=namespace, ttl=10.0)
    assert lock.acquire()
    first = lock.token
    with pytest.raises(AlreadyHeld):
        lock.acquire()
    with pytest.raises(AlreadyHeld):
        lock.acquire(blocking=False)
    # Another thread: a try fails, a timed wait ends at its timeout, a blocking one waits.
    _, tried = in_thread(lambda: lock.acquire(blocking=False))
    wait_for(lambda: "result" in tried or "error" in tried)
    assert tried == {"result": False}
    began = time.monotonic()
    _, timed = in_thread(lambda: lock.acquire(timeout=0.1))
    wait_for(lambda: timed)
    assert timed == {"result": False} and time.monotonic() - began >= 0.1
    thread, waited = in_thread(lambda: (lock.acquire(), lock.token, lock.release()))
    assert not waited and lock.token == first  # it waits, and the hold stays ours
    lock.release()
    thread.join(5)
    assert waited["result"][0] is True and waited["result"][1] > first
    assert not lock.held and not lock.locked()


def test_a_shared_semaphore_refuses_another_thread_while_it_acquires_or_holds(
    redis_client: redis.Redis, namespace: str
) -> None:
    other = Semaphore(redis_client, "pool", 1, namespace=namespace, ttl=10.0)
    shared = Semaphore(redis_client, "pool", 1, namespace=namespace, ttl=10.0)
    assert other.acquire()
    # One thread waits in the queue through the shared object: it is in use.
    thread, box = in_thread(lambda: shared.acquire(timeout=10.0))
    wait_for(lambda: redis_client.zcard(shared._zsets[1]) == 1)
    with pytest.raises(ConcurrentUse, match="another thread"):
        shared.acquire(blocking=False)
    other.release()
    thread.join(5)
    assert box == {"result": True} and shared.held
    with pytest.raises(ConcurrentUse):  # held by that thread
        shared.acquire()
    assert shared.holders() == 1
    shared.release()
    assert shared.holders() == 0 and redis_client.zcard(shared._zsets[1]) == 0
    assert shared.acquire()
    with pytest.raises(AlreadyHeld):
        shared.acquire()
    shared.release()


def test_threads_racing_on_one_semaphore_never_hold_two_permits_through_it(
    redis_client: redis.Redis, namespace: str
) -> None:
    shared = Semaphore(redis_client, "pool", 8, namespace=namespace, ttl=10.0)
    holds: list[Hold] = []
    refused = []

    def body(who: str) -> Callable[[], None]:
        def run() -> None:
            for _ in range(5):
                try:
                    got = shared.acquire(timeout=1.0)
                except ConcurrentUse:
                    refused.append(who)
                    continue
                assert got
                entered = time.monotonic()
                time.sleep(0.001)
                left = time.monotonic()
                shared.release()
                holds.append(Hold("pool", len(holds), entered, left, who))
        return run

    run_threads([body(f"t{i}") for i in range(6)])
    ordered = sorted(holds, key=lambda h: h.entered)
    assert not [(a, b) for a, b in itertools.pairwise(ordered) if b.entered < a.left]
    assert holds and shared.holders() == 0 and not shared.held


def test_a_leader_object_runs_once_at_a_time(redis_server: RedisServer, namespace: str) -> None:
    entered: list[tuple[int, int]] = []

    def lead(term: Term) -> None:
        entered.append((threading.get_ident(), term.token))
        while not term.wait(0.05):
            pass

    leader = Leader(redis_server.client(), name=namespace, on_acquired=lead,
                    handle_signals=False, lock_timeout=2.0)
    first, box = in_thread(leader.run)
    wait_for(lambda: entered)
    second, again = in_thread(leader.run)
    second.join(5)
    assert isinstance(again.get("error"), ConcurrentUse), again
    assert first.is_alive() and len(entered) == 1  # the first leads on, alone
    leader.stop()
    first.join(10)
    assert box == {"result": None} and len(entered) == 1
    assert Leader.current(redis_server.client(), namespace) is None


@settings(max_examples=8, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(keys=st.lists(st.sampled_from("abc"), min_size=2, max_size=8))
def test_compute_once_from_many_threads_computes_each_key_once(
    redis_client: redis.Redis, keys: list[str]
) -> None:
    namespace = f"once-{time.monotonic_ns()}"
    calls: dict[str, int] = {}
    mutex = threading.Lock()
    results: list[tuple[str, Any]] = []

    def fn(key: str) -> Callable[[], Any]:
        def compute() -> Any:
            with mutex:
                calls[key] = calls.get(key, 0) + 1
            time.sleep(0.01)
            return {"key": key, "n": calls[key]}
        return compute

    def call(key: str) -> Callable[[], None]:
        return lambda: results.append(
            (key, compute_once(redis_client, key, fn(key), ttl=30, namespace=namespace))
        )

    run_threads([call(k) for k in keys])
    assert calls == {k: 1 for k in set(keys)}
    assert all(value == {"key": k, "n": 1} for k, value in results)
