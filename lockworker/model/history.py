"""A job's attempt history: one record per attempt, who ran it, when, how it ended, why.

The records live in the job's history key (``lw:job:<namespace>:{<job id>}:history``,
:class:`~lockworker.model.keys.JobKeys`), a list, oldest first, written by the same
server steps that grant and settle the attempts (:mod:`lockworker.protocol.lua`), kept
as long as the job's state (``retention``) and trimmed to the last :data:`HISTORY_CAP`.
One record is::

    lw2|<attempt>|<token>|<run>|<started ms>|<ended ms>|<ending>|<JSON object>

``started``/``ended`` are the server's clock (``TIME``) in milliseconds; ``ended`` and
``ending`` are empty while the attempt runs. The JSON object holds the free text: the
holder's ``owner`` label and, for a failure, ``error_type``, ``error`` and
``traceback`` (its last frames), each bounded here before it is sent (Python encodes
it: the Lua steps only copy it). A grant appends its record (but a new job's, whose
record is implied: :func:`implied_start`); the settle of that attempt (done, failed,
gave_up, released, stopped) rewrites it in place (or appends the implied one); an attempt
whose lease ran out is closed as ``lost`` by the next grant, or by the acquire that
gives the job up (its ``ended`` is then when it was found lost, not when its lease
ended).

A DONE whose history is its own attempt's clean record alone folds that record into
the state and deletes the key (:func:`folds`, :class:`lockworker.model.codec.StateValue`):
most jobs are done at once, and the list cost more server memory than the state.
Reads return it as :func:`folded_record`; a reset writes it back to the list. The grant
of a new job writes no record at all: its record is implied by the lease and the state
until a later step writes it (:func:`implied_start`), so a clean job never touches the
list.
"""

from __future__ import annotations

import enum
import functools
import json
import linecache
import re
from collections.abc import Iterable
from dataclasses import dataclass
from types import TracebackType
from typing import Any

HISTORY_CAP = 20
"""Records kept per job: the last this many attempts (a refunded attempt, released on a
stop, counts as one too, so this is not ``max_attempts``)."""
ERROR_CHARS = 500
"""An error message is cut to this many characters (and says so)."""
TYPE_CHARS = 200
TRACEBACK_CHARS = 1500
"""A traceback keeps its last frames that fit in this many characters."""


class AttemptEnd(str, enum.Enum):
    """How an attempt ended."""

    DONE = "done"
    """``on_acquired`` returned: the job is DONE."""
    FAILED = "failed"
    """It raised; the job is tried again (by its retry schedule)."""
    GAVE_UP = "gave_up"
    """It raised and that was the end: its last attempt, or ``GiveUp``."""
    LOST = "lost"
    """Its lease ran out (the holder died, stalled or lost Redis): found by the next
    grant, or by the acquire that gave the job up."""
    RELEASED = "released"
    """Given back unused (refunded), other than by a stop."""
    STOPPED = "stopped"
    """Given back unused because its worker stopped (refunded)."""


@dataclass(frozen=True)
class ErrorText:
    """A failure as the history keeps it: bounded, plain text."""

    type: str
    message: str
    traceback: str | None = None


@dataclass(frozen=True)
class AttemptRecord:
    """One attempt of a job (:attr:`lockworker.Snapshot.history`)."""

    attempt: int
    token: int
    owner: str
    run: str
    started_ms: int
    """When it was granted (server clock, ms)."""
    ended_ms: int | None
    """When it ended (server clock, ms); None while it runs, and for an attempt whose
    lease ran out that nobody has found lost yet."""
    ending: str | None
    """One of :class:`AttemptEnd`'s values, or None while it runs."""
    error_type: str | None
    error: str | None
    traceback: str | None = None
    """The last frames of the failure's traceback that fit (bounded)."""


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "\u2026"


def tail_lines(lines: Iterable[str], limit: int) -> str:
    """The last of ``lines`` whose total length fits in ``limit`` characters (at least
    the very last, cut to fit)."""
    kept: list[str] = []
    size = 0
    for line in reversed(list(lines)):
        if size + len(line) > limit:
            break
        kept.append(line)
        size += len(line)
    if not kept:
        return _cut("".join(lines)[-limit:], limit)
    return "".join(reversed(kept))


