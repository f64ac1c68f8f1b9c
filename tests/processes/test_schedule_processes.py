"""A 1 s schedule served by real ``lockworker run --every tick=1`` processes (a primary
and a backup, ``ticks_app:Ticks``): each tick runs once with no gap; a holder SIGKILLed
mid-run has its tick finished elsewhere with a larger token; a fleet that was down
catches up as ``--catch-up`` says; ``--overlap skip`` never runs two ticks at once
across processes; a holder stopped (SIGSTOP) past its lease has its tick taken over,
and on SIGCONT its write is refused by the fence and its lease reported lost.

What each run believed is recorded by the hook (``ticks_app``: token, attempt, pid,
``time.monotonic()``, one clock for every process on Linux); what was decided is read
from the schedule's hash and the ticks' job states on the server; when each process
began serving is its ``schedule.progress`` event (``since``, the server's time).
"""

from __future__ import annotations

import itertools
import json
import math
import os
import signal
import subprocess
import sys
import uuid
from collections import Counter
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest
from helpers import reap, wait_for
from ticks_app import fence_key, hold_key, runs_key, victim_key

from lockworker.daemons.schedules import server_now
from lockworker.model.keys import JobKeys
from lockworker.model.state import JobStatus, Snapshot
from lockworker.protocol import inspect
from lockworker.protocol.schedules import Progress, decode_progress, schedule_key
from lockworker.testing import RedisServer

pytestmark = pytest.mark.processes

HERE = Path(__file__).resolve().parent
SCHEDULE = "tick"


def second(tick_id: str) -> int:
    """The nominal time of a tick's id (``tick@2026-11-30T06:00:00Z``), epoch seconds."""
    moment = datetime.strptime(tick_id.partition("@")[2], "%Y-%m-%dT%H:%M:%SZ")
    return int(moment.replace(tzinfo=timezone.utc).timestamp())


def tick_id(tick: int) -> str:
    return f"{SCHEDULE}@{datetime.fromtimestamp(tick, timezone.utc):%Y-%m-%dT%H:%M:%SZ}"


