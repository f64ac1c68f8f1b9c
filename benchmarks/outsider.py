"""Contended, as an outsider measures it: fresh processes, library defaults, a timeout.

The contended section (:mod:`benchmarks.contended`) runs every contender on the same
long-lived processes, with logging configured by the benchmark and a blocking
``acquire()``. This harness is the one a user would write to check the claim, so the
claim has to hold here too:

- 4 fresh OS processes (``spawn``) per contender and round, each with a plain
  ``redis.Redis(host, port)`` client (no socket timeout) and nothing configured:
  neither logging nor structlog (the library's defaults);
- one lock, the critical section ``n = GET counter; SET counter n + 1``, for
  ``seconds``, every process from the same instant;
- lockworker's ``Lock.acquire(timeout=TIMEOUT)`` (the object reused, or made per
  use) against python-redis-lock's ``acquire(blocking=True)``, both with a 5 s lease;
- ``rounds`` rounds, the contenders interleaved in a rotating order; the figure is
  the median of the rounds.

Handovers are counted as in :mod:`benchmarks.contended`: a section whose process
differs from the previous section's, the order given by the counter value each read.
"""

from __future__ import annotations

import itertools
import multiprocessing
import os
import time
import uuid
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from typing import Any

import redis

from benchmarks.common import installed, median, reap, spawn

LEASE = 5.0
TIMEOUT = 1.0
"""Seconds a lockworker ``acquire`` may wait: short enough that a waiter's deadline
falls within its first wait, as an application's ``acquire(timeout=1)`` does."""
START_DELAY = 0.3
REPLY_TIMEOUT = 60.0

REUSED = "lockworker Lock (reused)"
PER_USE = "lockworker Lock (new object per use)"
PEER = "python-redis-lock"
CONTENDERS = (REUSED, PER_USE, PEER)
NEEDS = {PEER: "redis_lock"}
CALLS = {
    REUSED: f"`acquire(timeout={TIMEOUT:g})`, one object per process",
    PER_USE: f"`Lock(...)` then `acquire(timeout={TIMEOUT:g})`, per section",
    PEER: "`acquire(blocking=True)`, one object per process",
}


def child(name: str, port: int, key: str, seconds: float, pipe: Connection) -> None:
    """One contending process: no logging set up, a plain client, its own clock."""
    client = redis.Redis(host="127.0.0.1", port=port)
    counter = f"outsider:{key}:counter"
    if name == PEER:
        import redis_lock

        lock: Any = redis_lock.Lock(client, key, expire=round(LEASE))
    else:
        import lockworker

        lock = lockworker.Lock(client, key, ttl=LEASE)
    client.ping()
    pipe.send("ready")
    start_at = float(pipe.recv())
    time.sleep(max(0.0, start_at - time.monotonic()))
    seen: list[int] = []
    before = os.times()
    end = start_at + seconds
    while time.monotonic() < end:
        if name == PEER:
            lock.acquire(blocking=True)
        else:
            if name == PER_USE:
                lock = lockworker.Lock(client, key, ttl=LEASE)
            if not lock.acquire(timeout=TIMEOUT):
                raise RuntimeError(f"{name}: acquire timed out after {TIMEOUT} s")
        n = int(client.get(counter) or 0)
        client.set(counter, n + 1)
        seen.append(n)
        lock.release()
    after = os.times()
    pipe.send((seen, after.user - before.user + after.system - before.system))
    client.close()


@dataclass
class OutsiderResult:
    name: str
    rates: list[float] = field(default_factory=list)
    """Handovers/s, one per round."""
    sections: list[float] = field(default_factory=list)
    """Sections/s, one per round."""
    client_us: list[float] = field(default_factory=list)
    """The processes' CPU (user + system) per section, µs, one per round."""
    exclusive: bool = True

    @property
    def rate(self) -> float:
        return median(self.rates)


def _handovers(seen: list[list[int]]) -> int:
    owner = {n: process for process, values in enumerate(seen) for n in values}
    order = [owner[n] for n in sorted(owner)]
    return sum(1 for a, b in itertools.pairwise(order) if a != b)


def one_round(name: str, port: int, client: redis.Redis, seconds: float,
              processes: int = 4) -> tuple[float, float, float, bool]:
    """(handovers/s, sections/s, client CPU µs per section, exclusive) of one run."""
    key = f"outsider-{uuid.uuid4().hex[:10]}"
    procs, pipes = spawn(child, [(name, port, key, seconds)] * processes, fresh=True)
    try:
        for pipe in pipes:
            if not pipe.poll(REPLY_TIMEOUT) or pipe.recv() != "ready":
                raise RuntimeError(f"{name}: a process did not get ready")
        start_at = time.monotonic() + START_DELAY
        for pipe in pipes:
            pipe.send(start_at)
        seen, cpu = [], 0.0
        for pipe in pipes:
            if not pipe.poll(REPLY_TIMEOUT + seconds):
                raise RuntimeError(f"{name}: no reply from a process")
            values, used = pipe.recv()
            seen.append(values)
            cpu += used
    finally:
        reap(procs, pipes)
    sections = sum(len(values) for values in seen)
    final = int(client.get(f"outsider:{key}:counter") or 0)
    exclusive = final == sections == len({n for values in seen for n in values})
    per_section = cpu * 1e6 / sections if sections else float("nan")
    return _handovers(seen) / seconds, sections / seconds, per_section, exclusive


