"""The keeper of a consumer-group member (:mod:`lockworker.daemons.groupsource`): a
thread beside ``serve`` that keeps the entries in hand, claims what other members left,
and tidies the group.

- **Refresh**: every third of the lease, the entries in hand (read or claimed, not yet
  resolved) that the member still owns are claimed by it again (``XCLAIM ... JUSTID``),
  which restarts their idle time, so nobody claims an entry while its job is worked on.
- **Claim**: every eighth of the lease, and at once when the group's channel says an
  entry was handed over, the member claims up to ``batch`` entries of *other* members
  idle for a whole lease or more (a crashed member's, or handed over). A member never
  claims from itself. While a primary of its namespace serves, a backup answers the
  channel after ``backup_delay``, so a live primary claims a handed-over entry first.
- **Hand over**: entries the pass asks it to (a failed job due again at once) get their
  idle time set to the claim threshold (``XCLAIM ... IDLE``), and the channel is told.
  They are not refreshed from then on, until this member takes their job again.
- **Tidy**: once per lease, consumers that own no entry and did nothing for
  ``reader_ttl`` are removed, and what no group and no fan-out reader needs is trimmed.

A step that fails is logged once per streak (``stream.keep_failed``) and tried again.
"""

from __future__ import annotations

import collections
import threading
from typing import Protocol

import redis

from lockworker.clock import Clock
from lockworker.errors import LockworkerError
from lockworker.model.keys import JobKeys
from lockworker.model.presence import View
from lockworker.model.state import Role
from lockworker.protocol import streams
from lockworker.protocol.streams import Entry
from lockworker.runtime import events, retry
from lockworker.runtime.wake import Waits

BAD_ENTRY = "stream.bad_entry"
ACK_FAILED = "stream.ack_failed"
KEEP_FAILED = "stream.keep_failed"
HANDED_OVER = "stream.handed_over"
CLAIMED = "stream.claimed"
FAILURES = (redis.RedisError, OSError, LockworkerError)
CHUNK = 500
"""Entry ids per script call (Lua's ``unpack`` has a limit)."""


class Member(Protocol):
    """What a group member reads of the worker serving it (``Worker`` and
    ``aio.Worker`` alike): the lease, the role and what its presence loop knows."""

    namespace: str
    run_id: str
    role: Role
    backup_delay: float
    lock_timeout: float
    clock: Clock
    """The worker's clock: what its view's start-up grace is read against."""
    _view: View


