"""The one format of the lock and state values, and of payloads.

The lock value says which run of which owner holds which attempt::

    lw2|<token>|<attempt>|<run>|<owner>

and the state value what became of the job, and who touched it last::

    lw2|<status>|<attempt>|<token>|<run>|<owner>

``token`` and ``attempt`` are decimal integers of any length, without sign or leading
zeros (so each number has exactly one spelling and a value can be compared as a
string); ``status`` is ``pending``, ``done`` or ``gave_up``; ``run`` is lowercase hex,
unique per process run (a :class:`~lockworker.Worker`, a :class:`~lockworker.Leader`,
one acquisition of a :class:`~lockworker.Lock`), and is what tells a restarted process
with a stable ``owner`` label from its dead predecessor. The owner comes last so it may
hold any bytes, ``|`` included.

A failed attempt's state carries, where the run would be, when the job's next attempt
is due: the server's clock in milliseconds, in decimal (``lw2|pending|2|<token>|<due
ms>|<owner>``). A due time is a decimal number of at most 15 digits without a leading
zero; a run is 16 hex digits (:func:`new_run`), so the two never look alike. Release
0.2.0 parses the same grammar and ignores the field (it reads a run there, and a
failure's run is nobody's).

A DONE state may carry its job's whole history when that history is one clean attempt
(granted, and DONE, with nothing before it): the run is followed by the attempt's
duration in milliseconds, in lowercase hex (``lw2|done|1|<token>|<run><took>|<owner>``;
1-12 digits, so the field is 17-28 hex digits where a run alone is 16). The attempt
started at the token's milliseconds: a new job's first grant takes its token from the
server's clock, in microseconds, at the instant it records as the start. Folding the
record into the state drops the history key, which cost a DONE job more memory than
its state (:mod:`lockworker.model.history`). Releases 0.2.0 and 0.3.0 parse the field
as a run (every lockworker run is 16 hex digits, :func:`new_run`): they read the job
as DONE, and show that longer run.

A value that does not match this grammar exactly was not written by lockworker: it is
reported as :class:`~lockworker.errors.ForeignValueError` and never overwritten. The
Lua scripts parse the same grammar with :data:`LUA_PROLOGUE`; property tests feed both
sides the same values and check that they agree on every one.
"""

from __future__ import annotations

import json
import re
import secrets
from dataclasses import dataclass
from typing import Any, cast

from lockworker.errors import InvalidConfig
from lockworker.model.state import JobStatus

TAG = "lw2|"

_NUM = rb"(0|[1-9][0-9]*)"
_RUN = rb"([0-9a-f]*)"
_LOCK = re.compile(rb"lw2\|" + _NUM + rb"\|" + _NUM + rb"\|" + _RUN + rb"\|(.*)", re.DOTALL)
_STATE = re.compile(
    rb"lw2\|(pending|done|gave_up)\|" + _NUM + rb"\|" + _NUM + rb"\|" + _RUN + rb"\|(.*)",
    re.DOTALL,
)
_RUN_TEXT = re.compile(r"[0-9a-f]{16,32}")
_DUE = re.compile(r"[1-9][0-9]{0,14}")
DUE_DIGITS = 15
"""A due time (server milliseconds) has at most this many digits; a run has more."""
RUN_DIGITS = 16
"""Every run lockworker makes has this many hex digits (:func:`new_run`)."""
TOOK_DIGITS = 12
"""A DONE state's folded duration has at most this many hex digits (8,900 years)."""


@dataclass(frozen=True)
class Holder:
    """Who asks for a lease: a readable ``owner`` label and the ``run`` that makes it
    unique (a restarted process keeps its label and gets a new run)."""

    owner: str
    run: str

    def value(self, token: int, attempt: int) -> LockValue:
        """The lock value this holder writes for ``attempt``, fenced by ``token``."""
        return LockValue(token, attempt, self.run, self.owner)


@dataclass(frozen=True)
class LockValue:
    """Who holds which attempt of a job: the value of its lock key."""

    token: int
    attempt: int
    run: str
    owner: str

    def encode(self) -> str:
        return f"{TAG}{self.token}|{self.attempt}|{self.run}|{self.owner}"


