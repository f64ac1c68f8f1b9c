"""A batch's commands written on one pooled connection at once, their replies read in turn.

The asyncio batcher's commands (:mod:`lockworker.aio.batcher`) are the largest a busy
stream sends: a looped step carries hundreds of arguments. redis-py's asyncio client
packs each argument in Python, growing one buffer by copying it per argument, which
made packing a sixth of an asyncio worker's CPU per job. On a plain ``redis.asyncio.Redis``
(a single server, or a master found through Sentinel) this module packs the batch in
one pass (:mod:`lockworker.protocol.resp`, hiredis when installed), writes it in one
write on a connection of the client's own pool, and reads one reply per command, as
redis-py's pipeline does:

- an error reply is returned in its command's place (a pipeline's
  ``raise_on_error=False``), so one refused step does not fail the others;
- anything else that goes wrong on the way (the connection breaks, times out, the
  task is cancelled mid-read) disconnects that connection before it goes back to the
  pool, so no later command reads a stale reply, and is raised: the batcher hands
  it to every step of the batch, whose retry policies send them again (every step
  allows that after a lost reply).

What redis-py's client layer adds to a command is therefore not applied to these:
its own retry of a broken connection (lockworker's retry policy, which logs each
try, retries them instead) and its per-command observability hooks. A cluster client,
one bound to a single connection, or a subclass with commands of its own takes
redis-py's path (:func:`direct` says which).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import redis.asyncio
from redis.exceptions import ResponseError

from lockworker.protocol import resp, wire


def direct(client: Any) -> bool:
    """Whether ``client``'s batches are written here: a ``redis.asyncio.Redis`` drawing
    connections from a pool (not a cluster client, not a single-connection client),
    whose commands and pipelines are redis-py's own: a subclass that overrides them
    (to trace or to change each command) sees every command through them, as before."""
    kind = type(client)
    return (
        isinstance(client, redis.asyncio.Redis)
        and kind.execute_command is redis.asyncio.Redis.execute_command
        and kind.pipeline is redis.asyncio.Redis.pipeline
        and client.connection is None
        and not client.single_connection_client
    )


async def exchange(client: Any, commands: Sequence[Sequence[Any]]) -> list[Any]:
    """Send ``commands`` in one write on a pooled connection of ``client``; each one's
    reply, an error reply as its ``ResponseError`` (see the module docstring)."""
    pool = client.connection_pool
    conn = await _connection(pool)
    try:
        await conn.send_packed_command(resp.packer(conn.encoder)(commands))
        replies: list[Any] = []
        for _ in commands:
            try:
                replies.append(await conn.read_response())
            except ResponseError as exc:  # read whole: the connection stays in step
                replies.append(exc)
        return replies
    except BaseException:
        await conn.disconnect()
        raise
    finally:
        await pool.release(conn)


async def _connection(pool: Any) -> Any:
    """A connection from ``pool`` (:func:`lockworker.protocol.wire.nameless`)."""
    if wire.nameless(pool):
        return await pool.get_connection()
    return await pool.get_connection("EVALSHA")  # pragma: no cover - redis-py < 5.3
