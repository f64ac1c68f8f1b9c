"""A process's wake-up hub whose connection breaks while nobody waits closes at once: it
does not reconnect for channels that only linger (a server gone for good would have it
reconnect forever), sync and asyncio. A later waiter opens a new one."""

from __future__ import annotations

import asyncio
import threading

import redis
import redis.asyncio as aredis
from helpers import wait_for
from redis.asyncio.retry import Retry as AsyncRetry
from redis.backoff import NoBackoff
from redis.retry import Retry

from lockworker.aio import wake as aio_wake
from lockworker.runtime import wake
from lockworker.testing.server import RedisServer

SOON = wake.LINGER + wake.IDLE_CLOSE - 2.0
"""Well before the channel's linger and the hub's idle time would have closed it."""


def test_a_hub_whose_server_is_gone_closes_once_nobody_listens() -> None:
    server = RedisServer().start()
    client = redis.Redis(port=server.port, retry=Retry(NoBackoff(), 0), socket_timeout=1.0)
    hub = wake.hub_for(client)
    try:
        with hub.listen(client, "wake-idle"):
            reader = hub._thread
            assert reader is not None and reader.is_alive()
            server.stop()  # gone for good, with a channel still subscribed
        wait_for(lambda: not reader.is_alive(), timeout=SOON)
        server.start(port=server.port)  # back: a new waiter listens through a new hub
        with hub.listen(client, "wake-idle") as event:
            client.publish("wake-idle", "hello")
            wait_for(event.is_set, timeout=10)
    finally:
        hub.close()
        client.close()
        server.close()


def test_an_asyncio_hub_whose_server_is_gone_closes_once_nobody_listens() -> None:
    server = RedisServer().start()
    ended = threading.Event()

    async def scenario() -> None:
        client = aredis.Redis(
            port=server.port, retry=AsyncRetry(NoBackoff(), 0), socket_timeout=1.0
        )
        hub = aio_wake.hub_for(client)
        try:
            async with hub.listen("wake-idle"):
                reader = hub._task
                assert reader is not None and not reader.done()
                server.stop()
            await asyncio.wait_for(asyncio.shield(reader), timeout=SOON)
            ended.set()
            server.start(port=server.port)
            async with hub.listen("wake-idle") as event:
                await client.publish("wake-idle", "hello")
                await asyncio.wait_for(event.wait(), timeout=10)
        finally:
            await client.aclose()

    try:
        asyncio.run(scenario())
    finally:
        server.close()
    assert ended.is_set()
