"""The asyncio heartbeat (lockworker.aio.lease.AsyncHeartbeat): one keeper task for
every held lease, each renewal in a task of its own, so a slow one holds up no other."""

from __future__ import annotations

import asyncio
import collections

from lockworker.aio.lease import AsyncHeartbeat
from lockworker.clock import SystemClock
from lockworker.runtime.lease import Lease
from tests.helpers import until

LEASE = 0.15
"""Seconds: renewed every 0.05 s."""


def keepers() -> list[asyncio.Task[object]]:
    return [t for t in asyncio.all_tasks() if t.get_name() == "lockworker-heartbeat"]


def test_one_keeper_renews_every_lease_and_a_slow_renewal_holds_up_no_other() -> None:
    clock = SystemClock()
    renewed: collections.Counter[int] = collections.Counter()
    stuck = asyncio.Event()

    async def scenario() -> None:
        heartbeat = AsyncHeartbeat(clock, LEASE / 3)

        def renewer(i: int) -> object:
            async def renew(_deadline: float) -> bool:
                renewed[i] += 1
                if i == 0:
                    await stuck.wait()  # the first lease's renewal never answers
                return True
            return renew

        leases = [Lease.granted(renewer(i), LEASE, clock.monotonic()) for i in range(20)]
        for lease in leases:
            heartbeat.hold(lease)
        assert len(keepers()) == 1
        await until(lambda: all(renewed[i] >= 4 for i in range(1, 20)), timeout=5)
        assert renewed[0] == 1  # in flight still: not sent twice
        assert len(keepers()) == 1
        for lease in leases:
            heartbeat.end(lease)
        await until(lambda: not keepers(), timeout=2)  # nothing held: the keeper ends
        again = Lease.granted(renewer(1), LEASE, clock.monotonic())
        before = renewed[1]
        heartbeat.hold(again)  # a new keeper for it
        await until(lambda: renewed[1] > before, timeout=2)
        heartbeat.end(again)
        await heartbeat.close()
        assert not keepers()

    asyncio.run(scenario())


def test_a_lease_held_due_sooner_than_the_keeper_sleeps_is_renewed_on_time() -> None:
    """The keeper sleeps until its earliest lease is due (a long one here); a shorter
    lease held meanwhile wakes it."""
    clock = SystemClock()
    renewed: list[float] = []

    async def scenario() -> None:
        heartbeat = AsyncHeartbeat(clock, 10.0)

        async def slow(_deadline: float) -> bool:
            return True

        async def fast(_deadline: float) -> bool:
            renewed.append(clock.monotonic())
            return True

        heartbeat.hold(Lease.granted(slow, 30.0, clock.monotonic()))
        await asyncio.sleep(0.01)  # the keeper now sleeps for about 10 s
        held_at = clock.monotonic()
        short = Lease.granted(fast, 0.3, held_at)
        heartbeat.hold(short)
        await until(lambda: renewed, timeout=3)
        assert renewed[0] - held_at < 0.1 + 0.5  # due a third of 0.3 s in, not 10 s
        await heartbeat.close()

    asyncio.run(scenario())
