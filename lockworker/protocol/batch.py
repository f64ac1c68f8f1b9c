"""Many protocol steps in one round trip, each the very per-job script.

A batch is not a new protocol. Each step in it is the very :class:`~lockworker.protocol.
script.Step` a job would send alone (the same script, keys, arguments and decoding), so
each keeps its own atomicity and every guarantee of docs/protocol.md; the batch only
shares the round trip. Steps of different jobs do not need to be atomic together, and
a reply of one step never decides another's.

How the steps travel (:func:`plan`): on one server, the steps of one script go in one
command that loops over them (:mod:`lockworker.protocol.many`: the per-job script's
source, unchanged, called once per step), because the client's cost per command, not
the round trip, is what limits a busy stream; a batch of several scripts is a pipeline
of such commands. On a Redis Cluster, where each job id is a hash slot of its own, a
batch is a pipeline of one EVALSHA per step, which redis-py sends one round trip per
node. Why not one new multi-job script per step kind: the per-job scripts are the ones
the fault battery and the model test prove, and a batch needs no second copy of any.

Rules of this module, as of the rest of the protocol: no threads, no sleeping, no
retries. It says what Redis did to each step; what to batch and when is the caller's
(:mod:`lockworker.runtime.batcher` for threads, :mod:`lockworker.aio.batcher` for tasks).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import redis
from redis.exceptions import NoScriptError

from lockworker.protocol import many
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


@dataclass(frozen=True)
class Call:
    """One command of a batch: one step's EVALSHA, or several steps of one script
    looped in one (:func:`lockworker.protocol.many.many`); ``steps`` are the indexes
    of the batch's steps it carries, in order."""

    script: LuaScript
    keys: Sequence[str]
    args: Sequence[Any]
    steps: tuple[int, ...]

    @property
    def looped(self) -> bool:
        return len(self.steps) > 1

    def command(self) -> tuple[Any, ...]:
        return ("EVALSHA", self.script.sha, len(self.keys), *self.keys, *self.args)


def plan(client: Any, steps: Sequence[Step[Any]]) -> list[Call]:
    """The commands that carry ``steps``: on one server, the steps of each script in
    one looped command; on a cluster (a job is a hash slot of its own), one EVALSHA
    per step, which its pipeline sends one round trip per node."""
    if len(steps) == 1 or is_cluster(client):
        return [Call(s.script, s.names, s.args, (i,)) for i, s in enumerate(steps)]
    by_script: dict[str, list[int]] = {}
    for i, step in enumerate(steps):
        by_script.setdefault(step.script.sha, []).append(i)
    calls: list[Call] = []
    for indexes in by_script.values():
        first = steps[indexes[0]]
        if len(indexes) == 1:
            calls.append(Call(first.script, first.names, first.args, (indexes[0],)))
            continue
        keys, args = many.arguments(
            [steps[i].names for i in indexes], [steps[i].args for i in indexes]
        )
        calls.append(Call(many.many(first.script), keys, args, tuple(indexes)))
    return calls


def is_cluster(client: Any) -> bool:
    """Whether ``client`` is a cluster client (sync or asyncio), by its module (the
    sync side should not pay for importing redis.asyncio)."""
    return type(client).__module__ in _CLUSTER_MODULES


_CLUSTER_MODULES = frozenset({"redis.cluster", "redis.asyncio.cluster"})


def spread(calls: Sequence[Call], replies: Sequence[Any], n: int) -> list[Any]:
    """Each step's reply, from the replies of the calls that carried them: a looped
    call's reply is its steps' replies in order; an error of the whole call (OOM, a
    lost script) is every one of its steps' reply."""
    out: list[Any] = [None] * n
    for call, reply in zip(calls, replies, strict=True):
        if not call.looped:
            out[call.steps[0]] = reply
        elif isinstance(reply, BaseException):
            for i in call.steps:
                out[i] = reply
        else:
            for i, one in zip(call.steps, reply, strict=True):
                out[i] = one
    return out


def missing_scripts(calls: Sequence[Call], replies: Sequence[Any]) -> list[LuaScript]:
    """The scripts the server did not know (NOSCRIPT), each once."""
    found: dict[str, LuaScript] = {}
    for call, reply in zip(calls, replies, strict=True):
        if isinstance(reply, NoScriptError):
            found[call.script.sha] = call.script
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
    """Send ``steps`` in one round trip; per step, its result or the exception it
    stands for. A connection error fails the whole batch (raised): every step is safe
    to send again (docs/protocol.md, "Every step is safe to retry after a lost reply")."""
    calls = plan(client, steps)
    replies = _execute(client, calls)
    missing = missing_scripts(calls, replies)
    if missing:
        # The server's script cache is empty (a restart, SCRIPT FLUSH): a NOSCRIPT
        # call did nothing, so load the scripts and send those calls again.
        for script in missing:
            client.script_load(script.source)
        again = [i for i, reply in enumerate(replies) if isinstance(reply, NoScriptError)]
        for i, reply in zip(again, _execute(client, [calls[i] for i in again]), strict=True):
            replies[i] = reply
    each = spread(calls, replies, len(steps))
    return [outcome(step, reply) for step, reply in zip(steps, each, strict=True)]


def _execute(client: redis.Redis, calls: Sequence[Call]) -> list[Any]:
    if len(calls) == 1:  # one command: no pipeline to build
        try:
            return [client.execute_command(*calls[0].command())]  # type: ignore[no-untyped-call]
        except redis.ResponseError as exc:
            return [exc]
    pipe = client.pipeline(transaction=False)
    for call in calls:
        pipe.execute_command(*call.command())  # type: ignore[no-untyped-call]
    return list(pipe.execute(raise_on_error=False))
