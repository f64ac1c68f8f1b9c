"""Where :meth:`lockworker.Worker.serve` gets its jobs: iterables and Redis Streams.

A source hands out :class:`Delivery` objects; ``serve`` calls ``delivery.resolved()``
once the job is settled for this process (done here, done elsewhere, given up), never
for a job left pending by a stop. A plain iterable ignores that call; a
:class:`StreamSource` uses it to save its read position only past jobs that are
resolved, so a crash can repeat a job's look-up but never skip a job.

Redis Streams fan-out (:class:`StreamSource`, :func:`submit`): producers XADD entries
``job_id``/``payload`` (JSON) to the stream; every reader sees every entry (plain XREAD),
and the lock protocol makes exactly one process do each job. With ``group=``, the
readers share the entries through a consumer group instead, each entry to one member
(:mod:`lockworker.daemons.groupsource`).

Keys of stream ``jobs`` share one hash tag (one Cluster slot): ``lw:stream:streams:
{jobs}:`` then ``entries`` (the stream), ``positions`` (owner -> last entry id resolved
by that owner), ``readers`` (sorted set: owner -> when its registration ends),
``namespaces`` (owner -> the namespace it serves), ``progress`` (namespace -> entry id
up to which every entry is resolved there), ``notdone`` (namespace -> the highest
entry id a reader of it resolved otherwise than DONE) and ``delayed`` (jobs submitted
with ``delay=``/``at=``, off the stream until due: :mod:`lockworker.daemons.submit`);
docs/daemons.md has the table.

A stream's progress is the record of its finished entries. Job states are per
namespace, so the progress is too: the highest position any reader of the namespace
saved (a position is saved only past resolved jobs, and only as far as every entry
before it is resolved). Under ``serve`` a reader knows its namespace (the worker's),
and a reader behind its namespace's progress (restarted, lagging, a backup) skips to
it without looking at any job there: when it starts, and whenever it reads while its
last word from the server is :data:`SAVE_EVERY` old (the word comes back with the save
of its own position, in the same call). An entry the progress shows resolved is never
run again, whatever became of its job's DONE record.

Each save also trims what no live reader needs: entries up to every live namespace's
progress (a dead or lagging reader holds back nothing its namespace resolved), up to
every live reader of no namespace's position, and below what a consumer group still
has pending (:mod:`lockworker.protocol.streams`, docs/daemons.md). A following backup
trails its primary instead of reading each entry (:mod:`lockworker.serving.trail`).
"""

from __future__ import annotations

import collections
import contextlib
import re
import threading
from collections.abc import Callable, Iterator
from typing import Any

import redis

from lockworker.clock import Clock, SystemClock
from lockworker.config import count, seconds
from lockworker.daemons.groupsource import BAD_ENTRY, GroupReader, Member
from lockworker.daemons.submit import DueMover, submit
from lockworker.errors import InvalidConfig, LockworkerError
from lockworker.model.keys import check_name
from lockworker.protocol import text
from lockworker.protocol.streams import NOT_DONE, TOUCH, entry_order, fanout_keys, touched
from lockworker.protocol.trail import TRAIL, Entries, read_entries
from lockworker.runtime import events, registering, retry
from lockworker.serving.delivery import (
    STREAMS_NAMESPACE,
    Delivery,
    IterableSource,
    Source,
    as_source,
    job_of,
    stream_keys,
)
from lockworker.serving.trail import Trailing

__all__ = [
    "BAD_ENTRY", "READER_TTL", "SAVE_FAILED", "STREAMS_NAMESPACE", "Delivery", "IterableSource",
    "Source", "StreamSource", "as_source", "stream_keys", "submit",
]

READER_TTL = 6 * 3600.0
"""Default ``reader_ttl``: how long a namespace's unfinished entries are kept after its
last reader was seen (a reader of no namespace: the entries after its position)."""
SAVE_EVERY = 0.05
"""Seconds between two saves of a reader's position while jobs resolve: a busy stream
saves once per this many jobs resolved, not once per job (a crash repeats at most
this long's look-ups, each of which finds its job DONE); an idle one saves at once."""
IDLE_TOUCH = 1.0
"""Seconds between two touches of a reader of a namespace that reads nothing: its saved
position follows its namespace's progress past entries trimmed before it read them."""
SAVE_FAILED = "stream.save_failed"
PROGRESS = "stream.progress"
"""Debug, at each touch: the ``position`` saved, the ``progress`` of the reader's
``namespace`` (None: it names none), ``behind_ms`` (how far the position it had saved
was behind that progress, by entry time: what it skips) and ``holds_trimming`` (whether trimming
waits for this reader's own position: only for a reader of no namespace).
:mod:`lockworker.metrics` shows the last of each stream."""
SKIPPED = "stream.skipped"
"""Debug: a reader jumped from ``from_id`` to its namespace's ``progress``, passing
over the entries between without a look at their jobs."""
GROUP_BATCH = 16
"""Default ``batch`` of a group member: entries it takes ahead of its slots (which no
other member serves meanwhile), so kept small."""
_ENTRY_ID = re.compile(r"^\d+-\d+$")




