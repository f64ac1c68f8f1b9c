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
of such commands. On a Redis Cluster, where each job id is a hash slot of its own, the
steps of one script on one master go in one such command sent to that node (its keys
among its arguments, :mod:`lockworker.protocol.many`); a step alone on its node is one
EVALSHA, in a pipeline that redis-py routes by key. A step whose slot its node no
longer serves (moved after the plan: it failed at its first key, writing nothing), and
the steps of a looped command refused whole (out of memory), go again one by one in
that pipeline, which follows redirections. Why not one new multi-job script per step
kind: the per-job scripts are the ones the fault battery and the model test prove, and
a batch needs no second copy of any.

Rules of this module, as of the rest of the protocol: no threads, no sleeping, no
retries. It says what Redis did to each step; what to batch and when is the caller's
(:mod:`lockworker.runtime.batcher` for threads, :mod:`lockworker.aio.batcher` for tasks).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import redis
from redis.exceptions import NoScriptError

from lockworker.protocol import many, wire
from lockworker.protocol.decode import foreign_on_wrongtype
from lockworker.protocol.luacall import LuaScript
from lockworker.protocol.script import Step
from lockworker.steps import Steps, drive

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
    node: Any = None
    """On a cluster, the node a looped command goes to (None: routed by its keys)."""

    @property
    def looped(self) -> bool:
        return len(self.steps) > 1

    def command(self) -> tuple[Any, ...]:
        return ("EVALSHA", self.script.sha, len(self.keys), *self.keys, *self.args)


def plan(client: Any, steps: Sequence[Step[Any]]) -> list[Call]:
    """The commands that carry ``steps``: the steps of each script in one looped
    command, on one server; on a cluster, per script and master node."""
    if len(steps) == 1:
        return singles(steps, range(1))
    cluster = is_cluster(client)
    groups: dict[tuple[str, str], list[int]] = {}
    nodes: dict[str, Any] = {}
    for i, step in enumerate(steps):
        where = ""
        if cluster:
            node = client.get_node_from_key(step.names[0])
            where = node.name
            nodes[where] = node
        groups.setdefault((step.script.sha, where), []).append(i)
    calls: list[Call] = []
    for (_, where), indexes in groups.items():
        first = steps[indexes[0]]
        if len(indexes) == 1:
            calls.append(Call(first.script, first.names, first.args, (indexes[0],)))
            continue
        keys, args = many.arguments(
            [steps[i].names for i in indexes], [steps[i].args for i in indexes],
            on_node=cluster,
        )
        calls.append(Call(
            many.many(first.script, on_node=cluster), keys, args, tuple(indexes),
            nodes.get(where),
        ))
    return calls


def singles(steps: Sequence[Step[Any]], indexes: Iterable[int]) -> list[Call]:
    """One EVALSHA per step, routed by its keys."""
    return [Call(steps[i].script, steps[i].names, steps[i].args, (i,)) for i in indexes]


_ELSEWHERE = (
    redis.exceptions.MovedError, redis.exceptions.AskError, redis.exceptions.TryAgainError,
    redis.exceptions.ClusterDownError,
)
_ELSEWHERE_TEXTS = ("non local key", "cluster is down")
"""What a script's key access says when its node cannot serve the key now (Redis 7,
Valkey): the step stopped there, before its first write."""


def strays(calls: Sequence[Call], replies: Sequence[Any], each: Sequence[Any]) -> list[int]:
    """The steps of a cluster's looped node commands to send again alone, routed by
    key: every step of a command the node refused whole (before the loop ran: out of
    memory, a node that is no master now; NOSCRIPT never comes here, it is loaded and
    sent again), and each step whose slot the node did not serve (it failed at its
    first key: a job step reads its keys before it writes)."""
    out: list[int] = []
    for call, reply in zip(calls, replies, strict=True):
        if call.node is None:
            continue
        whole = isinstance(reply, redis.ResponseError)
        out.extend(
            i for i in call.steps
            if whole or isinstance(each[i], _ELSEWHERE)
            or (isinstance(each[i], redis.ResponseError) and any(
                text in str(each[i]) for text in _ELSEWHERE_TEXTS
            ))
        )
    return out


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


def sending(
    client: Any, steps: Sequence[Step[Any]], execute: Callable[[list[Call]], Any]
) -> Steps[list[Any]]:
    """How a batch of ``steps`` is sent, for the sync and the asyncio side alike
    (:mod:`lockworker.steps`): the calls of the plan go first; a cluster's steps
    refused where the plan sent them go again, alone, routed by key (:func:`strays`);
    then each step's result or the exception it stands for. ``execute(calls)`` makes
    the calls the side's way (their replies, an error reply given back, not raised, or
    an awaitable of them)."""
    calls = plan(client, steps)
    replies = yield lambda: execute(calls)
    each = spread(calls, replies, len(steps))
    elsewhere = strays(calls, replies, each)
    if elsewhere:
        again = yield lambda: execute(singles(steps, elsewhere))
        for i, reply in zip(elsewhere, again, strict=True):
            each[i] = reply
    return [outcome(step, reply) for step, reply in zip(steps, each, strict=True)]


def send(client: redis.Redis, steps: Sequence[Step[Any]]) -> list[Any]:
    """Send ``steps`` in one round trip; per step, its result or the exception it
    stands for. A connection error fails the whole batch (raised): every step is safe
    to send again (docs/protocol.md, "Every step is safe to retry after a lost reply")."""
    try:
        return drive(sending(client, steps, lambda calls: _answered(client, calls)))
    except (redis.ConnectionError, redis.TimeoutError):
        if len(steps) == 1 or not is_cluster(client):
            raise
    # A cluster node is unreachable (crashed, failing over). redis-py refreshes its
    # slot map reliably after a failed command routed by its key, not after a failed
    # pipeline or a command sent to a chosen node: so the steps go one by one, routed
    # by key, until the map is right again. Each step is safe to send again.
    return [send(client, [step])[0] for step in steps]


def _answered(client: redis.Redis, calls: Sequence[Call]) -> list[Any]:
    """Each call's reply; a call the server's empty script cache refused (NOSCRIPT: it
    did nothing, after a restart, SCRIPT FLUSH or a failover to a replica) is sent
    again by its source, routed as it was (:meth:`LuaScript.evaluate`), which caches
    the script there."""
    replies = _execute(client, calls)
    for i, reply in enumerate(replies):
        if isinstance(reply, NoScriptError):
            call = calls[i]
            try:
                replies[i] = call.script.evaluate(client, call.keys, call.args, node=call.node)
            except redis.ResponseError as exc:
                replies[i] = exc
    return replies


def _execute(client: redis.Redis, calls: Sequence[Call]) -> list[Any]:
    """Each call's reply (an error reply returned, not raised): a cluster's looped
    commands one per node, the rest in one round trip (:func:`.wire.pipelined`)."""
    replies: list[Any] = [None] * len(calls)
    routed = []
    for n, call in enumerate(calls):
        if call.node is None:
            routed.append(n)
            continue
        try:
            replies[n] = call.script(client, call.keys, call.args, node=call.node)
        except redis.ResponseError as exc:
            replies[n] = exc
    if routed:
        sent = wire.pipelined(client, [calls[n].command() for n in routed])
        for n, reply in zip(routed, sent, strict=True):
            replies[n] = reply
    return replies
