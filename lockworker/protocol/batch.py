"""Many protocol steps in one round trip: a pipeline of the per-job scripts.

A batch is not a new protocol. Each step in it is the very :class:`~lockworker.protocol.
script.Step` a job would send alone (the same script, keys, arguments and decoding), so
each keeps its own atomicity and every guarantee of docs/protocol.md; the batch only
shares the round trip. Steps of different jobs do not need to be atomic together, and
a reply of one step never decides another's. On a Redis Cluster, redis-py's cluster
pipeline sends the steps of each node in one round trip of their own.

Why a pipeline of the per-job scripts, not one script looping over many jobs: the
per-job scripts are the ones the fault battery and the model test prove, a batch of them
needs no second copy of any step, and on a cluster a multi-job script could only take
jobs of one hash slot (each job id is a slot of its own).

Rules of this module, as of the rest of the protocol: no threads, no sleeping, no
retries. It says what Redis did to each step; what to batch and when is the caller's
(:mod:`lockworker.runtime.batcher` for threads, :mod:`lockworker.aio.batcher` for tasks).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import redis
from redis.exceptions import NoScriptError

from lockworker.protocol.decode import foreign_on_wrongtype
from lockworker.protocol.luacall import LuaScript
from lockworker.protocol.script import Step

MAX_BATCH = 256
"""Steps sent in one round trip at most: a batch this large already costs the server
and the client far more than the round trip it shares."""


def command(step: Step[Any]) -> tuple[Any, ...]:
    """The EVALSHA command of ``step``, as one job would send it."""
    names = step.names
    return ("EVALSHA", step.script.sha, len(names), *names, *step.args)


def missing_scripts(steps: Sequence[Step[Any]], replies: Sequence[Any]) -> list[LuaScript]:
    """The scripts the server did not know (NOSCRIPT), each once."""
    found: dict[str, LuaScript] = {}
    for step, reply in zip(steps, replies, strict=True):
        if isinstance(reply, NoScriptError):
            found[step.script.sha] = step.script
    return list(found.values())


def outcome(step: Step[Any], reply: Any) -> Any:
    """What ``reply`` means for ``step``: its result, or the exception it stands for.

    A script error after the step's writes (a settle whose PUBLISH was refused) is
    returned as the exception: the caller re-sends that step alone, whose recovery
    reads the state (:meth:`lockworker.protocol.script.ScriptProtocol._do`)."""
    if isinstance(reply, redis.ResponseError):
        if "WRONGTYPE" in str(reply):
            return foreign_on_wrongtype(step.keys, reply)
        return reply
    try:
        return step.decode(reply)
    except Exception as exc:  # a foreign value, named by the decoder
        return exc


def send(client: redis.Redis, steps: Sequence[Step[Any]]) -> list[Any]:
    """Send ``steps`` in one pipeline; per step, its result or the exception it stands
    for. A connection error fails the whole batch (raised): every step is safe to send
    again (docs/protocol.md, "Every step is safe to retry after a lost reply")."""
    replies = _execute(client, steps)
    missing = missing_scripts(steps, replies)
    if missing:
        # The server's script cache is empty (a restart, SCRIPT FLUSH): a NOSCRIPT step
        # did nothing, so load the scripts and send those steps again.
        for script in missing:
            client.script_load(script.source)
        again = [i for i, reply in enumerate(replies) if isinstance(reply, NoScriptError)]
        for i, reply in zip(again, _execute(client, [steps[i] for i in again]), strict=True):
            replies[i] = reply
    return [outcome(step, reply) for step, reply in zip(steps, replies, strict=True)]


def _execute(client: redis.Redis, steps: Sequence[Step[Any]]) -> list[Any]:
    pipe = client.pipeline(transaction=False)
    for step in steps:
        pipe.execute_command(*command(step))  # type: ignore[no-untyped-call]
    return list(pipe.execute(raise_on_error=False))
