"""A failing job's attempts follow its retry schedule whichever processes run them.

Three processes (a sync worker on the script protocol, one on ``protocol="txn"`` and an
asyncio worker) contend for one job whose hook always fails. The schedule is the job's:
the fail step records the next attempt's due time on the server, so each attempt starts
no sooner after the previous one failed than the schedule says, whoever failed it and
whoever runs the next (times are each process's ``time.monotonic``, one clock on Linux).
They start when it is due, not at the end of the 5 s lease: timers, not expiry.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import redis
from helpers import reap, wait_for

from lockworker.testing import RedisServer

PROC = str(Path(__file__).with_name("schedule_proc.py"))
KINDS = ("sync", "txn", "aio")
MS = 0.002
"""The due time is whole milliseconds of the server's clock: allowed early by this."""
LATE = 1.5
"""Generous bound on how late an attempt starts after its due time (a loaded machine)."""


def run_three(server: RedisServer, client: redis.Redis, namespace: str, schedule: str,
              max_attempts: int) -> list[dict[str, Any]]:
    procs = [
        subprocess.Popen(
            [sys.executable, PROC, server.url, namespace, "job", kind, kind, schedule,
             str(max_attempts)],
            stdout=subprocess.DEVNULL,
        )
        for kind in KINDS
    ]
    try:
        def events() -> list[dict[str, Any]]:
            return [json.loads(e) for e in client.lrange(f"{namespace}:events", 0, -1)]

        wait_for(lambda: len([e for e in events() if e["event"] == "outcome"]) == 3,
                 timeout=60)
        for proc in procs:
            assert proc.wait(10) == 0
        return events()
    finally:
        reap(procs)


@pytest.mark.parametrize(
    ("schedule", "delays"),
    [
        ("fixed", [0.4, 0.4, 0.4]),
        ("tenacity", [0.2, 0.4, 0.8]),
        ("function", [0.3, 0.6, 0.9]),
        ("retry_after", [0.7, 0.7, 0.7]),
    ],
)
def test_consecutive_attempts_are_never_closer_than_the_schedule(
    redis_server: RedisServer, redis_client: redis.Redis, namespace: str, schedule: str,
    delays: list[float],
) -> None:
    events = run_three(redis_server, redis_client, namespace, schedule, len(delays) + 1)
    starts = {e["attempt"]: e for e in events if e["event"] == "acquired"}
    failed = {e["attempt"]: e["t"] for e in events if e["event"] == "failing"}
    assert sorted(starts) == list(range(1, len(delays) + 2)), events
    for n, delay in enumerate(delays, start=1):
        gap = starts[n + 1]["t"] - failed[n]
        assert delay - MS <= gap < delay + LATE, (n, gap, delay, events)
    assert {e["outcome"] for e in events if e["event"] == "outcome"} == {"gave_up"}


@pytest.mark.parametrize("schedule", ["give_up", "give_up_on"])
def test_give_up_and_give_up_on_end_the_job_after_one_attempt(
    redis_server: RedisServer, redis_client: redis.Redis, namespace: str, schedule: str
) -> None:
    events = run_three(redis_server, redis_client, namespace, schedule, 5)
    assert [e["attempt"] for e in events if e["event"] == "acquired"] == [1], events
    assert [e["outcome"] for e in events if e["event"] == "outcome"] == ["gave_up"] * 3
