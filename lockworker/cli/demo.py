"""``lockworker demo``: a primary and two backups share a stream of jobs; the primary is
SIGKILLed part way; every job is still done exactly once.

What it does, in order:

1. Starts an embedded real server (:class:`lockworker.testing.RedisServer`) unless
   ``--redis`` is given (``$LOCKWORKER_REDIS_URL`` is not read: the demo writes to a
   server only when asked by name). Either way it works under a namespace of its own.
2. Starts three ``lockworker run`` processes of
   :class:`lockworker.cli.demo_worker.DemoWorker`: ``primary`` and ``backup-1``,
   ``backup-2`` (role backup), and waits until all three read the stream.
3. Submits ``--jobs`` jobs over ``--duration`` seconds, each 100-300 ms of work. A
   third of the way in it lets the jobs in hand finish, submits one job that takes long
   the first time, and SIGKILLs the primary in the middle of it; a backup takes the job
   over when the dead primary's lease ends (plus ``backup_delay`` if its registration
   in the namespace has not run out by then).
4. Shows who holds what while it runs, then a summary checked against the list each
   completed run appends to in Redis: jobs done exactly once, lost, done twice,
   handovers and the takeover latency. Exit 0 only if every job was done exactly once.

Everything it started (the three processes, the server, its temporary directory) is
stopped and removed at the end, also on Ctrl-C or SIGTERM, and every key it wrote
(those of its namespace, :func:`demo_patterns`) is deleted.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import random
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

import redis

from lockworker.cli.common import EXIT_FAILURE, EXIT_INTERRUPTED, EXIT_OK, CliError, connect
from lockworker.cli.demo_view import Board, Process, View, summarize, summary_lines
from lockworker.cli.demo_worker import key_prefix, records_key
from lockworker.clock import SystemClock
from lockworker.daemons.sources import stream_keys, submit
from lockworker.model import registry as names
from lockworker.model.keys import PREFIX, JobKeys, Space, escape
from lockworker.model.state import JobStatus, Snapshot
from lockworker.protocol import registry, snapshot_from
from lockworker.runtime.signals import stop_on_signals

WORKER = "lockworker.cli.demo_worker:DemoWorker"
TICK = 0.01
"""Seconds between two looks at the job being taken over."""
REDRAW = 0.1
"""Seconds between two reads of every job for the view."""
LONG_MS = 60_000
"""The killed job's first run: long enough that the kill surely lands inside it."""


def demo_patterns(namespace: str) -> list[str]:
    """SCAN patterns of every key a demo run in ``namespace`` writes: its jobs' keys,
    its namespace's index and outcomes per minute, its stream's (the stream is named
    after the namespace) and the demo worker's. (Its entries in the registry are taken
    out by :meth:`Demo.delete_keys`.)"""

    def glob(text: str) -> str:
        return re.sub(r"([*?\[\]\\])", r"\\\1", text)

    return [
        glob(f"{PREFIX}:{Space.JOB.value}:{escape(namespace)}:{{") + "*",
        glob(f"{PREFIX}:index:{escape(namespace)}:{{") + "*",
        glob(f"{PREFIX}:{Space.PRESENCE.value}:workers:{{{escape(namespace)}}}:rates:") + "*",
        glob(stream_keys(namespace).base + ":") + "*",
        glob(key_prefix(namespace)) + "*",
    ]


class Interrupted(Exception):
    """Ctrl-C or SIGTERM: clean up and leave."""


