"""The lock protocol: each step one atomic operation on the Redis server.

Steps (all take the client's view of one job's :class:`~lockworker.keys.JobKeys`):

=========  ==========================================================  =====================
step       what it does atomically                                      result
=========  ==========================================================  =====================
acquire    if pending and free: attempt+1, token+1, lease for owner     Grant | Snapshot
renew      extend the lease if the caller still holds this attempt      Renewal
complete   holder only: drop the lease, state DONE, wake waiters        Settle.DONE|NOT_HOLDER
fail       holder only: drop the lease (GAVE_UP if it was the last)     RELEASED|GAVE_UP|...
release    holder only: drop the lease and refund the attempt           RELEASED|NOT_HOLDER
inspect    read state, lease and its remaining time                     Snapshot
reset      make a known job pending again (token counter kept)          Reset
=========  ==========================================================  =====================

Rules of this module: no threads, no sleeping, no hooks, no logging, no retries. It
says what Redis did; the worker decides what to do about it. Every step is safe to
retry after a lost reply: acquire recognises its own lease (``Grant.reentered``: the
same *run*, not merely the same owner label), and settle steps recognise a state they
already wrote. A step that finds the job's state gone where a lease of the caller's
should be says so (``Renewal.STATE_LOST``, ``Settle.STATE_LOST``): the server lost
its data.

Two implementations share this interface: :class:`ScriptProtocol` (Lua, one round trip
per step; the default) and :class:`lockworker.txn.TxnProtocol` (WATCH/MULTI/EXEC, three
round trips per step).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

import redis

from lockworker import scripts
from lockworker.codec import Holder, LockValue, StateValue, decode_lock, decode_state
from lockworker.errors import ForeignValueError
from lockworker.keys import JobKeys
from lockworker.luacall import LuaScript
from lockworker.state import Grant, JobStatus, Renewal, Reset, Settle, Snapshot


class LockProtocol(Protocol):
    """The atomic steps of the job lock (see the module docstring)."""

    def acquire(
        self, keys: JobKeys, who: Holder, lease_ms: int, max_attempts: int, retention_ms: int
    ) -> Grant | Snapshot: ...

    def renew(
        self, keys: JobKeys, held: LockValue, lease_ms: int, retention_ms: int
    ) -> Renewal: ...

    def complete(self, keys: JobKeys, held: LockValue, retention_ms: int) -> Settle: ...

    def fail(
        self, keys: JobKeys, held: LockValue, max_attempts: int, retention_ms: int
    ) -> Settle: ...

    def release(self, keys: JobKeys, held: LockValue, retention_ms: int) -> Settle: ...

    def inspect(self, keys: JobKeys) -> Snapshot: ...

    def reset(self, keys: JobKeys, retention_ms: int, *, force: bool = False) -> Reset: ...


def text(raw: Any) -> str:
    """A reply as str, whether the client decodes responses or not."""
    return raw.decode("utf-8", "replace") if isinstance(raw, bytes) else str(raw)


def settle_plan(held: LockValue, kind: str, max_attempts: int = 0) -> tuple[StateValue, str]:
    """The state a settle step writes, and the message that wakes waiters.

    ``kind`` is ``complete``, ``fail`` or ``release``. A failed last attempt writes
    GAVE_UP; a release gives the attempt back so a graceful stop costs none.
    """
    if kind == "complete":
        return StateValue(JobStatus.DONE, held.attempt, held.token, held.run, held.owner), "done"
    if kind == "fail":
        final = held.attempt >= max_attempts
        status = JobStatus.GAVE_UP if final else JobStatus.PENDING
        return StateValue(status, held.attempt, held.token, held.run, held.owner), (
            "gave_up" if final else "failed"
        )
    refunded = max(0, held.attempt - 1)
    return (
        StateValue(JobStatus.PENDING, refunded, held.token, held.run, held.owner),
        "released",
    )


def settle_result(reply: int, new_state: StateValue) -> Settle:
    """Map a settle step's answer (1 or 2 applied, 0 refused, -1 state lost)."""
    if reply < 0:
        return Settle.STATE_LOST
    if reply == 0:
        return Settle.NOT_HOLDER
    if new_state.status is JobStatus.DONE:
        return Settle.DONE
    if new_state.status is JobStatus.GAVE_UP:
        return Settle.GAVE_UP
    return Settle.RELEASED


def snapshot_from(keys: JobKeys, raw_state: Any, raw_lock: Any, pttl: int | None) -> Snapshot:
    """Build a :class:`Snapshot` from raw reads of the state and lock keys."""
    state = None
    if raw_state is not None:
        state = decode_state(raw_state)
        if state is None:
            raise ForeignValueError(keys.state, text(raw_state))
    lock = None
    if raw_lock is not None:
        lock = decode_lock(raw_lock)
        if lock is None:
            raise ForeignValueError(keys.lock, text(raw_lock))
    if state is None:
        state = StateValue(JobStatus.PENDING, 0, 0, "", "")
    if lock is not None and state.status is JobStatus.PENDING:
        return Snapshot(
            state.status, lock.attempt, lock.token, state.owner, lock.owner, pttl, lock.run
        )
    return Snapshot(state.status, state.attempt, state.token, state.owner, run=state.run)