class Fleet:
    """``lockworker run`` processes serving ``--every tick=1`` in one namespace."""

    def __init__(self, server: RedisServer, tmp: Path, lock_timeout: float = 2.0) -> None:
        self.server = server
        self.tmp = tmp
        self.lock_timeout = lock_timeout
        self.namespace = f"ticks-{uuid.uuid4().hex[:8]}"
        self.client = server.client(decode_responses=True)
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.logs: dict[str, Path] = {}
        self.stopped: set[int] = set()
        self.started = 0

    def start(self, owner: str, role: str = "primary", *options: str) -> None:
        """Start (or start again) the process ``owner``; its log goes to a new file."""
        self.started += 1
        log = self.tmp / f"{self.namespace}-{owner}-{self.started}.log"
        with log.open("wb") as err:
            self.procs[owner] = subprocess.Popen(
                [sys.executable, "-m", "lockworker", "run", "ticks_app:Ticks", "--app-dir",
                 str(HERE), "--redis", self.server.url, "--namespace", self.namespace,
                 "--owner", owner, "--role", role, "--every", f"{SCHEDULE}=1",
                 "--lock-timeout", str(self.lock_timeout), "--log-format", "json",
                 "--log-level", "debug", *options],
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err,
            )
        self.logs[owner] = log

    def events(self, owner: str, event: str) -> list[dict[str, Any]]:
        lines = self.logs[owner].read_text().splitlines()
        found = [json.loads(line) for line in lines if line.startswith("{")]
        return [e for e in found if e.get("event") == event]

    def since(self, owner: str) -> float | None:
        """When ``owner`` (its latest start) began serving the schedule: server time."""
        seen = self.events(owner, "schedule.progress")
        return float(seen[0]["since"]) if seen else None

    def serving(self, *owners: str, timeout: float = 30) -> list[float]:
        """Wait until every one of ``owners`` serves; when each began (server time)."""
        wait_for(lambda: all(self.since(o) is not None for o in owners), timeout=timeout)
        return [float(self.since(o) or 0) for o in owners]

    def runs(self, event: str | None = None, **match: object) -> list[dict[str, Any]]:
        found = [json.loads(r) for r in self.client.lrange(runs_key(self.namespace), 0, -1)]
        for run in found:
            run["second"] = second(run["tick"])
        return [r for r in found if event in (None, r["event"])
                and all(r.get(k) == v for k, v in match.items())]

    def ended(self, **match: object) -> list[dict[str, Any]]:
        return self.runs("end", **match)

    def progress(self) -> Progress:
        return decode_progress(self.client.hgetall(schedule_key(self.namespace, SCHEDULE)))

    def job(self, tick: int) -> Snapshot:
        return inspect(self.client, JobKeys.of(self.namespace, tick_id(tick)))

    def now(self) -> float:
        return server_now(self.client)

    def hold(self, seconds: float) -> None:
        """Every run works ``seconds`` from now on."""
        self.client.set(hold_key(self.namespace), seconds)

    def victim(self, seconds: float) -> dict[str, Any]:
        """The next run to start works ``seconds``; its ``start`` record, once there."""
        self.client.set(victim_key(self.namespace), seconds)
        return wait_for(lambda: self.runs("start", victim=True), timeout=15)[0]

    def owner_of(self, pid: int) -> str:
        return next(o for o, p in self.procs.items() if p.pid == pid)

    def signal(self, owner: str, signum: signal.Signals) -> None:
        os.kill(self.procs[owner].pid, signum)
        if signum == signal.SIGSTOP:
            self.stopped.add(self.procs[owner].pid)
        elif signum == signal.SIGCONT:
            self.stopped.discard(self.procs[owner].pid)

    def kill_all(self) -> None:
        for proc in self.procs.values():
            proc.kill()
        for proc in self.procs.values():
            proc.wait(10)

    def stop_all(self) -> None:
        """SIGTERM: each finishes the run in hand, logs what it did, and exits 0."""
        for proc in self.procs.values():
            proc.send_signal(signal.SIGTERM)
        for proc in self.procs.values():
            assert proc.wait(15) == 0

    def close(self) -> None:
        for pid in self.stopped:  # a stopped process takes no SIGKILL until continued
            os.kill(pid, signal.SIGCONT)
        reap(self.procs.values())
        self.client.close()


@pytest.fixture
def fleet(redis_server: RedisServer, tmp_path: Path) -> Iterator[Fleet]:
    f = Fleet(redis_server, tmp_path)
    yield f
    f.close()


@pytest.fixture
def short_lease(redis_server: RedisServer, tmp_path: Path) -> Iterator[Fleet]:
    f = Fleet(redis_server, tmp_path, lock_timeout=1.0)
    yield f
    f.close()


def assert_once_each(fleet: Fleet) -> None:
    """No tick's work was completed twice, whatever else happened to it."""
    ends = Counter(r["tick"] for r in fleet.ended() if r["accepted"])
    assert all(n == 1 for n in ends.values()), ends


def test_every_tick_runs_once_with_no_gap(fleet: Fleet) -> None:
    fleet.start("primary", "primary")
    fleet.start("backup", "backup")
    first_served = min(fleet.serving("primary", "backup"))
    wait_for(lambda: fleet.progress().ran >= 4, timeout=30)
    progress = fleet.progress()  # every tick at or before ``resolved`` is settled
    starts = [r for r in fleet.runs("start") if r["second"] <= progress.resolved]
    ran = sorted(r["second"] for r in starts)
    # A schedule new to the server starts with the first tick after it was first served.
    first = math.floor(first_served) + 1
    assert ran == list(range(first, progress.resolved + 1)), (first_served, ran)
    assert progress.ran == len(ran) >= 4
    assert (progress.skipped, progress.caught_up) == (0, 0)
    assert progress.last_ran == progress.resolved
    for start in starts:
        job = fleet.job(start["second"])
        end = fleet.ended(tick=start["tick"])
        assert len(end) == 1 and end[0]["accepted"], (start, end)
        assert (job.status, job.token, job.owner) == (
            JobStatus.DONE, start["token"], start["owner"]
        ), (start, job)
        assert start["attempt"] == 1, start


