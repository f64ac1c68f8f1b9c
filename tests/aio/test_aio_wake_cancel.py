"""``asyncio.run`` ends at once after a program closes its client, wherever the wake-up
reader then is.

Closing the client disconnects the hub's pub/sub; its reader task reconnects at once and
is still there when ``asyncio.run`` cancels what is left. Before Python 3.12,
``asyncio.wait_for`` returns the result of an awaitable that finished as the awaiting
task was cancelled and drops the cancellation, and redis-py awaits one for every write
(the reconnect's HELLO, for one): a cancel landing there was lost, and the reader read
on until it closed itself for idleness, about 7 s later.
"""

from __future__ import annotations

import asyncio
import time

import pytest
import redis.asyncio as aredis

from lockworker import aio
from lockworker.testing.server import RedisServer


@pytest.mark.parametrize("turns", range(8))
def test_asyncio_run_ends_at_once_after_a_leader_and_its_client_are_closed(
    redis_server: RedisServer, namespace: str, turns: int
) -> None:
    async def main() -> float:
        client = aredis.Redis.from_url(
            redis_server.url, socket_timeout=0.5, socket_connect_timeout=0.5
        )

        async def lead(term: aio.AsyncTerm) -> None:
            await term.wait(0.01)

        leader = aio.Leader(
            client, name=namespace, lock_timeout=0.5, handle_signals=False, on_acquired=lead
        )
        asyncio.get_running_loop().call_later(0.1, leader.stop)
        await leader.run()
        await client.aclose()
        for _ in range(turns):  # the final cancel lands at another step of the reconnect
            await asyncio.sleep(0)
        return time.monotonic()

    returned = asyncio.run(main())
    assert time.monotonic() - returned < 1.0


CLASHES = {
    "second reader": RuntimeError(
        "read() called while another coroutine is already waiting for incoming data"
    ),
    "stream dropped": AttributeError("'NoneType' object has no attribute 'writelines'"),
}


@pytest.mark.parametrize("clash", CLASHES.values(), ids=CLASHES.keys())
def test_a_subscribe_that_clashes_with_the_readers_read_is_left_to_the_reader(
    redis_server: RedisServer, clash: Exception
) -> None:
    """After a server restart, a listen's SUBSCRIBE reconnects the shared pub/sub while
    the reader task uses the same connection: asyncio refuses the second read with a
    RuntimeError, or the reader drops the connection while the subscribe writes its
    handshake, and redis-py writes to the stream it no longer has (an AttributeError,
    seen in the fault battery). Either used to escape from ``listen`` (and from
    ``Worker.process``, ending a daemon); now the caller re-reads at once and the
    reader subscribes the channel, which a PUBLISH then reaches."""
    from lockworker.aio.wake import hub_for

    async def scenario() -> bool:
        client = aredis.Redis.from_url(redis_server.url)
        hub = hub_for(client)
        clashes = 1
        real = client.pubsub

        def pubsub() -> object:
            ps = real()
            subscribe = ps.subscribe

            async def clashing(*channels: str) -> None:
                nonlocal clashes
                if clashes:
                    clashes -= 1
                    raise clash
                await subscribe(*channels)

            ps.subscribe = clashing  # type: ignore[method-assign]
            return ps

        client.pubsub = pubsub  # type: ignore[method-assign]
        async with hub.listen("clash-channel") as event:
            assert event.is_set()  # not listening yet: the caller re-reads
            event.clear()
            deadline = time.monotonic() + 5
            while not hub.subscribed("clash-channel"):  # the reader subscribed it
                assert time.monotonic() < deadline
                await asyncio.sleep(0.01)
            await client.publish("clash-channel", "done")
            woken = await asyncio.wait_for(event.wait(), 5)
        await client.aclose()
        return woken

    assert asyncio.run(scenario())


def test_an_attribute_error_of_another_kind_in_a_subscribe_is_raised(
    redis_server: RedisServer,
) -> None:
    """Only the dropped stream is a clash: any other AttributeError is a bug, raised."""
    from lockworker.aio.wake import hub_for

    async def scenario() -> None:
        client = aredis.Redis.from_url(redis_server.url)
        real = client.pubsub

        def pubsub() -> object:
            ps = real()

            async def broken(*channels: str) -> None:
                raise AttributeError("'Connection' object has no attribute 'nope'")

            ps.subscribe = broken  # type: ignore[method-assign]
            return ps

        client.pubsub = pubsub  # type: ignore[method-assign]
        try:
            with pytest.raises(AttributeError, match="nope"):
                async with hub_for(client).listen("other-channel"):
                    pass
        finally:
            await client.aclose()

    asyncio.run(scenario())
