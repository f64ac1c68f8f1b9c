"""lockworker.protocol.wire: a script call written on a pooled connection without
redis-py's client layer, its reply read whole, no connection given back with a reply
unread, and a broken connection sent again under the client's own retry policy."""

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


def test_a_script_call_is_one_write_packed_without_redis_py(client: Any, namespace: str) -> None:
    client.script_load(COUNT.source)
    Counted.writes = Counted.packed = 0
    assert [COUNT(client, [f"{namespace}:n"], []) for _ in range(3)] == [1, 2, 3]
    assert (Counted.writes, Counted.packed) == (3, 0)


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


def test_a_read_interrupted_gives_back_no_connection_with_a_reply_unread(
    client: Any, namespace: str
) -> None:
    """The command went out, its reply is on its way, and the caller is interrupted:
    the connection is dropped, so the next command reads its own reply."""
    Counted.fail_next_read = KeyboardInterrupt()
    with pytest.raises(KeyboardInterrupt):
        COUNT(client, [f"{namespace}:n"], [])
    assert client.echo("mine") == b"mine"


def test_a_broken_connection_is_sent_again_through_redis_py(
    client: Any, namespace: str
) -> None:
    """A connection that breaks mid-call: the call goes again through
    ``execute_command``, whose retry policy (the client's) governs it, as before."""
    Counted.lose_next_reply = redis.ConnectionError("broken mid-read")
    assert COUNT(client, [f"{namespace}:n"], []) == 2  # the lost reply's run, then ours
    assert client.echo("after") == b"after"


class Traced(redis.Redis):
    """A client that sees each command itself (as a tracing wrapper would)."""

    seen: ClassVar[list[str]] = []

    def execute_command(self, *args: Any, **options: Any) -> Any:
        Traced.seen.append(str(args[0]))
        return super().execute_command(*args, **options)


def test_only_a_plain_pooled_client_is_written_to_directly(redis_server: RedisServer) -> None:
    """A subclass that overrides its commands keeps seeing every command; a client
    bound to one connection keeps redis-py's locking of it; a pipeline buffers."""
    url = redis_server.url
    plain = redis.Redis.from_url(url)
    clients = [
        plain,
        Traced.from_url(url),
        redis.Redis.from_url(url, single_connection_client=True),
        plain.pipeline(),
        object(),
    ]
    try:
        assert [wire.direct(c) for c in clients] == [True, False, False, False, False]
    finally:
        for c in clients[:3]:
            c.close()  # type: ignore[attr-defined]


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


def test_commands_written_at_once_reply_in_their_places(client: Any, namespace: str) -> None:
    key = f"{namespace}:list"
    client.rpush(key, "x")
    client.ping()
    Counted.writes = Counted.packed = 0
    replies = wire.exchange(client, [
        ("EVAL", "return ARGV[1]", 0, "first"),
        ("INCR", key),  # WRONGTYPE: its error in its place
        ("BLPOP", key, 1),
    ])
    assert replies[0] == b"first" and replies[2] == [key.encode(), b"x"]
    assert isinstance(replies[1], ResponseError) and "WRONGTYPE" in str(replies[1])
    assert (Counted.writes, Counted.packed) == (1, 0)
    assert client.echo("after") == b"after"  # the pool's only connection, read whole


@pytest.mark.parametrize("kind", ["plain", "traced", "broken"])
def test_pipelined_commands_answer_alike_on_every_path(
    redis_server: RedisServer, client: Any, namespace: str, kind: str
) -> None:
    """Written at once (plain), as redis-py's pipeline (a traced client), or written
    at once, its connection broken after the server ran them, then as a pipeline."""
    key = f"{namespace}:n"
    if kind == "broken":
        Counted.lose_next_reply = redis.ConnectionError("broken mid-read")
        target = client
    else:
        target = client if kind == "plain" else Traced.from_url(redis_server.url)
    try:
        replies = wire.pipelined(target, [("INCR", key), ("LPUSH", key, "x"), ("INCR", key)])
        last = wire.pipelined(target, [("GET", key)])
    finally:
        if target is not client:
            target.close()
    first = 3 if kind == "broken" else 1  # the lost round trip's two INCRs ran already
    assert (replies[0], replies[2]) == (first, first + 1)
    assert isinstance(replies[1], ResponseError)
    assert last == [str(first + 1).encode()]