def test_a_killed_holders_tick_finishes_elsewhere_with_a_larger_token(
    short_lease: Fleet,
) -> None:
    fleet = short_lease
    fleet.start("primary", "primary")
    fleet.start("backup", "backup")
    fleet.serving("primary", "backup")
    wait_for(fleet.ended, timeout=15)  # the schedule runs
    killed = fleet.victim(60)  # works a minute: it is killed long before
    victim = fleet.owner_of(killed["pid"])
    fleet.signal(victim, signal.SIGKILL)
    tick = killed["second"]
    finished = wait_for(lambda: fleet.ended(tick=killed["tick"]), timeout=15)
    wait_for(lambda: fleet.job(tick).status is JobStatus.DONE, timeout=10)
    assert len(finished) == 1 and finished[0]["accepted"], finished
    survivor = finished[0]
    assert survivor["owner"] != victim
    assert survivor["token"] > killed["token"]
    assert (survivor["attempt"], killed["attempt"]) == (2, 1)
    job = fleet.job(tick)
    assert (job.token, job.owner) == (survivor["token"], survivor["owner"])
    assert [r["token"] for r in fleet.runs("start", tick=killed["tick"])] == [
        killed["token"], survivor["token"]
    ]
    # The schedule goes on in the survivor: a later tick runs, once.
    later = wait_for(lambda: [r for r in fleet.ended() if r["second"] > tick], timeout=10)
    assert later[0]["owner"] == survivor["owner"]
    assert_once_each(fleet)


def missed_and_ran(fleet: Fleet, policy: str) -> tuple[list[int], list[int], list[int]]:
    """Kill the whole fleet, keep it down for two ticks and more, start it again:
    the ticks missed (due after the latest decided one, up to when the first process
    began serving again), the ticks run since, in the order they started, and the
    boundary ticks a first look may have found due just after it began serving."""
    options = ("--catch-up", policy)
    fleet.start("primary", "primary", *options)
    fleet.start("backup", "backup", *options)
    fleet.serving("primary", "backup")

    def between_ticks() -> bool:
        # Killed with no tick open (one would be run again first, and under
        # overlap="skip" the catch-up tick would be skipped behind it), and the next
        # tick 0.3 s away at least.
        seen = fleet.progress()
        return bool(fleet.ended()) and not seen.running and seen.last is not None and (
            fleet.now() - seen.last < 0.7)

    wait_for(between_ticks, timeout=15)
    fleet.kill_all()
    down = fleet.progress()
    last = down.last
    assert last is not None and not down.running, down
    wait_for(lambda: fleet.now() >= last + 2.2, timeout=10)  # two ticks missed, and more
    fleet.start("primary", "primary", *options)
    fleet.start("backup", "backup", *options)
    back = min(fleet.serving("primary", "backup"))
    missed = list(range(last + 1, math.floor(back) + 1))
    # Two ticks after the return have run (after every missed one "all" runs).
    wait_for(lambda: any(r["second"] >= math.floor(back) + 2 for r in fleet.ended()),
             timeout=20)
    starts = sorted((r for r in fleet.runs("start") if r["second"] > last),
                    key=lambda r: r["t"])
    ran = [r["second"] for r in starts]
    # A tick that fell due between the first process's start and its first look
    # (a millisecond or so) counts as current, not missed: note it for "latest".
    looked = [e for o in ("primary", "backup") for e in fleet.events(o, "schedule.progress")]
    at = min(datetime.fromisoformat(e["timestamp"].replace("Z", "+00:00")).timestamp()
             for e in looked)
    boundary = [t for t in range(math.floor(back) + 1, math.floor(at) + 1)]
    return missed, ran, boundary


@pytest.mark.parametrize("policy", ["latest", "all", "none"])
def test_a_fleet_that_was_down_catches_up_as_its_policy_says(
    fleet: Fleet, policy: str
) -> None:
    missed, ran, boundary = missed_and_ran(fleet, policy)
    assert len(missed) >= 2, missed
    assert len(ran) == len(set(ran)), ran  # none twice
    caught = [t for t in ran if t in missed]
    after = [t for t in ran if t not in missed]
    progress = fleet.progress()
    if policy == "latest":
        # Only the latest missed tick; none at all only if the first look came a
        # moment after the next tick fell due (then that one is "the latest").
        assert caught == [missed[-1]] or (not caught and after[0] in boundary), (
            missed, ran)
        assert progress.caught_up == 0
    elif policy == "all":
        assert caught == missed, (missed, ran)  # every one, in order
        assert ran[: len(missed)] == missed, ran  # before any current tick
        assert progress.caught_up >= len(missed)  # the last one too
    else:
        assert caught == [], (missed, ran)
        assert progress.caught_up == 0
    # After the missed ones, the current ticks run without a gap.
    assert after == list(range(after[0], after[0] + len(after))), ran
    assert after[0] <= missed[-1] + 2, (missed, ran)
    assert_once_each(fleet)


