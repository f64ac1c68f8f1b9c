"""The lock protocol as Lua scripts (:mod:`lockworker.protocol.lua`): one round trip per
step, the default implementation of :class:`~lockworker.protocol.interface.LockProtocol`.

Each step is first built as a :class:`Step` (pure: the script, the job's keys, the
arguments and how to read the reply), then sent. :class:`ScriptProtocol` sends it with
a ``redis.Redis`` client; :class:`lockworker.aio.protocol.AsyncScriptProtocol` awaits
the same step on a ``redis.asyncio`` client. One definition of every step, two kinds
of I/O.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any, Generic, TypeVar

import redis

from lockworker.model.codec import Holder, LockValue
from lockworker.model.history import AttemptEnd, ErrorText, record_tail
from lockworker.model.keys import JobKeys, Space
from lockworker.model.presence import handover_channel
from lockworker.model.state import Ending, Grant, Renewal, Reset, Settle, Snapshot
from lockworker.protocol import lua as scripts
from lockworker.protocol.decode import (
    applied_despite_error,
    decode_acquire,
    decode_reset,
    decode_settle,
    failure_due_ms,
    foreign_on_wrongtype,
    hands_over,
    renewal,
    server_ms,
    settle_ending,
    settle_plan,
    snapshot_from,
    wake_message,
)
from lockworker.protocol.interface import SettleSteps
from lockworker.protocol.luacall import LuaScript

R = TypeVar("R")

_ACQUIRE = LuaScript(scripts.ACQUIRE)
_RENEW = RENEW_SCRIPT = LuaScript(scripts.RENEW)
_SETTLE = LuaScript(scripts.SETTLE)
_RESET = LuaScript(scripts.RESET)
_INSPECT = LuaScript(scripts.INSPECT)


@dataclass(frozen=True, slots=True)
class Step(Generic[R]):
    """One protocol step, ready to send: ``decode(reply)`` is what Redis did."""

    script: LuaScript
    keys: JobKeys
    args: Sequence[str | int]
    decode: Callable[[Any], R]
    recover: Callable[[Any], R | None] | None = None
    """For a step that may fail after its writes (a settle whose PUBLISH the server
    refused, "ACL failure in script"): given the state key read after the error, the
    result if the step's writes were applied, else None (the error stands)."""

    @property
    def names(self) -> tuple[str, str, str, str]:
        """The script's KEYS: the job's lock, state, history and index (one hash
        slot; :mod:`lockworker.model.index`)."""
        return script_keys(self.keys)


def script_keys(keys: JobKeys) -> tuple[str, str, str, str]:
    """The KEYS every job step's script takes: lock, state, history and the
    namespace's index key of the job's slot (a primitive's lock key again: no index)."""
    return (keys.lock, keys.state, keys.history, keys.index)


def acquire_step(
    keys: JobKeys, who: Holder, lease_ms: int, max_attempts: int, retention_ms: int
) -> Step[Grant | Snapshot]:
    args = (who.owner, lease_ms, max_attempts, retention_ms, keys.wake, who.run,
            record_tail(who.owner))
    return Step(_ACQUIRE, keys, args, partial(decode_acquire, keys))


def _renewal(reply: Any) -> Renewal:
    return renewal(int(reply))


def renew_step(keys: JobKeys, held: LockValue, lease_ms: int, retention_ms: int) -> Step[Renewal]:
    return Step(_RENEW, keys, (held.encode(), lease_ms, retention_ms), _renewal)


def settle_step(
    keys: JobKeys, held: LockValue, kind: Ending, retention_ms: int, max_attempts: int = 0,
    *, delay_ms: int = 0, give_up: bool = False, error: ErrorText | None = None,
    stopped: bool = False,
) -> Step[Settle]:
    """Complete, fail or release; a failure with ``delay_ms`` records the job's due
    time (the server's clock plus the delay) in the same step, and ``give_up`` ends
    the job GAVE_UP whatever attempts are left. The attempt's history record is closed
    in the same step, with the failure's ``error``, or as ``stopped`` for a release
    because the worker stops (``stopped``)."""
    new_state, message = settle_plan(held, kind, max_attempts, give_up=give_up)
    due = failure_due_ms(new_state, delay_ms)
    ending: AttemptEnd = settle_ending(kind, new_state, stopped=stopped)
    handover = handover_channel(keys.namespace) if (
        keys.space is Space.JOB and hands_over(kind, message, due)
    ) else ""
    args = (held.encode(), new_state.encode(), retention_ms, keys.wake,
            wake_message(message, due), due or "", ending.value,
            record_tail(held.owner, error if kind is Ending.FAIL else None), handover)
    return Step(
        _SETTLE, keys, args, partial(decode_settle, keys, new_state),
        partial(applied_despite_error, new_state, delay_ms=due),
    )


