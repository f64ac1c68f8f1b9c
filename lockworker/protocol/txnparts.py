"""The transaction protocol's reads and queued writes (:mod:`lockworker.protocol.txn`).

Each helper reads under the step's WATCH, or queues its writes after MULTI, as the Lua
steps (:mod:`lockworker.protocol.lua`) read and write the same keys.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import redis
from redis.client import Pipeline

from lockworker.errors import ForeignValueError
from lockworker.model.codec import StateValue
from lockworker.model.history import (
    HISTORY_CAP,
    RawRecord,
    implied_start,
    parse_record,
    record_tail,
)
from lockworker.model.index import Kind, score
from lockworker.model.keys import JobKeys, escape
from lockworker.model.state import JobStatus
from lockworker.protocol.decode import text

INDEXED = {JobStatus.PENDING: Kind.PENDING, JobStatus.GAVE_UP: Kind.GAVE_UP}
"""The index entry a settle leaves (none: DONE removes it), as the script's."""


def index(
    pipe: Pipeline, keys: JobKeys, kind: Kind | None, ms: int, retention_ms: int
) -> None:
    """Queue the job's index entry (:mod:`lockworker.model.index`), as the scripts'
    ``lw_index`` writes it: ``kind`` at ``ms``, or removed (None), and (but for a
    grant) that kind's and the held entries older than ``retention_ms`` trimmed.
    Nothing for a primitive."""
    if keys.index == keys.lock:
        return
    member = escape(keys.job_id)
    if kind is None:
        pipe.zrem(keys.index, member)
        return
    pipe.zadd(keys.index, {member: score(kind, ms)})
    if kind is not Kind.HELD:
        pipe.zremrangebyscore(keys.index, kind.low, f"({score(kind, ms - retention_ms)}")
        pipe.zremrangebyscore(keys.index, Kind.HELD.low, f"({score(Kind.HELD, ms - retention_ms)}")


def last_record(pipe: Pipeline, keys: JobKeys) -> RawRecord | None:
    """The history's last record (None if it has none); a key of another type raises
    WRONGTYPE (reported foreign by :meth:`TxnProtocol._watched`), a value that is not
    a record ForeignValueError."""
    raw = pipe.lindex(keys.history, -1)
    if raw is None:
        return None
    found = parse_record(raw)
    if found is None:
        raise ForeignValueError(keys.history, text(raw))
    return found


def implied(state: StateValue | None, last: RawRecord | None, now: int) -> RawRecord | None:
    """The open record of a new job's first attempt, which its grant did not write
    (:func:`lockworker.model.history.implied_start`): its state pending and granted,
    the history's last record not its own; None if there is none (as ``lw_implied``)."""
    if state is None or state.status is not JobStatus.PENDING or not state.run:
        return None
    if last is not None and last.token == state.token:
        return None
    start = implied_start(state.attempt, state.token, now)
    if start is None:
        return None
    return RawRecord(
        state.attempt, state.token, state.run, start, None, None, record_tail(state.owner)
    )


def close_lost(pipe: Pipeline, keys: JobKeys, last: RawRecord | None, now: int) -> None:
    """Queue the closing of ``last`` as lost, if it is still open (its lease ran out)."""
    if last is not None and last.ending is None:
        pipe.lset(keys.history, -1, replace(last, ended_ms=now, ending="lost").encode())


def keep(pipe: Pipeline, keys: JobKeys, retention_ms: int) -> None:
    """Queue the history's trim to its cap and its time to live (the state's)."""
    pipe.ltrim(keys.history, -HISTORY_CAP, -1)
    pipe.pexpire(keys.history, retention_ms)


def server_now_us(pipe: Pipeline) -> int:
    """The server's clock in microseconds: the first token of a job id it does not know."""
    seconds, micros = pipe.time()
    return int(seconds) * 1_000_000 + int(micros)


def read_strings(pipe: Pipeline, keys: JobKeys, *names: str) -> list[Any]:
    """MGET ``names``; raise ForeignValueError if a missing value is a key of another type.

    MGET answers nil for a key that holds a list or a hash, which would let the
    transaction overwrite somebody else's data; one EXISTS, only when a value is
    missing, tells an absent key from a foreign one. A key that EXISTS finds but that
    holds a string was written by another client since the MGET (a race for a new
    job): the EXEC would fail on the WATCH, so the step starts again at once.
    """
    values: list[Any] = pipe.mget(*names)
    missing = [name for name, value in zip(names, values, strict=True) if value is None]
    if missing and int(pipe.exists(*missing)) > 0:
        if all(text(pipe.type(name)) in ("string", "none") for name in missing):
            raise redis.WatchError(f"{' or '.join(missing)} written since it was read")
        raise ForeignValueError(f"{keys.lock} or {keys.state}", "a value of another type")
    return values


def text_or_none(raw: Any) -> str | None:
    return None if raw is None else text(raw)
