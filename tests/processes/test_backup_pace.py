"""Once the primary is gone, backups serve a stream at the primary's pace.

A primary and a backup serve one stream (fan-out) as OS processes; the backup's
``backup_delay`` (1 s) is long enough that a backup deferring to a primary that is no
longer there would crawl (``concurrency / backup_delay``, 4 jobs a second). The
primary's own pace is measured first, in the same test; after its SIGKILL (it dies
holding jobs) or its SIGTERM (a clean stop, as in a deploy), the jobs left must all be
done within the lease + 1 s + 2 x the time the primary needed for as many. With no
primary, the first backup (by owner) serves as one, the next holding back behind it
until it goes. A crashed primary's registration still runs for a lease: a backup that
saw it stall serves each job that comes at once meanwhile.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from helpers import reap, wait_for

import lockworker
from lockworker.model.presence import presence_keys
from lockworker.model.state import Role
from lockworker.protocol import presence
from lockworker.testing import RedisServer

pytestmark = pytest.mark.processes

LEASE = 1.0
BACKUP_DELAY = 1.0
JOBS = 150
HANGING = 2
"""Jobs the primary holds when it goes: a crash leaves them to their leases' end, a
stop hands them over at once."""

CHILD = r"""
import asyncio, json, sys, time
import redis
import lockworker
from lockworker import aio

url, namespace, stream, owner, role, side = sys.argv[1:7]
lease, delay = float(sys.argv[7]), float(sys.argv[8])
client = redis.Redis.from_url(url, socket_timeout=5)

def hang(job):
    time.sleep((job.payload or {}).get("work", 0))
    while (job.payload or {}).get("hang_on") == owner:
        job.check()  # SIGTERM: StopRequested hands the job over
        time.sleep(0.005)

def record(job):
    client.rpush(f"{namespace}:did", json.dumps(
        {"job": job.id, "owner": owner, "attempt": job.attempt, "t": time.monotonic()}))

def on_acquired(job):
    record(job)  # the handler: one round trip
    hang(job)

settings = dict(namespace=namespace, owner=owner, role=role, backup_delay=delay,
                lock_timeout=lease)
source = lockworker.StreamSource(client, stream, owner=owner, block=0.1)
if side == "sync":
    worker = lockworker.Worker(client, on_acquired=on_acquired, **settings)
    worker.serve(source, concurrency=4)
    worker.close()
else:
    async def main():
        aclient = redis.asyncio.Redis.from_url(url, socket_timeout=5)

        async def acquired(job):
            await aclient.rpush(f"{namespace}:did", json.dumps(
                {"job": job.id, "owner": owner, "attempt": job.attempt,
                 "t": time.monotonic()}))
            await asyncio.to_thread(hang, job)

        async with aio.Worker(aclient, on_acquired=acquired, **settings) as worker:
            await worker.serve(source, concurrency=4)
        await aclient.aclose()

    import redis.asyncio
    asyncio.run(main())
