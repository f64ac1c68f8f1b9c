"""Group commit for the protocol steps of many tasks on one ``redis.asyncio`` client.

The asyncio twin of :mod:`lockworker.runtime.batcher`, by the same rule: a step that
finds no batch in flight is sent at once, alone; steps that arrive while one is in
flight go out together when it is back, sent by the first of them. The batch is the
sync side's (:mod:`lockworker.protocol.batch`): the very per-job steps, in the same
commands, decoded by the same functions.

A task cancelled while its step waits in the queue takes its step out of the batch
(the step was never sent, so nothing happened on the server). A leader cancelled while
its batch is in flight leaves the others' steps in doubt, as a lost reply does: they
are told so (``redis.ConnectionError``), and their retry policies send them again,
which every step allows.
"""

from __future__ import annotations

import asyncio
import weakref
from collections import deque
from typing import Any

import redis
from redis.exceptions import NoScriptError

from lockworker.protocol import batch
from lockworker.protocol.luacall import ready
from lockworker.protocol.script import Step
from lockworker.steps import adrive

_LEAD = object()
"""What a queued step's future is given when its task is to send the next batch."""


class AsyncBatcher:
    """Send protocol steps of many tasks in shared round trips (see the module)."""

    def __init__(self, client: Any, max_batch: int = batch.MAX_BATCH) -> None:
        self.client = client
        self.max_batch = max_batch
        self._queue: deque[tuple[Step[Any], asyncio.Future[Any]]] = deque()
        self._busy = False

    async def __call__(self, step: Step[Any]) -> Any:
        """``step``'s result or the exception it stands for (returned, as the sync
        side's); an error of the whole round trip is raised."""
        if self._busy:
            future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
            self._queue.append((step, future))
            try:
                led = await future
            except asyncio.CancelledError:
                # Cancelled as the lead was handed to it: hand it on, or every later
                # step would wait for a batch nobody sends.
                if future.done() and not future.cancelled() and future.result() is _LEAD:
                    self._pass_lead()
                raise
            if led is not _LEAD:
                return led
        self._busy = True
        return await self._lead(step)

    async def _lead(self, step: Step[Any]) -> Any:
        taken: list[tuple[Step[Any], asyncio.Future[Any]]] = []
        while self._queue and len(taken) < self.max_batch - 1:
            queued = self._queue.popleft()
            if not queued[1].done():  # a cancelled task's step is not sent
                taken.append(queued)
        try:
            if taken:
                results = await send(self.client, [step, *(s for s, _ in taken)])
            else:
                results = [await _alone(self.client, step)]
        except BaseException as exc:
            error = exc if isinstance(exc, Exception) else redis.ConnectionError(
                "the batch carrying this step was cancelled in flight"
            )
            for _, future in taken:
                if not future.done():
                    future.set_exception(error)
            self._pass_lead()
            raise
        for (_, future), result in zip(taken, results[1:], strict=True):
            if not future.done():
                future.set_result(result)
        self._pass_lead()
        return results[0]

    def _pass_lead(self) -> None:
        while self._queue:
            _, future = self._queue.popleft()
            if not future.done():
                future.set_result(_LEAD)
                return
        self._busy = False


async def _alone(client: Any, step: Step[Any]) -> Any:
    """One step as one command, sent as a batch's are (:func:`_execute`)."""
    (reply,) = await _execute(client, batch.singles([step], range(1)))
    return batch.outcome(step, reply)


async def send(client: Any, steps: list[Step[Any]]) -> list[Any]:
    """The sync side's :func:`lockworker.protocol.batch.send`, awaited: the same
    sequence (:func:`lockworker.protocol.batch.sending`), its calls awaited. A command
    the server's empty script cache refused (NOSCRIPT: not run) is sent again with
    EVAL, which loads its script as :meth:`~lockworker.protocol.luacall.LuaScript.acall`
    does."""
    await ready(client)
    try:
        return await adrive(batch.sending(client, steps, lambda calls: _execute(client, calls)))
    except (redis.ConnectionError, redis.TimeoutError):
        if len(steps) == 1 or not batch.is_cluster(client):
            raise
    # A cluster node is unreachable: step by step, routed by key, as the sync side
    # does (lockworker.protocol.batch.send), so redis-py refreshes its slot map.
    return [(await send(client, [step]))[0] for step in steps]


async def _execute(client: Any, calls: list[batch.Call]) -> list[Any]:
    """Each call's reply: on a cluster its looped commands one per node; the rest in
    one pipeline (a lone command without one)."""
    replies: list[Any] = [None] * len(calls)
    routed = [n for n, call in enumerate(calls) if call.node is None]
    for n, call in enumerate(calls):
        if call.node is not None:
            replies[n] = await _one(client, call)
    if len(routed) == 1:
        replies[routed[0]] = await _one(client, calls[routed[0]])
    elif routed:
        pipe = client.pipeline(transaction=False)
        for n in routed:
            pipe.execute_command(*calls[n].command())
        for n, reply in zip(routed, await pipe.execute(raise_on_error=False), strict=True):
            replies[n] = await _one(client, calls[n]) if isinstance(reply, NoScriptError) else reply
    return replies


async def _one(client: Any, call: batch.Call) -> Any:
    """One command's reply (an error reply returned, not raised)."""
    try:
        return await call.script.acall(client, call.keys, call.args, node=call.node)
    except redis.ResponseError as exc:
        return exc


_BATCHERS: weakref.WeakKeyDictionary[Any, AsyncBatcher] = weakref.WeakKeyDictionary()


def batcher_for(client: Any) -> AsyncBatcher:
    """The batcher of ``client`` (one per client object, made on first use)."""
    found = _BATCHERS.get(client)
    if found is None:
        found = _BATCHERS[client] = AsyncBatcher(client)
    return found
