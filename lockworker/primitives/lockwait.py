"""A waiter's look and its wait in one round trip.

A contended acquire looks (the ACQUIRE step of :mod:`~lockworker.primitives.lockqueue`:
take the lock, or join the queue) and, finding it held, blocks on its own grant list
(BLPOP) until a release grants it the lock: two round trips before it waits. For a lock
that is likely held, both go out in one pipeline. The look is told how long the pop
behind it waits; unless its caller is to wait at least that long anyway (another run
holds the lock for longer, or the head of the queue keeps its place longer), it pushes
:data:`~lockworker.primitives.lockqueue.MARKER` onto the caller's grant list, so the
pop answers at once and the caller goes on as after a look alone (takes the lock the
look granted, or waits as long as the look said). Otherwise the pop *is* the wait the
caller would have made after the look, and answers with the grant a release pushes.

A lock is likely held when the last acquisition of its key on the same client did not
get it at its first look: one entry per lock key and client (its connection pool), so
the objects of a client share it, those made per use included, and a lock that is
free again is looked at alone next time (a pipeline costs the client more than one
command). A server that lost its scripts (a restart, SCRIPT FLUSH) makes the next pop
sent behind a look wait out its time (at most a wait slice) once; the look is then
sent again alone, which loads the script. Only plain ``redis.Redis`` and
``redis.asyncio.Redis`` clients pipeline; a cluster client looks alone.
"""

from __future__ import annotations

import weakref
from typing import Any

import redis
from redis.exceptions import NoScriptError

from lockworker.model.state import Grant, Snapshot
from lockworker.primitives.common import ScriptStep
from lockworker.primitives.lockqueue import MARKER, LockSteps, pushed_grant
from lockworker.protocol import wire
from lockworker.protocol.decode import foreign_on_wrongtype, text

HINTS = 4096
"""Lock keys remembered per client at most (its hints start again when full)."""

Looked = tuple[Grant | Snapshot | float, "tuple[int, int] | None", bool]
"""A look with its wait: what the look saw, the grant the pop got (or None), and
whether the pop waited its whole time (True) or answered at once with the marker."""

_hints: weakref.WeakKeyDictionary[Any, dict[str, bool]] = weakref.WeakKeyDictionary()
"""Per client (its connection pool): the lock keys whose last acquisition waited."""


def likely_held(client: Any, key: str) -> bool:
    """Whether the last acquisition of ``key`` on ``client`` waited. Never before a
    look alone ran on the client, which loaded the script: a pop sent behind a look
    that failed (NOSCRIPT) would wait its whole time for nothing."""
    hints = _hints.get(client.connection_pool)
    return hints is not None and key in hints


def note(client: Any, key: str, waited: bool) -> None:
    """Remember whether an acquisition of ``key`` on ``client`` had to wait."""
    hints = _hints.get(client.connection_pool)
    if not waited:
        if hints is not None:
            hints.pop(key, None)
        return
    if hints is None:
        hints = _hints.setdefault(client.connection_pool, {})
    if key not in hints:
        if len(hints) >= HINTS:
            hints.clear()
        hints[key] = True


def pipelines(client: Any) -> bool:
    """Whether ``client`` is a plain single-server client (sync or asyncio)."""
    return any(
        kind.__name__ == "Redis" and kind.__module__ in ("redis.client", "redis.asyncio.client")
        for kind in type(client).__mro__
    )


def _command(step: ScriptStep[Any]) -> tuple[Any, ...]:
    return ("EVALSHA", step.script.sha, len(step.keys), *step.keys, *step.args)


def _read(steps: LockSteps, step: ScriptStep[Any], look: Any, key: str, popped: Any) -> Looked:
    """The pipeline's two replies (``look`` already run again alone after NOSCRIPT)."""
    for reply in (look, popped):
        if isinstance(reply, redis.ResponseError):
            raise foreign_on_wrongtype(steps.keys, reply) from reply
        if isinstance(reply, Exception):
            raise reply
    seen = look if isinstance(look, (Grant, Snapshot, float)) else step.decode(look)
    if popped is None:
        return seen, None, True
    if text(popped[1]) == MARKER:
        return seen, None, False
    return seen, pushed_grant(key, popped), False


def look_and_pop(steps: LockSteps, step: ScriptStep[Any], key: str, timeout: float) -> Looked:
    """Send ``step`` (a look with ``pop_ms``) and a pop of ``key`` in one round trip
    (:func:`lockworker.protocol.wire.pipelined`)."""
    look, popped = wire.pipelined(steps.client, [_command(step), ("BLPOP", key, timeout)])
    if isinstance(look, NoScriptError):
        # The server lost its scripts (a restart, SCRIPT FLUSH): the pop waited for
        # nothing. Look alone, which loads the script.
        look = steps.run(step)
    return _read(steps, step, look, key, popped)


async def alook_and_pop(
    steps: LockSteps, step: ScriptStep[Any], key: str, timeout: float
) -> Looked:
    """:func:`look_and_pop` on a ``redis.asyncio`` client."""
    pipe = steps.client.pipeline(transaction=False)
    pipe.execute_command(*_command(step))
    pipe.blpop([key], timeout=timeout)
    look, popped = await pipe.execute(raise_on_error=False)
    if isinstance(look, NoScriptError):
        look = await steps.arun(step)
    return _read(steps, step, look, key, popped)
