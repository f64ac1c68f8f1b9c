"""Worker processes sharing one stream through a consumer group: a member SIGKILLed
mid-stream has its entries claimed and done by the others, every job done once."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from helpers import reap, wait_for

import lockworker
from lockworker.daemons.sources import stream_keys
from lockworker.model.keys import JobKeys
from lockworker.model.state import JobStatus
from lockworker.protocol import inspect
from lockworker.testing import RedisServer

pytestmark = pytest.mark.processes

LEASE = 1.0

CHILD = r"""
import json, sys, threading, time
import redis
import lockworker

url, namespace, stream, owner = sys.argv[1:5]
client = redis.Redis.from_url(url, socket_timeout=5)

def on_acquired(job):
    client.rpush(f"{namespace}:did", json.dumps(
        {"job": job.id, "owner": owner, "attempt": job.attempt, "at": time.time()}))
    if (job.payload or {}).get("hang") and job.attempt == 1:
        threading.Event().wait(60)  # killed before it returns
    time.sleep(0.02)

worker = lockworker.Worker(
    client, namespace=namespace, owner=owner, lock_timeout=float(sys.argv[5]),
    on_acquired=on_acquired,
)
worker.serve(
    lockworker.StreamSource(client, stream, owner=owner, group="g", block=0.05),
    concurrency=4,
)
worker.close()
"""


class Members:
    def __init__(self, server: RedisServer) -> None:
        self.server = server
        self.namespace = f"group-{uuid.uuid4().hex[:8]}"
        self.stream = f"{self.namespace}-jobs"
        self.client = server.client(decode_responses=True)
        self.procs: dict[str, subprocess.Popen[bytes]] = {}

    def spawn(self, owner: str) -> None:
        self.procs[owner] = subprocess.Popen(
            [sys.executable, "-c", CHILD, self.server.url, self.namespace, self.stream, owner,
             str(LEASE)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )

    def did(self) -> list[dict[str, Any]]:
        return [json.loads(r) for r in self.client.lrange(f"{self.namespace}:did", 0, -1)]

    def consumers(self) -> dict[str, int]:
        try:
            found = self.client.xinfo_consumers(stream_keys(self.stream).extra("entries"), "g")
        except Exception:  # no group yet
            return {}
        return {c["name"]: c["pending"] for c in found}

    def held_by(self, consumer: str) -> set[str]:
        """The entry ids ``consumer`` has read and not acknowledged."""
        entries = stream_keys(self.stream).extra("entries")
        found = self.client.xpending_range(
            entries, "g", min="-", max="+", count=10_000, consumername=consumer
        )
        return {str(e["message_id"]) for e in found}

    def pending(self) -> int:
        entries = stream_keys(self.stream).extra("entries")
        return int(self.client.xpending(entries, "g")["pending"])

    def status(self, job_id: str) -> JobStatus:
        return inspect(self.client, JobKeys.of(self.namespace, job_id)).status

    def close(self) -> None:
        reap(self.procs.values())
        self.client.close()


@pytest.fixture
def members(redis_server: RedisServer) -> Iterator[Members]:
    m = Members(redis_server)
    yield m
    m.close()


def test_a_killed_members_entries_are_claimed_and_every_job_done_once(
    members: Members,
) -> None:
    for owner in ("a", "b", "c"):
        members.spawn(owner)
    wait_for(lambda: set(members.consumers()) == {"a", "b", "c"}, timeout=20)
    jobs = ["hang", *(f"j{i}" for i in range(90))]
    entry_of = {"hang": lockworker.submit(members.client, members.stream, "hang", {"hang": True})}
    for job in jobs[1:]:
        entry_of[job] = lockworker.submit(members.client, members.stream, job)
    first = wait_for(lambda: next((r for r in members.did() if r["job"] == "hang"), None))
    victim = first["owner"]
    members.procs[victim].kill()
    killed_at = time.time()
    members.procs[victim].wait(timeout=10)
    # The entries in the victim's hands when it died (the others claim them only at the
    # lease's end): the hung job and any it had taken, perhaps before its hook recorded it.
    held = members.held_by(victim)
    held_at_kill = {job for job, entry in entry_of.items() if entry in held}
    wait_for(lambda: all(members.status(j) is JobStatus.DONE for j in jobs), timeout=30)
    wait_for(lambda: members.pending() == 0, timeout=10)  # every entry acknowledged

    records = members.did()
    by_job: dict[str, list[dict[str, Any]]] = {}
    for r in records:
        by_job.setdefault(r["job"], []).append(r)
    assert set(by_job) == set(jobs)
    for runs in by_job.values():
        # One holder per attempt, attempts growing; a job started twice, or first
        # recorded past attempt 1 (the victim died between its lease and its hook's
        # record), only if it was in the victim's hands when it died.
        attempts = [r["attempt"] for r in runs]
        assert attempts == sorted(set(attempts)), runs
        if len(runs) > 1 or attempts[0] != 1:
            assert runs[0]["job"] in held_at_kill, (runs, held_at_kill)
            assert attempts[-1] <= 2, runs
        if len(runs) > 1:
            assert runs[0]["owner"] == victim and runs[0]["at"] <= killed_at, runs
    taken_over = by_job["hang"][1]
    assert taken_over["owner"] != victim
    # Within the lease and the claim period after the kill, with room for a busy machine.
    assert taken_over["at"] - killed_at < LEASE * 1.25 + 2.0
    assert "hang" in held_at_kill
    survivors = {r["owner"] for r in records if r["at"] > killed_at}
    assert survivors and victim not in survivors
