"""A leader process paused past its lease (SIGSTOP) while another takes over, then
resumed: its ``on_lost`` runs exactly once, and the log says why; never after a clean
resignation.

The pause is repeated, the two processes taking turns as the paused leader: the loss
is noticed by whichever comes first after SIGCONT, the hook's own ``term.wait`` or the
heartbeat thread, and each must lead to one report.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from helpers import reap, wait_for

from lockworker.testing import RedisServer

pytestmark = pytest.mark.processes

LOCK_TIMEOUT = 0.5
PAUSES = 5

CHILD = r"""
import json, logging, sys
import redis
import lockworker

url, name, owner, lock_timeout = sys.argv[1:5]
client = redis.Redis.from_url(url, socket_timeout=5)

def record(event, **fields):
    client.rpush(f"{name}:log", json.dumps({"event": event, "owner": owner, **fields}))

class Events(logging.Handler):
    # lockworker's events reach the standard logging module, fields as attributes.
    def emit(self, rec):
        if getattr(rec, "event", None) == "leader.lost":
            record("lost_event", token=getattr(rec, "token", None),
                   reason=getattr(rec, "reason", None))

events = logging.getLogger("lockworker.daemons.leader")
events.addHandler(Events())
events.setLevel(logging.WARNING)

class Child(lockworker.Leader):
    def on_acquired(self, term):
        record("acquired", token=term.token)
        while not term.wait(0.02):
            pass
        # Returns at once, as a leader does once its term is over (nothing recorded
        # here: a round trip would give the heartbeat time to report first).

    def on_locked(self, term):
        record("following", holder=term.holder, token=term.token)

    def on_lost(self, term):
        record("lost", token=term.token)

Child(client, name=name, owner=owner, lock_timeout=float(lock_timeout)).run()
record("exited")
"""


class Pair:
    """Two leader processes of one name, and what they recorded."""

    def __init__(self, server: RedisServer) -> None:
        self.name = f"paused-{uuid.uuid4().hex[:8]}"
        self.server = server
        self.client = server.client(decode_responses=True)
        self.procs: dict[str, subprocess.Popen[bytes]] = {}

    def spawn(self, owner: str) -> None:
        self.procs[owner] = subprocess.Popen(
            [sys.executable, "-c", CHILD, self.server.url, self.name, owner, str(LOCK_TIMEOUT)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )

    def records(self, event: str, owner: str | None = None) -> list[dict[str, Any]]:
        out = [json.loads(r) for r in self.client.lrange(f"{self.name}:log", 0, -1)]
        return [r for r in out if r["event"] == event and owner in (None, r["owner"])]

    def wait(self, event: str, owner: str, newer_than: int, timeout: float = 10) -> None:
        """Until ``owner`` recorded ``event`` for a token above ``newer_than``."""
        wait_for(lambda: any(
            r["token"] > newer_than for r in self.records(event, owner)
        ), timeout=timeout)

    def close(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                os.kill(proc.pid, signal.SIGCONT)
        reap(self.procs.values())
        self.client.close()


@pytest.fixture
def pair(redis_server: RedisServer) -> Iterator[Pair]:
    p = Pair(redis_server)
    yield p
    p.close()


def test_a_leader_paused_past_its_lease_is_told_it_lost_exactly_once(pair: Pair) -> None:
    pair.spawn("a")
    wait_for(lambda: pair.records("acquired", "a"), timeout=15)
    pair.spawn("b")
    wait_for(lambda: pair.records("following", "b"), timeout=15)
    paused: list[tuple[str, int]] = []
    for _ in range(PAUSES):
        last = pair.records("acquired")[-1]
        leader, token = last["owner"], last["token"]
        other = "b" if leader == "a" else "a"
        os.kill(pair.procs[leader].pid, signal.SIGSTOP)
        # The other process leads meanwhile: the paused leader's term is over.
        pair.wait("acquired", other, newer_than=token)
        os.kill(pair.procs[leader].pid, signal.SIGCONT)
        # Back in the campaign, it follows the new leader: its term was let go of.
        pair.wait("following", leader, newer_than=token)
        pair.wait("lost", leader, newer_than=token - 1, timeout=5)
        paused.append((leader, token))
    # A clean resignation: the last leader is stopped while it holds its term.
    last = pair.records("acquired")[-1]
    for owner in ("b", "a") if last["owner"] == "a" else ("a", "b"):
        pair.procs[owner].send_signal(signal.SIGTERM)
        assert pair.procs[owner].wait(timeout=10) == 0
    for owner, token in paused:
        lost = [r for r in pair.records("lost", owner) if r["token"] == token]
        said = [r for r in pair.records("lost_event", owner) if r["token"] == token]
        assert len(lost) == 1, (owner, token, lost)
        assert len(said) == 1 and said[0]["reason"], (owner, token, said)
    resigned = last["token"]
    assert not [r for r in pair.records("lost") if r["token"] == resigned]
    assert not [r for r in pair.records("lost_event") if r["token"] == resigned]
