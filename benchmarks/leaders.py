"""Leadership handover: from a leader's stop to the next leader's election, sync and
asyncio.

Two long-lived OS processes, a holder and a follower, and a fresh leader name per
trial. The holder runs a leader (``lockworker.Leader`` in its main thread, or
``lockworker.aio.Leader`` in an event loop) whose ``on_acquired`` reports that it leads
and waits for the go. The follower then runs a leader of the same name, which sees the
holder's term (``on_locked``) and waits for the wake-up. :data:`SETTLE` after the
follower reported, the holder is told to go: its hook reads the clock, calls
``stop()`` and returns, so the term ends (the release publishes on the wake channel);
the follower's leader takes a new term, records it, and its ``on_acquired`` reads the
clock (and stops that leader). Latency = the difference of the two readings
(``time.monotonic()``, one system-wide clock on Linux).

Each pairing of sides is measured: sync to sync, asyncio to asyncio, and the two mixed
ones (one leadership for both kinds of process).
"""

from __future__ import annotations

import asyncio
import time
import uuid
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from typing import Any

import redis
import redis.asyncio

import lockworker
import lockworker.aio
from benchmarks.common import median, quiet_logging, reap, spawn

LEASE = 5.0
"""Seconds: the leaders' lease (long enough never to expire in a trial)."""

SETTLE = 0.05
"""Seconds between the follower's report and the go, so that the follower is waiting
(subscribed, its timer set) when the handover starts."""

REPLY_TIMEOUT = 30.0

SYNC, ASYNC = "Leader", "aio.Leader"

PAIRS = ((SYNC, SYNC), (ASYNC, ASYNC), (SYNC, ASYNC), (ASYNC, SYNC))
"""(the holder's side, the follower's side) of each measured pairing."""


@dataclass
class LeaderHandover:
    holder: str
    follower: str
    latencies: list[float] = field(default_factory=list)

    @property
    def kind(self) -> str:
        return f"{self.holder} -> {self.follower}"

    @property
    def mixed(self) -> bool:
        return self.holder != self.follower

    @property
    def median(self) -> float:
        return median(self.latencies)


# -- child processes ------------------------------------------------------------------


class _Child:
    """One benchmark process: leads or follows one leader name per command."""

    def __init__(self, port: int, pipe: Connection) -> None:
        self.port = port
        self.pipe = pipe
        self.client = redis.Redis(host="127.0.0.1", port=port, socket_timeout=REPLY_TIMEOUT)

    def report(self, *message: Any) -> None:
        self.pipe.send(message)

    def go(self) -> None:
        """Wait for the parent's go (the holder only)."""
        if self.pipe.recv() != "go":
            raise RuntimeError("expected the go")

    # The hooks: the holder reports and waits for the go, then stops; the follower
    # reports what it sees, and stops once elected. ``times`` gets the clock readings.

    def sync_leader(self, name: str, leading: bool, times: list[float]) -> None:
        leader: lockworker.Leader

        def hold(_term: lockworker.Term) -> None:
            self.report("leading")
            self.go()
            times.append(time.monotonic())
            leader.stop()

        def elected(_term: lockworker.Term) -> None:
            times.append(time.monotonic())
            leader.stop()

        leader = lockworker.Leader(
            self.client, name=name, lock_timeout=LEASE, handle_signals=False,
            on_acquired=hold if leading else elected,
            on_locked=lambda _term: self.report("following"),
        )
        leader.run()

    async def async_leader(self, name: str, leading: bool, times: list[float]) -> None:
        client = redis.asyncio.Redis(
            host="127.0.0.1", port=self.port, socket_timeout=REPLY_TIMEOUT
        )
        leader: lockworker.aio.Leader

        async def hold(_term: lockworker.aio.AsyncTerm) -> None:
            self.report("leading")
            await asyncio.to_thread(self.go)  # the loop renews the lease meanwhile
            times.append(time.monotonic())
            leader.stop()

        async def elected(_term: lockworker.aio.AsyncTerm) -> None:
            times.append(time.monotonic())
            leader.stop()

        leader = lockworker.aio.Leader(
            client, name=name, lock_timeout=LEASE, handle_signals=False,
            on_acquired=hold if leading else elected,
            on_locked=lambda _term: self.report("following"),
        )
        try:
            await leader.run()
        finally:
            await client.aclose()

    def serve(self) -> None:
        while True:
            message = self.pipe.recv()
            if message is None:
                return
            op, side, name = message
            times: list[float] = []
            try:
                if side == SYNC:
                    self.sync_leader(name, op == "lead", times)
                else:
                    asyncio.run(self.async_leader(name, op == "lead", times))
                if not times:
                    raise RuntimeError(f"the {side} never led")
                self.report("done", times[0])
            except Exception as exc:  # reported to the parent, which fails the run
                self.report("error", f"{type(exc).__name__}: {exc}")


def child_main(port: int, pipe: Connection) -> None:
    """A long-lived process: runs ``(op, side, name)`` commands until ``None``."""
    quiet_logging(to_devnull=True)
    child = _Child(port, pipe)
    try:
        child.serve()
    finally:
        child.client.close()


# -- the measurement --------------------------------------------------------------------


def _expect(pipe: Connection, what: str) -> tuple[Any, ...]:
    if not pipe.poll(REPLY_TIMEOUT):
        raise RuntimeError(f"leader handover: no {what!r} within {REPLY_TIMEOUT:g} s")
    reply: tuple[Any, ...] = pipe.recv()
    if reply[0] != what:
        raise RuntimeError(f"leader handover: expected {what!r}, got {reply!r}")
    return reply


def trial(holder: Connection, follower: Connection, result: LeaderHandover) -> None:
    """One handover from ``holder``'s leader to ``follower``'s, on a fresh name."""
    name = f"bench-leader-{uuid.uuid4().hex[:10]}"
    holder.send(("lead", result.holder, name))
    _expect(holder, "leading")
    follower.send(("follow", result.follower, name))
    _expect(follower, "following")
    time.sleep(SETTLE)
    holder.send("go")
    stopped = _expect(holder, "done")[1]
    elected = _expect(follower, "done")[1]
    result.latencies.append(elected - stopped)


def run(port: int, trials: int) -> list[LeaderHandover]:
    """``trials`` handovers of each pairing, interleaved, on two long-lived processes."""
    results = [LeaderHandover(holder, follower) for holder, follower in PAIRS]
    procs, pipes = spawn(child_main, [(port,), (port,)])
    try:
        for _ in range(trials):
            for result in results:
                trial(pipes[0], pipes[1], result)
    finally:
        for pipe in pipes:
            pipe.send(None)
        reap(procs, pipes)
    return results
