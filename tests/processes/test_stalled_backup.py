"""A backup whose primary was SIGKILLed mid-jobs keeps serving new jobs.

The primary holds more jobs than the backup has slots when it dies. The backup's jobs
that wait for the dead primary's leases park (they hold no slot), so the backup does
the new jobs at once, and takes the stalled ones over when their leases end.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from helpers import present, reap, wait_for

import lockworker
from lockworker.model.keys import JobKeys
from lockworker.model.state import JobStatus
from lockworker.protocol import ScriptProtocol
from lockworker.testing import RedisServer

pytestmark = pytest.mark.processes

LEASE = 2.0
BACKUP_CONCURRENCY = 4
STALLED = [f"stalled-{i}" for i in range(6)]  # more than the backup's slots
FRESH = [f"new-{i}" for i in range(6)]

CHILD = r"""
import json, sys, threading, time
import redis
import lockworker

url, namespace, stream, owner, role, concurrency, lease = sys.argv[1:8]
client = redis.Redis.from_url(url, socket_timeout=5)

def record(event, job, **extra):
    client.rpush(f"{namespace}:events", json.dumps({
        "event": event, "job": job.id, "owner": owner, "attempt": job.attempt,
        "t": time.monotonic(), **extra,
    }))

def on_acquired(job):
    record("acquired", job)
    if (job.payload or {}).get("hang_on") == owner:
        threading.Event().wait(600)  # killed before it returns

def on_locked(job):
    record("locked", job, holder=job.holder)

worker = lockworker.Worker(
    client, namespace=namespace, owner=owner, role=role, backup_delay=0.1,
    lock_timeout=float(lease), on_acquired=on_acquired, on_locked=on_locked,
)
source = lockworker.StreamSource(client, stream, owner=owner, block=0.1)
worker.serve(source, concurrency=int(concurrency))
worker.close()
"""


class Daemons:
    """A primary and a backup serving one stream, as separate OS processes."""

    def __init__(self, server: RedisServer) -> None:
        self.server = server
        self.namespace = f"stalled-{uuid.uuid4().hex[:8]}"
        self.stream = f"{self.namespace}-jobs"
        self.client: redis.Redis = server.client(decode_responses=True)
        self.protocol = ScriptProtocol(self.client)
        self.procs: dict[str, subprocess.Popen[bytes]] = {}

    def spawn(self, owner: str, role: str, concurrency: int) -> None:
        self.procs[owner] = subprocess.Popen(
            [sys.executable, "-c", CHILD, self.server.url, self.namespace, self.stream,
             owner, role, str(concurrency), str(LEASE)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )

    def registered(self, owner: str) -> bool:
        key = lockworker.daemons.sources.stream_keys(self.stream).extra("readers")
        return self.client.zscore(key, owner) is not None

    def events(self, **match: object) -> list[dict[str, Any]]:
        raw = self.client.lrange(f"{self.namespace}:events", 0, -1)
        found = [json.loads(item) for item in raw]
        return [e for e in found if all(e.get(k) == v for k, v in match.items())]

    def inspect(self, job_id: str) -> lockworker.Snapshot:
        return self.protocol.inspect(JobKeys.of(self.namespace, job_id))

    def close(self) -> None:
        reap(self.procs.values())
        self.client.close()


@pytest.fixture
def daemons(redis_server: RedisServer) -> Iterator[Daemons]:
    d = Daemons(redis_server)
    yield d
    d.close()


def test_backup_serves_new_jobs_while_the_dead_primarys_jobs_are_parked(
    daemons: Daemons,
) -> None:
    daemons.spawn("primary", "primary", len(STALLED))
    wait_for(lambda: present(daemons.client, daemons.namespace, "primary"), timeout=15)
    daemons.spawn("backup", "backup", BACKUP_CONCURRENCY)
    wait_for(lambda: daemons.registered("primary") and daemons.registered("backup"), timeout=15)
    for job_id in STALLED:
        lockworker.submit(daemons.client, daemons.stream, job_id, {"hang_on": "primary"})
    wait_for(lambda: len(daemons.events(event="acquired", owner="primary")) == len(STALLED))
    # The backup has seen the primary hold them (its slots are what the bug filled).
    wait_for(lambda: len({e["job"] for e in daemons.events(event="locked", owner="backup")})
             >= BACKUP_CONCURRENCY)

    daemons.procs["primary"].kill()
    daemons.procs["primary"].wait(timeout=10)
    lease_end: dict[str, float] = {}
    for job_id in STALLED:
        before = time.monotonic()
        seen = daemons.inspect(job_id)
        assert seen.holder == "primary" and seen.pttl_ms is not None
        lease_end[job_id] = before + seen.pttl_ms / 1000  # at or before the real end
    first_end = min(lease_end.values())
    for job_id in FRESH:
        lockworker.submit(daemons.client, daemons.stream, job_id)

    # The new jobs are done while every stalled job is still held by the dead primary.
    wait_for(lambda: all(daemons.inspect(j).status is JobStatus.DONE for j in FRESH),
             timeout=max(0.1, first_end - time.monotonic()))
    assert time.monotonic() < first_end
    assert [daemons.inspect(j).holder for j in STALLED] == ["primary"] * len(STALLED)

    # Then the stalled ones are taken over, each after its own lease's end.
    wait_for(lambda: all(daemons.inspect(j).status is JobStatus.DONE for j in STALLED),
             timeout=LEASE + 10)
    by_backup = daemons.events(event="acquired", owner="backup")
    assert sorted(e["job"] for e in by_backup) == sorted(STALLED + FRESH)  # each once
    assert sorted(e["job"] for e in daemons.events(event="acquired", owner="primary")) \
        == sorted(STALLED)
    for e in by_backup:
        if e["job"] in STALLED:
            assert e["attempt"] == 2
            assert e["t"] >= lease_end[e["job"]]
        else:
            assert e["attempt"] == 1
    for job_id in STALLED + FRESH:
        seen = daemons.inspect(job_id)
        assert (seen.status, seen.owner) == (JobStatus.DONE, "backup")