class Demo:
    """One demo run: its processes, its jobs, its clock."""

    def __init__(self, args: argparse.Namespace, url: str, client: redis.Redis) -> None:
        self.args = args
        self.url = url
        self.client = client
        self.clock = SystemClock()
        self.t0 = self.clock.monotonic()
        self.namespace = f"demo-{uuid.uuid4().hex[:12]}"
        self.logdir = Path(tempfile.mkdtemp(prefix="lockworker-demo-"))
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.stop = threading.Event()
        self.board = Board(
            [Process("primary", "primary"), Process("backup-1", "backup"),
             Process("backup-2", "backup")],
            args.jobs,
        )
        self.view = View(sys.stdout, live=sys.stdout.isatty())
        self.ids = [f"job-{i:03d}" for i in range(args.jobs)]
        self.kill_index = max(0, min(args.jobs - 1, args.jobs // 3))
        self.killed_at: float | None = None
        self.takeover: float | None = None
        self.taken_by: str | None = None
        self.drawn_at = float("-inf")

    def now(self) -> float:
        return self.clock.monotonic() - self.t0

    # -- processes -------------------------------------------------------------------

    def spawn(self, proc: Process) -> None:
        a = self.args
        log = (self.logdir / f"{proc.name}.log").open("wb")
        cmd = [
            sys.executable, "-m", "lockworker", "run", WORKER, "--redis", self.url,
            "--namespace", self.namespace, "--stream", self.namespace,
            "--role", proc.role, "--owner", proc.name,
            "--lock-timeout", str(a.lock_timeout), "--backup-delay", str(a.backup_delay),
            "--concurrency", "4", "--grace", "5", "--log-format", "json",
            "--log-level", a.log_level,
        ]
        with log:
            self.procs[proc.name] = subprocess.Popen(
                cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
            )

    def registered(self, name: str) -> bool:
        readers = stream_keys(self.namespace).extra("readers")
        return self.client.zscore(readers, name) is not None

    def check_alive(self) -> None:
        killed = {p.name for p in self.board.processes if p.killed_at is not None}
        for name, proc in self.procs.items():
            if proc.poll() is not None and name not in killed:
                tail = (self.logdir / f"{name}.log").read_text(errors="replace")[-400:].strip()
                raise CliError(f"{name} exited with {proc.returncode}: {tail}", EXIT_FAILURE)

    def terminate(self) -> None:
        """SIGTERM every process still running, then SIGKILL any that linger."""
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.terminate()
        for proc in self.procs.values():
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()

    def delete_keys(self) -> int:
        """Delete every key of this run (after its processes stopped); how many."""
        deleted = 0
        for pattern in demo_patterns(self.namespace):
            batch: list[str] = []
            for key in self.client.scan_iter(match=pattern, count=1000):
                batch.append(key)
                if len(batch) >= 500:
                    deleted += self.client.unlink(*batch)
                    batch = []
            if batch:
                deleted += self.client.unlink(*batch)
        registry.forget(self.client, names.namespace(self.namespace),
                        names.stream(self.namespace))
        return deleted

    # -- waiting ---------------------------------------------------------------------

    def pause(self, seconds: float) -> None:
        if self.stop.wait(max(0.0, seconds)):
            raise Interrupted

    def until(self, what: str, predicate: Callable[[], bool], timeout: float) -> None:
        """Wait for ``predicate()`` while keeping the view alive, or fail saying ``what``."""
        deadline = self.clock.monotonic() + timeout
        while not predicate():
            if self.clock.monotonic() > deadline:
                raise CliError(f"timed out after {timeout:.0f}s waiting until {what}", 1)
            self.tick()

    def tick(self) -> None:
        """One short step: watch the takeover, refresh the view when due."""
        self.check_alive()
        self.watch_takeover()
        now = self.now()
        if now - self.drawn_at >= REDRAW:
            self.drawn_at = now
            self.refresh()
            self.view.draw(now, self.board)
        self.pause(TICK)

    # -- reading Redis ---------------------------------------------------------------

    def read_jobs(self, ids: list[str]) -> dict[str, Snapshot]:
        pipe = self.client.pipeline(transaction=False)
        for job_id in ids:
            keys = JobKeys(self.namespace, job_id)
            pipe.get(keys.state)
            pipe.get(keys.lock)
            pipe.pttl(keys.lock)
        replies = pipe.execute()
        seen = {}
        for i, job_id in enumerate(ids):
            raw_state, raw_lock, pttl = replies[3 * i : 3 * i + 3]
            seen[job_id] = snapshot_from(
                JobKeys(self.namespace, job_id), raw_state, raw_lock,
                int(pttl) if int(pttl) >= 0 else None,
            )
        return seen

    def records(self) -> list[dict[str, object]]:
        return [json.loads(r) for r in self.client.lrange(records_key(self.namespace), 0, -1)]

    def refresh(self) -> None:
        self.board.jobs = self.read_jobs(self.ids[: self.board.submitted])
        self.board.done_by = Counter(str(r["owner"]) for r in self.records())

    def watch_takeover(self) -> None:
        if self.killed_at is None or self.takeover is not None:
            return
        job_id = self.ids[self.kill_index]
        seen = self.read_jobs([job_id])[job_id]
        taker = seen.holder or (seen.owner if seen.status is JobStatus.DONE else None)
        if taker is not None and taker != "primary":
            self.takeover = self.now() - self.killed_at
            self.taken_by = taker
            self.view.event(
                self.now(), f"{taker} took over {job_id} (attempt {seen.attempt}) "
                f"{self.takeover:.2f}s after the kill",
            )

    # -- the run ---------------------------------------------------------------------

    def run(self) -> bool:
        a = self.args
        self.view.event(
            0.0, f"{a.jobs} jobs, namespace {self.namespace}; starting a primary and two "
            f"backups (lock timeout {a.lock_timeout}s, backup delay {a.backup_delay}s)",
        )
        for proc in self.board.processes:
            self.spawn(proc)
        self.until(
            "the three workers read the stream",
            lambda: all(self.registered(p.name) for p in self.board.processes), 60,
        )
        self.view.event(self.now(), "all three workers are reading the stream")
        rng = random.Random(a.seed)
        interval = a.duration / a.jobs
        for index, job_id in enumerate(self.ids):
            if index == self.kill_index:
                self.kill_primary(job_id, rng)
            else:
                submit(self.client, self.namespace, job_id, {"ms": rng.randint(100, 300)})
                self.board.submitted += 1
            next_at = self.now() + interval
            while self.now() < next_at:
                self.tick()
        self.until(
            "every job is resolved",
            lambda: all(s.resolved for s in self.read_jobs(self.ids).values()),
            30 + a.jobs * 0.5,
        )
        self.refresh()
        self.view.draw(self.now(), self.board, final=True)
        return self.summary()

    def kill_primary(self, job_id: str, rng: random.Random) -> None:
        """Let the jobs in hand finish, start a long one, SIGKILL the primary inside it."""
        done = self.ids[: self.board.submitted]
        self.until(
            "the jobs before the kill are done",
            lambda: all(s.resolved for s in self.read_jobs(done).values()), 30,
        )
        submit(self.client, self.namespace, job_id,
               {"ms": rng.randint(100, 300), "first_run_ms": LONG_MS})
        self.board.submitted += 1
        self.until(
            f"the primary holds {job_id}",
            lambda: self.read_jobs([job_id])[job_id].holder == "primary", 30,
        )
        self.procs["primary"].kill()
        self.procs["primary"].wait()
        self.killed_at = self.now()
        self.board.processes[0].killed_at = self.killed_at
        self.view.event(self.killed_at, f"SIGKILL primary while it holds {job_id}")

    def summary(self) -> bool:
        a = self.args
        runs = [(str(r["job"]), str(r["owner"])) for r in self.records()]
        result = summarize(
            self.ids, [p.name for p in self.board.processes], runs, self.read_jobs(self.ids)
        )
        lines = ["", "summary", *summary_lines(result)]
        if self.takeover is not None:
            lines.append(
                f"  takeover after SIGKILL: {self.takeover:.2f}s by {self.taken_by} "
                f"(the rest of the dead lease: at most lock timeout {a.lock_timeout}s "
                f"+ backup delay {a.backup_delay}s + scheduling)"
            )
        lines.append(f"  elapsed: {self.now():.1f}s")
        sys.stdout.write("\n".join(lines) + "\n")
        sys.stdout.flush()
        return result.ok


@contextlib.contextmanager
def _server(url: str | None) -> Iterator[str]:
    """``url``, or an embedded server's URL for the block."""
    if url:
        yield url
        return
    from lockworker.testing.server import RedisServer  # noqa: PLC0415 (optional extra)

    with RedisServer() as server:
        yield server.url


def main(args: argparse.Namespace) -> int:
    with _server(args.redis) as url:
        client = connect(url)
        demo = Demo(args, url, client)
        ok = interrupted = False
        try:
            with stop_on_signals(lambda _signum: demo.stop.set()):
                ok = demo.run()
        except Interrupted:
            interrupted = True
            demo.view.event(demo.now(), "interrupted: stopping everything the demo started")
            return EXIT_INTERRUPTED
        finally:
            demo.terminate()
            try:
                demo.delete_keys()
            except redis.RedisError as exc:
                print(f"lockworker demo: could not delete the keys of namespace "
                      f"{demo.namespace}: {exc}", file=sys.stderr)
            client.close()
            if ok or interrupted:
                shutil.rmtree(demo.logdir, ignore_errors=True)
            else:
                print(f"worker logs kept in {demo.logdir}", file=sys.stderr)
    return EXIT_OK if ok else EXIT_FAILURE

