"""What a plain ``logging`` handler shows of a lockworker event: the event's name, then
its key fields as ``key=value`` pairs, rendered only when a handler asks for the
message. Kept apart from :mod:`lockworker.runtime.events` (which routes events) because
it is a format with rules of its own: which fields come first, and how a value is
quoted so that no value can add a field or a line.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Mapping
from functools import lru_cache
from typing import Any

RESERVED = frozenset(
    logging.LogRecord("", 0, "", 0, "", (), None).__dict__
) | {"message", "asctime", "taskName"}
"""``LogRecord`` attributes a field may not overwrite (``logging`` raises KeyError)."""

FIRST = (
    "job_id", "lock", "semaphore", "leader", "key", "stream", "namespace", "owner",
    "attempt", "token", "error",
)
"""The fields a record's message shows first, in this order: what the event is about
(a job, a lock...), where, whose, which attempt, and what went wrong; the others follow
in the order they were given."""
_FIRST_RANK = {name: rank for rank, name in enumerate(FIRST)}
_BARE = re.compile(r"[\w.:/@+,-]+").fullmatch
"""A value shown unquoted: one word of letters, digits and ``_.:/@+,-``; no space, quote,
``=`` or control character that could make it read as more than one field."""


class Fields:
    """An event's fields as its record's message shows them: ``key=value`` pairs, the
    :data:`FIRST` ones first, rendered only when a handler asks for the message (the
    ``event`` key, which the record carries beside them, is not a field).

    A value is shown bare when it is one plain word (``job_id=a``, ``attempt=1``);
    otherwise (a string with spaces, an ``error``, a list) it is double-quoted with
    JSON's escapes, non-printable characters escaped too, so that no value can add a
    field or a line to what is shown: ``error="RuntimeError('downstream said no')"``.
    Other objects are shown by their ``repr``.
    """

    __slots__ = ("_fields",)

    def __init__(self, fields: Mapping[str, Any]) -> None:
        self._fields = fields

    def __str__(self) -> str:
        fields = self._fields
        keys = sorted(fields, key=lambda k: _FIRST_RANK.get(k, len(FIRST)))
        return " ".join(f"{key}={shown(fields[key])}" for key in keys if key != "event")

    def __repr__(self) -> str:
        return f"<Fields {self}>"


def shown(value: Any) -> str:
    """One value of a record's message (:class:`Fields`)."""
    if isinstance(value, bool) or value is None:
        return str(value)
    text = value if isinstance(value, str) else repr(value)
    if _BARE(text):
        return text
    quoted = json.dumps(text, ensure_ascii=False)
    if not quoted.isprintable():  # a line or paragraph separator, a bidi control...
        quoted = "".join(c if c.isprintable() else f"\\u{ord(c):04x}" for c in quoted)
    return quoted


@lru_cache(maxsize=256)
def template(event: str) -> str:
    """``event`` then its fields, as a ``logging`` message template."""
    return event.replace("%", "%%") + " %s"
