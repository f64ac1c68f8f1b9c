"""Where :meth:`lockworker.Worker.serve` gets its jobs: iterables and Redis Streams.

A source hands out :class:`Delivery` objects; ``serve`` calls ``delivery.resolved()``
once the job is settled for this process (done here, done elsewhere, given up), never
for a job left pending by a stop. A plain iterable ignores that call; a
:class:`StreamSource` uses it to save its read position only past jobs that are
resolved, so a crash can repeat a job's look-up but never skip a job.

Redis Streams fan-out (:class:`StreamSource`, :func:`submit`): producers XADD entries
``job_id``/``payload`` (JSON) to the stream; every reader sees every entry (plain XREAD,
no consumer groups), and the lock protocol makes exactly one process do each job.

Keys of stream ``jobs`` (one hash tag, so one Cluster slot)::

    lw:stream:streams:{jobs}:entries     the stream
    lw:stream:streams:{jobs}:positions   hash: owner -> last entry id resolved by that owner
    lw:stream:streams:{jobs}:readers     sorted set: owner -> when its registration ends (ms)

Trimming policy: each reader, when it saves its position (and at least every third of
``reader_ttl`` while idle), forgets readers whose registration ran out, then trims the
entries below the lowest position of the live readers. An entry is therefore removed
only once every live reader has resolved it; a reader gone for longer than its
``reader_ttl`` stops holding trimming back and loses its saved position. Trimmed entries
are all resolved jobs (someone resolved them), so a reader that returns late misses
nothing that still needs doing.
"""

from __future__ import annotations

import collections
import json
import re
import threading
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol

import redis

from lockworker.clock import Clock, SystemClock
from lockworker.config import count, seconds
from lockworker.errors import InvalidConfig, LockworkerError
from lockworker.model.codec import check_payload
from lockworker.model.keys import JobKeys, Space, check_name
from lockworker.protocol import text
from lockworker.runtime import events, retry

STREAMS_NAMESPACE = "streams"
READER_TTL = 6 * 3600.0
"""Default ``reader_ttl``: a quarter of the worker's default ``retention`` (a day), so
that a reader catching up after a long absence finds old jobs DONE, not forgotten."""
SAVE_EVERY = 0.05
"""Seconds between two saves of a reader's position while jobs resolve: a busy stream
saves once per this many jobs resolved, not once per job (a crash repeats at most
this long's look-ups, each of which finds its job DONE); an idle one saves at once."""
SAVE_FAILED = "stream.save_failed"
BAD_ENTRY = "stream.bad_entry"
_ENTRY_ID = re.compile(r"^\d+-\d+$")


def _noop() -> None:
    """The ``resolved`` callback of sources that keep no position."""


@dataclass(frozen=True)
class Delivery:
    """One job handed out by a source."""

    job_id: str
    payload: Any
    resolved: Callable[[], None] = field(default=_noop, repr=False, compare=False)
    """Called by ``serve`` once the job is resolved for this process (not when stopped)."""


class Source(Protocol):
    """What ``serve`` needs of a source: deliveries until exhausted or ``stop`` is set."""

    def deliveries(self, stop: threading.Event) -> Iterator[Delivery]: ...


class IterableSource:
    """Any iterable of ``(job_id, payload)`` pairs, read lazily."""

    def __init__(self, items: Iterable[Any]) -> None:
        self.items = items

    def deliveries(self, stop: threading.Event) -> Iterator[Delivery]:
        for item in self.items:
            if stop.is_set():
                return
            if not isinstance(item, (tuple, list)) or len(item) != 2:
                raise InvalidConfig(
                    f"source items must be (job_id, payload) pairs, got {item!r}"
                )
            yield Delivery(item[0], item[1])


def as_source(source: object) -> Source:
    """``source`` if it is a :class:`Source`, else an iterable wrapped as one."""
    if hasattr(source, "deliveries"):
        return source
    if isinstance(source, (str, bytes, dict)) or not isinstance(source, Iterable):
        raise InvalidConfig(
            "source must be an iterable of (job_id, payload) pairs or a StreamSource, "
            f"got {type(source).__name__}"
        )
    return IterableSource(source)


