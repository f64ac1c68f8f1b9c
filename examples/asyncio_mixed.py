"""asyncio and threads on the same jobs: each job is done once, whoever takes it.

Three asyncio workers (``lockworker.aio.Worker``, tasks on one event loop) and one sync
worker (``lockworker.Worker``, in a thread) all process the same jobs. They share the
keys, the Lua steps and the contender loop, so exactly one of them does each job and
the others report DONE_ELSEWHERE. Then an asyncio task holding a job is cancelled: its
lease is released at once and the sync worker takes the job over, long before the
lease would have run out.

    python examples/asyncio_mixed.py

Uses $LOCKWORKER_REDIS_URL if set (as the ``lockworker`` command does), otherwise
starts an embedded real server for the run.
"""

from __future__ import annotations

import asyncio
import threading
import time
import uuid

import redis
import redis.asyncio as aredis
from _server import redis_url

import lockworker
from lockworker import aio

JOBS = [f"report-{n}" for n in range(6)]


async def main(url: str) -> None:
    namespace = f"example-{uuid.uuid4().hex[:8]}"
    client, sync_client = aredis.Redis.from_url(url), redis.Redis.from_url(url)
    done_by: dict[str, str] = {}

    def worker_hook(name: str) -> lockworker.Worker:
        def run(job: lockworker.Job) -> None:
            time.sleep(0.01)  # the work
            done_by[job.id] = f"{name} (token {job.token})"
        return lockworker.Worker(sync_client, namespace=namespace, on_acquired=run,
                                 handle_signals=False)

    def task_hook(name: str) -> aio.Worker:
        async def run(job: lockworker.Job) -> None:
            await asyncio.sleep(0.01)  # the work: any awaitable
            done_by[job.id] = f"{name} (token {job.token})"
        return aio.Worker(client, namespace=namespace, on_acquired=run, handle_signals=False)

    sync_worker = worker_hook("thread")
    tasks = [task_hook(f"task-{n}") for n in range(3)]
    thread = threading.Thread(target=lambda: [sync_worker.process(j) for j in reversed(JOBS)])
    thread.start()
    outcomes = await asyncio.gather(*(w.process(j) for w in tasks for j in JOBS))
    await asyncio.to_thread(thread.join)
    for job_id in JOBS:
        print(f"{job_id}: done once, by {done_by[job_id]}")
    print(f"outcomes in the tasks: {outcomes.count(lockworker.Outcome.DONE)} done, "
          f"{outcomes.count(lockworker.Outcome.DONE_ELSEWHERE)} done elsewhere")

    # A task holding a job is cancelled: the lease (30 s) is released at once.
    holding = asyncio.Event()

    async def slow(job: lockworker.Job) -> None:
        holding.set()
        await asyncio.sleep(3600)

    slow_worker = aio.Worker(client, namespace=namespace, on_acquired=slow,
                             handle_signals=False, lock_timeout=30.0)
    held = asyncio.ensure_future(slow_worker.process("nightly"))
    await holding.wait()
    cancelled_at = time.monotonic()
    held.cancel()
    taken = await asyncio.to_thread(sync_worker.process, "nightly")
    print(f"nightly: cancelled in a task, then {taken.value} by the thread "
          f"{time.monotonic() - cancelled_at:.3f} s later (the lease was 30 s)")

    for w in [*tasks, slow_worker]:
        await w.close()
    sync_worker.close()
    await client.aclose()
    sync_client.close()


if __name__ == "__main__":
    with redis_url() as url:
        asyncio.run(main(url))
