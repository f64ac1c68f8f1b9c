"""The worker processes of the frameworks beside lockworker in :mod:`benchmarks.peers`
that run in-process workers on a Redis broker: Dramatiq, arq, saq, streaq, taskiq-redis
and huey (RQ's and Celery's are in :mod:`benchmarks.peer_workers`).

Each worker process builds its tool's worker for one queue of its own (a name per
trial), with :data:`CONCURRENCY` jobs at a time where the tool has that setting, says
``ready`` over its pipe once it is connected, and starts consuming when it is sent
``go``. The parent queues the jobs through the tool's own client (:func:`enqueue`).
Every tool runs the handlers of :mod:`benchmarks.peer_jobs`: the sync ones (Dramatiq,
huey, in worker threads) or their asyncio twins (arq, saq, streaq, taskiq), one round
trip per ``record`` job either way. Each framework's own log goes to ``os.devnull`` at
WARNING, as RQ's and Celery's workers log at WARNING.
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any

from benchmarks import peer_jobs
from benchmarks.common import quiet_logging

CONCURRENCY = 4
"""Jobs at a time per worker process: Dramatiq's ``worker_threads``, arq's
``max_jobs``, saq's and streaq's ``concurrency``, taskiq's ``max_async_tasks`` and huey's
``workers`` (threads); the section's concurrency for lockworker and Celery's threads."""
TIMEOUT_MARGIN = 10
"""Seconds a tuned job's timeout gives beyond its work (arq, saq): the timeout ends the
job, so it must exceed the work, and a dead worker's job is found only after it."""
DRAMATIQ_HEARTBEAT_MS = 5_000
"""The tuned Dramatiq broker's ``heartbeat_timeout`` (60,000 ms by default): a worker
whose last command is older counts as dead. An idle worker polls at least every
second, a busy one too, so 5 s leaves room."""
DRAMATIQ_MAINTENANCE = 1_000_000
"""The tuned ``maintenance_chance`` (per million commands; 1,000 by default): the
maintenance that requeues a dead worker's messages runs with every command."""
TUNED_IDLE = 2.0
"""Seconds: the tuned ``idle_timeout`` of streaq and taskiq-redis (a consumer group's
entry not renewed for that long is claimed again), like lockworker's tuned lease."""
SAQ_SWEEP = 1
"""Seconds between the tuned saq worker's sweeps for stuck jobs (60 by default)."""
BATCH = 100
"""Jobs the asyncio clients queue at once (``asyncio.gather``)."""

MODULES = {
    "Dramatiq": "dramatiq", "arq": "arq", "saq": "saq", "streaq": "streaq",
    "taskiq-redis": "taskiq_redis", "huey": "huey",
}
"""The frameworks this module runs, and the module each needs."""
DISTRIBUTIONS = {
    "Dramatiq": "dramatiq", "arq": "arq", "saq": "saq", "streaq": "streaq",
    "taskiq-redis": "taskiq-redis", "huey": "huey",
}


@dataclass(frozen=True)
class Plan:
    """One trial's workers (pickled to each child)."""

    tool: str
    port: int
    queue: str
    setting: str
    hold: float = 0.0

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    @property
    def tuned(self) -> bool:
        return self.setting == "tuned"


def worker_main(plan: Plan, pipe: Connection) -> None:
    """One worker process of ``plan.tool``: get ready, wait for ``go``, work until killed."""
    quiet_logging(to_devnull=True)
    logging.basicConfig(
        level=logging.WARNING, handlers=[logging.FileHandler(os.devnull)], force=True
    )
    try:
        MAINS[plan.tool](plan, pipe)
    except Exception as error:  # the parent waits for "ready": tell it why not instead
        text = " ".join(str(error).split())[:160]
        pipe.send(f"{type(error).__name__}: {text}" if text else type(error).__name__)


def enqueue(plan: Plan, handler: str, args: list[tuple[Any, ...]]) -> None:
    """Queue one ``handler`` job per ``args`` through the tool's client."""
    ENQUEUES[plan.tool](plan, handler, args)


async def _batched(calls: list[Callable[[], Awaitable[Any]]]) -> None:
    for start in range(0, len(calls), BATCH):
        await asyncio.gather(*(call() for call in calls[start:start + BATCH]))


# -- Dramatiq (threads) -----------------------------------------------------------------