def run(port: int, client: redis.Redis, *, seconds: float, rounds: int) -> list[OutsiderResult]:
    """Every contender ``rounds`` times, interleaved in a rotating order."""
    chosen = [name for name in CONTENDERS if installed(NEEDS.get(name))]
    results = {name: OutsiderResult(name) for name in chosen}
    for round_no in range(rounds):
        shift = round_no % len(chosen)
        for name in chosen[shift:] + chosen[:shift]:
            handovers, sections, cpu, exclusive = one_round(name, port, client, seconds)
            result = results[name]
            result.rates.append(handovers)
            result.sections.append(sections)
            result.client_us.append(cpu)
            result.exclusive = result.exclusive and exclusive
    return [results[name] for name in chosen]


# -- the page ---------------------------------------------------------------------------


def summary(results: list[OutsiderResult], target: float) -> list[str]:
    """One line per lockworker row: its ratio to python-redis-lock and the target."""
    by_name = {r.name: r for r in results}
    peer = by_name.get(PEER)
    lines = []
    for name in (REUSED, PER_USE):
        ours = by_name.get(name)
        if ours is None or peer is None or not peer.rate:
            continue
        ratio = ours.rate / peer.rate
        line = (
            f"contended handovers/s, fresh processes, {name} with `acquire(timeout="
            f"{TIMEOUT:g})`: {ours.rate:,.0f} = {ratio:.2f}x python-redis-lock "
            f"({peer.rate:,.0f}); target >= {target:g}x: "
            f"{'met' if ratio >= target else '**not met**'}"
        )
        if not ratio >= target:
            line += (
                f" (bound as in the project's harness, by the work of a FIFO handover: "
                f"{median(ours.sections):,.0f} sections/s, every one changing hands, and "
                f"{median(ours.client_us):,.0f} µs of the processes' CPU per section, "
                f"against python-redis-lock's {median(peer.sections):,.0f} sections/s, "
                f"of which {peer.rate:,.0f} changed hands, and "
                f"{median(peer.client_us):,.0f} µs)"
            )
        lines.append(line)
    for result in results:
        if not result.exclusive:
            lines.append(f"MUTUAL EXCLUSION BROKEN (fresh processes): {result.name}")
    return lines


def render(results: list[OutsiderResult], seconds: float, rounds: int) -> list[str]:
    out = [
        "### Contended, fresh processes and library defaults",
        "",
        f"The same section measured as a user would check it "
        f"(`benchmarks/outsider.py`): for each contender and round 4 new processes, each "
        f"with a plain `redis.Redis` client and no logging set up, loop on one lock for "
        f"{seconds:g} s from one instant; lockworker waits with `acquire(timeout="
        f"{TIMEOUT:g})`, python-redis-lock with `acquire(blocking=True)`, both with a "
        f"{LEASE:g} s lease. {rounds} rounds, the contenders interleaved; medians. "
        "**client CPU** is the 4 processes' user + system time per section.",
        "",
        "| contender | acquire | handovers/s (median) | rounds | sections/s | "
        "client CPU µs / section | exclusive |",
        "|---|---|---:|---|---:|---:|---|",
    ]
    for r in results:
        rounds_text = ", ".join(f"{rate:,.0f}" for rate in r.rates)
        out.append(
            f"| {r.name} | {CALLS[r.name]} | {r.rate:,.0f} | {rounds_text} "
            f"| {median(r.sections):,.0f} | {median(r.client_us):,.0f} "
            f"| {'yes' if r.exclusive else '**no**'} |"
        )
    out.append("")
    return out


if __name__ == "__main__":  # pragma: no cover - a manual run of this harness alone
    import sys

    from lockworker.testing.server import RedisServer

    multiprocessing.set_start_method("spawn", force=True)
    seconds_arg = float(sys.argv[1]) if len(sys.argv) > 1 else 5.0
    rounds_arg = int(sys.argv[2]) if len(sys.argv) > 2 else 2
    with RedisServer() as server:
        probe = server.client()
        found = run(server.port, probe, seconds=seconds_arg, rounds=rounds_arg)
        probe.close()
    print("\n".join(render(found, seconds_arg, rounds_arg)))
    print("\n".join(summary(found, 1.5)))
