"""Pure decoding of the protocol's replies and the state each settle step writes.

No I/O here: what a reply means, and what an ending writes, decided once for both
implementations (:mod:`lockworker.protocol.script` and :mod:`lockworker.protocol.txn`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import redis

from lockworker.errors import ForeignValueError
from lockworker.model.codec import LockValue, StateValue, decode_lock, decode_state
from lockworker.model.history import (
    AttemptEnd,
    AttemptRecord,
    folded_record,
    implied_start,
    read_history,
)
from lockworker.model.keys import JobKeys
from lockworker.model.state import Ending, Grant, JobStatus, Renewal, Reset, Settle, Snapshot


def text(raw: Any) -> str:
    """A reply as str, whether the client decodes responses or not."""
    return raw.decode("utf-8", "replace") if isinstance(raw, bytes) else str(raw)


def settle_plan(
    held: LockValue, kind: Ending, max_attempts: int = 0, *, give_up: bool = False
) -> tuple[StateValue, str]:
    """The state a settle step writes, and the message that wakes waiters.

    ``kind`` is ``complete``, ``fail`` or ``release``. A failed last attempt writes
    GAVE_UP, and so does a failure with ``give_up`` (``lockworker.GiveUp``); a release
    gives the attempt back so a graceful stop costs none. A failure followed by a retry
    delay carries its due time too, added by the step on the server
    (:func:`failure_due_ms`, :func:`same_failure`).

    Every value written here is one that only this holder's settle of this attempt
    writes, because a settle whose lease is gone answers "applied already" when it
    finds its value (a retry whose reply was lost) and "stale" otherwise. DONE and a
    refunded attempt are unique as they are; a failure names its owner but no run, as
    the grant (pending, this attempt and token, this run) and an acquire that gives the
    job up after its last lease ran out (GAVE_UP, this attempt and token, this run)
    write the same fields with the run: a holder whose lease ran out is then told it
    is stale, whatever the state reads.
    """
    if kind is Ending.COMPLETE:
        return StateValue(JobStatus.DONE, held.attempt, held.token, held.run, held.owner), "done"
    if kind is Ending.FAIL:
        final = give_up or held.attempt >= max_attempts
        status = JobStatus.GAVE_UP if final else JobStatus.PENDING
        return StateValue(status, held.attempt, held.token, "", held.owner), (
            "gave_up" if final else "failed"
        )
    refunded = max(0, held.attempt - 1)
    return (
        StateValue(JobStatus.PENDING, refunded, held.token, held.run, held.owner),
        "released",
    )


def wake_message(message: str, due_in_ms: int) -> str:
    """The wake message of a settle step: ``failed:<ms>`` for a failure whose next
    attempt is due that many ms after the step, so a woken waiter sets its timer from
    it without asking (:func:`due_in`); the bare message otherwise."""
    return f"{message}:{due_in_ms}" if due_in_ms > 0 else message


def hands_over(kind: Ending, message: str, due_in_ms: int) -> bool:
    """Whether a settle hands the job to whoever else wants it, now: a release (a stop
    gives the attempt back) or a failure due again at once. Only such a settle is
    told on the namespace's handover channel (backups holding deliveries back listen
    there: :mod:`lockworker.daemons.defer`)."""
    return kind is Ending.RELEASE or (message == "failed" and due_in_ms <= 0)


def due_in(message: object) -> float | None:
    """Seconds until the job a wake ``message`` was about is due again (a failure's
    ``failed:<ms>``), or None for any other message, one of another release included."""
    kind, _, ms = text(message).partition(":")
    if kind != "failed" or not ms.isdigit():
        return None
    return int(ms) / 1000.0


def failure_due_ms(new_state: StateValue, delay_ms: int) -> int:
    """The delay a fail step writing ``new_state`` asks the server to add to its clock
    for the job's due time: 0 (none written) unless the job stays pending."""
    return delay_ms if new_state.status is JobStatus.PENDING and delay_ms > 0 else 0


def same_failure(found: StateValue | None, new_state: StateValue) -> bool:
    """True if ``found`` is ``new_state`` written with a due time: the fail step's own
    write (a retry whose reply was lost), whatever the server's clock was then."""
    return (
        found is not None and found.due_ms is not None
        and (found.status, found.attempt, found.token, found.owner)
        == (new_state.status, new_state.attempt, new_state.token, new_state.owner)
    )


def written_by(raw_state: Any, new_state: StateValue, delay_ms: int = 0) -> bool:
    """True if ``raw_state`` is what the settle writing ``new_state`` wrote (a retry
    whose reply was lost finds its own write): that value, that value with a due time
    (a failure with a retry delay, :func:`same_failure`), or that DONE with its one
    clean attempt folded in (:class:`~lockworker.model.codec.StateValue`); the server
    added the last two from its clock."""
    if text(raw_state) == new_state.encode():
        return True
    found = decode_state(raw_state)
    if delay_ms > 0 and same_failure(found, new_state):
        return True
    return (
        found is not None and found.took_ms is not None
        and replace(found, took_ms=None) == new_state
    )


def settle_ending(kind: Ending, new_state: StateValue, *, stopped: bool = False) -> AttemptEnd:
    """How a settle writing ``new_state`` ends its attempt, for the history."""
    if kind is Ending.COMPLETE:
        return AttemptEnd.DONE
    if kind is Ending.FAIL:
        return AttemptEnd.GAVE_UP if new_state.status is JobStatus.GAVE_UP else AttemptEnd.FAILED
    return AttemptEnd.STOPPED if stopped else AttemptEnd.RELEASED


