"""One failover-worker process for the process tests.

    python failover_proc.py URL NAMESPACE JOB_ID OWNER MODE [LOCK_TIMEOUT] [MAX_ATTEMPTS]

MODE: ``ok`` (finish at once), ``fail`` (always raise), ``hold`` (run until the parent
signals it: SIGKILL/SIGSTOP scenarios), ``slow`` (run 0.3 s), ``fail_on_go``
(hold until the key ``NAMESPACE:go`` exists, then raise), ``slow_fail`` (run 0.2 s,
then raise), ``hold_check`` (hold, calling ``job.check()``: SIGTERM hands it over).
Every hook appends a JSON record to the Redis list ``NAMESPACE:events`` with this
process's monotonic time (system-wide on Linux, so the test can compare processes);
the outcome is recorded the same way, so the test never parses stdout.
"""

from __future__ import annotations

import json
import logging
import sys
import time

import redis
import structlog

import lockworker

structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.CRITICAL))


def main() -> int:
    url, namespace, job_id, owner, mode = sys.argv[1:6]
    lock_timeout = float(sys.argv[6]) if len(sys.argv) > 6 else 1.0
    max_attempts = int(sys.argv[7]) if len(sys.argv) > 7 else 3
    client = redis.Redis.from_url(url, socket_timeout=5.0)

    def record(event: str, job: lockworker.Job | None = None, **extra: object) -> None:
        entry = {"owner": owner, "event": event, "t": time.monotonic(), **extra}
        if job is not None:
            entry.update(attempt=job.attempt, token=job.token, holder=job.holder)
        client.rpush(f"{namespace}:events", json.dumps(entry))

    class Proc(lockworker.Worker):
        def on_acquired(self, job: lockworker.Job) -> None:
            record("acquired", job)
            if mode == "slow_fail":
                time.sleep(0.2)
                record("ending", job)
                raise RuntimeError("attempt failed on purpose")
            if mode == "hold_check":
                while True:  # until SIGTERM: check() raises StopRequested
                    job.check()
                    time.sleep(0.005)
            if mode == "fail":
                raise RuntimeError("attempt failed on purpose")
            if mode == "hold":
                while True:  # until SIGKILL, or SIGSTOP then SIGCONT past the lease
                    if job.lost:
                        record("saw_lost", job)
                        return  # try to complete: the server must refuse
                    time.sleep(0.005)
            if mode == "fail_on_go":  # fail when the test sets NAMESPACE:go
                while not client.exists(f"{namespace}:go"):
                    time.sleep(0.002)
                record("failing", job)
                raise RuntimeError("attempt failed on purpose")
            if mode == "slow":
                time.sleep(0.3)
            record("finished", job)

        def on_locked(self, job: lockworker.Job) -> None:
            record("locked", job)

        def on_lost(self, job: lockworker.Job) -> None:
            record("lost", job)

        def on_gave_up(self, job: lockworker.Job) -> None:
            record("gave_up", job)

    worker = Proc(
        client, namespace=namespace, owner=owner, lock_timeout=lock_timeout,
        # The first failure is handed over at once (the failing process steps back);
        # later ones are due 0.2 s later for everybody (the job's schedule).
        max_attempts=max_attempts, retry_delay=lambda n: 0.0 if n == 1 else 0.2,
    )
    record("ready")
    outcome = worker.process(job_id)
    record("outcome", outcome=outcome.value)
    worker.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