def _dramatiq(plan: Plan) -> tuple[Any, dict[str, Any]]:
    import dramatiq
    from dramatiq.brokers.redis import RedisBroker

    tuned: dict[str, Any] = (
        {"heartbeat_timeout": DRAMATIQ_HEARTBEAT_MS, "maintenance_chance": DRAMATIQ_MAINTENANCE}
        if plan.tuned else {}
    )
    broker = RedisBroker(host="127.0.0.1", port=plan.port, namespace=plan.queue, **tuned)
    actors = {
        name: dramatiq.actor(fn, actor_name=name, queue_name=plan.queue, broker=broker)
        for name, fn in (("record", peer_jobs.record), ("hold", peer_jobs.hold))
    }
    return broker, actors


def _dramatiq_main(plan: Plan, pipe: Connection) -> None:
    import dramatiq

    broker, _ = _dramatiq(plan)
    broker.client.ping()
    worker = dramatiq.Worker(broker, worker_threads=CONCURRENCY)
    pipe.send("ready")
    pipe.recv()
    worker.start()
    threading.Event().wait()  # the worker's threads work until the process is killed


def _dramatiq_enqueue(plan: Plan, handler: str, args: list[tuple[Any, ...]]) -> None:
    broker, actors = _dramatiq(plan)
    try:
        for one in args:
            actors[handler].send(*one)
    finally:
        broker.close()


# -- huey (threads) ---------------------------------------------------------------------


def _huey(plan: Plan) -> tuple[Any, dict[str, Any]]:
    from huey import RedisHuey

    huey = RedisHuey(name=plan.queue, host="127.0.0.1", port=plan.port, results=False)
    tasks = {
        name: huey.task(name=name)(fn)
        for name, fn in (("record", peer_jobs.record), ("hold", peer_jobs.hold))
    }
    return huey, tasks


def _huey_main(plan: Plan, pipe: Connection) -> None:
    huey, _ = _huey(plan)
    huey.storage.conn.ping()
    consumer = huey.create_consumer(workers=CONCURRENCY, worker_type="thread", periodic=False)
    pipe.send("ready")
    pipe.recv()
    consumer.run()


def _huey_enqueue(plan: Plan, handler: str, args: list[tuple[Any, ...]]) -> None:
    huey, tasks = _huey(plan)
    for one in args:
        tasks[handler](*one)
    huey.storage.conn.close()


# -- arq (asyncio) ----------------------------------------------------------------------


async def _arq_record(ctx: dict[str, Any], port: int, keyspace: str, n: int) -> None:
    await peer_jobs.arecord(port, keyspace, n)


async def _arq_hold(ctx: dict[str, Any], port: int, keyspace: str, seconds: float) -> None:
    await peer_jobs.ahold(port, keyspace, seconds)


def _arq_main(plan: Plan, pipe: Connection) -> None:
    async def main() -> None:
        from arq import Worker, create_pool, func
        from arq.connections import RedisSettings

        pool = await create_pool(RedisSettings(host="127.0.0.1", port=plan.port))
        tuned: dict[str, Any] = (
            {"job_timeout": round(plan.hold) + TIMEOUT_MARGIN} if plan.tuned else {}
        )
        worker = Worker(
            functions=[func(_arq_record, name="record"), func(_arq_hold, name="hold")],
            queue_name=plan.queue, redis_pool=pool, max_jobs=CONCURRENCY,
            handle_signals=False, **tuned,
        )
        pipe.send("ready")
        await asyncio.to_thread(pipe.recv)
        await worker.async_run()

    asyncio.run(main())


def _arq_enqueue(plan: Plan, handler: str, args: list[tuple[Any, ...]]) -> None:
    async def main() -> None:
        from arq import create_pool
        from arq.connections import RedisSettings

        pool = await create_pool(RedisSettings(host="127.0.0.1", port=plan.port))
        try:
            await _batched([
                lambda one=one: pool.enqueue_job(handler, *one, _queue_name=plan.queue)
                for one in args
            ])
        finally:
            await pool.aclose()

    asyncio.run(main())


# -- saq (asyncio) ----------------------------------------------------------------------


async def _saq_record(ctx: Any, *, port: int, keyspace: str, n: int) -> None:
    await peer_jobs.arecord(port, keyspace, n)


async def _saq_hold(ctx: Any, *, port: int, keyspace: str, seconds: float) -> None:
    await peer_jobs.ahold(port, keyspace, seconds)


