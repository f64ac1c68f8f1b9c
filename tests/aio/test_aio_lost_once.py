"""The asyncio twins: ``on_lost`` exactly once when a term or an attempt ends other than
by a clean resignation, never after one, and it has run when the term or the attempt
is over. The same hand-driven scenarios as tests/integration/test_lost_once.py: a
FakeClock, and a heartbeat that starts no task (the test takes its beats)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
import redis.asyncio as aredis

from lockworker import Job, Outcome, aio
from lockworker.aio.lease import AsyncHeartbeat
from lockworker.daemons.leader import leader_keys
from lockworker.model.keys import JobKeys
from lockworker.runtime.lease import EXPIRED_IN_HOOK, REFUSED_AT_END, Lease
from lockworker.testing import FakeClock, capture_events
from lockworker.testing.server import RedisServer

LEASE = 3.0
Script = Callable[[Any, Lease, FakeClock, AsyncHeartbeat, Any], Awaitable[None]]


class ManualHeartbeat(AsyncHeartbeat):
    """Starts no renewal task: the test beats by hand."""

    def hold(self, lease: Lease) -> None:
        return None


class Hand:
    def __init__(self, script: Script) -> None:
        self.script = script
        self.lost: list[Any] = []
        self.calls = 0

    async def on_lost(self, handle: Any) -> None:
        await asyncio.sleep(0)  # a real task: it must have run when the run is over
        self.lost.append(handle)


def lead(server: RedisServer, name: str, hand: Hand) -> list[Any]:
    """One term of an aio.Leader, ``hand.script`` run in it; the events logged."""

    async def scenario() -> list[Any]:
        client = aredis.Redis(host="127.0.0.1", port=server.port)
        clock = FakeClock()
        heartbeat = ManualHeartbeat(clock, LEASE / 3)

        async def on_acquired(term: aio.AsyncTerm) -> None:
            hand.calls += 1
            assert term._lease is not None
            try:
                await hand.script(term, term._lease, clock, heartbeat, client)
            finally:
                leader.stop()

        leader = aio.Leader(
            client, name=name, lock_timeout=LEASE, clock=clock, handle_signals=False,
            on_acquired=on_acquired, on_lost=hand.on_lost,
        )
        leader._heartbeat = heartbeat
        with capture_events() as logged:
            await asyncio.wait_for(leader.run(), 10)
        await client.aclose()
        return logged

    return asyncio.run(scenario())


def work(server: RedisServer, namespace: str, hand: Hand) -> tuple[Outcome, list[Any]]:
    """``process`` one job with an aio.Worker, ``hand.script`` run in its first attempt."""

    async def scenario() -> tuple[Outcome, list[Any]]:
        client = aredis.Redis(host="127.0.0.1", port=server.port)
        clock = FakeClock()
        heartbeat = ManualHeartbeat(clock, LEASE / 3)

        async def on_acquired(job: Job) -> None:
            hand.calls += 1
            assert job._lease is not None
            await hand.script(job, job._lease, clock, heartbeat, client)
            # A refused attempt steps back for a time measured on the FakeClock, which
            # no asyncio wait moves: the run ends there instead of competing again.
            worker.stop()

        worker = aio.Worker(
            client, namespace=namespace, lock_timeout=LEASE, clock=clock,
            handle_signals=False, on_acquired=on_acquired, on_lost=hand.on_lost,
        )
        worker._heartbeat = heartbeat
        async with worker:
            with capture_events() as logged:
                outcome = await asyncio.wait_for(worker.process("job"), 10)
        await client.aclose()
        return outcome, logged

    return asyncio.run(scenario())


def losses(logged: list[Any], event: str) -> list[str]:
    return [e["reason"] for e in logged if e["event"] == event]


async def paused(handle: Any, lease: Lease, clock: FakeClock, hb: AsyncHeartbeat,
                 client: Any) -> None:
    """A pause past the lease, noticed by the hook before the heartbeat says so."""
    clock.advance(LEASE * 2)
    assert handle.lost and not lease.lost


async def paused_and_beaten(handle: Any, lease: Lease, clock: FakeClock, hb: AsyncHeartbeat,
                            client: Any) -> None:
    """The same pause, reported by the heartbeat before the hook returns."""
    clock.advance(LEASE * 2)
    await hb.beat(lease)
    assert lease.lost


async def in_time(handle: Any, lease: Lease, clock: FakeClock, hb: AsyncHeartbeat,
                  client: Any) -> None:
    clock.advance(LEASE / 2)
    await hb.beat(lease)


def taken(lock_key: str, *, renewal_first: bool) -> Script:
    """Another hand deletes the lease; with ``renewal_first`` a renewal is refused."""

    async def script(handle: Any, lease: Lease, clock: FakeClock, hb: AsyncHeartbeat,
                     client: Any) -> None:
        await client.delete(lock_key)
        if renewal_first:
            clock.advance(LEASE / 3)
            await hb.beat(lease)
            assert handle.lost

    return script


EXPIRED_BY_HEARTBEAT = "lease expired before it could be renewed (process paused?)"
TAKEN = "lease taken over or expired on the server"


@pytest.mark.parametrize(("script", "reason"), [
    (paused, EXPIRED_IN_HOOK), (paused_and_beaten, EXPIRED_BY_HEARTBEAT),
], ids=["noticed-by-the-hook", "noticed-by-both"])
def test_a_term_that_ran_out_is_reported_once(
    redis_server: RedisServer, namespace: str, script: Script, reason: str
) -> None:
    hand = Hand(script)
    logged = lead(redis_server, namespace, hand)
    assert len(hand.lost) == 1 and hand.lost[0].lost
    assert losses(logged, "leader.lost") == [reason]


@pytest.mark.parametrize(("renewal_first", "reason"), [
    (True, TAKEN), (False, REFUSED_AT_END),
], ids=["renewal", "resignation"])
def test_a_term_taken_away_is_reported_once(
    redis_server: RedisServer, namespace: str, renewal_first: bool, reason: str
) -> None:
    hand = Hand(taken(leader_keys(namespace).lock, renewal_first=renewal_first))
    logged = lead(redis_server, namespace, hand)
    assert len(hand.lost) == 1
    assert losses(logged, "leader.lost") == [reason]


def test_a_clean_resignation_never_calls_on_lost(
    redis_server: RedisServer, namespace: str
) -> None:
    hand = Hand(in_time)
    logged = lead(redis_server, namespace, hand)
    assert hand.calls == 1 and hand.lost == [] and losses(logged, "leader.lost") == []
    assert [e for e in logged if e["event"] == "leader.resigned"]


@pytest.mark.parametrize(("script", "reason"), [
    (paused, EXPIRED_IN_HOOK), (paused_and_beaten, EXPIRED_BY_HEARTBEAT),
], ids=["noticed-by-the-hook", "noticed-by-both"])
def test_a_job_lease_that_ran_out_is_reported_once(
    redis_server: RedisServer, namespace: str, script: Script, reason: str
) -> None:
    hand = Hand(script)
    _, logged = work(redis_server, namespace, hand)
    assert len(hand.lost) == 1
    assert losses(logged, "lease.lost") == [reason]


@pytest.mark.parametrize(("renewal_first", "reason"), [
    (True, TAKEN), (False, REFUSED_AT_END),
], ids=["renewal", "completion"])
def test_a_job_lease_taken_away_is_reported_once(
    redis_server: RedisServer, namespace: str, renewal_first: bool, reason: str
) -> None:
    hand = Hand(taken(JobKeys.of(namespace, "job").lock, renewal_first=renewal_first))
    outcome, logged = work(redis_server, namespace, hand)
    assert outcome is Outcome.STOPPED and hand.calls == 1
    assert len(hand.lost) == 1 and hand.lost[0].attempt == 1
    assert losses(logged, "lease.lost") == [reason]


def test_a_job_done_in_time_never_calls_on_lost(
    redis_server: RedisServer, namespace: str
) -> None:
    hand = Hand(in_time)
    outcome, logged = work(redis_server, namespace, hand)
    assert outcome is Outcome.DONE and hand.lost == [] and losses(logged, "lease.lost") == []
