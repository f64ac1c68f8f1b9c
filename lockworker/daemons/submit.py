"""Adding jobs to a stream (:func:`submit`), now or once due (``delay=``, ``at=``).

A delayed job waits off the stream, in the stream's sorted set of delayed jobs
(:mod:`lockworker.protocol.delayed`), so it holds no reader, no slot and no trimming
back while it waits, and the jobs submitted after it run at once. Every reader of the
stream moves the jobs come due into the stream before each read
(:class:`DueMover`), and bounds the read's block by the time to the next due one: a
due job reaches the stream within milliseconds of its due time by the server's clock
(TIME) while a reader reads, and never before it. In the stream it is an entry like
any other, served as any other.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

import redis

from lockworker.config import due
from lockworker.model.codec import check_payload
from lockworker.model.keys import JobKeys, check_name
from lockworker.protocol import text
from lockworker.protocol.delayed import add_delayed, move_due
from lockworker.runtime import retry
from lockworker.serving.delivery import stream_keys

DELAYED_PREFIX = "delayed:"
"""What the id of a job waiting off its stream starts with (an entry id never does)."""


@dataclass(frozen=True)
class Submitted:
    """Where a submitted job went: ``entry``, its stream entry's id (None while it
    waits); ``delayed``, its id while it waits off the stream (None if it went to the
    stream at once); ``due_ms``, when it is due, in the server's epoch ms (None: now)."""

    entry: str | None
    delayed: str | None = None
    due_ms: int | None = None

    @property
    def id(self) -> str:
        """The entry id, or ``delayed:<16 hex digits>`` for a job waiting off the stream."""
        return self.entry if self.entry is not None else f"{DELAYED_PREFIX}{self.delayed}"


def submit_job(
    client: redis.Redis, stream: str, job_id: str, payload: Any = None, *,
    delay: float | None = None, at: datetime | None = None,
) -> Submitted:
    """:func:`submit`, saying where the job went and when it is due."""
    keys = stream_keys(stream)
    check_name(job_id, "job_id")
    data = check_payload(payload)
    when = due(delay, at)
    if when is None:
        fields = {"job_id": job_id, "payload": data}
        return Submitted(text(client.xadd(keys.extra("entries"), fields)))  # type: ignore[arg-type]
    ident, entry, due_ms = add_delayed(client, keys, job_id, data, when)
    if entry is not None:
        return Submitted(entry, None, due_ms)
    return Submitted(None, ident, due_ms)


def submit(
    client: redis.Redis, stream: str, job_id: str, payload: Any = None, *,
    delay: float | None = None, at: datetime | None = None,
) -> str:
    """Add a job to ``stream`` for every reader to see; returns the entry id.

    ``payload`` must be JSON-serialisable; it is checked before anything is sent.

    ``delay`` (seconds >= 0) or ``at`` (an aware :class:`~datetime.datetime`), not
    both: the job is due then, by the server's clock. Until then it waits off the
    stream (the jobs after it are not held back, and it holds no slot), and the id
    returned is ``delayed:<16 hex digits>``; a job already due (``delay=0``, ``at`` in
    the past) goes to the stream at once and the entry id is returned.
    """
    return submit_job(client, stream, job_id, payload, delay=delay, at=at).id


class DueMover:
    """A reader's part in its stream's delayed jobs: before each read, move the due
    ones into the stream (one script; one ZRANGE of one member when none is due), and
    shorten the read's block to the time until the next is due."""

    __slots__ = ("_call", "client", "keys")

    def __init__(self, client: redis.Redis, keys: JobKeys, call: retry.Caller) -> None:
        self.client = client
        self.keys = keys
        self._call = call

    def block_ms(self, block_ms: int) -> int:
        """Move the due jobs; the ms a read may block (never 0, which blocks for ever)."""
        _moved, wait = self._call(
            lambda: move_due(self.client, self.keys), "move the due delayed jobs of stream"
        )
        return block_ms if wait is None else max(1, min(block_ms, wait))