def stream_keys(stream: str) -> JobKeys:
    """The keys of ``stream`` (see the module docstring)."""
    return JobKeys(STREAMS_NAMESPACE, check_name(stream, "stream"), Space.STREAM)


def submit(client: redis.Redis, stream: str, job_id: str, payload: Any = None) -> str:
    """Add a job to ``stream`` for every reader to see; returns the entry id.

    ``payload`` must be JSON-serialisable; it is checked before anything is sent.
    """
    keys = stream_keys(stream)
    check_name(job_id, "job_id")
    data = check_payload(payload)
    return text(client.xadd(keys.extra("entries"), {"job_id": job_id, "payload": data}))


# TOUCH: register (or refresh) a reader, save its position, forget readers gone too
# long, and trim the entries every live reader has resolved.
# KEYS[1] entries   KEYS[2] positions   KEYS[3] readers
# ARGV[1] owner   ARGV[2] position to save ('' for none)   ARGV[3] reader ttl ms
# ARGV[4] start for a new reader ('0-0', '$' or an entry id)
# returns the owner's saved position (positions only move forward)
TOUCH = """
local function split(id) return string.match(id, '^(%d+)-(%d+)$') end
local function less(a, b)
  local am, as = split(a)
  local bm, bs = split(b)
  am, as, bm, bs = tonumber(am), tonumber(as), tonumber(bm), tonumber(bs)
  return am < bm or (am == bm and as < bs)
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local pos = redis.call('HGET', KEYS[2], ARGV[1])
if not pos then
  pos = ARGV[4]
  if pos == '$' then
    local last = redis.call('XREVRANGE', KEYS[1], '+', '-', 'COUNT', 1)
    if #last > 0 then pos = last[1][1] else pos = '0-0' end
  end
end
if ARGV[2] ~= '' and less(pos, ARGV[2]) then pos = ARGV[2] end
redis.call('HSET', KEYS[2], ARGV[1], pos)
redis.call('ZADD', KEYS[3], now + tonumber(ARGV[3]), ARGV[1])
for _, o in ipairs(redis.call('ZRANGEBYSCORE', KEYS[3], '-inf', '(' .. now)) do
  redis.call('ZREM', KEYS[3], o)
  redis.call('HDEL', KEYS[2], o)
end
local low = nil
for _, o in ipairs(redis.call('ZRANGE', KEYS[3], 0, -1)) do
  local p = redis.call('HGET', KEYS[2], o) or '0-0'
  if low == nil or less(p, low) then low = p end
end
if low then
  local ms, seq = split(low)
  redis.call('XTRIM', KEYS[1], 'MINID', ms .. '-' .. (tonumber(seq) + 1))
end
return pos
"""


def _entries(reply: Any) -> list[tuple[str, dict[str, str]]]:
    """The (id, fields) pairs of an XREAD reply of one stream (RESP2 or RESP3 form)."""
    if isinstance(reply, dict):  # RESP3: {stream: [[entries]]}
        batches = [batch for value in reply.values() for batch in value]
    else:  # RESP2: [[stream, [entries]]]
        batches = [item[1] for item in reply or ()]
    return [
        (text(entry_id), {text(k): text(v) for k, v in (fields or {}).items()})
        for batch in batches
        for entry_id, fields in batch
    ]