"""


class Daemons:
    def __init__(self, server: RedisServer) -> None:
        self.server = server
        self.namespace = f"pace-{uuid.uuid4().hex[:8]}"
        self.stream = f"{self.namespace}-jobs"
        self.client: redis.Redis = server.client(decode_responses=True)
        self.procs: dict[str, subprocess.Popen[bytes]] = {}

    def spawn(self, owner: str, role: str, side: str = "sync", *, lease: float = LEASE,
              delay: float = BACKUP_DELAY) -> None:
        self.procs[owner] = subprocess.Popen(
            [sys.executable, "-c", CHILD, self.server.url, self.namespace, self.stream,
             owner, role, side, str(lease), str(delay)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )

    def alive(self) -> list[presence.Registered]:
        return presence.read(self.client, presence_keys(self.namespace))

    def serving(self, owner: str, role: str) -> bool:
        """Registered in the namespace and reading the stream."""
        readers = lockworker.daemons.sources.stream_keys(self.stream).extra("readers")
        return self.client.zscore(readers, owner) is not None and any(
            r.member.owner == owner and r.member.role is Role(role) for r in self.alive()
        )

    def submit(self, prefix: str, count: int, payload: Any = None) -> float:
        """Submit ``count`` jobs in one round trip; when they were sent."""
        sent = time.monotonic()
        pipe = self.client.pipeline(transaction=False)
        for i in range(count):
            pipe.xadd(lockworker.daemons.sources.stream_keys(self.stream).extra("entries"),
                      {"job_id": f"{prefix}-{i}", "payload": json.dumps(payload)})
        pipe.execute()
        return sent

    def did(self, prefix: str = "") -> list[dict[str, Any]]:
        raw = self.client.lrange(f"{self.namespace}:did", 0, -1)
        return [r for r in map(json.loads, raw) if r["job"].startswith(prefix)]

    def done(self, prefix: str, count: int) -> bool:
        return len({r["job"] for r in self.did(prefix)}) == count

    def close(self) -> None:
        reap(self.procs.values())
        self.client.close()


@pytest.fixture
def daemons(redis_server: RedisServer) -> Iterator[Daemons]:
    d = Daemons(redis_server)
    yield d
    d.close()


def primary_pace(daemons: Daemons) -> float:
    """Seconds the primary needs for JOBS jobs (alone: on a loaded machine a slow
    moment would let the backup's delay run out and take some)."""
    sent = daemons.submit("a", JOBS)
    wait_for(lambda: daemons.done("a", JOBS), timeout=30)
    records = daemons.did("a")
    assert {r["owner"] for r in records} == {"primary"}
    return max(r["t"] for r in records) - sent


@pytest.mark.parametrize(
    ("how", "side"),
    [(signal.SIGKILL, "sync"), (signal.SIGTERM, "sync"), (signal.SIGKILL, "aio"),
     (signal.SIGTERM, "aio")],
    ids=["sigkill-sync", "sigterm-sync", "sigkill-aio", "sigterm-aio"],
)
def test_the_backup_serves_at_the_primarys_pace_once_the_primary_is_gone(
    daemons: Daemons, how: signal.Signals, side: str
) -> None:
    daemons.spawn("primary", "primary")
    wait_for(lambda: daemons.serving("primary", "primary"), timeout=30)
    primary_took = primary_pace(daemons)
    daemons.spawn("backup", "backup", side)
    wait_for(lambda: daemons.serving("backup", "backup"), timeout=30)

    # Mid-stream: the primary holds jobs when it goes.
    daemons.submit("hang", HANGING, {"hang_on": "primary"})
    wait_for(lambda: daemons.done("hang", HANGING), timeout=10)
    gone_at = time.monotonic()
    daemons.procs["primary"].send_signal(how)
    # Gone before the next jobs come: a stopping primary finishes what it was given
    # before the signal, and jobs it read before it handled the signal are its own.
    if how == signal.SIGTERM:
        assert daemons.procs["primary"].wait(timeout=10) == 0
    else:
        daemons.procs["primary"].wait(timeout=10)
    daemons.submit("b", JOBS)
    wait_for(lambda: daemons.done("b", JOBS) and len(daemons.did("hang")) == 2 * HANGING,
             timeout=60)
    finished = max(r["t"] for r in daemons.did("b") + daemons.did("hang"))
    backup_took = finished - gone_at
    assert {r["owner"] for r in daemons.did("b")} == {"backup"}
    hang = daemons.did("hang")
    assert sorted((r["owner"], r["attempt"]) for r in hang) == (
        [("backup", 2)] * HANGING + [("primary", 1)] * HANGING
        if how == signal.SIGKILL else
        # a stop hands its jobs over without spending their attempt
        [("backup", 1)] * HANGING + [("primary", 1)] * HANGING
    )
    # A backup still deferring to the dead primary needs JOBS / 4 seconds (37 s); one
    # that knows it is alone needs the lease (a crash's registration runs out), then
    # about the primary's time: 1 s is room for a loaded machine, far below 37 s.
    assert backup_took < LEASE + 1.0 + 2 * primary_took, (backup_took, primary_took)
    assert all(r.member.role is Role.BACKUP for r in daemons.alive())  # gone


def test_a_restarted_primary_gets_the_work_back(daemons: Daemons) -> None:
    daemons.spawn("primary", "primary")
    daemons.spawn("backup", "backup")
    wait_for(lambda: daemons.serving("primary", "primary")
             and daemons.serving("backup", "backup"), timeout=30)
    daemons.procs["primary"].kill()
    daemons.procs["primary"].wait(timeout=10)
    daemons.submit("b", 20)
    wait_for(lambda: daemons.done("b", 20), timeout=LEASE + 10)
    assert {r["owner"] for r in daemons.did("b")} == {"backup"}

    daemons.spawn("primary", "primary")  # the same owner: resumes its stream position
    wait_for(lambda: daemons.serving("primary", "primary"), timeout=30)
    daemons.submit("warm", 1)
    wait_for(lambda: daemons.done("warm", 1), timeout=10)
    daemons.submit("c", 40)
    wait_for(lambda: daemons.done("c", 40), timeout=30)
    # The backup defers again: it lets every free job lie for its delay, the primary
    # takes each at once.
    assert {r["owner"] for r in daemons.did("c")} == {"primary"}


@pytest.mark.parametrize("how", [signal.SIGTERM, signal.SIGKILL], ids=["sigterm", "sigkill"])
def test_with_no_primary_the_first_backup_serves_and_the_next_steps_in_when_it_goes(
    daemons: Daemons, how: signal.Signals
) -> None:
    # backup-1 ranks first (by owner). Registered before backup-2 starts, it is in
    # backup-2's first reading, so backup-2 holds back from its first job.
    daemons.spawn("backup-1", "backup")
    wait_for(lambda: daemons.serving("backup-1", "backup"), timeout=30)
    daemons.spawn("backup-2", "backup", "aio")
    wait_for(lambda: daemons.serving("backup-2", "backup"), timeout=30)
    sent = daemons.submit("j", JOBS, {"work": 0.02})  # 0.75 s of work for 4 slots
    wait_for(lambda: daemons.done("j", JOBS), timeout=30)
    first_took = max(r["t"] for r in daemons.did("j")) - sent
    records = daemons.did("j")
    assert len(records) == JOBS  # each once
    # backup-2 held every job back behind backup-1, which moved all along: no job cost
    # two contests. Both competing for every job was the rule before.
    assert {r["owner"] for r in records} == {"backup-1"}

    gone_at = time.monotonic()
    daemons.procs["backup-1"].send_signal(how)
    daemons.procs["backup-1"].wait(timeout=10)
    daemons.submit("k", JOBS, {"work": 0.02})
    wait_for(lambda: daemons.done("k", JOBS), timeout=60)
    took = max(r["t"] for r in daemons.did("k")) - gone_at
    assert {r["owner"] for r in daemons.did("k")} == {"backup-2"}
    # Holding back behind a backup that is gone would need JOBS / 4 seconds (37 s): a
    # stop is known within a round trip, a crash when its registration ends (a lease).
    assert took < LEASE + 1.0 + 2 * first_took, (took, first_took)


@pytest.mark.parametrize("side", ["sync", "aio"])
def test_a_crashed_primarys_stream_is_served_at_once_while_its_registration_runs(
    daemons: Daemons, side: str
) -> None:
    """A crashed primary's registration runs on for up to a lease (10 s here). Once a
    job nobody took has waited ``backup_delay`` (2 s) for it, the backup knows the
    primary stalls: each job that comes next is served at once, not after a
    ``backup_delay`` of its own, as long as the primary is not seen to move again."""
    lease, delay = 10.0, 2.0
    daemons.spawn("primary", "primary", lease=lease, delay=delay)
    daemons.spawn("backup", "backup", side, lease=lease, delay=delay)
    wait_for(lambda: daemons.serving("primary", "primary")
             and daemons.serving("backup", "backup"), timeout=30)
    daemons.submit("warm", 1)
    wait_for(lambda: daemons.done("warm", 1), timeout=10)
    daemons.procs["primary"].kill()
    daemons.procs["primary"].wait(timeout=10)
    killed_at = time.monotonic()
    daemons.submit("b", 1)  # waits out the delay: the stall is seen
    wait_for(lambda: daemons.done("b", 1), timeout=lease)
    waits = []
    for n in range(5):
        sent = daemons.submit(f"c{n}", 1)
        wait_for(lambda n=n: daemons.done(f"c{n}", 1), timeout=lease)
        waits.append(daemons.did(f"c{n}")[0]["t"] - sent)
    assert {r["owner"] for r in daemons.did("b") + daemons.did("c")} == {"backup"}
    # Held back for the delay each, every job would wait 2 s or more.
    assert max(waits) < delay / 2, waits
    # Still registered: what the backup went by was the stall, not the primary's end.
    assert time.monotonic() - killed_at < lease
    assert any(r.member.role is Role.PRIMARY for r in daemons.alive())
