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


def test_close_all_ends_every_reader_at_once_and_a_later_waiter_gets_a_new_hub(
    redis_server: RedisServer,
) -> None:
    clients = [redis_server.client() for _ in range(2)]
    hubs = [wake.hub_for(c) for c in clients]
    for hub, client in zip(hubs, clients, strict=True):
        with hub.listen(client, "wake-close-all"):
            pass  # the channel lingers: the reader would stay for seconds
    readers = [hub._thread for hub in hubs]
    assert all(r is not None and r.is_alive() for r in readers)
    ended = wake.close_all()
    assert set(ended) >= set(readers)
    for reader in ended:  # all told at once: one reader's turn, not one per hub
        reader.join(timeout=10)
        assert not reader.is_alive()
    fresh = wake.hub_for(clients[0])
    assert fresh is not hubs[0]
    with fresh.listen(clients[0], "wake-close-all") as event:
        clients[0].publish("wake-close-all", "hello")
        wait_for(event.is_set, timeout=10)
    fresh.close()