def decode_settle(keys: JobKeys, new_state: StateValue, reply: Any) -> Settle:
    """Decode the SETTLE script's reply: -2 is a history that is not ours."""
    if int(reply) == -2:
        raise ForeignValueError(keys.history, "a value that is not an attempt record")
    return settle_result(int(reply), new_state)


def with_history(
    seen: Snapshot, raw_records: Any, raw_lock: Any, raw_state: Any, now_ms: int
) -> Snapshot:
    """``seen`` with the job's history, read with it (the live lease's token tells a
    running attempt from one whose lease ran out, and ``now_ms`` is the server's clock
    then). A DONE state that folded in its one clean attempt
    (:class:`~lockworker.model.codec.StateValue`) is that record; a new job's first
    attempt, whose grant wrote no record, is the record its state implies
    (:func:`~lockworker.model.history.implied_start`)."""
    lock = None if raw_lock is None else decode_lock(raw_lock)
    live = lock.token if lock else None
    history = read_history(raw_records, live)
    state = None if raw_state is None else decode_state(raw_state)
    if state is None:
        return replace(seen, history=history)
    times = state.folded()
    if times is not None and not history:
        history = (folded_record(state.attempt, state.token, state.run, state.owner, times),)
    elif (state.status is JobStatus.PENDING and state.run and state.due_ms is None
          and not (history and history[-1].token == state.token)):
        started = implied_start(state.attempt, state.token, now_ms)
        if started is not None:
            ending = None if live == state.token else AttemptEnd.LOST.value
            history += (AttemptRecord(
                state.attempt, state.token, state.owner, state.run, started, None, ending,
                None, None,
            ),)
    return replace(seen, history=history)


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


def applied_despite_error(
    new_state: StateValue, raw_state: Any, delay_ms: int = 0
) -> Settle | None:
    """The settle's result if the state read after its error is exactly the value it
    writes (unique to this holder's settle of this attempt, as for a retry after a lost
    reply: :func:`settle_plan`), or, for a failure with a due time (``delay_ms``), that
    value as the server completed it (:func:`written_by`); else None."""
    if raw_state is not None and written_by(raw_state, new_state, delay_ms):
        return settle_result(1, new_state)
    return None


def snapshot_from(
    keys: JobKeys, raw_state: Any, raw_lock: Any, pttl: int | None, now_ms: int | None = None
) -> Snapshot:
    """Build a :class:`Snapshot` from raw reads of the state and lock keys (and the
    server's clock, ``now_ms``, read with them: what tells a due time still ahead)."""
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
    return snapshot_of(state, lock, pttl, now_ms)


def snapshot_of(
    state: StateValue | None, lock: LockValue | None, pttl: int | None, now_ms: int | None
) -> Snapshot:
    """The :class:`Snapshot` of a job from its decoded state and lock (None: no key),
    the lock's PTTL and the server's clock (see :func:`snapshot_from`)."""
    if state is None:
        state = StateValue(JobStatus.PENDING, 0, 0, "", "")
    if lock is not None and state.status is JobStatus.PENDING:
        return Snapshot(
            state.status, lock.attempt, lock.token, state.owner, lock.owner, pttl, lock.run
        )
    due = None
    if (state.status is JobStatus.PENDING and lock is None and state.due_ms is not None
            and now_ms is not None and state.due_ms > now_ms):
        due = state.due_ms - now_ms
    return Snapshot(
        state.status, state.attempt, state.token, state.owner, run=state.run, due_ms=due
    )


def server_ms(reply: Any) -> int:
    """The server's clock in milliseconds, from a TIME reply."""
    seconds, micros = reply
    return int(seconds) * 1000 + int(micros) // 1000


def decode_acquire(keys: JobKeys, reply: Sequence[Any]) -> Grant | Snapshot:
    """Decode the ACQUIRE script's reply (see :mod:`lockworker.protocol.lua`)."""
    kind = text(reply[0])
    if kind == "granted":
        return Grant(int(reply[1]), int(reply[2]), reentered=int(reply[3]) == 1)
    if kind == "locked":
        return Snapshot(
            JobStatus.PENDING, int(reply[1]), int(reply[2]), text(reply[3]),
            holder=text(reply[3]), pttl_ms=max(0, int(reply[4])), run=text(reply[5]),
        )
    if kind == "due":
        return Snapshot(
            JobStatus.PENDING, int(reply[1]), int(reply[2]), text(reply[3]),
            due_ms=max(1, int(reply[4])),
        )
    if kind == "foreign":
        raise ForeignValueError(text(reply[1]), text(reply[2]))
    return Snapshot(
        JobStatus(kind), int(reply[1]), int(reply[2]), text(reply[3]), run=text(reply[4])
    )


def decode_reset(reply: Sequence[Any]) -> Reset:
    """Decode the RESET script's reply (see :mod:`lockworker.protocol.lua`)."""
    kind = text(reply[0])
    if kind == "foreign":
        raise ForeignValueError(text(reply[1]), text(reply[2]))
    return Reset(kind)


def foreign_on_wrongtype(keys: JobKeys, exc: redis.ResponseError) -> Exception:
    if "WRONGTYPE" in str(exc):
        return ForeignValueError(
            f"{keys.lock}, {keys.state} or {keys.history}", "a value of another type"
        )
    return exc


def renewal(reply: int) -> Renewal:
    """Map a renew step's answer (1 renewed, 0 not the holder, -1 state lost)."""
    if reply == 1:
        return Renewal.RENEWED
    return Renewal.STATE_LOST if reply < 0 else Renewal.NOT_HOLDER
