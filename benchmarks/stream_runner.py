"""One measured run of the stream section: start the processes, release them, watch.

:func:`run_fleet` spawns one process per :class:`~benchmarks.stream_children.Setup`,
releases them together, waits until every job of every stream has run at least once
(optionally SIGKILLing one process once a quarter of the jobs has run), stops them and
collects what they counted, and what the servers counted meanwhile.
"""

from __future__ import annotations

import os
import signal
import time
from collections import Counter
from dataclasses import dataclass
from typing import Any

import redis

import lockworker
from benchmarks.common import reap, spawn
from benchmarks.stream_children import REPLY_TIMEOUT, Setup, child_main
from benchmarks.stream_kit import (
    Costs,
    Outcome,
    Tally,
    TallyConnection,
    analyse,
    commandstats,
    entries_key,
    log_key,
    read_log,
    server_cpu,
)

HARNESS = frozenset({"info", "llen", "lrange"})
"""Commands only the watching parent sends: left out of the servers' counts."""


def harness_client(port: int) -> redis.Redis:
    """A client for the parent whose commands :class:`Tally` counts (to subtract)."""
    pool = redis.ConnectionPool(
        host="127.0.0.1", port=port, socket_timeout=REPLY_TIMEOUT,
        connection_class=TallyConnection,
    )
    return redis.Redis(connection_pool=pool)


def group_support(client: redis.Redis, stream: str) -> str:
    """``""`` if ``StreamSource`` takes ``group=``, else why not (the rows say so)."""
    try:
        lockworker.StreamSource(client, stream, owner="probe", group="probe")  # type: ignore[call-arg]
    except TypeError as exc:
        return f"not available: StreamSource rejects group= ({exc})"
    finally:
        client.delete(entries_key(stream))  # in case making the source made its group
    return ""


@dataclass
class Measured:
    outcome: Outcome
    costs: Costs
    killed_at: float | None = None
    timed_out: bool = False
    window: float = float("nan")
    """Seconds from the start signal to the stop: the span the CPU figures cover."""


def _ready(procs: Any, pipes: Any) -> None:
    for proc, pipe in zip(procs, pipes, strict=True):
        try:
            ready = pipe.poll(REPLY_TIMEOUT) and pipe.recv() == "ready"
        except EOFError:
            ready = False
        if not ready:
            proc.join(timeout=1.0)
            raise RuntimeError(f"a serving process did not get ready (exit {proc.exitcode})")


def _distinct(harness: Any, streams: list[str]) -> int:
    return len({r.job for stream in streams for r in read_log(harness, stream)})


def run_fleet(
    setups: list[Setup], streams: list[str], jobs: int, harness: Any, servers: list[Any],
    *, kill: int | None = None, cap: float = 30.0,
) -> Measured:
    """Serve ``jobs`` jobs per stream of ``streams`` (already backlogged) by one process
    per setup; ``harness`` reads the logs (its commands are left out of the counts),
    ``servers`` are a client per server for ``INFO``. With ``kill``, that process gets
    SIGKILL once a quarter of the jobs has run, and the run ends at the latest ``cap``
    seconds after."""
    total = jobs * len(streams)
    procs, pipes = spawn(child_main, [(setup,) for setup in setups])
    killed_at: float | None = None
    killed_owner = ""
    timed_out = False
    answers: list[dict[str, Any]] = []
    try:
        _ready(procs, pipes)
        before, cpu_before = commandstats(servers), server_cpu(servers)
        Tally.reset()
        start = time.monotonic()
        for pipe in pipes:
            pipe.send("go")
        deadline = start + REPLY_TIMEOUT + total / 20
        while True:
            ran = sum(int(harness.llen(log_key(stream))) for stream in streams)
            if kill is not None and killed_at is None and ran >= total // 4:
                pid = procs[kill].pid
                assert pid is not None
                killed_owner = f"{setups[kill].role}-{pid}"
                killed_at = time.monotonic()
                os.kill(pid, signal.SIGKILL)
                deadline = killed_at + cap
            if ran >= total and _distinct(harness, streams) >= total:
                break
            if time.monotonic() > deadline:
                timed_out = True
                break
            time.sleep(0.005 if ran < total else 0.05)
        window = time.monotonic() - start
        for index, pipe in enumerate(pipes):
            if index != kill:
                pipe.send("stop")
        for index, pipe in enumerate(pipes):
            if index != kill and pipe.poll(REPLY_TIMEOUT):
                answers.append(pipe.recv())
        _, harness_sent = Tally.snapshot()
        after, cpu_after = commandstats(servers), server_cpu(servers)
    finally:
        reap(procs, pipes)
    records = [r for stream in streams for r in read_log(harness, stream)]
    outcome = analyse(records, total, start, killed_at, killed_owner)
    server: Counter[str] = Counter()
    for name, calls in after.items():
        delta = calls - before.get(name, 0) - harness_sent.get(name, 0)
        if delta > 0 and name not in HARNESS:
            server[name] = delta
    costs = Costs(total, server=server, server_cpu=cpu_after - cpu_before)
    handled = 0
    for answer in answers:
        costs.round_trips += answer["round_trips"]
        costs.sent.update(answer["sent"])
        costs.client_cpu += answer["cpu"]
        if answer["cpu"] >= costs.busiest_cpu:
            costs.busiest_switches = answer["switches"]
        costs.busiest_cpu = max(costs.busiest_cpu, answer["cpu"])
        costs.handler_seconds += answer["handler_seconds"] * answer["handled"]
        handled += answer["handled"]
    costs.handler_seconds = costs.handler_seconds / handled if handled else float("nan")
    return Measured(outcome, costs, killed_at, timed_out, window)