@dataclass(frozen=True)
class StateValue:
    """What became of a job, and which run touched it last: the value of its state key.

    ``due_ms``: when the job's next attempt may start (the server's clock, ms), written
    by a failed attempt in the run's place (so a value has a run or a due time).
    ``took_ms``: a DONE job whose history was one clean attempt carries that attempt's
    duration after the run, and no history key (:meth:`folded`)."""

    status: JobStatus
    attempt: int
    token: int
    run: str
    owner: str
    due_ms: int | None = None
    took_ms: int | None = None

    def encode(self) -> str:
        middle = self.run if self.due_ms is None else str(self.due_ms)
        if self.took_ms is not None:
            middle += f"{self.took_ms:x}"
        return f"{TAG}{self.status.value}|{self.attempt}|{self.token}|{middle}|{self.owner}"

    def folded(self) -> tuple[int, int] | None:
        """``(started_ms, ended_ms)`` of the one clean attempt a DONE state holds."""
        if self.took_ms is None:
            return None
        started = self.token // 1000
        return started, started + self.took_ms


def _raw(value: str | bytes) -> bytes:
    # A client that decodes responses hands us str; the grammar is defined on bytes.
    return value.encode("utf-8", "surrogateescape") if isinstance(value, str) else value


def _owner(raw: bytes) -> str:
    return raw.decode("utf-8", "replace")


def decode_lock(raw: str | bytes) -> LockValue | None:
    """The lock value, or None if it does not follow the grammar exactly."""
    m = _LOCK.fullmatch(_raw(raw))
    if m is None:
        return None
    return LockValue(int(m[1]), int(m[2]), m[3].decode("ascii"), _owner(m[4]))


def decode_state(raw: str | bytes) -> StateValue | None:
    """The state value, or None if it does not follow the grammar exactly."""
    m = _STATE.fullmatch(_raw(raw))
    if m is None:
        return None
    status = JobStatus(m[1].decode("ascii"))
    run = m[4].decode("ascii")
    if _DUE.fullmatch(run):
        return StateValue(status, int(m[2]), int(m[3]), "", _owner(m[5]), int(run))
    if status is JobStatus.DONE and RUN_DIGITS < len(run) <= RUN_DIGITS + TOOK_DIGITS:
        return StateValue(
            status, int(m[2]), int(m[3]), run[:RUN_DIGITS], _owner(m[5]),
            took_ms=int(run[RUN_DIGITS:], 16),
        )
    return StateValue(status, int(m[2]), int(m[3]), run, _owner(m[5]))


_GRANT = re.compile(rb"([0-9]+)\|([0-9]+)")


def decode_grant(raw: str | bytes) -> tuple[int, int] | None:
    """``(token, attempt)`` of the ``token|attempt`` that a ``Lock``'s release pushes
    onto the granted waiter's own list (Lua writes it, in
    :mod:`lockworker.primitives.lockqueue`); None if ``raw`` is anything else."""
    found = _GRANT.fullmatch(_raw(raw))
    return None if found is None else (int(found[1]), int(found[2]))


def new_run() -> str:
    """A fresh run id: 16 random hex digits, unique per process run or acquisition."""
    return secrets.token_hex(8)


def check_run(run: str) -> str:
    """``run`` if it is 16-32 lowercase hex digits (what :func:`new_run` makes; never
    a due time, which has at most 15 digits)."""
    if not isinstance(run, str) or not _RUN_TEXT.fullmatch(run):
        raise InvalidConfig(f"run must be 16-32 lowercase hex digits, got {run!r}")
    return run


