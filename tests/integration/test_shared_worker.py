"""One Worker shared by threads (sync) or tasks (asyncio): one holder per job id inside
the process too.

A worker writes one run id into every lease it takes, and the acquire step re-enters a
lease of the same run (a retry after a lost reply). These tests hold the worker to what
docs/guarantees.md promises: concurrent ``process`` calls for one id run its hook once
at a time; the others answer as a second Worker would (``on_locked``, then
``DONE_ELSEWHERE``, or their own attempt, with a larger token, after a failure).

Every hook records who ran what and when (``time.monotonic()``), and each test checks
the whole history: no two runs of one id overlap, and distinct runs carry distinct
tokens.
"""

from __future__ import annotations

import asyncio
import itertools
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest
import redis
import redis.asyncio
from helpers import in_thread
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import lockworker
from lockworker import Job, Outcome, aio
from lockworker.model.keys import JobKeys
from lockworker.model.state import Grant
from lockworker.protocol import ScriptProtocol
from lockworker.testing.server import RedisServer

DEADLINE = 10.0


@dataclass
class History:
    """What each hook believed and when: (job id, token, attempt, start, end)."""

    runs: list[tuple[str, int, int, float, float]] = field(default_factory=list)
    locked: list[tuple[str, int]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def ran(self, job: Job, start: float) -> None:
        with self.lock:
            self.runs.append((job.id, job.token, job.attempt, start, time.monotonic()))

    def saw_locked(self, job: Job) -> None:
        with self.lock:
            self.locked.append((job.id, job.token))

    def check(self) -> None:
        """No two runs of one id overlap; every run has a token of its own."""
        tokens = [(job_id, token) for job_id, token, _, _, _ in self.runs]
        assert len(tokens) == len(set(tokens)), f"two runs with one token: {self.runs}"
        by_id: dict[str, list[tuple[float, float]]] = {}
        for job_id, _, _, start, end in self.runs:
            by_id.setdefault(job_id, []).append((start, end))
        for job_id, spans in by_id.items():
            spans.sort()
            for (_, end), (start, _) in itertools.pairwise(spans):
                assert end <= start, f"{job_id!r} ran twice at once: {spans}"


def wait_for(predicate: Callable[[], bool], what: str) -> None:
    """Wait for ``predicate`` with a deadline (a hook's wait for its rivals)."""
    deadline = time.monotonic() + DEADLINE
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.002)


def test_concurrent_process_calls_on_one_worker_run_the_hook_once(
    make: Callable[..., lockworker.Worker],
) -> None:
    """The first call's hook holds until every other call reported the job held: they
    all overlap it, and none runs the hook; they end DONE_ELSEWHERE."""
    history, calls = History(), 4

    def hook(job: Job) -> None:
        start = time.monotonic()
        wait_for(lambda: len(history.locked) >= calls - 1, "the other calls' on_locked")
        history.ran(job, start)

    worker = make(hook, on_locked=history.saw_locked)
    threads = [in_thread(lambda: worker.process("same")) for _ in range(calls)]
    for thread, _ in threads:
        thread.join(DEADLINE)
    outcomes = sorted(box["result"].value for _, box in threads)
    assert len(history.runs) == 1, history.runs
    assert outcomes == sorted(["done"] + ["done_elsewhere"] * (calls - 1))
    assert {token for _, token in history.locked} == {history.runs[0][1]}
    history.check()
    assert len(worker._contenders) == 0


def test_a_call_waiting_behind_a_failed_one_takes_its_own_attempt(
    make: Callable[..., lockworker.Worker],
) -> None:
    """The first call's attempt fails while the second waits: the second takes the
    next attempt, with its own, larger token, as a second Worker would."""
    history = History()
    first = threading.Event()

    def hook(job: Job) -> None:
        start = time.monotonic()
        if not first.is_set():
            first.set()
            wait_for(lambda: len(history.locked) >= 1, "the second call's on_locked")
            history.ran(job, start)
            raise RuntimeError("downstream said no")
        history.ran(job, start)

    worker = make(hook, on_locked=history.saw_locked, retry_delay=0)
    t1, b1 = in_thread(lambda: worker.process("j"))
    assert first.wait(DEADLINE)
    t2, b2 = in_thread(lambda: worker.process("j"))
    for thread in (t1, t2):
        thread.join(DEADLINE)
    assert {b1["result"], b2["result"]} == {Outcome.DONE, Outcome.DONE_ELSEWHERE}
    assert [attempt for _, _, attempt, _, _ in history.runs] == [1, 2]
    assert history.runs[0][1] < history.runs[1][1]
    history.check()


def test_a_reentered_grant_is_the_run_s_own_only_after_a_lost_reply(
    make: Callable[..., lockworker.Worker], redis_client: redis.Redis,
) -> None:
    """The acquire of the same run after a lost reply still re-enters its own lease
    (one attempt, not two), when no other call of the worker contends."""
    history = History()
    worker = make(lambda job: history.ran(job, time.monotonic()))
    keys = JobKeys.of(worker.namespace, "lost")
    # The reply of the first acquire is lost: the server granted it anyway.
    granted = ScriptProtocol(redis_client).acquire(
        keys, worker._who, worker._lease_ms, worker.max_attempts, worker._retention_ms
    )
    assert isinstance(granted, Grant) and not granted.reentered
    real = worker.protocol.acquire
    lost = [True]

    def acquire(*args: Any, **kwargs: Any) -> Any:
        answer = real(*args, **kwargs)
        if lost and lost.pop():
            raise redis.ConnectionError("the reply was lost")
        return answer

    worker.protocol.acquire = acquire  # type: ignore[method-assign]
    assert worker.process("lost") is Outcome.DONE
    assert [(attempt, token) for _, token, attempt, _, _ in history.runs] == [
        (granted.attempt, granted.token)
    ]


