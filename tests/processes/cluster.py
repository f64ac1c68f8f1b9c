"""Drive failover worker processes (failover_proc.py) and read what they recorded."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import redis
from helpers import wait_for

from lockworker.testing import RedisServer

PROC = str(Path(__file__).with_name("failover_proc.py"))


class Cluster:
    """Worker processes for one job, and what they recorded."""

    def __init__(self, server: RedisServer, client: redis.Redis, namespace: str) -> None:
        self.server = server
        self.client = client
        self.namespace = namespace
        self.procs: dict[str, subprocess.Popen[bytes]] = {}

    def start(
        self, owner: str, mode: str, *, job: str = "job", lock_timeout: float = 1.0,
        max_attempts: int = 3, wait_ready: bool = True,
    ) -> subprocess.Popen[bytes]:
        args = [sys.executable, PROC, self.server.url, self.namespace, job, owner, mode,
                str(lock_timeout), str(max_attempts)]
        proc = subprocess.Popen(args, stdout=subprocess.DEVNULL)
        self.procs[owner] = proc
        if wait_ready:
            wait_for(lambda: self.find(owner=owner, event="ready"), timeout=20)
        return proc

    def events(self) -> list[dict[str, Any]]:
        raw = self.client.lrange(f"{self.namespace}:events", 0, -1)
        return [json.loads(item) for item in raw]

    def find(self, **match: object) -> list[dict[str, Any]]:
        return [e for e in self.events() if all(e.get(k) == v for k, v in match.items())]

    def outcome(self, owner: str, timeout: float = 20) -> str:
        found = wait_for(lambda: self.find(owner=owner, event="outcome"), timeout=timeout)
        return str(found[0]["outcome"])

    def stop_all(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.kill()
            proc.wait(10)
