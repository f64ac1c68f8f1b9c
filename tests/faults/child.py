"""One process of the fault battery: a worker, lock holder, leader or redlock holder,
sync (``worker``, ``lock``, ``leader``, ``redlock``) or on asyncio (``aworker``,
``alock``, ``aleader``, ``aredlock``: :mod:`lockworker.aio`'s twins, in one
``asyncio.run``).

    PYTHONPATH=tests python -m faults.child CONFIG_JSON

Every critical section (a worker attempt, a lock hold, a leader term) writes to the
fenced store, checking before each write that it still believes it holds the section
and recording that moment in this process's history file (see :mod:`faults.history`).
A holder that finds it lost its section makes one late write on purpose, which the
store must refuse once a newer holder has written. The configuration keys are read in
:func:`main`; the parent builds them in :mod:`faults.harness`.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import random
import sys
import threading
import time
from collections.abc import Awaitable, Callable, Generator, Iterator
from pathlib import Path
from typing import Any

import redis
import redis.asyncio
import structlog
from redis.asyncio.retry import Retry as AsyncRetry
from redis.backoff import NoBackoff
from redis.retry import Retry

import lockworker
from lockworker import aio
from lockworker.testing.events import capture_events

from .history import JOB, Recorder
from .store import AsyncFencedStore, FencedStore, Write

CRASH_EXIT = 3
"""Exit status of a process whose hook crashed it on purpose (``os._exit``)."""


class SectionEnded(Exception):
    """Raised from ``on_acquired`` when the section did not finish its work."""


Call = Write | float
"""What a section asks of its driver: a write to the fenced store (the answer: accepted
or not), or a pause of so many seconds between two writes."""


class Work:
    """Runs critical sections: fenced writes while the section is believed held.

    A section is written once, as :meth:`plan` (a generator yielding its calls to the
    store and its pauses), and driven by a thread (:meth:`section`) or awaited
    (:meth:`asection`), so sync and asyncio holders do exactly the same things between
    the same checks.
    """

    def __init__(
        self, config: dict[str, Any], rec: Recorder, store: FencedStore | AsyncFencedStore
    ) -> None:
        self.rec = rec
        self.store = store
        self.rng = random.Random()
        low, high = config.get("steps", (2, 5))
        self.steps = (int(low), int(high))
        self.step = float(config.get("step", 0.03))
        self.fail_rate = float(config.get("fail_rate", 0.0))
        self.crash_rate = float(config.get("crash_rate", 0.0))
        self.long_jobs = frozenset(config.get("long_jobs", ()))
        self.long_for = float(config.get("long_for", 0.0))
        """A job of ``long_jobs`` takes ``long_for`` seconds on its first attempt, and
        does not fail: a holder that passes it over, or is killed holding it."""
        self.fail_first = frozenset(config.get("fail_first", ()))
        """Jobs whose first attempt fails, whatever ``fail_rate`` says: a handover
        at a known point."""

    def plan(
        self, kind: str, key: str, token: int, lost: Callable[[], bool], *,
        attempt: int | None = None,
        stopping: Callable[[], bool] | None = None,
    ) -> Generator[Call, Any, str]:
        """One critical section; returns how it ended (see ``Section.result``)."""
        rec, rng = self.rec, self.rng
        sid = rec.begin(kind, key, token, lost, attempt=attempt)
        steps = rng.randint(*self.steps)
        fail = rng.random() < self.fail_rate
        if key in self.long_jobs and attempt == 1:
            steps, fail = max(steps, round(self.long_for / self.step)), False
        elif key in self.fail_first and attempt == 1:
            fail = True
        crash_at = rng.randint(0, steps) if rng.random() < self.crash_rate else None
        for i in range(steps + 1):
            if crash_at == i:
                os._exit(CRASH_EXIT)
            if stopping is not None and stopping():
                rec.end(sid, "stopped")
                return "stopped"
            t = rec.holding(sid, lost)
            if t is None:
                late = yield Write(kind, key, token, rec.run, sid, "late", time.monotonic())
                rec.note("late_write", kind=kind, key=key, sid=sid, token=token, accepted=late)
                rec.end(sid, "lost")
                return "lost"
            last = i == steps
            if last and fail:
                rec.end(sid, "failed")
                return "failed"
            op = "commit" if last else "write"
            if not (yield Write(kind, key, token, rec.run, sid, op, t)):
                rec.end(sid, "fenced")
                return "fenced"
            if not last:
                yield self.step
        rec.end(sid, "returned")
        return "returned"

    def section(
        self, kind: str, key: str, token: int, lost: Callable[[], bool], *,
        attempt: int | None = None,
        wait: Callable[[float], object] | None = None,
        stopping: Callable[[], bool] | None = None,
    ) -> str:
        """:meth:`plan` in this thread: store writes and pauses block it."""
        store = self.store
        assert isinstance(store, FencedStore)
        pause = wait if wait is not None else time.sleep
        plan = self.plan(kind, key, token, lost, attempt=attempt, stopping=stopping)
        reply: Any = None
        while True:
            try:
                call = plan.send(reply)
            except StopIteration as end:
                return str(end.value)
            reply = store.write(call) if isinstance(call, Write) else pause(call)

    async def asection(
        self, kind: str, key: str, token: int, lost: Callable[[], bool], *,
        attempt: int | None = None,
        wait: Callable[[float], Awaitable[object]] | None = None,
        stopping: Callable[[], bool] | None = None,
    ) -> str:
        """:meth:`plan` in this task: store writes and pauses are awaited, so the
        heartbeat task runs meanwhile."""
        store = self.store
        assert isinstance(store, AsyncFencedStore)
        pause = wait if wait is not None else asyncio.sleep
        plan = self.plan(kind, key, token, lost, attempt=attempt, stopping=stopping)
        reply: Any = None
        while True:
            try:
                call = plan.send(reply)
            except StopIteration as end:
                return str(end.value)
            reply = await (store.write(call) if isinstance(call, Write) else pause(call))


def stop_requested(config: dict[str, Any]) -> bool:
    return Path(config["stop_file"]).exists()


def redis_client(config: dict[str, Any], url: str) -> redis.Redis:
    timeout = float(config.get("socket_timeout", 0.5))
    return redis.Redis.from_url(url, socket_timeout=timeout, socket_connect_timeout=timeout)


def retry_schedule(config: dict[str, Any]) -> Any:
    """The workers' ``retry_delay``: the default, or seconds by failed attempt (a list,
    the last repeated)."""
    delays = config.get("retry_delay")
    if not isinstance(delays, list):
        return delays
    return lambda attempt: delays[min(attempt, len(delays)) - 1]


def retry_policy(config: dict[str, Any]) -> lockworker.RetryPolicy:
    return lockworker.RetryPolicy(budget=float(config.get("retry_budget", 10.0)))


def serving(config: dict[str, Any]) -> dict[str, Any]:
    """A worker's role and, for one that serves its jobs (``concurrency`` > 1: many at
    once, so their steps share round trips, and a backup holds deliveries back), the
    settings that say so."""
    return {"role": config.get("role", "primary"),
            "backup_delay": float(config.get("backup_delay", 0.5))}


def note_batches(rec: Recorder) -> None:
    """Note every round trip that carries more than one protocol step (sync and
    asyncio), so a scenario can tell its steps were batched (not vacuously), each
    delivery a backup settled by its namespace's progress, without a look, each time a
    fan-out reader skipped to that progress, reading none of what it passed, and each
    time a backup's reading of its namespace showed a primary serving, or none any more."""
    from lockworker.aio import batcher as aio_batcher
    from lockworker.protocol import batch

    try:
        from lockworker.daemons import lane
    except ImportError:  # release 0.3.0 (a rolling upgrade's old side) has no lane
        lane = None

    sync_send, async_send = batch.send, aio_batcher.send

    def send(client: Any, steps: Any) -> Any:
        rec.note("batch", steps=len(steps))
        return sync_send(client, steps)

    async def asend(client: Any, steps: Any) -> Any:
        rec.note("batch", steps=len(steps))
        return await async_send(client, steps)

    batch.send = send  # type: ignore[assignment]
    if lane is not None:
        lane.send = send  # type: ignore[assignment]  # serve's lane: claims and DONEs
    aio_batcher.send = asend  # type: ignore[assignment]

    def followed(logger: str, event: str, fields: dict[str, Any]) -> None:
        if event == "job.done_elsewhere" and fields.get("followed"):
            rec.note("followed", key=str(fields.get("job_id")))  # settled, no look
        elif event == "stream.skipped":  # the source skipped to its namespace's progress
            rec.note("skipped", progress=str(fields.get("progress")))
        elif event in ("presence.primary_serving", "presence.primary_gone"):
            rec.note("primary", serving=event.endswith("serving"))  # a backup's view

    lockworker.runtime.events.add_observer(followed)


