"""One Lua script, called in one command: EVALSHA, and EVAL of its source on NOSCRIPT.

redis-py's ``Script`` objects are bound to a client and, on every call, look at the
client's type and re-pack their arguments; a lock step pays that on its hot path
twice per cycle. A :class:`LuaScript` is built once per process (its SHA1 computed at
import) and shared by every object on every client: a call is one command. On a plain
pooled client it is written on a connection of the pool (:mod:`lockworker.protocol.wire`,
without redis-py's per-command client layer); other clients get one
``execute_command``, and cluster clients route it by its keys as they route ``Script``
calls. :meth:`LuaScript.acall` is the same call awaited on a ``redis.asyncio`` client:
one source, one SHA, both sides.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any

import redis
from redis.exceptions import NoScriptError, ResponseError

from lockworker.protocol import wire

_ASYNC_CLUSTER = "redis.asyncio.cluster"
"""The module of redis-py's asyncio ``RedisCluster`` (compared, not imported: the sync
side should not pay for importing redis.asyncio)."""


async def ready(client: Any) -> None:
    """Make sure an asyncio ``RedisCluster`` is initialized before it is used.

    redis-py 8.1's asyncio cluster client breaks when many tasks make their first
    commands at once on a new client ("'NoneType' object has no attribute
    'writelines'"); awaiting ``initialize()`` first, which returns at once once done,
    avoids it. Every asyncio call into a cluster of lockworker passes here.
    """
    if type(client).__module__ == _ASYNC_CLUSTER:
        await client.initialize()


class LuaScript:
    """A Lua source and its SHA1; call it with a client, its keys and its arguments."""

    __slots__ = ("sha", "source")

    def __init__(self, source: str) -> None:
        self.source = source
        self.sha = hashlib.sha1(source.encode("utf-8")).hexdigest()

    def __call__(
        self, client: redis.Redis, keys: Sequence[str], args: Sequence[Any], node: Any = None
    ) -> Any:
        """Run the script; ``node``: on a cluster, the node to send it to (a script
        over keys of several slots of that node), instead of the node of its keys."""
        command = ("EVALSHA", self.sha, len(keys), *keys, *args)
        try:
            if node is None:  # written at once on a plain client (wire.pipelined)
                reply = wire.pipelined(client, [command])[0]
                if isinstance(reply, ResponseError):
                    raise reply
                return reply
            return client.execute_command(  # type: ignore[no-untyped-call]
                *command, target_nodes=node
            )
        except NoScriptError:
            # The server's script cache is empty (a restart, SCRIPT FLUSH, a promoted
            # replica): send the source, routed like the EVALSHA, which caches it there.
            # Not SCRIPT LOAD: on a cluster that goes to every master the client knows,
            # and after a failover that may be the crashed one, which fails the call.
            return self.evaluate(client, keys, args, node)

    def evaluate(
        self, client: redis.Redis, keys: Sequence[str], args: Sequence[Any], node: Any = None
    ) -> Any:
        """Run the script by its source (EVAL), routed like :meth:`__call__`: for a
        server whose script cache lacks it, which then caches it."""
        target = {} if node is None else {"target_nodes": node}
        return client.execute_command(  # type: ignore[no-untyped-call]
            "EVAL", self.source, len(keys), *keys, *args, **target
        )

    async def acall(
        self, client: Any, keys: Sequence[str], args: Sequence[Any], node: Any = None
    ) -> Any:
        """The same call on a ``redis.asyncio`` client (single server or cluster).

        On NOSCRIPT it sends the source once with EVAL, routed like the EVALSHA, which
        also caches the script on that server. Not SCRIPT LOAD: on an asyncio cluster
        client that goes to every node, and many tasks doing it at once on fresh
        connections break redis-py's asyncio cluster connections (measured with
        redis-py 8.1: "'NoneType' object has no attribute 'writelines'").
        """
        target = {} if node is None else {"target_nodes": node}
        if type(client).__module__ == _ASYNC_CLUSTER:
            await ready(client)
        try:
            return await client.execute_command(
                "EVALSHA", self.sha, len(keys), *keys, *args, **target
            )
        except NoScriptError:
            return await client.execute_command(
                "EVAL", self.source, len(keys), *keys, *args, **target
            )

    def __repr__(self) -> str:
        return f"<LuaScript {self.sha[:8]}>"