def _snapshot(keys: JobKeys, reply: Any) -> Snapshot:
    raw_state, raw_lock, pttl, now = reply
    return snapshot_from(
        keys, raw_state or None, raw_lock or None, int(pttl) if int(pttl) >= 0 else None,
        server_ms(now) if now else None,
    )


def inspect_step(keys: JobKeys) -> Step[Snapshot]:
    """Read the job (state, lease, lease time left, the server's clock) in one script:
    one command, and a step like the others, so looks of many jobs share a batch."""
    return Step(_INSPECT, keys, (), partial(_snapshot, keys))


def reset_step(
    keys: JobKeys, retention_ms: int, *, force: bool = False, expect: str | None = None
) -> Step[Reset]:
    """Reset the job; with ``expect`` (pending, held, done, gave_up), only if it is in
    that state (else ``Reset.CHANGED``, nothing written)."""
    args = (1 if force else 0, retention_ms, keys.wake, expect or "")
    return Step(_RESET, keys, args, decode_reset)


Sender = Callable[[Step[Any]], Any]
"""Sends a step, perhaps in a batch with others' (:mod:`lockworker.runtime.batcher`):
returns its result or the exception it stands for
(:func:`lockworker.protocol.batch.outcome`), raises an error of the round trip."""


class ScriptProtocol(SettleSteps):
    """The protocol as Lua scripts: one round trip per step.

    The scripts are shared by every object in the process (:mod:`lockworker.protocol.luacall`):
    one EVALSHA per step, and a SCRIPT LOAD once per server whose cache is empty.
    With a ``sender`` (a worker's, :mod:`lockworker.runtime.batcher`), steps that many
    threads send at once share round trips; each is still its own atomic script.
    """

    __slots__ = ("client", "sender")

    def __init__(self, client: redis.Redis, sender: Sender | None = None) -> None:
        self.client = client
        self.sender = sender

    def _run(self, script: LuaScript, keys: JobKeys, args: Sequence[str | int]) -> Any:
        try:
            return script(self.client, script_keys(keys), args)
        except redis.ResponseError as exc:
            raise foreign_on_wrongtype(keys, exc) from exc

    def _do(self, step: Step[R]) -> R:
        if self.sender is not None:
            result = self.sender(step)
            if not isinstance(result, BaseException):
                return result  # type: ignore[no-any-return]
            if isinstance(result, redis.ResponseError):
                return self._recovered(step, result)
            raise result
        try:
            reply = self._run(step.script, step.keys, step.args)
        except redis.ResponseError as exc:
            return self._recovered(step, exc)
        return step.decode(reply)

    def _recovered(self, step: Step[R], error: redis.ResponseError) -> R:
        """A script's error after its writes (nothing is rolled back): as after a lost
        reply, the state says whether the step was applied; if not, the error stands."""
        if step.recover is not None:
            done = step.recover(self.client.get(step.keys.state))
            if done is not None:
                return done
        raise error

    def acquire(
        self, keys: JobKeys, who: Holder, lease_ms: int, max_attempts: int, retention_ms: int
    ) -> Grant | Snapshot:
        return self._do(acquire_step(keys, who, lease_ms, max_attempts, retention_ms))

    def renew(
        self, keys: JobKeys, held: LockValue, lease_ms: int, retention_ms: int
    ) -> Renewal:
        return self._do(renew_step(keys, held, lease_ms, retention_ms))

    def _settle_step(
        self, keys: JobKeys, held: LockValue, kind: Ending, retention_ms: int,
        max_attempts: int = 0, *, delay_ms: int = 0, give_up: bool = False,
        error: ErrorText | None = None, stopped: bool = False,
    ) -> Settle:
        return self._do(settle_step(
            keys, held, kind, retention_ms, max_attempts, delay_ms=delay_ms, give_up=give_up,
            error=error, stopped=stopped,
        ))

    def reset(
        self, keys: JobKeys, retention_ms: int, *, force: bool = False,
        expect: str | None = None,
    ) -> Reset:
        return self._do(reset_step(keys, retention_ms, force=force, expect=expect))

    def inspect(self, keys: JobKeys, *, history: bool = False) -> Snapshot:
        """One script; with ``history``, the transaction that reads the attempts too."""
        if history:
            return super().inspect(keys, history=True)
        return self._do(inspect_step(keys))