class StreamSource:
    """Every job submitted to a Redis stream, for one reader ``owner``.

    :param owner: the reader's stable name (e.g. ``host-a/billing``): a restarted
        process with the same owner resumes after the last job it resolved and catches
        up on what was submitted meanwhile. Two live processes must not share an owner.
    :param block: seconds one XREAD blocks; bounds how long a stop takes to notice
        (keep the client's ``socket_timeout`` above it).
    :param batch: entries read per XREAD (default 100); in a group, entries a member
        reads ahead of its free slots (default 16; no other member serves them
        meanwhile).
    :param start: where a new owner (no saved position) starts: ``"0"`` everything
        still in the stream, ``"$"`` only jobs submitted from now on, or an entry id.
    :param reader_ttl: seconds a reader stays registered without touching the stream
        (default six hours); a reader gone longer loses its position. A reader under
        ``serve`` holds back only its namespace's unfinished entries, and skips what its
        namespace resolved (the stream's progress, see the module); one of no namespace
        holds trimming back at its own position while registered.
    :param redis_retry: retry policy for connection errors while reading or saving;
        when it runs out, :class:`~lockworker.RedisUnavailable` ends ``serve``.
    :param group: a consumer group's name: share the stream's entries with the other
        members of the group, each entry to one of them, instead of reading every entry
        (:mod:`lockworker.daemons.groupsource`; ``owner`` is the member's consumer name,
        ``start`` where a new group starts). Served by ``Worker.serve`` only, which
        gives it the worker's lease and role.
    """

    def __init__(
        self,
        client: redis.Redis,
        stream: str,
        *,
        owner: str,
        block: float = 0.25,
        batch: int | None = None,
        start: str = "0",
        reader_ttl: float = READER_TTL,
        clock: Clock | None = None,
        logger: Any = None,
        redis_retry: retry.RetryPolicy | None = None,
        group: str | None = None,
    ) -> None:
        self.keys = stream_keys(stream)
        self.stream = stream
        self.owner = check_name(owner, "owner")
        block, reader_ttl = seconds(block, "block"), seconds(reader_ttl, "reader_ttl")
        self.group = None if group is None else check_name(group, "group")
        if batch is None:
            batch = 100 if group is None else GROUP_BATCH
        batch = count(batch, "batch")
        if start == "0":
            start = "0-0"
        if not isinstance(start, str) or (start != "$" and not _ENTRY_ID.match(start)):
            raise InvalidConfig(f"start must be '0', '$' or an entry id like '1-0', got {start!r}")
        self.client = client
        self.block = float(block)
        self.batch = batch
        self.start = start
        self.reader_ttl = float(reader_ttl)
        self.clock: Clock = clock or SystemClock()
        self.redis_retry = redis_retry or retry.DEFAULT
        self._log = events.logger(events.SOURCES, logger, stream=stream, owner=self.owner)
        self._call = retry.Caller(self.clock, self.redis_retry, self._log, f" {stream!r}")
        self._due = DueMover(client, self.keys, self._call)
        self._lock = threading.Lock()
        self._read: collections.deque[str] = collections.deque()
        self._done: set[str] = set()
        self._last_touch = float("-inf")
        self._unsaved: str | None = None
        self._closed = True
        self._buffered = 0
        self.namespace: str | None = None
        """The namespace of the worker serving this reader (``serve`` says, through
        :meth:`attach`): its position counts toward that namespace's progress, and it
        skips what the progress shows resolved. None: read as release 0.3.0 did."""
        self._progress: str | None = None
        self._undone: set[str] = set()
        """Entries read and resolved here otherwise than DONE, not yet passed."""
        self._not_done: str | None = None
        """The highest such entry the position passed, until a touch saved it."""
        self._trailing: Trailing | None = None  # a following backup's (:meth:`trail`)
        self._registration = registering.stream(client, stream)  # the views' list
        self._group = None if self.group is None else GroupReader(
            client, self.keys, owner=self.owner, group=self.group, block=self.block,
            batch=batch, start=start, reader_ttl=self.reader_ttl, clock=self.clock,
            log=self._log, call=self._call,
        )

    def attach(self, worker: Member) -> None:
        """``serve`` tells a source the worker it serves for: a group its lease, role
        and presence; a fan-out reader its namespace, whose progress it follows."""
        self._registration()  # the views' list (a fan-out reader's touch adds it too)
        if self._group is not None:
            self._group.attach(worker)
        elif self.namespace != worker.namespace:
            self.namespace, self._progress = worker.namespace, None

    def trail(self, deferring: Callable[[], bool], delay: float) -> Trailing | None:
        """A following backup's ``serve`` trails its primary while ``deferring()``
        (:mod:`lockworker.serving.trail`); returns what its deferrals nudge on a
        handover (None for a group's member, which reads only what it is given)."""
        if self._group is not None:
            return None
        self._trailing = Trailing(deferring, delay, self.clock.monotonic())
        return self._trailing

    @property
    def buffered(self) -> int:
        """Entries read and not yet delivered: the next deliveries come without a wait.
        A hint for a reader in another thread (the asyncio ``serve`` takes them in one
        hop instead of one per delivery); it may be stale by the time it is read."""
        if self._group is not None:
            return self._group.buffered
        return self._buffered

    def resolving(self) -> contextlib.AbstractContextManager[None]:
        """Resolutions reported together (``delivery.resolved()`` of many deliveries, in
        one thread): in a group, acknowledged in one XACK at the end; a fan-out reader
        saves its position at most every :data:`SAVE_EVERY` seconds anyway."""
        if self._group is not None:
            return self._group.resolving()
        return contextlib.nullcontext()

    @property
    def entries_key(self) -> str:
        return self.keys.extra("entries")

    def position(self) -> str | None:
        """The entry id up to which this owner resolved every job (None if unknown)."""
        raw = self.client.hget(self.keys.extra("positions"), self.owner)
        return None if raw is None else text(raw)

    def progress(self) -> str | None:
        """The entry id up to which every entry is resolved in this reader's namespace,
        as last read from the server (None: no namespace, or not read yet)."""
        return self._progress

    def touch(self, position: str = "") -> str:
        """Register or refresh this reader, save ``position``, and trim; returns the
        saved position (for a reader of a namespace, never behind its progress)."""
        self._registration()
        self._last_touch = self.clock.monotonic()
        ttl_ms = max(1, round(self.reader_ttl * 1000))
        not_done = self._not_done  # saved before, or with, the position passing it
        args: list[str | int] = [
            self.owner, position, ttl_ms, self.start, self.namespace or "", not_done or "",
        ]
        keys = [*fanout_keys(self.keys), self.keys.extra(NOT_DONE)]
        saved, progress, behind = touched(
            self._call(
                lambda: TOUCH(self.client, keys, args), "save the position of stream"
            )
        )
        with self._lock:
            if self._not_done == not_done:
                self._not_done = None
        self._progress = progress
        self._log.debug(
            PROGRESS, namespace=self.namespace, position=saved, progress=progress,
            behind_ms=behind, holds_trimming=progress is None,
        )
        return saved

    def deliveries(self, stop: threading.Event) -> Iterator[Delivery]:
        """Jobs after this owner's saved position, until ``stop`` is set (in a group:
        the entries this member is given)."""
        if self._group is not None:
            yield from self._group.deliveries(stop)
            return
        with self._lock:  # a new pass starts from the saved position: forget the last one
            self._read.clear()
            self._done.clear()
            self._undone.clear()
            self._unsaved = None
            self._closed = False
        try:
            yield from self._read_from(self.touch(), stop)
        finally:
            with self._lock:  # from now on every resolution saves at once
                self._closed = True
            self._save(force=True)

    def _read_from(self, last_read: str, stop: threading.Event) -> Iterator[Delivery]:
        block_ms = max(1, round(self.block * 1000))
        read_any = False
        while not stop.is_set():
            self._save(force=True)  # what resolved while the last batch was served
            since = self.clock.monotonic() - self._last_touch
            every = SAVE_EVERY if read_any else IDLE_TOUCH
            if since >= self.reader_ttl / 3 or (self.namespace is not None and since >= every):
                self.touch()  # a reader that reads on hears of its namespace's progress
            last_read = self._skip(last_read)
            urgent, entries = self._poll(last_read, block_ms)
            read_any = bool(entries)
            self._buffered = len(entries)
            for entry_id, fields in entries:
                self._buffered -= 1
                if stop.is_set():
                    return
                last_read = entry_id
                if self._resolved_here(entry_id):
                    continue  # resolved in the namespace: no look, nothing to save
                with self._lock:
                    self._read.append(entry_id)
                delivery = self._decode(entry_id, fields, urgent)
                if delivery is None:
                    self._resolved(entry_id)
                    continue
                yield delivery

    def _poll(self, last_read: str, block_ms: int) -> tuple[bool, Entries]:
        """The next entries after ``last_read`` (XREAD; trailing a primary, TRAIL), and
        whether a handover asked for them (urgent)."""
        trailing = self._trailing
        if trailing is None or self.namespace is None or not trailing.deferring():
            wait_ms = self._due.block_ms(block_ms)  # the delayed jobs come due join
            return False, read_entries(self._call(lambda: self.client.xread(
                {self.entries_key: last_read}, count=self.batch, block=wait_ms
            ), "read stream"))
        keys = [self.entries_key, self.keys.extra("progress")]
        progress, entries = trailing.poll(lambda *args: self._call(
            lambda: TRAIL(self.client, keys, [self.namespace, last_read, *args]), "trail stream"
        ), self.batch, self.clock)
        if progress is not None and not self._resolved_here(progress):
            self._progress = progress
        if not entries:
            self.clock.wait(trailing.nudged, trailing.pause(self.block))
        return trailing.urgent, entries

    def _skip(self, last_read: str) -> str:
        """Where to read on from: past ``last_read``, or past the namespace's progress
        if that is further (every entry up to it is resolved there)."""
        progress = self._progress
        if progress is None or entry_order(progress) <= entry_order(last_read):
            return last_read
        self._log.debug(SKIPPED, namespace=self.namespace, from_id=last_read, progress=progress)
        return progress

    def _resolved_here(self, entry_id: str) -> bool:
        """Whether the namespace's progress, as last heard, is at or past ``entry_id``."""
        progress = self._progress
        return progress is not None and entry_order(entry_id) <= entry_order(progress)

    def _decode(self, entry_id: str, fields: dict[str, str], urgent: bool) -> Delivery | None:
        job = job_of(fields)
        if job is None:
            self._log.error(BAD_ENTRY, entry_id=entry_id, fields=fields)
            return None
        return Delivery(
            job[0], job[1], lambda: self._resolved(entry_id), decoded=True,
            stream=self.stream, entry=entry_id, not_done=lambda: self._undo(entry_id),
            urgent=urgent,
        )

    def _undo(self, entry_id: str) -> None:
        """``entry_id`` is resolved here otherwise than DONE (reported before its
        resolution): the touch that saves a position past it records it."""
        with self._lock:
            self._undone.add(entry_id)

    def _resolved(self, entry_id: str) -> None:
        """Mark ``entry_id`` resolved; the position moves past every resolved entry,
        saved at most every :data:`SAVE_EVERY` seconds while the reader reads (at once
        once it stopped reading: jobs still running then are the last)."""
        with self._lock:
            self._done.add(entry_id)
            while self._read and self._read[0] in self._done:
                self._unsaved = self._read.popleft()
                self._done.discard(self._unsaved)
                if self._unsaved in self._undone:
                    self._undone.discard(self._unsaved)
                    self._not_done = self._unsaved  # entries pass in order: the highest
        self._save(force=False)

    def _save(self, *, force: bool) -> None:
        """Save the unsaved position: with ``force``, or when the last save is
        :data:`SAVE_EVERY` old, or once the reader stopped reading."""
        with self._lock:
            position = self._unsaved
            if position is None or not (
                force or self._closed
                or self.clock.monotonic() - self._last_touch >= SAVE_EVERY
            ):
                return
            self._unsaved = None
            self._last_touch = self.clock.monotonic()  # no other thread saves meanwhile
        try:
            self.touch(position)
        except (redis.RedisError, LockworkerError) as exc:  # the next save goes past it
            self._log.warning(SAVE_FAILED, position=position, error=events.describe(exc))
