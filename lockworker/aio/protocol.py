"""The job lock protocol on a ``redis.asyncio`` client: the sync steps, awaited.

Every step is built by :mod:`lockworker.protocol.script` (the same Lua, arguments and
decoding as :class:`~lockworker.protocol.ScriptProtocol`); this class only sends it and
awaits the reply. A sync and an async process therefore speak one protocol on one job.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import redis

from lockworker.model.codec import Holder, LockValue
from lockworker.model.history import ErrorText
from lockworker.model.keys import JobKeys
from lockworker.model.state import Ending, Grant, Renewal, Reset, Settle, Snapshot
from lockworker.protocol.decode import (
    foreign_on_wrongtype,
    server_ms,
    snapshot_from,
    with_history,
)
from lockworker.protocol.interface import node_of
from lockworker.protocol.script import (
    Step,
    acquire_step,
    inspect_step,
    renew_step,
    reset_step,
    settle_step,
)

R = TypeVar("R")

AsyncSender = Callable[[Step[Any]], Awaitable[Any]]
"""The asyncio side's :data:`lockworker.protocol.script.Sender`."""


class AsyncScriptProtocol:
    """:class:`~lockworker.protocol.LockProtocol`'s steps as coroutines."""

    __slots__ = ("client", "sender")

    def __init__(self, client: Any, sender: AsyncSender | None = None) -> None:
        self.client = client
        self.sender = sender
        """With a worker's sender (:mod:`lockworker.aio.batcher`), steps that many
        tasks send at once share round trips; each is still its own atomic script."""

    async def _do(self, step: Step[R]) -> R:
        keys = step.keys
        if self.sender is not None:
            result = await self.sender(step)
            if not isinstance(result, BaseException):
                return result  # type: ignore[no-any-return]
            if isinstance(result, redis.ResponseError) and step.recover is not None:
                done = step.recover(await self.client.get(keys.state))
                if done is not None:
                    return done
            raise result
        try:
            reply = await step.script.acall(self.client, step.names, step.args)
        except redis.ResponseError as exc:
            if step.recover is not None and "WRONGTYPE" not in str(exc):  # applied anyway?
                done = step.recover(await self.client.get(keys.state))
                if done is not None:
                    return done
            raise foreign_on_wrongtype(keys, exc) from exc
        return step.decode(reply)

    async def acquire(
        self, keys: JobKeys, who: Holder, lease_ms: int, max_attempts: int, retention_ms: int
    ) -> Grant | Snapshot:
        return await self._do(acquire_step(keys, who, lease_ms, max_attempts, retention_ms))

    async def renew(
        self, keys: JobKeys, held: LockValue, lease_ms: int, retention_ms: int
    ) -> Renewal:
        return await self._do(renew_step(keys, held, lease_ms, retention_ms))

    async def complete(self, keys: JobKeys, held: LockValue, retention_ms: int) -> Settle:
        return await self._do(settle_step(keys, held, Ending.COMPLETE, retention_ms))

    async def fail(
        self, keys: JobKeys, held: LockValue, max_attempts: int, retention_ms: int,
        *, delay_ms: int = 0, give_up: bool = False, error: ErrorText | None = None,
    ) -> Settle:
        return await self._do(settle_step(
            keys, held, Ending.FAIL, retention_ms, max_attempts, delay_ms=delay_ms,
            give_up=give_up, error=error,
        ))

    async def release(
        self, keys: JobKeys, held: LockValue, retention_ms: int, *, stopped: bool = False
    ) -> Settle:
        return await self._do(
            settle_step(keys, held, Ending.RELEASE, retention_ms, stopped=stopped)
        )

    async def reset(
        self, keys: JobKeys, retention_ms: int, *, force: bool = False,
        expect: str | None = None,
    ) -> Reset:
        return await self._do(reset_step(keys, retention_ms, force=force, expect=expect))

    async def inspect(self, keys: JobKeys, *, history: bool = False) -> Snapshot:
        """State, lease and lease time left in one transaction, as the sync side reads
        it; with ``history``, the job's attempts too. Without, one script (on a cluster
        too, where a transaction takes no TIME)."""
        if not history:
            return await self._do(inspect_step(keys))
        node = node_of(self.client, keys)
        # On a cluster, redis.asyncio's transaction pipeline (redis-py 8) runs a command
        # that must re-read the slot map in a loop of its own and fails ("bound to a
        # different event loop"): read in a plain pipeline there, one slot, one batch.
        # Not one atomic read, which no decision needs: every decision is an atomic
        # step of its own (acquire, settle); this read only reports and times waits.
        pipe = self.client.pipeline(transaction=node is None)
        pipe.get(keys.state)
        pipe.get(keys.lock)
        pipe.pttl(keys.lock)
        if history:
            pipe.lrange(keys.history, 0, -1)
        if node is None:
            pipe.time()
        try:
            raw_state, raw_lock, pttl, *rest = await pipe.execute()
        except redis.ResponseError as exc:
            raise foreign_on_wrongtype(keys, exc) from exc
        records = rest.pop(0) if history else None
        if node is not None:  # see lockworker.protocol.interface.inspect
            rest = [await self.client.execute_command("TIME", target_nodes=node)]
        now = server_ms(rest[0])
        seen = snapshot_from(
            keys, raw_state, raw_lock, int(pttl) if int(pttl) >= 0 else None, now
        )
        return seen if records is None else with_history(seen, records, raw_lock, raw_state, now)