def error_text(exc: BaseException) -> ErrorText:
    """``exc`` as the history keeps it: its type (qualified unless a builtin), its
    message cut to :data:`ERROR_CHARS`, and the last frames of its traceback that fit
    in :data:`TRACEBACK_CHARS` (None if it has none)."""
    kind = type(exc)
    name = kind.__qualname__ if kind.__module__ == "builtins" else (
        f"{kind.__module__}.{kind.__qualname__}"
    )
    trace = None
    if exc.__traceback__ is not None:
        trace = tail_lines(frame_lines(exc.__traceback__, TRACEBACK_CHARS), TRACEBACK_CHARS)
    return ErrorText(_cut(name, TYPE_CHARS), _cut(str(exc), ERROR_CHARS), trace)


def frame_lines(tb: TracebackType, limit: int) -> list[str]:
    """The traceback's frames as ``traceback.format_tb`` writes them, without its
    ``^^^`` position markers, oldest first, only the last ones that can fit in
    ``limit`` characters read.

    Why not ``format_tb``: it reads every frame's source and, since Python 3.11,
    parses the failing line of each to place the markers. That cost (a third of a
    millisecond measured, the larger part of a failure's own handling) is paid
    between a failed attempt and its release, so every handover waits for it.
    """
    frames: list[tuple[str, int, str]] = []
    current: TracebackType | None = tb
    while current is not None:
        code = current.tb_frame.f_code
        frames.append((code.co_filename, current.tb_lineno, code.co_name))
        current = current.tb_next
    lines: list[str] = []
    size = 0
    for filename, lineno, function in reversed(frames):
        line = f'  File "{filename}", line {lineno}, in {function}\n'
        linecache.checkcache(filename)  # source edited since it was read: read it anew
        source = linecache.getline(filename, lineno).strip()
        if source:
            line += f"    {source}\n"
        lines.append(line)
        size += len(line)
        if size > limit:
            break
    lines.reverse()
    return lines


FOLD_LIMIT_MS = 16**12
"""A clean attempt that took this long or longer is not folded (its duration would not
fit :data:`lockworker.model.codec.TOOK_DIGITS` hex digits)."""


def folds(
    last: RawRecord | None, records: int, *, token: int, ending: str, tail: str, now_ms: int
) -> bool:
    """True if the DONE settle of the attempt fenced by ``token``, at ``now_ms``, folds
    the job's history into its state (:class:`lockworker.model.codec.StateValue`):
    the history is that attempt's open record alone (``records`` long, ``last`` its
    last record), written with the same tail as its ending's (the owner, no error),
    started at the token's milliseconds (a new job's first grant: the state then
    tells the start), and ended at or after its start. The Lua steps decide the same
    (:mod:`lockworker.protocol.lua`).
    """
    return (
        ending == AttemptEnd.DONE.value and records == 1 and last is not None
        and last.token == token and last.ending is None and last.tail == tail
        and last.started_ms == token // 1000 and 0 <= now_ms - last.started_ms < FOLD_LIMIT_MS
    )


IMPLIED_TOKEN = 10**18
"""An attempt's record is implied by its token only below this token (its milliseconds
have at most 15 digits, exact as a number in the scripts)."""


def implied_start(attempt: int, token: int, now_ms: int) -> int | None:
    """The start (server ms) of an attempt whose grant wrote no record, or None if
    ``attempt`` and ``token`` cannot be one, seen at ``now_ms``.

    The grant of a job the server does not know writes its lease and state and no
    record: most jobs end at that attempt, and the record would be written, read and
    deleted again. The record is implied by what the lease and the state hold: attempt
    1, its run and owner, started at its token's milliseconds (the first token is the
    server's clock in microseconds at the grant). The next step on the job that
    needs it in the history writes it there: the settle (or folds it into a DONE
    state, :func:`folds`), a takeover or a give-up (closed as lost), a reset (open).
    The Lua steps decide the same (:mod:`lockworker.protocol.lua`, ``lw_implied``).
    """
    if attempt != 1 or not 1000 <= token < IMPLIED_TOKEN:
        return None
    started = token // 1000
    return started if 0 <= now_ms - started < FOLD_LIMIT_MS else None


def folded_record(
    attempt: int, token: int, run: str, owner: str, times: tuple[int, int]
) -> AttemptRecord:
    """The one clean attempt a DONE state folded in (:class:`lockworker.model.codec.
    StateValue`), as its record read: ``times`` are its start and end (server ms)."""
    return AttemptRecord(
        attempt, token, owner, run, times[0], times[1], AttemptEnd.DONE.value, None, None
    )