def test_overlap_skip_never_runs_two_ticks_at_once_across_processes(fleet: Fleet) -> None:
    fleet.hold(1.5)  # longer than the interval: the next tick falls due meanwhile
    fleet.start("one", "primary", "--overlap", "skip")
    fleet.start("two", "primary", "--overlap", "skip")
    fleet.serving("one", "two")
    wait_for(lambda: len(fleet.ended()) >= 3, timeout=30)
    fleet.stop_all()  # then the logs, the hash and the runs tell one consistent story
    progress = fleet.progress()
    runs = fleet.runs()
    spans = {}
    for start in (r for r in runs if r["event"] == "start"):
        end = [r for r in runs if r["event"] == "end" and r["tick"] == start["tick"]]
        spans[start["second"]] = (start["t"], end[0]["t"] if end else math.inf, start)
    ordered = sorted(spans.values(), key=lambda span: span[0])
    for (_, ended, a), (began, _, b) in itertools.pairwise(ordered):
        assert ended <= began, (a, b)  # the next run began after the previous ended
    # Every tick from the first to the progress ran or was recorded skipped, not both.
    first = min(spans)
    settled = range(first, progress.resolved + 1)
    skipped = {
        second(e["tick"]) for o in ("one", "two")
        for e in fleet.events(o, "schedule.skipped") if e["decided"]
    }
    assert not skipped & set(spans), (skipped, sorted(spans))
    assert {t for t in settled if t not in spans} == {t for t in skipped if t in settled}
    assert progress.skipped == len(skipped) >= 2, (progress, sorted(skipped))
    assert len([t for t in settled if t in spans]) >= 2
    assert_once_each(fleet)


def test_a_holder_stopped_past_its_lease_loses_the_tick_and_its_write_is_refused(
    short_lease: Fleet,
) -> None:
    fleet = short_lease
    fleet.start("primary", "primary")
    fleet.start("backup", "backup")
    fleet.serving("primary", "backup")
    wait_for(fleet.ended, timeout=15)
    paused = fleet.victim(2.5)  # stopped at once, for longer than its 1 s lease
    stopped = fleet.owner_of(paused["pid"])
    fleet.signal(stopped, signal.SIGSTOP)
    tick = paused["second"]
    took = wait_for(lambda: fleet.ended(tick=paused["tick"]), timeout=15)[0]
    wait_for(lambda: fleet.job(tick).status is JobStatus.DONE, timeout=10)
    assert took["owner"] != stopped and took["token"] > paused["token"], (took, paused)
    assert took["accepted"]
    fleet.signal(stopped, signal.SIGCONT)
    late = wait_for(lambda: fleet.ended(tick=paused["tick"], owner=stopped), timeout=15)[0]
    lost = wait_for(lambda: fleet.runs("lost", tick=paused["tick"], owner=stopped),
                    timeout=15)
    assert late["token"] == paused["token"] and not late["accepted"], late
    assert [r["token"] for r in lost] == [paused["token"]]
    said = wait_for(lambda: [
        e for e in fleet.events(stopped, "lease.lost") if e.get("job_id") == paused["tick"]
    ], timeout=10)
    assert [e["token"] for e in said] == [paused["token"]]
    job = fleet.job(tick)
    assert (job.status, job.token, job.owner) == (JobStatus.DONE, took["token"], took["owner"])
    assert int(fleet.client.hget(fence_key(fleet.namespace), paused["tick"]) or 0) == took[
        "token"]
    assert not [e for e in fleet.events(stopped, "job.done") if e["job_id"] == paused["tick"]]
    assert_once_each(fleet)
