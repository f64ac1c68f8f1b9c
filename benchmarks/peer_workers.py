"""The worker processes of :mod:`benchmarks.peers`: three of one tool, started, released
together, one of them killed, all stopped.

lockworker's are :mod:`benchmarks.stream_failover`'s processes (three members of one
consumer group on one stream, ``StreamSource(..., group=...)``); RQ's are
``SimpleWorker``s in ``spawn`` processes; Celery's are ``celery worker`` commands
(:mod:`benchmarks.peer_celery`); Dramatiq's, arq's, saq's, streaq's, taskiq-redis's and
huey's are :mod:`benchmarks.peer_frameworks`' processes. Every handler writes the same
keys: ``bench:<name>:runs`` (runs per job), ``:starts`` and ``:ends`` ("time role
pid"), and ``:first`` (the first start of a jobs/s row).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import redis

import lockworker
from benchmarks import peer_frameworks, stream_failover
from benchmarks.common import quiet_logging, reap, spawn
from benchmarks.peer_frameworks import TIMEOUT_MARGIN
from benchmarks.stream_failover import Setup

ROOT = Path(__file__).resolve().parent.parent
PROCESSES = 3
CONCURRENCY = peer_frameworks.CONCURRENCY
"""lockworker's ``serve`` concurrency and the Celery threads pool's, per process (and
the frameworks' of :mod:`benchmarks.peer_frameworks`)."""
RQ_MAINTENANCE = 5
RQ_WORKER_TTL = 20
"""An idle RQ worker blocks ``worker_ttl - 15`` s for a job, and runs its maintenance
(which finds abandoned jobs) only between two such waits: 420 - 15 s by default."""
RQ_TIMEOUT_MARGIN = TIMEOUT_MARGIN
"""Seconds the tuned RQ job's timeout gives beyond its work: a dead ``SimpleWorker``'s
job is abandoned only 60 s after its timeout (180 s by default) has passed."""
TUNED_LEASE = 2.0
REPLY_TIMEOUT = 60.0


# -- RQ's worker processes -------------------------------------------------------------


def rq_main(port: int, queue: str, setting: str, pipe: Connection) -> None:
    """An RQ ``SimpleWorker`` on ``queue``: get ready, wait for ``go``, work."""
    from rq import Queue, SimpleWorker

    quiet_logging(to_devnull=True)
    client = redis.Redis(host="127.0.0.1", port=port)
    tuned: dict[str, Any] = (
        {
            "maintenance_interval": RQ_MAINTENANCE, "worker_ttl": RQ_WORKER_TTL,
        }
        if setting == "tuned" else {}
    )
    worker = SimpleWorker([Queue(queue, connection=client)], connection=client, **tuned)
    pipe.send("ready")
    pipe.recv()
    worker.work(logging_level="WARNING")


# -- the three workers of one tool, started and stopped -------------------------------


class Workers:
    """Three worker processes of ``tool`` with ``setting`` on a queue of their own."""

    def __init__(self, tool: str, setting: str, port: int, *, hold: float = 0.0,
                 concurrency: int = CONCURRENCY) -> None:
        self.tool, self.setting, self.port, self.hold = tool, setting, port, hold
        self.concurrency = concurrency
        self.name = f"bench-peer-{uuid.uuid4().hex[:8]}"
        self.keyspace = f"bench:{self.name}"
        self.pids: list[int] = []
        self._spawned: Any = None
        self._popens: list[subprocess.Popen[bytes]] = []
        self._logs: list[Any] = []
        self._celery: Any = None

    # lockworker's processes write "bench:<namespace>:runs|starts", as peer_jobs does.
    def __enter__(self) -> Workers:
        try:
            if self.tool == "lockworker":
                lease = TUNED_LEASE if self.setting == "tuned" else 10.0
                setups = [
                    Setup(self.name, self.name, "primary", "sync", lease, hold=self.hold,
                          concurrency=self.concurrency, group=self.name, peer=not self.hold)
                    for _ in range(PROCESSES)
                ]
                self._spawned = stream_failover.Processes(self.port, setups).__enter__()
                self.pids = [self._spawned.pid(i) for i in range(PROCESSES)]
            elif self.tool == "RQ":
                procs, pipes = spawn(
                    rq_main, [(self.port, self.name, self.setting)] * PROCESSES
                )
                self._spawned = (procs, pipes)
                for pipe in pipes:
                    if not pipe.poll(REPLY_TIMEOUT) or pipe.recv() != "ready":
                        raise RuntimeError("an RQ worker did not get ready")
                self.pids = [proc.pid for proc in procs if proc.pid is not None]
            elif self.tool in peer_frameworks.MODULES:
                self._start_framework()
            else:
                self._start_celery()
        except BaseException:
            self.__exit__()
            raise
        return self

    @property
    def plan(self) -> peer_frameworks.Plan:
        return peer_frameworks.Plan(self.tool, self.port, self.name, self.setting, self.hold)

    def _start_framework(self) -> None:
        procs, pipes = spawn(peer_frameworks.worker_main, [(self.plan,)] * PROCESSES)
        self._spawned = (procs, pipes)
        self.pids = [proc.pid for proc in procs if proc.pid is not None]
        for pipe in pipes:
            if not pipe.poll(REPLY_TIMEOUT):
                raise RuntimeError(f"a {self.tool} worker did not get ready")
            try:
                said = pipe.recv()
            except EOFError:  # it died while starting: its log went to os.devnull
                raise RuntimeError(f"a {self.tool} worker exited while starting") from None
            if said != "ready":  # what failed in the worker
                raise RuntimeError(said)

    def _start_celery(self) -> None:
        from benchmarks import peer_celery

        broker = f"redis://127.0.0.1:{self.port}/0"
        pool = "solo" if "solo" in self.tool else "threads"
        env = {
            **os.environ, "LOCKWORKER_BENCH_BROKER": broker,
            "LOCKWORKER_BENCH_CELERY": self.setting,
            "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
        }
        # A worker consumes a queue of its own until told to consume the jobs' queue,
        # so that all three start on the backlog at one instant (see ``go``).
        self.nodes = [f"{self.name}-{i}@bench" for i in range(PROCESSES)]
        for node in self.nodes:
            log = tempfile.TemporaryFile()  # noqa: SIM115 (closed in __exit__)
            self._logs.append(log)
            command = [
                sys.executable, "-m", "celery", "-A", "benchmarks.peer_celery", "worker",
                "-P", pool, "-n", node, "-Q", f"{self.name}-idle", "--loglevel", "WARNING",
            ]
            if pool == "threads":
                command += ["-c", str(CONCURRENCY)]
            self._popens.append(subprocess.Popen(
                command, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
            ))
        self.pids = [popen.pid for popen in self._popens]
        self._celery = peer_celery.make_app(broker, self.setting)
        deadline = time.monotonic() + REPLY_TIMEOUT
        while True:
            replies = self._celery.control.ping(destination=self.nodes, timeout=1.0)
            if len(replies) == PROCESSES:
                return
            if time.monotonic() > deadline or any(p.poll() is not None for p in self._popens):
                raise RuntimeError(f"Celery workers did not start:\n{self._log_text()}")

    def _log_text(self) -> str:
        out = []
        for log in self._logs:
            log.seek(0)
            out.append(log.read().decode(errors="replace")[-2000:])
        return "\n".join(out)

    def queue(self, client: redis.Redis, handler: str, args: list[tuple[Any, ...]]) -> None:
        """Queue one ``handler`` job per ``args`` (lockworker: submit to the stream)."""
        if self.tool == "lockworker":
            for n, _ in enumerate(args):
                lockworker.submit(client, self.name, f"job-{n}", None)
        elif self.tool == "RQ":
            from rq import Queue, Retry

            tuned: dict[str, Any] = (
                {"retry": Retry(max=1), "timeout": round(self.hold) + RQ_TIMEOUT_MARGIN}
                if self.setting == "tuned" else {}
            )
            queue = Queue(self.name, connection=client)
            func = f"benchmarks.peer_jobs.{handler}"
            queue.enqueue_many([Queue.prepare_data(func, one, **tuned) for one in args])
        elif self.tool in peer_frameworks.MODULES:
            peer_frameworks.enqueue(self.plan, handler, args)
        else:
            for one in args:
                self._celery.send_task(f"bench.{handler}", args=one, queue=self.name)

    def go(self) -> None:
        if self.tool == "lockworker":
            self._spawned.go()
        elif self.tool == "RQ" or self.tool in peer_frameworks.MODULES:
            for pipe in self._spawned[1]:
                pipe.send("go")
        else:
            self._celery.control.add_consumer(
                self.name, destination=self.nodes, reply=True, timeout=REPLY_TIMEOUT
            )

    def kill(self, pid: int) -> float:
        """SIGKILL ``pid``, one of these workers; returns the time just before it."""
        if pid not in self.pids:
            raise RuntimeError(f"pid {pid} is not one of this trial's workers {self.pids}")
        at = time.monotonic()
        os.kill(pid, signal.SIGKILL)
        return at

    def __exit__(self, *exc: object) -> None:
        for pid in self.pids:  # the measurement is over: no worker needs a clean stop
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        if self.tool == "lockworker" and self._spawned is not None:
            self._spawned.__exit__()
        elif self._spawned is not None:
            reap(*self._spawned)
        for popen in self._popens:
            popen.wait(timeout=REPLY_TIMEOUT)
        for log in self._logs:
            log.close()
        if self._celery is not None:
            self._celery.close()
