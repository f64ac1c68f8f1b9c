"""lockworker.protocol.wire: commands sent through redis-py's own client (a pipeline,
or one command), each reply in its place, the connection left in step, and every
command seen by a client that traces its commands."""

from __future__ import annotations

from typing import Any, ClassVar

import pytest
import redis
from redis.exceptions import ResponseError

import lockworker
from lockworker.protocol import wire
from lockworker.protocol.luacall import LuaScript
from lockworker.testing.server import RedisServer


class Counted(redis.Connection):
    """A connection that counts its writes and redis-py's packing, and can be told to
    fail its next read: before reading (the reply still on its way), or after it (the
    reply lost)."""

    writes = 0
    packed = 0
    fail_next_read: BaseException | None = None
    lose_next_reply: BaseException | None = None

    def pack_command(self, *args: Any) -> Any:
        Counted.packed += 1
        return super().pack_command(*args)

    def send_packed_command(self, command: Any, check_health: bool = True) -> None:
        super().send_packed_command(command, check_health)
        Counted.writes += 1

    def read_response(self, *args: Any, **kwargs: Any) -> Any:
        failure, Counted.fail_next_read = Counted.fail_next_read, None
        if failure is not None:
            raise failure
        reply = super().read_response(*args, **kwargs)
        failure, Counted.lose_next_reply = Counted.lose_next_reply, None
        if failure is not None:
            raise failure
        return reply


@pytest.fixture
def client(redis_server: RedisServer) -> Any:
    """A client whose pool holds one connection, so every command reuses it."""
    Counted.writes = Counted.packed = 0
    Counted.fail_next_read = Counted.lose_next_reply = None
    pool = redis.BlockingConnectionPool(
        host=redis_server.connect_host, port=redis_server.port, max_connections=1,
        connection_class=Counted, timeout=2,
    )
    client = redis.Redis(connection_pool=pool)
    client.ping()  # connected: a failure armed by a test meets its call, not the handshake
    yield client
    client.close()
    pool.disconnect()


COUNT = LuaScript("return redis.call('INCR', KEYS[1])")


def test_an_error_reply_is_raised_and_the_connection_stays_in_step(
    client: Any, namespace: str
) -> None:
    key = f"{namespace}:list"
    client.rpush(key, "x")
    with pytest.raises(ResponseError, match="WRONGTYPE"):
        COUNT(client, [key], [])
    assert client.echo("after") == b"after"  # the pool's only connection, read whole


def test_an_uncached_script_is_sent_by_its_source(client: Any, namespace: str) -> None:
    script = LuaScript(f"return '{namespace}'")  # a source no server has cached
    assert script(client, [], []) == namespace.encode()
    assert client.script_exists(script.sha) == [True]


class Traced(redis.Redis):
    """A client that sees each command itself (as a tracing wrapper would)."""

    seen: ClassVar[list[str]] = []

    def execute_command(self, *args: Any, **options: Any) -> Any:
        Traced.seen.append(str(args[0]))
        return super().execute_command(*args, **options)


def test_a_traced_client_still_sees_every_step(
    redis_server: RedisServer, namespace: str
) -> None:
    Traced.seen = []
    client = Traced.from_url(redis_server.url)
    try:
        lock = lockworker.Lock(client, "traced", namespace=namespace)
        for _ in range(3):
            with lock:
                pass
    finally:
        client.close()
    assert Traced.seen.count("EVALSHA") + Traced.seen.count("EVAL") >= 6


@pytest.mark.parametrize("kind", ["plain", "traced"])
def test_pipelined_commands_answer_in_their_places(
    redis_server: RedisServer, client: Any, namespace: str, kind: str
) -> None:
    """Several commands in one round trip: each reply in its place, an error reply as
    its ``ResponseError`` (the others still run), on a plain client and on one that
    sees each command itself."""
    key = f"{namespace}:n"
    target = client if kind == "plain" else Traced.from_url(redis_server.url)
    try:
        replies = wire.pipelined(target, [("INCR", key), ("LPUSH", key, "x"), ("INCR", key)])
        last = wire.pipelined(target, [("GET", key)])
        alone = wire.pipelined(target, [("LPUSH", key, "x")])
    finally:
        if target is not client:
            target.close()
    assert (replies[0], replies[2]) == (1, 2)
    assert isinstance(replies[1], ResponseError)
    assert last == [b"2"]
    assert isinstance(alone[0], ResponseError) and "WRONGTYPE" in str(alone[0])
    assert client.echo("after") == b"after"  # the pool's only connection, in step