def recording(base: type[Any], rec: Recorder) -> type[Any]:
    """``base`` (a Worker class) whose ``process`` records each outcome, retrying while
    Redis is unavailable: what a sequential worker does around each call, here for the
    calls ``serve`` makes (it runs every job through the public ``process``)."""
    if issubclass(base, aio.Worker):
        class AsyncRecording(base):  # type: ignore[misc, valid-type]
            async def process(self, job_id: str, payload: Any = None) -> Any:
                while True:
                    try:
                        outcome = await super().process(job_id, payload)
                    except lockworker.RedisUnavailable as exc:
                        rec.note("unavailable", key=job_id, error=repr(exc))
                        continue
                    rec.outcome(job_id, outcome.value)
                    return outcome
        return AsyncRecording

    class Recording(base):  # type: ignore[misc, valid-type]
        def process(self, job_id: str, payload: Any = None) -> Any:
            while True:
                try:
                    outcome = super().process(job_id, payload)
                except lockworker.RedisUnavailable as exc:
                    rec.note("unavailable", key=job_id, error=repr(exc))
                    continue
                rec.outcome(job_id, outcome.value)
                return outcome
    return Recording


def run_worker(config: dict[str, Any], rec: Recorder, work: Work) -> None:
    client = redis_client(config, config["urls"][0])

    def on_acquired(job: lockworker.Job) -> None:
        if getattr(job, "scheduled_for", None) is not None:  # none in 0.3.0
            note_tick(rec, job, client.time())
        result = work.section(JOB, job.id, job.token, lambda: job.lost, attempt=job.attempt)
        if result != "returned":
            raise SectionEnded(result)

    concurrency = int(config.get("concurrency", 1))
    own = bool(config.get("own_process"))
    if concurrency > 1 or own:
        note_batches(rec)
    worker = (lockworker.Worker if own else recording(lockworker.Worker, rec))(
        client,
        namespace=config["namespace"],
        owner=config.get("owner"),
        lock_timeout=float(config["lock_timeout"]),
        max_attempts=int(config.get("max_attempts", 3)),
        retry_delay=retry_schedule(config),
        redis_retry=retry_policy(config),
        handle_signals=False,
        on_acquired=on_acquired,
        **serving(config),
        **retention(config),
    )
    rec.owner = worker.owner
    first = list(config.get("first", []))
    rest = [j for j in config["jobs"] if j not in first]
    work.rng.shuffle(rest)
    rec.note("ready")
    source = served_source(config, worker.owner)
    if source is not None:
        watcher = threading.Thread(
            target=stop_on_file if config.get("until_stopped") else stop_once_resolved,
            args=(worker, config), daemon=True,
        )
        watcher.start()
        with done_events(rec) if own else contextlib.nullcontext():
            worker.serve(source, concurrency=concurrency)
    elif concurrency > 1:
        worker.serve([(job_id, None) for job_id in first + rest], concurrency=concurrency)
    elif int(config.get("shared", 1)) > 1:
        shared_calls(worker, first + rest, int(config["shared"]), work.rng)
    else:
        for job_id in first + rest:
            worker.process(job_id)
    worker.close()