class StreamSource:
    """Every job submitted to a Redis stream, for one reader ``owner``.

    :param owner: the reader's stable name (e.g. ``host-a/billing``): a restarted
        process with the same owner resumes after the last job it resolved and catches
        up on what was submitted meanwhile. Two live processes must not share an owner.
    :param block: seconds one XREAD blocks; bounds how long a stop takes to notice
        (keep the client's ``socket_timeout`` above it).
    :param batch: entries read per XREAD.
    :param start: where a new owner (no saved position) starts: ``"0"`` everything
        still in the stream, ``"$"`` only jobs submitted from now on, or an entry id.
    :param reader_ttl: seconds a reader stays registered without touching the stream
        (default six hours); a reader gone longer stops holding back trimming and loses
        its position. Keep it below the workers' ``retention``.
    :param redis_retry: retry policy for connection errors while reading or saving;
        when it runs out, :class:`~lockworker.RedisUnavailable` ends ``serve``.
    """

    def __init__(
        self,
        client: redis.Redis,
        stream: str,
        *,
        owner: str,
        block: float = 0.25,
        batch: int = 100,
        start: str = "0",
        reader_ttl: float = READER_TTL,
        clock: Clock | None = None,
        logger: Any = None,
        redis_retry: retry.RetryPolicy | None = None,
    ) -> None:
        self.keys = stream_keys(stream)
        self.stream = stream
        self.owner = check_name(owner, "owner")
        block, reader_ttl = seconds(block, "block"), seconds(reader_ttl, "reader_ttl")
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
        self._touch = client.register_script(TOUCH)
        self._lock = threading.Lock()
        self._read: collections.deque[str] = collections.deque()
        self._done: set[str] = set()
        self._last_touch = float("-inf")
        self._unsaved: str | None = None
        self._closed = True

    @property
    def entries_key(self) -> str:
        return self.keys.extra("entries")

    def position(self) -> str | None:
        """The entry id up to which this owner resolved every job (None if unknown)."""
        raw = self.client.hget(self.keys.extra("positions"), self.owner)
        return None if raw is None else text(raw)

    def touch(self, position: str = "") -> str:
        """Register or refresh this reader, save ``position``, and trim; returns the
        saved position."""
        self._last_touch = self.clock.monotonic()
        keys = [self.entries_key, self.keys.extra("positions"), self.keys.extra("readers")]
        ttl_ms = max(1, round(self.reader_ttl * 1000))
        args: list[str | int] = [self.owner, position, ttl_ms, self.start]
        return text(
            self._call(
                lambda: self._touch(keys=keys, args=args, client=self.client),
                "save the position of stream",
            )
        )

    def deliveries(self, stop: threading.Event) -> Iterator[Delivery]:
        """Jobs after this owner's saved position, until ``stop`` is set."""
        with self._lock:  # a new pass starts from the saved position: forget the last one
            self._read.clear()
            self._done.clear()
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
        while not stop.is_set():
            self._save(force=True)  # what resolved while the last batch was served
            if self.clock.monotonic() - self._last_touch >= self.reader_ttl / 3:
                self.touch()
            reply = self._call(
                lambda after=last_read: self.client.xread(  # type: ignore[misc]
                    {self.entries_key: after}, count=self.batch, block=block_ms
                ),
                "read stream",
            )
            for entry_id, fields in _entries(reply):
                if stop.is_set():
                    return
                last_read = entry_id
                with self._lock:
                    self._read.append(entry_id)
                delivery = self._decode(entry_id, fields)
                if delivery is None:
                    self._resolved(entry_id)
                    continue
                yield delivery

    def _decode(self, entry_id: str, fields: dict[str, str]) -> Delivery | None:
        job_id = fields.get("job_id")
        try:
            payload = json.loads(fields.get("payload", "null"))
        except ValueError:
            job_id = None
        if not job_id:
            self._log.error(BAD_ENTRY, entry_id=entry_id, fields=fields)
            return None
        return Delivery(job_id, payload, lambda: self._resolved(entry_id))

    def _resolved(self, entry_id: str) -> None:
        """Mark ``entry_id`` resolved; the position moves past every resolved entry,
        saved at most every :data:`SAVE_EVERY` seconds while the reader reads (at once
        once it stopped reading: jobs still running then are the last)."""
        with self._lock:
            self._done.add(entry_id)
            while self._read and self._read[0] in self._done:
                self._unsaved = self._read.popleft()
                self._done.discard(self._unsaved)
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