class Keeper:
    """A group member's state, and the keeper thread that works on it (see the module;
    :class:`~lockworker.daemons.groupsource.GroupReader` adds the pass and the reader)."""

    def __init__(
        self, client: redis.Redis, keys: JobKeys, *, owner: str, group: str, block: float,
        batch: int, start: str, reader_ttl: float, clock: Clock, log: events.EventLog,
        call: retry.Caller,
    ) -> None:
        self.client = client
        self.keys = keys
        self.entries_key = keys.extra("entries")
        self.owner = owner
        self.group = group
        self.channel = streams.group_channel(keys, group)
        self.block = block
        self.batch = batch
        self.start = "0" if start == "0-0" else start
        self.reader_ttl = reader_ttl
        self.clock = clock
        self.log = log.bind(group=group)
        self._call = call
        self.member: Member | None = None
        self._cond = threading.Condition()
        self._ready: collections.deque[Entry] = collections.deque()
        self._held: dict[str, str | None] = {}
        """Entries in hand, not resolved: id -> job id (None: not handed out yet)."""
        self._given: set[str] = set()
        """Entries handed over after a failure: not refreshed while others may claim."""
        self._acks: list[str] = []
        """Resolved entries not yet acknowledged (the next XACK carries them)."""
        self._acking = False
        """A thread is sending acknowledgements (and sends what comes meanwhile)."""
        self._together = 0
        """Batches of resolutions being reported (:meth:`GroupReader.resolving`): their
        acknowledgements wait for the batch's end."""
        self._handover: set[str] = set()
        self._kick: threading.Event = threading.Event()
        """Wakes the keeper: the event its channel's messages set, once it listens."""
        self._closing = False
        self._left = False
        self._error: BaseException | None = None
        self._threads: list[threading.Thread] = []

    def attach(self, member: Member) -> None:
        """Serve for ``member`` (``serve`` calls it before the first delivery)."""
        self.member = member

    @property
    def lease(self) -> float:
        assert self.member is not None
        return float(self.member.lock_timeout)

    @property
    def idle_ms(self) -> int:
        """How long an entry lies untouched before another member may claim it."""
        return max(1, round(self.lease * 1000))

    def _take(self, found: list[Entry]) -> int:
        """Put entries read or claimed in hand (those in hand already are not handed
        out twice); how many were new."""
        new = 0
        with self._cond:
            for entry_id, fields in found:
                if entry_id in self._held:
                    continue
                self._held[entry_id] = None
                self._ready.append((entry_id, fields))
                new += 1
            if new:
                self._cond.notify_all()
        return new

    def _create(self) -> None:
        self._call(
            lambda: streams.create_group(self.client, self.entries_key, self.group, self.start),
            "create the consumer group of stream",
        )

    def _create_quietly(self) -> None:
        try:
            self._create()
        except FAILURES as exc:
            self.log.warning(KEEP_FAILED, step="create group", error=events.describe(exc))
            self._pause()

    def _pause(self) -> None:
        with self._cond:
            if not self._closing:
                self._cond.wait(self.block)

    # -- the keeper -----------------------------------------------------------------

    def _keep_loop(self) -> None:
        lease = self.lease
        failing = False
        with Waits(self.client).listen(self.channel) as heard:
            self._kick = heard
            if self._closing:
                return
            now = self.clock.monotonic()
            refresh_at, scan_at, tidy_at, sweep_at = now + lease / 3, now, now, float("inf")
            while not self._closing:
                now = self.clock.monotonic()
                if heard.is_set():
                    heard.clear()
                    sweep_at = min(sweep_at, now + self._answer_delay())
                try:
                    self._hand_over_asked()
                    if now >= sweep_at or now >= scan_at:
                        sweep_at, scan_at = float("inf"), now + lease / 8
                        self._claim()
                    if now >= refresh_at:
                        refresh_at = now + lease / 3
                        self._refresh()
                    if now >= tidy_at:
                        tidy_at = now + lease
                        self._tidy()
                    failing = False
                except Exception as exc:  # logged; tried again at the next turn
                    if not failing:
                        self.log.warning(KEEP_FAILED, error=events.describe(exc))
                    failing = True
                    if streams.missing_group(exc):
                        self._create_quietly()
                wait = min(refresh_at, scan_at, tidy_at, sweep_at) - self.clock.monotonic()
                if wait > 0:
                    self.clock.wait(heard, wait)

    def _answer_delay(self) -> float:
        """A backup lets a live primary claim a handed-over entry first."""
        m = self.member
        assert m is not None
        if m.role is Role.BACKUP and m._view.primary_serving():
            return float(m.backup_delay)
        return 0.0

    def _hand_over_asked(self) -> None:
        with self._cond:
            asked = [e for e in self._handover if e in self._held]
            self._handover.clear()
            self._given.update(asked)
        if asked:
            self._hand_over(asked)

    def _hand_over(self, ids: list[str]) -> None:
        for i in range(0, len(ids), CHUNK):
            chunk = ids[i : i + CHUNK]
            n = self._call(
                lambda c=chunk: streams.HAND_OVER(  # type: ignore[misc]
                    self.client, [self.entries_key],
                    [self.group, self.owner, self.idle_ms, self.channel, *c],
                ),
                "hand over entries of stream",
            )
            self.log.info(HANDED_OVER, entries=int(n))

    def _claim(self) -> None:
        reply = self._call(
            lambda: streams.CLAIM(
                self.client, [self.entries_key],
                [self.group, self.owner, self.idle_ms, self.batch],
            ),
            "claim entries of stream",
        )
        found = streams.claimed(reply)
        if found:
            self.log.info(CLAIMED, entries=self._take(found))

    def _refresh(self) -> None:
        with self._cond:
            ids = [e for e in self._held if e not in self._given]
        for i in range(0, len(ids), CHUNK):
            chunk = ids[i : i + CHUNK]
            self._call(
                lambda c=chunk: streams.REFRESH(  # type: ignore[misc]
                    self.client, [self.entries_key], [self.group, self.owner, *c]
                ),
                "refresh entries of stream",
            )

    def _tidy(self) -> None:
        keys = streams.fanout_keys(self.keys)
        ttl_ms = max(1, round(self.reader_ttl * 1000))
        self._call(
            lambda: streams.TIDY(self.client, keys, [self.group, ttl_ms]),
            "trim stream",
        )
