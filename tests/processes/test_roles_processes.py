"""Primary and backup worker processes serving one stream."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from helpers import present, reap, wait_for

import lockworker
from lockworker.testing import RedisServer

pytestmark = pytest.mark.processes

CHILD = r"""
import json, sys, threading
import redis
import lockworker

url, namespace, stream, owner, role = sys.argv[1:6]
client = redis.Redis.from_url(url, socket_timeout=5)

def on_acquired(job):
    client.rpush(f"{namespace}:did", json.dumps(
        {"job": job.id, "owner": owner, "attempt": job.attempt}))
    if (job.payload or {}).get("hang_on") == owner:
        threading.Event().wait(60)  # killed before it returns

worker = lockworker.Worker(
    client, namespace=namespace, owner=owner, role=role, backup_delay=1.0,
    lock_timeout=1.0, on_acquired=on_acquired,
)
worker.serve(lockworker.StreamSource(client, stream, owner=owner, block=0.1), concurrency=4)
worker.close()
"""


class Pair:
    def __init__(self, server: RedisServer) -> None:
        self.server = server
        self.namespace = f"roles-{uuid.uuid4().hex[:8]}"
        self.stream = f"{self.namespace}-jobs"
        self.client = server.client(decode_responses=True)
        self.procs: dict[str, subprocess.Popen[bytes]] = {}

    def spawn(self, owner: str, role: str) -> None:
        self.procs[owner] = subprocess.Popen(
            [sys.executable, "-c", CHILD, self.server.url, self.namespace, self.stream,
             owner, role],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )

    def did(self) -> list[dict[str, Any]]:
        return [json.loads(r) for r in self.client.lrange(f"{self.namespace}:did", 0, -1)]

    def registered(self, owner: str) -> bool:
        key = lockworker.daemons.sources.stream_keys(self.stream).extra("readers")
        return self.client.zscore(key, owner) is not None

    def close(self) -> None:
        reap(self.procs.values())
        self.client.close()


@pytest.fixture
def pair(redis_server: RedisServer) -> Iterator[Pair]:
    p = Pair(redis_server)
    yield p
    p.close()


def test_live_primary_does_the_jobs_and_backup_takes_over_when_it_dies(pair: Pair) -> None:
    pair.spawn("primary", "primary")
    wait_for(lambda: present(pair.client, pair.namespace, "primary"), timeout=15)
    pair.spawn("backup", "backup")
    wait_for(lambda: pair.registered("primary") and pair.registered("backup"), timeout=15)
    for i in range(6):
        lockworker.submit(pair.client, pair.stream, f"a-{i}")
    wait_for(lambda: len(pair.did()) == 6, timeout=15)
    assert {r["owner"] for r in pair.did()} == {"primary"}

    # The primary dies holding a job: the backup takes it over, then does the rest.
    lockworker.submit(pair.client, pair.stream, "hang", {"hang_on": "primary"})
    wait_for(lambda: any(r["job"] == "hang" for r in pair.did()), timeout=10)
    killed_at = time.monotonic()
    pair.procs["primary"].kill()
    for i in range(4):
        lockworker.submit(pair.client, pair.stream, f"b-{i}")
    wait_for(lambda: len(pair.did()) == 12, timeout=15)
    took_over = time.monotonic() - killed_at
    records = pair.did()
    hang = [r for r in records if r["job"] == "hang"]
    assert [(r["owner"], r["attempt"]) for r in hang] == [("primary", 1), ("backup", 2)]
    assert {r["owner"] for r in records if r["job"].startswith("b-")} == {"backup"}
    jobs = [r["job"] for r in records if r["job"] != "hang"]
    assert len(jobs) == len(set(jobs)) == 10  # none twice
    # lease (1 s) + backup_delay (1 s), with room for a busy machine
    assert took_over < 5.0


def test_backup_alone_serves_and_a_returning_primary_wins_again(pair: Pair) -> None:
    pair.spawn("backup", "backup")
    wait_for(lambda: pair.registered("backup"), timeout=15)
    lockworker.submit(pair.client, pair.stream, "c-0")
    wait_for(lambda: len(pair.did()) == 1, timeout=10)
    assert pair.did()[0]["owner"] == "backup"
    pair.spawn("primary", "primary")
    wait_for(lambda: pair.registered("primary"), timeout=15)
    # The new primary starts from the beginning of the stream: c-0 is done already.
    for i in range(1, 5):
        lockworker.submit(pair.client, pair.stream, f"c-{i}")
    wait_for(lambda: len(pair.did()) == 5, timeout=15)
    assert [r["owner"] for r in pair.did()[1:]] == ["primary"] * 4
