"""Value encoding of the lock and state keys, and of payloads.

The lock value says who holds which attempt::

    lw1|<token>|<attempt>|<owner>

and the state value what became of the job::

    lw1|<status>|<attempt>|<token>|<owner>

Both start with the version tag ``lw1|``. A value without it was not written by
lockworker: it is reported as foreign and never overwritten. The owner comes last so it
may contain any character, ``|`` included. The Lua scripts in :mod:`lockworker.protocol`
parse the same format; the two are tested against each other.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from lockworker.errors import InvalidConfig
from lockworker.state import JobStatus

TAG = "lw1|"


@dataclass(frozen=True)
class LockValue:
    token: int
    attempt: int
    owner: str

    def encode(self) -> str:
        return f"{TAG}{self.token}|{self.attempt}|{self.owner}"


@dataclass(frozen=True)
class StateValue:
    status: JobStatus
    attempt: int
    token: int
    owner: str

    def encode(self) -> str:
        return f"{TAG}{self.status.value}|{self.attempt}|{self.token}|{self.owner}"


def _text(raw: str | bytes) -> str:
    return raw.decode("utf-8", "replace") if isinstance(raw, bytes) else raw


def decode_lock(raw: str | bytes) -> LockValue | None:
    """The lock value, or None if lockworker did not write it."""
    text = _text(raw)
    if not text.startswith(TAG):
        return None
    parts = text[len(TAG) :].split("|", 2)
    if len(parts) != 3 or not parts[0].isdigit() or not parts[1].isdigit():
        return None
    return LockValue(int(parts[0]), int(parts[1]), parts[2])


def decode_state(raw: str | bytes) -> StateValue | None:
    """The state value, or None if lockworker did not write it."""
    text = _text(raw)
    if not text.startswith(TAG):
        return None
    parts = text[len(TAG) :].split("|", 3)
    if len(parts) != 4 or not parts[1].isdigit() or not parts[2].isdigit():
        return None
    try:
        status = JobStatus(parts[0])
    except ValueError:
        return None
    return StateValue(status, int(parts[1]), int(parts[2]), parts[3])


def to_json(value: Any) -> str:
    """Compact, strict JSON (no NaN or infinities, which other languages cannot read).

    Raises TypeError or ValueError for values JSON cannot hold.
    """
    return json.dumps(value, separators=(",", ":"), allow_nan=False)


def check_payload(payload: Any) -> str:
    """JSON text of ``payload``; raise a clear error if it cannot be serialised.

    Payloads travel between processes (streams, status), so they must be JSON. This is
    checked before any Redis call, so a bad payload never reaches the lock protocol.
    """
    if payload is None:
        return "null"
    try:
        return to_json(payload)
    except (TypeError, ValueError) as exc:
        raise InvalidConfig(
            f"payload must be JSON-serialisable (dict, list, str, int, float, bool, None), "
            f"got {type(payload).__name__}: {exc}"
        ) from exc