def shared_orders(jobs: list[str], calls: int, rng: Any) -> list[list[str]]:
    """Each of ``calls`` callers' order of every job: the first caller's as given, the
    others shuffled, so they meet on one id at different moments."""
    orders = [list(jobs)]
    for _ in range(calls - 1):
        order = list(jobs)
        rng.shuffle(order)
        orders.append(order)
    return orders


def shared_calls(worker: lockworker.Worker, jobs: list[str], calls: int, rng: Any) -> None:
    """``calls`` threads sharing one worker, each processing every job (a web handler
    or a pool sharing one Worker): one holder per id inside the process too."""
    threads = [
        threading.Thread(target=lambda order=order: [worker.process(j) for j in order])
        for order in shared_orders(jobs, calls, rng)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


GROUP_DONE = frozenset({lockworker.JobStatus.DONE, lockworker.JobStatus.GAVE_UP})


def retention(config: dict[str, Any]) -> dict[str, Any]:
    """A worker's ``done_retention``, if the scenario shortens the DONE window."""
    window = config.get("done_retention")
    return {} if window is None else {"done_retention": float(window)}


def served_source(config: dict[str, Any], owner: str) -> Any:
    """The endless source a worker serves, if any (None: it processes ``jobs``): a
    member of the scenario's consumer group (``group``), a fan-out reader of its stream
    (``fanout``: every reader sees every entry), or the ticks of the schedule ``tick``
    every ``schedule`` seconds."""
    if config.get("group"):
        return group_source(config, owner)
    if config.get("fanout"):
        return lockworker.StreamSource(
            redis_client(config, config["urls"][0]), group_stream(config), owner=owner,
            block=0.05,
        )
    if config.get("schedule"):
        return lockworker.ScheduleSource(
            redis_client(config, config["urls"][0]),
            [lockworker.Every("tick", int(config["schedule"]))],
        )
    return None


def note_tick(rec: Recorder, job: lockworker.Job, server_time: Any) -> None:
    """Before a tick's section: the server's clock (``TIME``) and the tick's nominal
    time, so the checker can tell no tick ran before it was due on the server."""
    secs, micros = server_time
    assert job.scheduled_for is not None
    rec.note("tick", key=job.id, token=job.token, server=int(secs) + int(micros) / 1e6,
             nominal=job.scheduled_for.timestamp())


def stop_on_file(worker: Any, config: dict[str, Any]) -> None:
    """Stop a worker serving an endless source once the scenario asks every child
    to end (its jobs may be resolved, or deleted, long before)."""
    while not stop_requested(config):
        time.sleep(0.05)
    worker.stop()


def group_stream(config: dict[str, Any]) -> str:
    """The stream a group scenario's jobs are submitted to (one per namespace)."""
    return f"{config['namespace']}-jobs"


@contextlib.contextmanager
def done_events(rec: Recorder) -> Iterator[None]:
    """Record each job's DONE from its ``job.done`` event (a worker that serves
    through lockworker's own ``process``, which no override records)."""
    with capture_events() as events:
        try:
            yield
        finally:
            for event in events:
                if event.get("event") == "job.done" and "job_id" in event:
                    rec.outcome(str(event["job_id"]), "done")


def group_source(config: dict[str, Any], owner: str) -> lockworker.StreamSource:
    """A member of the scenario's consumer group: each entry goes to one member, and a
    dead member's entries are claimed by the others."""
    return lockworker.StreamSource(
        redis_client(config, config["urls"][0]), group_stream(config), owner=owner,
        group=str(config["group"]), block=0.05, batch=config.get("group_batch"),
    )


def stop_once_resolved(worker: lockworker.Worker, config: dict[str, Any]) -> None:
    """A group member serves a stream, which never ends: stop it once every job of the
    scenario is DONE or GAVE_UP on the server (whoever served it)."""
    jobs = config["jobs"]
    while not worker.stopping:
        try:
            if all(worker.inspect(job_id).status in GROUP_DONE for job_id in jobs):
                worker.stop()
                return
        except lockworker.LockworkerError:
            pass  # Redis unavailable for now (a fault): look again
        time.sleep(0.05)


def lost_of(lock: lockworker.Lock | aio.Lock) -> Callable[[], bool]:
    return lambda: lock.lost


def run_lock(config: dict[str, Any], rec: Recorder, work: Work) -> None:
    client = redis_client(config, config["urls"][0])
    lock_timeout = float(config["lock_timeout"])
    locks = {
        name: lockworker.Lock(
            client, name, ttl=lock_timeout, auto_renew=True, namespace=config["namespace"],
            redis_retry=retry_policy(config),
        )
        for name in config["names"]
    }
    gap = float(config.get("gap", 0.01))
    rec.note("ready")
    while not stop_requested(config):
        name = work.rng.choice(sorted(locks))
        lock = locks[name]
        try:
            if not lock.acquire(timeout=lock_timeout * 2):
                continue
        except lockworker.RedisUnavailable as exc:
            rec.note("unavailable", key=name, error=repr(exc))
            continue
        token = lock.token
        assert token is not None
        work.section("lock", name, token, lost_of(lock))
        try:
            lock.release()
        except lockworker.LockLost:
            rec.note("release_lost", key=name, token=token)
        except lockworker.RedisUnavailable as exc:
            rec.note("unavailable", key=name, error=repr(exc))
        time.sleep(work.rng.uniform(0, gap))
    for lock in locks.values():
        lock.close()


def run_leader(config: dict[str, Any], rec: Recorder, work: Work) -> None:
    client = redis_client(config, config["urls"][0])
    name = config["names"][0]
    current: list[lockworker.Leader] = []

    def lead(term: lockworker.Term) -> None:
        work.section(
            "leader", name, term.token, lambda: term.lost,
            wait=term.wait, stopping=lambda: term.stopping,
        )

    def stopper() -> None:
        while not stop_requested(config):
            time.sleep(0.05)
        for leader in list(current):
            leader.stop()

    threading.Thread(target=stopper, daemon=True).start()
    rec.note("ready")
    while not stop_requested(config):
        leader = lockworker.Leader(
            client, name=name, owner=config.get("owner"),
            lock_timeout=float(config["lock_timeout"]), handle_signals=False,
            redis_retry=retry_policy(config), on_acquired=lead,
        )
        rec.owner = leader.owner
        current.append(leader)
        if stop_requested(config):
            break
        try:
            leader.run()
        except lockworker.RedisUnavailable as exc:
            rec.note("unavailable", key=name, error=repr(exc))


def run_redlock(config: dict[str, Any], rec: Recorder, work: Work) -> None:
    clients = [
        redis.Redis.from_url(
            url, socket_timeout=0.1, socket_connect_timeout=0.1, retry=Retry(NoBackoff(), 0)
        )
        for url in config["urls"]
    ]
    ttl = float(config["lock_timeout"])
    name = config["names"][0]
    lock = lockworker.Redlock(
        clients, name, ttl=ttl, retry_count=0, retry_delay=0.05,
        auto_renew=bool(config.get("auto_renew", False)), namespace=config["namespace"],
    )
    gap = float(config.get("gap", 0.01))
    rec.note("ready")
    while not stop_requested(config):
        try:
            if not lock.acquire(timeout=ttl):
                continue
        except lockworker.QuorumNotReached as exc:
            rec.note("no_quorum", key=name, error=repr(exc))
            time.sleep(0.02)
            continue
        token = lock.token
        assert token is not None
        work.section("redlock", name, token, lambda: lock.lost)
        try:
            lock.release()
        except lockworker.LockLost:
            rec.note("release_lost", key=name, token=token)
        time.sleep(work.rng.uniform(0, gap))
    lock.close()


# -- asyncio children: the same loops as the sync ones above, on lockworker.aio ------


def aredis_client(config: dict[str, Any], url: str) -> redis.asyncio.Redis:
    timeout = float(config.get("socket_timeout", 0.5))
    return redis.asyncio.Redis.from_url(
        url, socket_timeout=timeout, socket_connect_timeout=timeout
    )


async def run_aworker(config: dict[str, Any], rec: Recorder, work: Work) -> None:
    async def on_acquired(job: lockworker.Job) -> None:
        if getattr(job, "scheduled_for", None) is not None:  # none in 0.3.0
            note_tick(rec, job, await client.time())
        result = await work.asection(
            JOB, job.id, job.token, lambda: job.lost, attempt=job.attempt
        )
        if result != "returned":
            raise SectionEnded(result)

    client = aredis_client(config, config["urls"][0])
    concurrency = int(config.get("concurrency", 1))
    own = bool(config.get("own_process")) and bool(config.get("fanout"))
    if concurrency > 1 or own:
        note_batches(rec)
    worker = (aio.Worker if own else recording(aio.Worker, rec))(
        client,
        namespace=config["namespace"],
        owner=config.get("owner"),
        lock_timeout=float(config["lock_timeout"]),
        max_attempts=int(config.get("max_attempts", 3)),
        retry_delay=retry_schedule(config),
        redis_retry=retry_policy(config),
        handle_signals=False,
        on_acquired=on_acquired,
        **serving(config),
        **retention(config),
    )
    rec.owner = worker.owner
    first = list(config.get("first", []))
    rest = [j for j in config["jobs"] if j not in first]
    work.rng.shuffle(rest)
    rec.note("ready")
    source = served_source(config, worker.owner)
    if source is not None:
        watcher = asyncio.ensure_future(
            astop_on_file(worker, config) if config.get("until_stopped")
            else astop_once_resolved(worker, config["jobs"])
        )
        with done_events(rec) if own else contextlib.nullcontext():
            await worker.serve(source, concurrency=concurrency)
        watcher.cancel()
    elif concurrency > 1:
        await worker.serve([(job_id, None) for job_id in first + rest], concurrency=concurrency)
    elif int(config.get("shared", 1)) > 1:
        async def calls(order: list[str]) -> None:
            for job_id in order:
                await worker.process(job_id)
        orders = shared_orders(first + rest, int(config["shared"]), work.rng)
        await asyncio.gather(*(calls(order) for order in orders))
    else:
        for job_id in first + rest:
            await worker.process(job_id)
    await worker.close()
    await client.aclose()


async def astop_once_resolved(worker: aio.Worker, jobs: list[str]) -> None:
    """:func:`stop_once_resolved` for an asyncio worker."""
    while not worker.stopping:
        try:
            seen = [await worker.inspect(job_id) for job_id in jobs]
            if all(s.status in GROUP_DONE for s in seen):
                worker.stop()
                return
        except lockworker.LockworkerError:
            pass
        await asyncio.sleep(0.05)


async def astop_on_file(worker: aio.Worker, config: dict[str, Any]) -> None:
    """:func:`stop_on_file` for an asyncio worker."""
    while not stop_requested(config):
        await asyncio.sleep(0.05)
    worker.stop()


async def run_alock(config: dict[str, Any], rec: Recorder, work: Work) -> None:
    client = aredis_client(config, config["urls"][0])
    lock_timeout = float(config["lock_timeout"])
    locks = {
        name: aio.Lock(
            client, name, ttl=lock_timeout, auto_renew=True, namespace=config["namespace"],
            redis_retry=retry_policy(config),
        )
        for name in config["names"]
    }
    gap = float(config.get("gap", 0.01))
    rec.note("ready")
    while not stop_requested(config):
        name = work.rng.choice(sorted(locks))
        lock = locks[name]
        try:
            if not await lock.acquire(timeout=lock_timeout * 2):
                continue
        except lockworker.RedisUnavailable as exc:
            rec.note("unavailable", key=name, error=repr(exc))
            continue
        token = lock.token
        assert token is not None
        await work.asection("lock", name, token, lost_of(lock))
        try:
            await lock.release()
        except lockworker.LockLost:
            rec.note("release_lost", key=name, token=token)
        except lockworker.RedisUnavailable as exc:
            rec.note("unavailable", key=name, error=repr(exc))
        await asyncio.sleep(work.rng.uniform(0, gap))
    for lock in locks.values():
        lock.close()
    await client.aclose()


async def run_aredlock(config: dict[str, Any], rec: Recorder, work: Work) -> None:
    clients = [
        redis.asyncio.Redis.from_url(
            url, socket_timeout=0.1, socket_connect_timeout=0.1,
            retry=AsyncRetry(NoBackoff(), 0),
        )
        for url in config["urls"]
    ]
    ttl = float(config["lock_timeout"])
    name = config["names"][0]
    lock = aio.Redlock(
        clients, name, ttl=ttl, retry_count=0, retry_delay=0.05,
        auto_renew=bool(config.get("auto_renew", False)), namespace=config["namespace"],
    )
    gap = float(config.get("gap", 0.01))
    rec.note("ready")
    while not stop_requested(config):
        try:
            if not await lock.acquire(timeout=ttl):
                continue
        except lockworker.QuorumNotReached as exc:
            rec.note("no_quorum", key=name, error=repr(exc))
            await asyncio.sleep(0.02)
            continue
        token = lock.token
        assert token is not None
        await work.asection("redlock", name, token, lambda: lock.lost)
        try:
            await lock.release()
        except lockworker.LockLost:
            rec.note("release_lost", key=name, token=token)
        await asyncio.sleep(work.rng.uniform(0, gap))
    lock.close()
    for client in clients:
        await client.aclose()


async def run_aleader(config: dict[str, Any], rec: Recorder, work: Work) -> None:
    client = aredis_client(config, config["urls"][0])
    name = config["names"][0]
    current: list[aio.Leader] = []

    async def lead(term: aio.AsyncTerm) -> None:
        await work.asection(
            "leader", name, term.token, lambda: term.lost,
            wait=term.wait, stopping=lambda: term.stopping,
        )

    async def stopper() -> None:
        while not stop_requested(config):
            await asyncio.sleep(0.05)
        for leader in list(current):
            leader.stop()

    stopping = asyncio.create_task(stopper())
    rec.note("ready")
    while not stop_requested(config):
        leader = aio.Leader(
            client, name=name, owner=config.get("owner"),
            lock_timeout=float(config["lock_timeout"]), handle_signals=False,
            redis_retry=retry_policy(config), on_acquired=lead,
        )
        rec.owner = leader.owner
        current.append(leader)
        if stop_requested(config):
            break
        try:
            await leader.run()
        except lockworker.RedisUnavailable as exc:
            rec.note("unavailable", key=name, error=repr(exc))
    await stopping
    await client.aclose()


def jump_wall_clock(rec: Recorder) -> None:
    """Make ``time.time`` jump by an hour either way, again and again, from now on.

    A process cannot step the system clock without privileges, so the jumps are made
    where Python code reads it: the library must not care, as it judges leases by
    ``time.monotonic`` only.
    """
    real_time, real_time_ns = time.time, time.time_ns
    offset = [0.0]
    time.time = lambda: real_time() + offset[0]
    time.time_ns = lambda: real_time_ns() + int(offset[0] * 1e9)
    rng = random.Random()

    def jumper() -> None:
        while True:
            time.sleep(rng.uniform(0.05, 0.2))
            offset[0] = rng.choice([-3600.0, 3600.0, 0.0, -3600.0 * 24])
            rec.note("clock_jump", offset=offset[0])

    threading.Thread(target=jumper, daemon=True).start()


MODES = {"worker": run_worker, "lock": run_lock, "leader": run_leader, "redlock": run_redlock}
AMODES = {
    "aworker": run_aworker, "alock": run_alock, "aleader": run_aleader, "aredlock": run_aredlock,
}
"""The asyncio twins of ``worker``, ``lock``, ``leader`` and ``redlock``, each run by
``asyncio.run``."""


async def run_async(config: dict[str, Any], rec: Recorder) -> None:
    client = redis.asyncio.Redis.from_url(config["store_url"], socket_timeout=10.0)
    store = AsyncFencedStore(client, config["store_ns"])
    await AMODES[config["mode"]](config, rec, Work(config, rec, store))
    await client.aclose()


def main() -> int:
    config: dict[str, Any] = json.loads(sys.argv[1])
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.CRITICAL))
    label = config.get("owner") or f"{config['mode']}-{os.getpid()}"
    rec = Recorder(config["history"], owner=label)
    rec.note("release", version=lockworker.__version__, file=lockworker.__file__)
    if config.get("clock_jumps"):
        jump_wall_clock(rec)
    if config["mode"] in AMODES:
        asyncio.run(run_async(config, rec))
    else:
        store = FencedStore(
            redis.Redis.from_url(config["store_url"], socket_timeout=10.0), config["store_ns"]
        )
        MODES[config["mode"]](config, rec, Work(config, rec, store))
    rec.note("exit")
    return 0


if __name__ == "__main__":
    sys.exit(main())
