"""The worker ``test_schedule_processes.py`` runs with ``lockworker run ticks_app:Ticks``.

Each run of a tick appends what it believed to the Redis list :func:`runs_key` (JSON):
``start`` and ``end`` with the tick's id, this process's owner and pid, the job's token
and attempt, ``time.monotonic()`` (one clock for every process on Linux, so the test
compares processes) and, at the end, whether the downstream fence accepted the run's
write. ``on_lost`` appends ``lost``. The test steers the runs through two keys:

- :func:`hold_key`: the seconds every run works (default :data:`HOLD`);
- :func:`victim_key`: seconds that the one run which takes the key (GETDEL) works
  instead: the run the test kills or stops once its ``start`` is recorded.

The work is a plain sleep that never looks at the lease (``job.check()``), as a hook
that does not is the case a fence is for. Then the run writes to a downstream fence: a
hash of the highest token written per tick, which refuses a token below the highest
(:data:`FENCE`).
"""

from __future__ import annotations

import json
import os
import time
from typing import Any

import lockworker

HOLD = 0.05
"""Seconds a run works unless told otherwise."""

FENCE = """
local seen = tonumber(redis.call('HGET', KEYS[1], ARGV[1]) or '0')
if tonumber(ARGV[2]) < seen then return 0 end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
return 1
"""
"""The downstream store's check: write tick ARGV[1] with token ARGV[2] unless a larger
token wrote it already (KEYS[1]: the fence's hash); 1 if written."""


def runs_key(namespace: str) -> str:
    return f"ticks-app:{namespace}:runs"


def hold_key(namespace: str) -> str:
    return f"ticks-app:{namespace}:hold"


def victim_key(namespace: str) -> str:
    return f"ticks-app:{namespace}:victim"


def fence_key(namespace: str) -> str:
    return f"ticks-app:{namespace}:fence"


class Ticks(lockworker.Worker):
    """Records each run of a tick, works for a while, then writes through the fence."""

    def record(self, event: str, job: lockworker.Job, **extra: Any) -> None:
        entry = {
            "event": event, "tick": job.id, "owner": self.owner, "pid": os.getpid(),
            "token": job.token, "attempt": job.attempt, "t": time.monotonic(), **extra,
        }
        self.client.rpush(runs_key(self.namespace), json.dumps(entry))

    def on_acquired(self, job: lockworker.Job) -> None:
        victim = self.client.getdel(victim_key(self.namespace))
        hold = victim if victim is not None else self.client.get(hold_key(self.namespace))
        self.record("start", job, victim=victim is not None)
        time.sleep(HOLD if hold is None else float(hold))
        written = self.client.eval(
            FENCE, 1, fence_key(self.namespace), job.id, job.token
        )
        self.record("end", job, accepted=written == 1)

    def on_lost(self, job: lockworker.Job) -> None:
        self.record("lost", job)
