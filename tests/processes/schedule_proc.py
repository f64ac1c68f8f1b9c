"""One worker process of the retry-schedule tests, whose hook always fails.

    python schedule_proc.py URL NAMESPACE JOB_ID OWNER KIND SCHEDULE MAX_ATTEMPTS

KIND: ``sync`` (a ``lockworker.Worker``, script protocol), ``txn`` (the same with
``protocol="txn"``) or ``aio`` (a ``lockworker.aio.Worker``). SCHEDULE: ``fixed``
(0.4 s), ``tenacity`` (``wait_exponential(multiplier=0.2)``: 0.2, 0.4, 0.8 s),
``function`` (0.3 s x the failed attempt's number), ``retry_after`` (the hook raises
``Retry(after=0.7)``; ``retry_delay`` 0), ``give_up`` (the hook raises ``GiveUp``) or
``give_up_on`` (it raises a ``KeyError``, in ``give_up_on``). Each attempt's start is
appended to the Redis list ``NAMESPACE:events`` with this process's monotonic time
(system-wide on Linux, so the test compares processes), and the outcome too.
"""

from __future__ import annotations

import asyncio
import json
import logging
import sys
import time
from typing import Any

import redis
import redis.asyncio as aredis
import structlog
import tenacity

import lockworker
from lockworker import aio

structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.CRITICAL))

SCHEDULES: dict[str, Any] = {
    "fixed": 0.4,
    "tenacity": tenacity.wait_exponential(multiplier=0.2),
    "function": lambda attempt: 0.3 * attempt,
    "retry_after": 0.0,
    "give_up": None,
    "give_up_on": None,
}


def main() -> int:
    url, namespace, job_id, owner, kind, schedule = sys.argv[1:7]
    max_attempts = int(sys.argv[7])
    client = redis.Redis.from_url(url, socket_timeout=5.0)

    def record(event: str, **extra: object) -> None:
        entry = {"owner": owner, "event": event, "t": time.monotonic(), **extra}
        client.rpush(f"{namespace}:events", json.dumps(entry))

    def hook(job: lockworker.Job) -> None:
        record("acquired", attempt=job.attempt)
        record("failing", attempt=job.attempt)
        if schedule == "retry_after":
            raise lockworker.Retry(after=0.7)
        if schedule == "give_up":
            raise lockworker.GiveUp("the payload can never work")
        if schedule == "give_up_on":
            raise KeyError("no such customer")
        raise RuntimeError("downstream is down")

    settings: dict[str, Any] = dict(
        namespace=namespace, owner=owner, lock_timeout=5.0, max_attempts=max_attempts,
        retry_delay=SCHEDULES[schedule], give_up_on=(KeyError,), handle_signals=False,
        on_acquired=hook,
    )
    if kind == "aio":
        async def run() -> lockworker.Outcome:
            aclient = aredis.Redis.from_url(url, socket_timeout=5.0)
            async with aio.Worker(aclient, **settings) as worker:
                record("ready")
                outcome = await worker.process(job_id)
            await aclient.aclose()
            return outcome

        outcome = asyncio.run(run())
    else:
        protocol = "txn" if kind == "txn" else "script"
        worker = lockworker.Worker(client, protocol=protocol, **settings)
        record("ready")
        outcome = worker.process(job_id)
        worker.close()
    record("outcome", outcome=outcome.value)
    return 0


if __name__ == "__main__":
    sys.exit(main())
