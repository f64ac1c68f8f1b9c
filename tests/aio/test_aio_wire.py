"""lockworker.aio.wire: an asyncio batch written at once on a pooled connection, its
replies read in place, and no connection given back with a reply still unread."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
import redis
import redis.asyncio as aredis
from redis.exceptions import ResponseError

from lockworker.aio import batcher as aio_batcher
from lockworker.aio import wire
from lockworker.model.keys import JobKeys
from lockworker.model.state import Grant
from lockworker.protocol import script
from lockworker.protocol.many import many
from lockworker.protocol.script import acquire_step
from lockworker.testing.server import RedisServer
from tests.helpers import until, who


class Counted(aredis.Connection):
    """A connection that counts its writes and redis-py's packing."""

    writes = 0
    packed = 0

    def pack_command(self, *args: Any) -> Any:
        Counted.packed += 1
        return super().pack_command(*args)

    async def send_packed_command(self, command: Any, check_health: bool = True) -> None:
        await super().send_packed_command(command, check_health)
        Counted.writes += 1


def one_connection(server: RedisServer, **options: Any) -> aredis.Redis:
    """A client whose pool holds one connection, so every command reuses it."""
    pool = aredis.BlockingConnectionPool(
        host=server.connect_host, port=server.port, max_connections=1,
        connection_class=Counted, **options,
    )
    return aredis.Redis(connection_pool=pool)


def test_each_reply_comes_back_in_its_place_an_error_reply_included(
    redis_server: RedisServer, namespace: str
) -> None:
    async def scenario() -> tuple[list[Any], Any]:
        client = one_connection(redis_server, decode_responses=True)
        try:
            replies = await wire.exchange(client, [
                ("EVAL", "return ARGV[1]", 0, "first"),
                ("EVAL", "return redis.error_reply('REFUSED no')", 0),
                ("EVAL", "return {1, 'two'}", 0),
            ])
            return replies, await client.echo("after")
        finally:
            await client.aclose()

    replies, after = asyncio.run(scenario())
    assert replies[0] == "first" and replies[2] == [1, "two"]
    assert isinstance(replies[1], ResponseError) and "REFUSED" in str(replies[1])
    assert after == "after"  # the same connection, its replies all read


def test_a_cancelled_exchange_gives_back_no_connection_with_a_reply_unread(
    redis_server: RedisServer,
) -> None:
    """Cancelled while the server still runs its command: the connection is dropped,
    so the next command (on the pool's only connection) reads its own reply, not the
    late one. (redis-py's read drops it too; the exchange also covers a cancellation
    between its write and its read.)"""

    watcher = redis.Redis.from_url(redis_server.url)

    def blocked() -> bool:  # the server holds the command: its reply is not due yet
        return any(c["cmd"] == "blpop" for c in watcher.client_list())

    async def scenario() -> Any:
        client = one_connection(redis_server)
        try:
            exchange = asyncio.ensure_future(
                wire.exchange(client, [("BLPOP", "nothing", 5)])  # a reply 5 s late
            )
            await until(blocked)
            exchange.cancel()
            with pytest.raises(asyncio.CancelledError):
                await exchange
            return await asyncio.wait_for(client.echo("mine"), 2)
        finally:
            await client.aclose()

    try:
        assert asyncio.run(scenario()) == b"mine"
    finally:
        watcher.close()


def test_a_batch_of_steps_is_one_write_packed_without_redis_py(
    redis_server: RedisServer, namespace: str
) -> None:
    keys = [JobKeys.of(namespace, f"j{i}") for i in range(20)]
    steps = [acquire_step(k, who("me"), 10_000, 3, 60_000) for k in keys]

    async def scenario() -> list[Any]:
        client = one_connection(redis_server)
        try:
            # The looped script cached first (NOSCRIPT would add its reload), and
            # the connection's handshake done: only the batch is counted.
            await client.script_load(many(script._ACQUIRE).source)
            Counted.writes = Counted.packed = 0
            return await aio_batcher.send(client, steps)
        finally:
            await client.aclose()

    results = asyncio.run(scenario())
    assert all(isinstance(r, Grant) and r.attempt == 1 for r in results)
    assert (Counted.writes, Counted.packed) == (1, 0)


class Traced(aredis.Redis):
    """A client that sees each command itself (as a tracing wrapper would)."""

    async def execute_command(self, *args: Any, **options: Any) -> Any:
        return await super().execute_command(*args, **options)


def test_only_a_plain_pooled_client_is_written_to_directly(redis_server: RedisServer) -> None:
    """A subclass that overrides its commands keeps seeing every command; a client
    bound to one connection keeps redis-py's locking of it."""

    async def scenario() -> list[bool]:
        url = redis_server.url
        clients = [
            aredis.Redis.from_url(url),
            Traced.from_url(url),
            aredis.Redis.from_url(url, single_connection_client=True),
        ]
        try:
            return [wire.direct(c) for c in clients] + [wire.direct(object())]
        finally:
            for c in clients:
                await c.aclose()

    assert asyncio.run(scenario()) == [True, False, False, False]


def test_a_traced_client_still_sees_every_step(
    redis_server: RedisServer, namespace: str
) -> None:
    seen: list[str] = []

    class Tracing(aredis.Redis):
        async def execute_command(self, *args: Any, **options: Any) -> Any:
            seen.append(str(args[0]))
            return await super().execute_command(*args, **options)

    keys = [JobKeys.of(namespace, f"j{i}") for i in range(3)]

    async def scenario() -> list[Any]:
        client = Tracing.from_url(redis_server.url)
        try:
            return [await aio_batcher.send(client, [acquire_step(k, who("me"), 10_000, 3, 60_000)])
                    for k in keys]
        finally:
            await client.aclose()

    asyncio.run(scenario())
    assert seen.count("EVALSHA") + seen.count("EVAL") >= 3
