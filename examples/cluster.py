"""A cluster of worker processes sharing jobs: who did what.

Every process is handed the same jobs. For each job they race for its lock; the winner
runs it, and the others watch. Each attempt succeeds with a 15 % chance; a failure hands
the job at once to another process with the next attempt number, up to 5 attempts.
Then every process agrees: done, or given up.

    python examples/cluster.py [--processes 4] [--jobs 5] [--seed 1]

Uses $LOCKWORKER_REDIS_URL if set (as the ``lockworker`` command does), otherwise
starts an embedded real server for the run.
"""

from __future__ import annotations

import argparse
import logging
import multiprocessing
import random
import sys
import uuid
from pathlib import Path

import redis
import structlog

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _server import redis_url

import lockworker

SUCCESS_CHANCE = 0.15
MAX_ATTEMPTS = 5


def say(line: str) -> None:
    """One whole line per write, so lines of concurrent processes never interleave."""
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


class FlakyWorker(lockworker.Worker):
    """Succeeds with a 15 % chance per attempt, and says what it sees."""

    def __init__(self, client: redis.Redis, name: str, seed: int, **kwargs: object) -> None:
        super().__init__(client, owner=name, **kwargs)  # type: ignore[arg-type]
        self.name = name
        self.rng = random.Random(f"{seed}:{name}")

    def on_acquired(self, job: lockworker.Job) -> None:
        say(f"  {self.name}: acquired {job.id} (attempt {job.attempt}, token {job.token})")
        if self.rng.random() >= SUCCESS_CHANCE:
            raise RuntimeError("simulated failure")
        say(f"  {self.name}: finished {job.id}")

    def on_locked(self, job: lockworker.Job) -> None:
        say(f"  {self.name}: {job.id} is locked by {job.holder} (attempt {job.attempt})")

    def on_failed(self, job: lockworker.Job, exc: BaseException) -> None:
        say(f"  {self.name}: attempt {job.attempt} of {job.id} failed: {exc}")

    def on_gave_up(self, job: lockworker.Job) -> None:
        say(f"  {self.name}: {job.id} given up after {job.attempt} attempts")


def run_process(url: str, name: str, namespace: str, jobs: list[str], seed: int) -> None:
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.ERROR))
    client = redis.Redis.from_url(url, socket_timeout=2.0)
    with FlakyWorker(
        client, name, seed, namespace=namespace, lock_timeout=2.0,
        max_attempts=MAX_ATTEMPTS, retry_delay=0.05,
    ) as worker:
        for job_id in jobs:
            outcome = worker.process(job_id)
            say(f"  {name}: {job_id} -> {outcome.value}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--processes", type=int, default=4)
    parser.add_argument("--jobs", type=int, default=5)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    namespace = f"cluster-{uuid.uuid4().hex[:8]}"
    jobs = [f"job-{n}" for n in range(1, args.jobs + 1)]
    with redis_url() as url:
        processes = [
            multiprocessing.Process(
                target=run_process, args=(url, f"worker-{n}", namespace, jobs, args.seed)
            )
            for n in range(1, args.processes + 1)
        ]
        for process in processes:
            process.start()
        for process in processes:
            process.join()
        worker = lockworker.Worker(
            redis.Redis.from_url(url), namespace=namespace, on_acquired=lambda job: None
        )
        print("\nSummary")
        for job_id in jobs:
            seen = worker.inspect(job_id)
            print(
                f"  {job_id}: {seen.status.value} after {seen.attempt} attempt(s), "
                f"last held by {seen.owner}"
            )
        worker.close()
    return 0 if all(p.exitcode == 0 for p in processes) else 1


if __name__ == "__main__":
    sys.exit(main())
