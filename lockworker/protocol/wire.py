"""Commands on a pooled connection, without redis-py's per-command client layer.

Every step of a lock and of a job is one script call, and a cycle makes two. redis-py
8's ``Redis.execute_command`` wraps each command in a retry closure, observability
records, an event dispatch and a second packing pass (it re-checks every argument's
type before hiredis packs them); on this machine that is about 12 µs of the client's
CPU per command (an uncontended ``Lock`` cycle makes two: a fifth of its client CPU),
measured against the same ``EVALSHA`` written on a connection of the same pool.
:func:`exchange` does what is left: it takes a connection from the client's own pool,
packs its commands in one pass (:mod:`lockworker.protocol.resp`, the same bytes),
writes them at once, reads each reply in its place and gives the connection back; the
connection's own health check, decoding and error replies are redis-py's.

What is not applied is redis-py's client layer: its per-command observability hooks,
and its retry of a broken connection. A call that fails on a broken connection is not
retried here; :func:`pipelined`, through which every caller sends (a script call,
a batch), sends it again through ``execute_command`` or a pipeline, so the client's
own retry policy still governs failures. Any failure other than an error reply drops
the connection before it goes back to the pool, so no later command reads a stale
reply. A cluster client, one bound
to a single connection, a pipeline, or a subclass with commands of its own takes
redis-py's path (:func:`direct` says which). :mod:`lockworker.aio.wire` is the asyncio
side, for batches.
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from typing import Any

import redis
from redis.exceptions import ResponseError

from lockworker.protocol import resp

_NAMELESS: dict[type, bool] = {}


def direct(client: Any) -> bool:
    """Whether ``client``'s commands are written here: a ``redis.Redis`` drawing
    connections from a pool (not a cluster client, not a single-connection client, not
    a pipeline), whose commands are redis-py's own: a subclass that overrides them (to
    trace or to change each command) sees every command through them, as before."""
    return (
        isinstance(client, redis.Redis)
        and type(client).execute_command is redis.Redis.execute_command
        and client.connection is None
    )


def exchange(client: redis.Redis, commands: Sequence[Sequence[Any]]) -> list[Any]:
    """Send ``commands`` in one write on a pooled connection of ``client``; each one's
    reply, an error reply as its ``ResponseError`` in its place (a pipeline's
    ``raise_on_error=False``). Replies are the server's, not redis-py's response
    callbacks' (a BLPOP's is a list, not a tuple)."""
    pool = client.connection_pool
    conn: Any = pool.get_connection() if nameless(pool) else pool.get_connection("EVALSHA")
    try:
        conn.send_packed_command([resp.packer(conn.encoder)(commands)])
        replies: list[Any] = []
        for _ in commands:
            try:
                replies.append(conn.read_response())
            except ResponseError as exc:  # read whole: the connection stays in step
                replies.append(exc)
        return replies
    except BaseException:
        conn.disconnect()
        raise
    finally:
        _give_back(pool, conn)


def pipelined(client: Any, commands: Sequence[Sequence[Any]]) -> list[Any]:
    """Each command's reply (an error reply in its place), all sent in one round trip:
    by :func:`exchange` on a plain client, else (and after its connection broke: sent
    again under the client's retry policy) as a redis-py pipeline, or one
    ``execute_command`` for one command (a cluster client routes it by its keys)."""
    if direct(client):
        try:
            return exchange(client, commands)
        except (redis.ConnectionError, redis.TimeoutError):
            pass
    if len(commands) == 1:  # one command: no pipeline to build
        try:
            return [client.execute_command(*commands[0])]
        except ResponseError as exc:
            return [exc]
    pipe = client.pipeline(transaction=False)
    for command in commands:
        pipe.execute_command(*command)
    return list(pipe.execute(raise_on_error=False))


def _give_back(pool: Any, conn: Any) -> None:
    moved = getattr(conn, "should_reconnect", None)  # redis-py 6 and later
    if moved is not None and moved():  # the server announced a move, as redis-py
        conn.disconnect()
    pool.release(conn)


def nameless(pool: Any) -> bool:
    """Whether ``pool.get_connection`` takes no command name: redis-py 5.3 and later
    (which warn when given one); earlier 5.x require one."""
    kind = type(pool)
    known = _NAMELESS.get(kind)
    if known is None:
        param = inspect.signature(kind.get_connection).parameters.get("command_name")
        known = _NAMELESS[kind] = param is None or param.default is not param.empty
    return known