def test_a_lease_left_by_an_earlier_call_is_waited_out_not_reentered(
    make: Callable[..., lockworker.Worker], redis_client: redis.Redis,
) -> None:
    """A lease of this worker's run that no call of it holds any more (an earlier call
    ended without releasing it) is another holder's to a new call: it waits for the
    lease's end and takes the next attempt, never the same token again."""
    history = History()
    worker = make(lambda job: history.ran(job, time.monotonic()), lock_timeout=0.5)
    keys = JobKeys.of(worker.namespace, "left")
    left = ScriptProtocol(redis_client).acquire(
        keys, worker._who, worker._lease_ms, worker.max_attempts, worker._retention_ms
    )
    assert isinstance(left, Grant)
    assert worker.process("left") is Outcome.DONE
    assert [(attempt, token) for _, token, attempt, _, _ in history.runs] == [
        (left.attempt + 1, left.token + 1)
    ]


@settings(
    max_examples=12, deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    plan=st.lists(
        st.tuples(st.sampled_from(["a", "b", "c"]), st.booleans()), min_size=2, max_size=10
    )
)
def test_threads_sharing_a_worker_never_run_an_id_twice_at_once(
    redis_server: RedisServer, plan: list[tuple[str, bool]],
) -> None:
    """N threads on one worker, random ids, random failures: every id's hook ran at
    most once at a time, distinct runs with distinct tokens, and every call ended."""
    client = redis_server.client(decode_responses=True)
    history = History()
    failing = {i for i, (_, fails) in enumerate(plan) if fails}
    arrived = threading.Barrier(len(plan), timeout=DEADLINE)
    ids = iter(range(len(plan)))
    ids_lock = threading.Lock()

    def hook(job: Job) -> None:
        start = time.monotonic()
        time.sleep(0.005)  # a hook's work: gives the other calls a window to collide
        history.ran(job, start)
        if job.payload in failing and job.attempt == 1:
            raise RuntimeError("fails once")

    worker = lockworker.Worker(
        client, namespace=f"shared-{time.monotonic_ns()}", on_acquired=hook,
        handle_signals=False, lock_timeout=2.0, retry_delay=0, max_attempts=3,
    )

    def call() -> tuple[str, Outcome]:
        with ids_lock:
            i = next(ids)
        arrived.wait()
        return plan[i][0], worker.process(plan[i][0], payload=i)

    try:
        threads = [in_thread(call) for _ in plan]
        for thread, _ in threads:
            thread.join(DEADLINE)
        ended = [box.get("result", box.get("error")) for _, box in threads]
        assert all(isinstance(e, tuple) for e in ended), ended
        history.check()
        for job_id in {job_id for job_id, _ in plan}:
            outcomes = [outcome for j, outcome in ended if j == job_id]
            assert outcomes.count(Outcome.DONE) == 1, (job_id, outcomes)
            assert set(outcomes) <= {Outcome.DONE, Outcome.DONE_ELSEWHERE}
        assert len(worker._contenders) == 0
    finally:
        worker.stop()
        worker.close()
        client.close()


@pytest.fixture
def aclient_url(redis_server: RedisServer) -> str:
    return redis_server.url


def test_concurrent_tasks_on_one_aio_worker_run_the_hook_once(
    aclient_url: str, namespace: str
) -> None:
    """``asyncio.gather`` of calls for one id on one ``aio.Worker``: one runs the hook,
    the others report it held and end DONE_ELSEWHERE."""
    history, calls = History(), 4

    async def main() -> list[Outcome]:
        client = redis.asyncio.Redis.from_url(aclient_url, socket_timeout=5.0)

        async def hook(job: Job) -> None:
            start = time.monotonic()
            deadline = start + DEADLINE
            while len(history.locked) < calls - 1:
                assert time.monotonic() < deadline, "the other calls' on_locked"
                await asyncio.sleep(0.002)
            history.ran(job, start)

        try:
            async with aio.Worker(
                client, namespace=namespace, on_acquired=hook,
                on_locked=history.saw_locked, handle_signals=False, lock_timeout=2.0,
            ) as worker:
                outcomes = await asyncio.gather(*(worker.process("g") for _ in range(calls)))
                assert len(worker._contenders) == 0
                return list(outcomes)
        finally:
            await client.aclose()

    outcomes = asyncio.run(main())
    assert len(history.runs) == 1, history.runs
    assert sorted(o.value for o in outcomes) == sorted(
        ["done"] + ["done_elsewhere"] * (calls - 1)
    )
    history.check()


def test_tasks_sharing_an_aio_worker_never_run_an_id_twice_at_once(
    aclient_url: str, namespace: str
) -> None:
    """Many tasks, a few ids, one failure each on the first attempt: the history has
    no overlap per id and one token per run."""
    history = History()
    plan = [f"t{i % 3}" for i in range(12)]

    async def main() -> list[Outcome]:
        client = redis.asyncio.Redis.from_url(aclient_url, socket_timeout=5.0)

        async def hook(job: Job) -> None:
            start = time.monotonic()
            await asyncio.sleep(0.005)
            history.ran(job, start)
            if job.attempt == 1:
                raise RuntimeError("fails once")

        try:
            async with aio.Worker(
                client, namespace=namespace, on_acquired=hook, handle_signals=False,
                lock_timeout=2.0, retry_delay=0, max_attempts=3,
            ) as worker:
                return list(await asyncio.gather(*(worker.process(j) for j in plan)))
        finally:
            await client.aclose()

    outcomes = asyncio.run(main())
    assert outcomes.count(Outcome.DONE) == 3
    history.check()
