"""The worker the demo (and examples/supervisord) runs: ``lockworker.cli.demo_worker:DemoWorker``.

Each job sleeps for ``payload["ms"]`` milliseconds (default 200) in short steps,
checking ``job.check()`` between them, so a SIGTERM hands the job over at once and a
lost lease stops it. ``payload["first_run_ms"]``, if given, is how long the job's first
attempt takes: the demo uses it to have the primary in the middle of a job when it is
killed. It goes by ``job.attempt``, not by a marker the hook writes: a process killed
after its grant but before its hook wrote anything has still spent attempt 1, and the
process that takes over must not take the long first run again.

When a job's work is done, the hook appends ``{"job", "owner", "attempt", "token"}`` to
the Redis list :func:`records_key` before returning (after which the worker marks the
job DONE). The demo and the tests read that list to check that every job was done, and
none twice.
"""

from __future__ import annotations

import json

from lockworker.daemons.worker import Worker
from lockworker.serving.job import Job

STEP = 0.02
"""Seconds between two checks of ``job.check()`` while a job works."""


def key_prefix(namespace: str) -> str:
    """What the names of the demo worker's own keys in ``namespace`` start with."""
    return f"lockworker-demo:{namespace}:"


def records_key(namespace: str) -> str:
    """The Redis list of completed runs of jobs in ``namespace``."""
    return key_prefix(namespace) + "records"


class DemoWorker(Worker):
    """Pretends to work for a while, then records who did the job."""

    def on_acquired(self, job: Job) -> None:
        payload = job.payload if isinstance(job.payload, dict) else {}
        ms = float(payload.get("ms", 200))
        first = payload.get("first_run_ms")
        if first is not None and job.attempt == 1:
            ms = float(first)
        remaining = ms / 1000.0
        while remaining > 0:
            job.check()  # raises StopRequested (hand over) or LockLost (stop working)
            step = min(STEP, remaining)
            self.clock.sleep(step)
            remaining -= step
        job.check()
        record = {"job": job.id, "owner": self.owner, "attempt": job.attempt, "token": job.token}
        self.client.rpush(records_key(self.namespace), json.dumps(record))