def record_tail(owner: str, error: ErrorText | None = None) -> str:
    """The JSON object that ends a record: the owner, and a failure's text."""
    if error is None:
        return _owner_tail(owner)
    fields: dict[str, str] = {"owner": owner}
    if error is not None:
        fields["error_type"] = error.type
        fields["error"] = error.message
        if error.traceback:
            fields["traceback"] = error.traceback
    return json.dumps(fields, separators=(",", ":"), ensure_ascii=False)


@functools.lru_cache(maxsize=256)
def _owner_tail(owner: str) -> str:
    """The tail of every grant and of every ending without an error: the same for all
    the steps of one owner, so encoded once (a step of the hot path, twice per job)."""
    return json.dumps({"owner": owner}, separators=(",", ":"), ensure_ascii=False)


_RECORD = re.compile(
    r"lw2\|(0|[1-9][0-9]*)\|(0|[1-9][0-9]*)\|([0-9a-f]*)\|([0-9]+)\|([0-9]*)\|([a-z_]*)\|(\{.*)",
    re.DOTALL,
)
_ENDINGS = {end.value for end in AttemptEnd}


@dataclass(frozen=True)
class RawRecord:
    """A record's fields as stored (the tail still JSON text)."""

    attempt: int
    token: int
    run: str
    started_ms: int
    ended_ms: int | None
    ending: str | None
    tail: str

    def encode(self) -> str:
        """The record as the history key holds it (the Lua steps write the same)."""
        ended = "" if self.ended_ms is None else str(self.ended_ms)
        return (
            f"lw2|{self.attempt}|{self.token}|{self.run}|{self.started_ms}|{ended}|"
            f"{self.ending or ''}|{self.tail}"
        )


def parse_record(raw: str | bytes) -> RawRecord | None:
    """The fields of a stored record, or None if it does not follow the grammar."""
    value = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else raw
    m = _RECORD.fullmatch(value)
    if m is None or (m[6] and m[6] not in _ENDINGS) or bool(m[5]) != bool(m[6]):
        return None
    return RawRecord(
        int(m[1]), int(m[2]), m[3], int(m[4]), int(m[5]) if m[5] else None, m[6] or None, m[7]
    )


def decode_record(raw: str | bytes, live_token: int | None = None) -> AttemptRecord | None:
    """A stored record as an :class:`AttemptRecord` (None if it is not one). A record
    still open whose lease is not the live one (``live_token``, the lock's token, None
    when no lease is live) reads as ``lost``, its end unknown."""
    found = parse_record(raw)
    if found is None:
        return None
    try:
        tail: Any = json.loads(found.tail)
    except ValueError:
        return None
    if not isinstance(tail, dict):
        return None

    def field(name: str) -> str | None:
        value = tail.get(name)
        return value if isinstance(value, str) else None

    ending = found.ending
    if ending is None and found.token != live_token:
        ending = AttemptEnd.LOST.value
    return AttemptRecord(
        found.attempt, found.token, field("owner") or "", found.run, found.started_ms,
        found.ended_ms, ending, field("error_type"), field("error"), field("traceback"),
    )


def read_history(raws: Iterable[Any], live_token: int | None) -> tuple[AttemptRecord, ...]:
    """The records of a history key's values, oldest first (values that are not
    records are left out)."""
    records = (decode_record(raw, live_token) for raw in raws)
    return tuple(r for r in records if r is not None)


_REFUNDED = (AttemptEnd.RELEASED.value, AttemptEnd.STOPPED.value)


def reset_before(records: tuple[AttemptRecord, ...] | list[AttemptRecord]) -> frozenset[int]:
    """The indices of ``records`` (oldest first) that a reset preceded: a reset clears
    the attempt count, so the next attempt's number is lower than the one after the
    record before it would have been (that one again after a refunded attempt, else the
    next). Read from the numbers alone, so a reset right after a refunded first attempt
    (which changed nothing the history shows) is not seen."""
    found = set()
    for i in range(1, len(records)):
        before = records[i - 1]
        expected = before.attempt if before.ending in _REFUNDED else before.attempt + 1
        if records[i].attempt < expected:
            found.add(i)
    return frozenset(found)


def handed_over(
    records: tuple[AttemptRecord, ...] | list[AttemptRecord],
) -> list[tuple[AttemptRecord, AttemptRecord]]:
    """The ``(before, after)`` pairs of consecutive attempts by different owners, with
    no reset between them: the job passed from one process to another (a holder that
    died, failed, or stopped, and another that took the next attempt)."""
    resets = reset_before(records)
    return [
        (records[i - 1], records[i])
        for i in range(1, len(records))
        if i not in resets and records[i].owner != records[i - 1].owner
    ]
