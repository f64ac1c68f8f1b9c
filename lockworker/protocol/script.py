"""The lock protocol as Lua scripts (:mod:`lockworker.protocol.lua`): one round trip per
step, the default implementation of :class:`~lockworker.protocol.interface.LockProtocol`."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import redis

from lockworker.model.codec import Holder, LockValue
from lockworker.model.keys import JobKeys
from lockworker.model.state import Ending, Grant, Renewal, Reset, Settle, Snapshot
from lockworker.protocol import lua as scripts
from lockworker.protocol.decode import (
    decode_acquire,
    decode_reset,
    foreign_on_wrongtype,
    renewal,
    settle_plan,
    settle_result,
)
from lockworker.protocol.interface import SettleSteps
from lockworker.protocol.luacall import LuaScript

_ACQUIRE = LuaScript(scripts.ACQUIRE)
_RENEW = LuaScript(scripts.RENEW)
_SETTLE = LuaScript(scripts.SETTLE)
_RESET = LuaScript(scripts.RESET)


class ScriptProtocol(SettleSteps):
    """The protocol as Lua scripts: one round trip per step.

    The scripts are shared by every object in the process (:mod:`lockworker.protocol.luacall`):
    one EVALSHA per step, and a SCRIPT LOAD once per server whose cache is empty.
    """

    __slots__ = ("client",)

    def __init__(self, client: redis.Redis) -> None:
        self.client = client

    def _run(self, script: LuaScript, keys: JobKeys, args: Sequence[str | int]) -> Any:
        try:
            return script(self.client, (keys.lock, keys.state), args)
        except redis.ResponseError as exc:
            raise foreign_on_wrongtype(keys, exc) from exc

    def acquire(
        self, keys: JobKeys, who: Holder, lease_ms: int, max_attempts: int, retention_ms: int
    ) -> Grant | Snapshot:
        args = (who.owner, lease_ms, max_attempts, retention_ms, keys.wake, who.run)
        return decode_acquire(keys, self._run(_ACQUIRE, keys, args))

    def renew(
        self, keys: JobKeys, held: LockValue, lease_ms: int, retention_ms: int
    ) -> Renewal:
        reply = int(self._run(_RENEW, keys, (held.encode(), lease_ms, retention_ms)))
        return renewal(reply)

    def _settle_step(
        self, keys: JobKeys, held: LockValue, kind: Ending, retention_ms: int, max_attempts: int = 0
    ) -> Settle:
        new_state, message = settle_plan(held, kind, max_attempts)
        reply = self._run(
            _SETTLE,
            keys,
            (held.encode(), new_state.encode(), retention_ms, keys.wake, message),
        )
        return settle_result(int(reply), new_state)

    def reset(self, keys: JobKeys, retention_ms: int, *, force: bool = False) -> Reset:
        reply = self._run(_RESET, keys, (1 if force else 0, retention_ms, keys.wake))
        return decode_reset(reply)