def _saq_main(plan: Plan, pipe: Connection) -> None:
    async def main() -> None:
        from saq import Queue, Worker

        queue = Queue.from_url(plan.url, name=plan.queue)
        await queue.connect()
        worker = Worker(
            queue, functions=[("record", _saq_record), ("hold", _saq_hold)],
            concurrency=CONCURRENCY, timers={"sweep": SAQ_SWEEP} if plan.tuned else None,
        )
        pipe.send("ready")
        await asyncio.to_thread(pipe.recv)
        await worker.start()

    asyncio.run(main())


def _saq_enqueue(plan: Plan, handler: str, args: list[tuple[Any, ...]]) -> None:
    names = ("port", "keyspace", "n" if handler == "record" else "seconds")
    jobs = [dict(zip(names, one, strict=True)) for one in args]
    tuned: dict[str, Any] = (
        {"retries": 2, "timeout": round(plan.hold) + TIMEOUT_MARGIN} if plan.tuned else {}
    )

    async def main() -> None:
        from saq import Queue

        queue = Queue.from_url(plan.url, name=plan.queue)
        await queue.connect()
        try:
            await _batched([
                lambda job=job: queue.enqueue(handler, **job, **tuned) for job in jobs
            ])
        finally:
            await queue.disconnect()

    asyncio.run(main())


# -- streaq (asyncio, through anyio) ----------------------------------------------------


def _streaq(plan: Plan) -> Any:
    from streaq import Worker

    tuned: dict[str, Any] = {"idle_timeout": TUNED_IDLE} if plan.tuned else {}
    worker = Worker(
        redis_url=plan.url, queue_name=plan.queue, concurrency=CONCURRENCY,
        handle_signals=False, **tuned,
    )
    worker.task(name="record")(peer_jobs.arecord)
    worker.task(name="hold")(peer_jobs.ahold)
    return worker


def _streaq_main(plan: Plan, pipe: Connection) -> None:
    worker = _streaq(plan)

    async def main() -> None:
        pipe.send("ready")
        await asyncio.to_thread(pipe.recv)
        await worker.run_async()

    asyncio.run(main())


def _streaq_enqueue(plan: Plan, handler: str, args: list[tuple[Any, ...]]) -> None:
    worker = _streaq(plan)

    async def main() -> None:
        async with worker:
            for start in range(0, len(args), BATCH):
                await worker.enqueue_many(
                    [worker.enqueue_unsafe(handler, *one) for one in args[start:start + BATCH]]
                )

    asyncio.run(main())


# -- taskiq-redis (asyncio, a stream's consumer group) ----------------------------------


def _taskiq(plan: Plan) -> Any:
    from taskiq_redis import RedisStreamBroker

    tuned: dict[str, Any] = {"idle_timeout": int(TUNED_IDLE * 1000)} if plan.tuned else {}
    broker = RedisStreamBroker(plan.url, queue_name=plan.queue, **tuned)
    broker.register_task(peer_jobs.arecord, task_name="record")
    broker.register_task(peer_jobs.ahold, task_name="hold")
    return broker


def _taskiq_main(plan: Plan, pipe: Connection) -> None:
    async def main() -> None:
        from taskiq.api import run_receiver_task

        broker = _taskiq(plan)
        # The group is created reading from the stream's end ("$"): before any job is
        # queued, which is why the workers say ready only after it.
        await broker.startup()
        pipe.send("ready")
        await asyncio.to_thread(pipe.recv)
        await run_receiver_task(broker, max_async_tasks=CONCURRENCY)

    asyncio.run(main())


def _taskiq_enqueue(plan: Plan, handler: str, args: list[tuple[Any, ...]]) -> None:
    async def main() -> None:
        broker = _taskiq(plan)
        task: Any = broker.find_task(handler)
        try:
            await _batched([lambda one=one: task.kiq(*one) for one in args])
        finally:
            await broker.shutdown()

    asyncio.run(main())


MAINS: dict[str, Callable[[Plan, Connection], None]] = {
    "Dramatiq": _dramatiq_main, "arq": _arq_main, "saq": _saq_main,
    "streaq": _streaq_main, "taskiq-redis": _taskiq_main, "huey": _huey_main,
}
ENQUEUES: dict[str, Callable[[Plan, str, list[tuple[Any, ...]]], None]] = {
    "Dramatiq": _dramatiq_enqueue, "arq": _arq_enqueue, "saq": _saq_enqueue,
    "streaq": _streaq_enqueue, "taskiq-redis": _taskiq_enqueue, "huey": _huey_enqueue,
}