# The Lua side of the grammar: every script that reads a lock or state value starts
# with this prologue, so there is one parser per language and both follow the rules
# above. Numbers stay decimal strings (Lua numbers are doubles: 10^15 would be written
# back as 1e+15, and integers past 2^53 would round), compared by length then text and
# incremented digit by digit.
LUA_PROLOGUE = r"""
local function lw_num(s)
  return s ~= nil and (s == '0' or string.find(s, '^[1-9][0-9]*$') ~= nil)
end
local function lw_lock(v)
  local t, a, r, o = string.match(v, '^lw2|([0-9]+)|([0-9]+)|([0-9a-f]*)|(.*)$')
  if not (lw_num(t) and lw_num(a)) then return nil end
  return {token = t, attempt = a, run = r, owner = o}
end
local function lw_state(v)
  local s, a, t, r, o = string.match(v, '^lw2|([a-z_]+)|([0-9]+)|([0-9]+)|([0-9a-f]*)|(.*)$')
  if not (s == 'pending' or s == 'done' or s == 'gave_up') then return nil end
  if not (lw_num(a) and lw_num(t)) then return nil end
  if #r <= 15 and string.find(r, '^[1-9][0-9]*$') then
    return {status = s, attempt = a, token = t, run = '', due = r, owner = o}
  end
  if s == 'done' and #r > 16 and #r <= 28 then
    return {status = s, attempt = a, token = t, run = string.sub(r, 1, 16),
            took = string.sub(r, 17), owner = o}
  end
  return {status = s, attempt = a, token = t, run = r, owner = o}
end
local function lw_lock_value(token, attempt, run, owner)
  return 'lw2|' .. token .. '|' .. attempt .. '|' .. run .. '|' .. owner
end
local function lw_state_value(status, attempt, token, run, owner)
  return 'lw2|' .. status .. '|' .. attempt .. '|' .. token .. '|' .. run .. '|' .. owner
end
local function lw_gt(a, b)
  if #a ~= #b then return #a > #b end
  return a > b
end
local function lw_incr(s)
  local i = #s
  while i > 0 and string.byte(s, i) == 57 do i = i - 1 end
  if i == 0 then return '1' .. string.rep('0', #s) end
  return string.sub(s, 1, i - 1) .. string.char(string.byte(s, i) + 1) .. string.rep('0', #s - i)
end
local function lw_now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local function lw_now_us()
  local t = redis.call('TIME')
  return t[1] .. string.format('%06d', tonumber(t[2]))
end
"""


def to_json(value: Any) -> str:
    """Compact, strict JSON (no NaN or infinities, which other languages cannot read).

    Raises TypeError or ValueError for values JSON cannot hold.
    """
    return json.dumps(value, separators=(",", ":"), allow_nan=False)


def check_payload(payload: Any) -> str:
    """JSON text of ``payload``; raise a clear error if it cannot be serialised.

    Payloads travel between processes (streams, status), so they must be JSON. This is
    checked before any Redis call, so a bad payload never reaches the lock protocol.
    Dict keys must be strings: JSON would turn ``{1: "a"}`` into ``{"1": "a"}`` (and
    ``{1: "a", "1": "b"}`` into one key), so a process reading it back would see
    another payload than the one submitted.
    """
    if payload is None:
        return "null"
    bad_key = _non_text_key(payload)
    if bad_key is not None:
        raise InvalidConfig(
            f"payload dict keys must be strings (JSON has no other keys), got {bad_key!r} "
            f"in {type(payload).__name__}"
        )
    try:
        return to_json(payload)
    except (TypeError, ValueError) as exc:
        raise InvalidConfig(
            f"payload must be JSON-serialisable (dict, list, str, int, float, bool, None), "
            f"got {type(payload).__name__}: {exc}"
        ) from exc


def payload_view(payload: Any) -> Any:
    """``payload`` as every process sees it: checked, encoded and decoded again.

    The hook of the process that was handed the payload gets this too, so a tuple is a
    list there as well, and no process sees an object the others cannot.
    """
    if payload is None or isinstance(payload, (str, bool, int)):
        check_payload(payload)  # still refuses what JSON cannot hold (none of these)
        return payload
    return json.loads(check_payload(payload))


def _non_text_key(value: Any, depth: int = 0) -> object | None:
    """The first dict key that is not a str, anywhere in ``value`` (None if none)."""
    if depth > 100:
        return None  # deeper nesting is json's to refuse (recursion)
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                return cast(object, key)
            found = _non_text_key(item, depth + 1)
            if found is not None:
                return found
    elif isinstance(value, (list, tuple)):
        for item in value:
            found = _non_text_key(item, depth + 1)
            if found is not None:
                return found
    return None
