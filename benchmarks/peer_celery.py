"""The Celery app of :mod:`benchmarks.peers` (``celery -A benchmarks.peer_celery worker``).

Configured from the environment the benchmark starts each worker with:
``LOCKWORKER_BENCH_BROKER`` (the Redis URL of the run's own server) and
``LOCKWORKER_BENCH_CELERY`` (``default``, or ``tuned``: late acknowledgement, a short
visibility timeout swept every second, and a prefetch of one, so that a killed
worker's task is delivered again).
"""

from __future__ import annotations

import os

from celery import Celery

from benchmarks import peer_jobs

VISIBILITY_TIMEOUT = 10
"""Seconds: the tuned broker's visibility timeout (Celery's default is one hour)."""

TUNED = {
    "task_acks_late": True,
    "worker_prefetch_multiplier": 1,
    "broker_transport_options": {
        "visibility_timeout": VISIBILITY_TIMEOUT,
        # kombu sweeps for messages past their visibility timeout every interval x
        # throttle seconds (10 x 10 by default): every second here.
        "unacked_restore_interval": 1,
        "unacked_restore_throttle": 1,
    },
}


def make_app(broker: str, setting: str = "default") -> Celery:
    app = Celery("lockworker_bench", broker=broker)
    app.conf.update(
        task_ignore_result=True,
        broker_connection_retry_on_startup=True,
        worker_hijack_root_logger=False,
    )
    if setting == "tuned":
        app.conf.update(TUNED)
    app.task(name="bench.record")(peer_jobs.record)
    app.task(name="bench.hold")(peer_jobs.hold)
    return app


app = make_app(
    os.environ.get("LOCKWORKER_BENCH_BROKER", "redis://127.0.0.1:6379/0"),
    os.environ.get("LOCKWORKER_BENCH_CELERY", "default"),
)