def decode_acquire(keys: JobKeys, reply: Sequence[Any]) -> Grant | Snapshot:
    """Decode the ACQUIRE script's reply (see :mod:`lockworker.scripts`)."""
    kind = text(reply[0])
    if kind == "granted":
        return Grant(int(reply[1]), int(reply[2]), reentered=int(reply[3]) == 1)
    if kind == "locked":
        return Snapshot(
            JobStatus.PENDING, int(reply[1]), int(reply[2]), text(reply[3]),
            holder=text(reply[3]), pttl_ms=max(0, int(reply[4])), run=text(reply[5]),
        )
    if kind == "foreign":
        raise ForeignValueError(text(reply[1]), text(reply[2]))
    return Snapshot(
        JobStatus(kind), int(reply[1]), int(reply[2]), text(reply[3]), run=text(reply[4])
    )


def decode_reset(reply: Sequence[Any]) -> Reset:
    """Decode the RESET script's reply (see :mod:`lockworker.scripts`)."""
    kind = text(reply[0])
    if kind == "foreign":
        raise ForeignValueError(text(reply[1]), text(reply[2]))
    return Reset(kind)


def _foreign_on_wrongtype(keys: JobKeys, exc: redis.ResponseError) -> Exception:
    if "WRONGTYPE" in str(exc):
        return ForeignValueError(f"{keys.lock} or {keys.state}", "a value of another type")
    return exc


class SettleSteps:
    """complete, fail, release and inspect, shared by both implementations.

    Each implementation supplies ``client`` and ``_settle_step(keys, held, kind,
    retention_ms, max_attempts)``, the one atomic step behind the three endings.
    """

    client: redis.Redis

    def _settle_step(
        self, keys: JobKeys, held: LockValue, kind: str, retention_ms: int, max_attempts: int = 0
    ) -> Settle:
        raise NotImplementedError

    def complete(self, keys: JobKeys, held: LockValue, retention_ms: int) -> Settle:
        return self._settle_step(keys, held, "complete", retention_ms)

    def fail(
        self, keys: JobKeys, held: LockValue, max_attempts: int, retention_ms: int
    ) -> Settle:
        return self._settle_step(keys, held, "fail", retention_ms, max_attempts)

    def release(self, keys: JobKeys, held: LockValue, retention_ms: int) -> Settle:
        return self._settle_step(keys, held, "release", retention_ms)

    def inspect(self, keys: JobKeys) -> Snapshot:
        return inspect(self.client, keys)


_ACQUIRE = LuaScript(scripts.ACQUIRE)
_RENEW = LuaScript(scripts.RENEW)
_SETTLE = LuaScript(scripts.SETTLE)
_RESET = LuaScript(scripts.RESET)


class ScriptProtocol(SettleSteps):
    """The protocol as Lua scripts: one round trip per step.

    The scripts are shared by every object in the process (:mod:`lockworker.luacall`):
    one EVALSHA per step, and a SCRIPT LOAD once per server whose cache is empty.
    """

    __slots__ = ("client",)

    def __init__(self, client: redis.Redis) -> None:
        self.client = client

    def _run(self, script: LuaScript, keys: JobKeys, args: Sequence[str | int]) -> Any:
        try:
            return script(self.client, (keys.lock, keys.state), args)
        except redis.ResponseError as exc:
            raise _foreign_on_wrongtype(keys, exc) from exc

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
        self, keys: JobKeys, held: LockValue, kind: str, retention_ms: int, max_attempts: int = 0
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


def renewal(reply: int) -> Renewal:
    """Map a renew step's answer (1 renewed, 0 not the holder, -1 state lost)."""
    if reply == 1:
        return Renewal.RENEWED
    return Renewal.STATE_LOST if reply < 0 else Renewal.NOT_HOLDER


def inspect(client: redis.Redis, keys: JobKeys) -> Snapshot:
    """Read a job's state, lease and lease time left in one atomic round trip."""
    pipe = client.pipeline(transaction=True)
    pipe.get(keys.state)
    pipe.get(keys.lock)
    pipe.pttl(keys.lock)
    try:
        raw_state, raw_lock, pttl = pipe.execute()
    except redis.ResponseError as exc:
        raise _foreign_on_wrongtype(keys, exc) from exc
    return snapshot_from(keys, raw_state, raw_lock, int(pttl) if int(pttl) >= 0 else None)
