"""Consumer-group delivery: ``StreamSource(client, stream, owner=..., group="NAME")``.

Each entry of the stream goes to one member of the Redis Streams consumer group
``NAME`` (XREADGROUP, the source's ``owner`` as the consumer), so processes that share a
group share the work instead of all watching every job. lockworker's leases still
decide who runs a job, count its attempts and fence it: the worker's ``process`` is the
same; the group only decides which process looks at an entry first.

A member (one :meth:`GroupReader.deliveries` pass, under ``Worker.serve``, which tells
the source its worker: lease, role, presence) runs two threads beside ``serve``:

- the **reader** creates the group if missing (``XGROUP CREATE ... MKSTREAM``, from the
  source's ``start``), hands out first what the group still lists as this owner's (a
  restart of the same owner), then reads new entries, ``batch`` at a time, once the
  previous batch was handed out. A ``role="backup"`` member reads no new entry while
  a primary of its namespace serves: it only claims (below), as a backup in fan-out
  only steps in for jobs a primary failed or left.
- the **keeper** keeps the entries in hand from being claimed while they are worked on
  (``XCLAIM ... JUSTID`` to itself every third of the lease: their idle time restarts),
  claims what other members left, and tidies up.

An entry is acknowledged (``XACK``) only when ``serve`` reports its job resolved: DONE
(here or elsewhere) or GAVE_UP on the server. A job left pending by a stop is not
acknowledged; its entry stays in the group's pending list until a member serves it.

Who serves an entry whose member cannot:

- **crash**: nobody refreshes its entries, so they become idle. Every member claims,
  every eighth of the lease, the entries of *other* members idle for a whole lease or
  more; the claimer's ``process`` then waits for the dead holder's lease to end, as a
  backup does in fan-out. Takeover: within about a lease and an eighth of the crash.
- **failure**: when an attempt of a job whose entry this member holds fails and the
  job's next attempt is due at once (the retry schedule's first step), the member
  hands the entry over: its idle time is set to the claim threshold (``XCLAIM ... IDLE``)
  and a message on the group's channel makes every listening member claim it at once,
  while the failing process steps back (its job run's ``retry_delay``), so another
  process takes the next attempt within milliseconds. Alone, the member retries the job
  itself after the step back. A failure whose retry is scheduled later is retried when
  due by the member that holds the entry (everybody waits for a due time alike).
  While a primary serves, a backup answers such a message after ``backup_delay``, so a
  live primary claims the entry first.
- **stop**: a member that stops hands over every entry it has not resolved in the same
  way (others claim them at once); whatever nobody claimed is served again by this
  owner when it restarts. Its consumer is removed once it owns no entry
  (``XGROUP DELCONSUMER``); consumers that own nothing and did nothing for
  ``reader_ttl`` (crashed members) are removed by the others' tidying.

Trimming (each member, once per lease): entries below the oldest entry any group still
has pending or not yet delivered, and below every live fan-out reader's position, are
removed (:mod:`lockworker.protocol.streams`): both modes may share a stream. A group
nobody serves any more holds trimming back until it is destroyed (``XGROUP DESTROY``).
"""

from __future__ import annotations

import contextlib
import functools
import threading
from collections.abc import Iterator, Mapping
from typing import Any

from lockworker.daemons.groupkeep import (
    ACK_FAILED,
    BAD_ENTRY,
    FAILURES,
    KEEP_FAILED,
    Keeper,
    Member,
)
from lockworker.daemons.submit import DueMover
from lockworker.errors import InvalidConfig
from lockworker.model.state import Role
from lockworker.protocol import streams
from lockworker.protocol.streams import Entry
from lockworker.runtime import events
from lockworker.serving import rules
from lockworker.serving.delivery import Delivery, job_of

__all__ = ["BAD_ENTRY", "GroupReader", "Member"]


class GroupReader(Keeper):
    """The group side of one :class:`~lockworker.StreamSource` (see the module)."""

    # -- the pass -------------------------------------------------------------------

    @functools.cached_property
    def _due(self) -> DueMover:
        return DueMover(self.client, self.keys, self._call)

    @property
    def buffered(self) -> int:
        """Entries read ahead and not yet delivered (see ``StreamSource.buffered``)."""
        return len(self._ready)

    def deliveries(self, stop: threading.Event) -> Iterator[Delivery]:
        if self.member is None:
            raise InvalidConfig(
                f"StreamSource(group={self.group!r}) is served by Worker.serve (it takes "
                "its lease and role from the worker)"
            )
        with self._cond:
            self._ready.clear()
            self._held.clear()
            self._given.clear()
            self._handover.clear()
            self._closing, self._left, self._error = False, False, None
            self._kick = threading.Event()
        self._create()
        self._threads = [
            threading.Thread(target=self._read_loop, name="lockworker-group-read", daemon=True),
            threading.Thread(target=self._keep_loop, name="lockworker-group-keep", daemon=True),
        ]
        events.add_observer(self._observe)
        for thread in self._threads:
            thread.start()
        try:
            while not stop.is_set():
                entry = self._next(stop)
                if entry is None:
                    continue
                entry_id, fields = entry
                job = None if fields is None else job_of(fields)
                if job is None:
                    if fields is not None:
                        self.log.error(BAD_ENTRY, entry_id=entry_id, fields=fields)
                    self._resolved(entry_id)
                    continue
                with self._cond:
                    self._held[entry_id] = job[0]
                yield Delivery(
                    job[0], job[1], functools.partial(self._resolved, entry_id), decoded=True,
                    stream=self.keys.job_id,
                )
        finally:
            self._leave()

    def _next(self, stop: threading.Event) -> Entry | None:
        with self._cond:
            if not self._ready and self._error is None and not stop.is_set():
                self._cond.wait(self.block)
            if self._error is not None:
                raise self._error
            if not self._ready or stop.is_set():
                return None
            entry = self._ready.popleft()
            self._cond.notify_all()
            return entry

    def _resolved(self, entry_id: str) -> None:
        """The entry's job is DONE or GAVE_UP (or it holds no job): acknowledge it.

        Acknowledgements are group-committed: one that comes while another thread is
        sending goes with that thread's next XACK, and its own thread goes on at once
        (nothing waits for an acknowledgement: one that fails leaves the entry pending,
        and a member that claims it finds its job resolved and acknowledges it)."""
        with self._cond:
            self._held.pop(entry_id, None)
            self._given.discard(entry_id)
            self._acks.append(entry_id)
            if self._acking or self._together:
                return
            self._acking = True
        self._send_acks()

    @contextlib.contextmanager
    def resolving(self) -> Iterator[None]:
        """Report many resolutions together, from one thread (asyncio ``serve`` reports
        what resolved meanwhile in one hop to a worker thread): their entries are
        acknowledged in one XACK when the batch ends. Called one by one, each would find
        no acknowledgement in flight and send its own, one round trip per job."""
        with self._cond:
            self._together += 1
        try:
            yield
        finally:
            with self._cond:
                self._together -= 1
                send = not self._together and not self._acking and bool(self._acks)
                if send:
                    self._acking = True
            if send:
                self._send_acks()

    def _send_acks(self) -> None:
        """XACK what waits, until nothing does; then remove the consumer if the pass
        has left and owns nothing any more."""
        while True:
            with self._cond:
                ids, self._acks = self._acks, []
                if not ids:
                    self._acking = False
                    last = self._left and not self._held
                    break
            try:
                self._call(
                    lambda ids=ids: self.client.xack(  # type: ignore[misc]
                        self.entries_key, self.group, *ids
                    ),
                    "acknowledge entries of stream",
                )
            except FAILURES as exc:  # left pending: a member claims them, finds them resolved
                self.log.warning(ACK_FAILED, entry_ids=ids, error=events.describe(exc))
        if last:
            self._remove_consumer()

    def _observe(self, _logger: str, event: str, fields: Mapping[str, Any]) -> None:
        """Watch this worker's attempts: a failure due again at once hands the job's
        entries over; taking the job again keeps them refreshed again."""
        member = self.member
        if member is None or fields.get("run") != member.run_id:
            return
        if fields.get("namespace") != member.namespace:
            return
        if event == events.RELEASED:
            if fields.get("reason") != "failed" or fields.get("retry_in_ms"):
                return
        elif event != events.ACQUIRED:
            return
        job_id = fields.get("job_id")
        with self._cond:
            mine = [e for e, j in self._held.items() if j == job_id]
            if event == events.ACQUIRED:
                self._given.difference_update(mine)
                return
            self._handover.update(mine)
        if mine:
            self._kick.set()

    # -- the reader -----------------------------------------------------------------

    def _may_read(self) -> bool:
        """A backup reads no new entry while a primary of its namespace serves, nor
        during its start-up grace (:meth:`lockworker.model.presence.View.begin`): an
        entry it read would be its own, not the primary's."""
        m = self.member
        assert m is not None
        return not (m.role is Role.BACKUP and rules.deferring(m, ranked=False))

    def _read_loop(self) -> None:
        """Hand out this owner's entries, then read new ones (before each read, the
        stream's delayed jobs come due join it: :mod:`lockworker.daemons.submit`)."""
        history: str | None = "0"  # first what the group lists as this owner's
        block_ms = max(1, round(self.block * 1000))
        while not self._closing:
            try:
                if history is not None:
                    found = self._read(history, None)
                    history = found[-1][0] if found else None
                    self._take(found)
                    continue
                with self._cond:
                    if self._ready and not self._closing:
                        self._cond.wait(self.block)
                        continue
                if not self._may_read():
                    self._pause()
                    continue
                self._take(self._read(">", self._due.block_ms(block_ms)))
            except BaseException as exc:
                if streams.missing_group(exc):
                    self._create_quietly()
                    continue
                with self._cond:
                    self._error = exc
                    self._cond.notify_all()
                return

    def _read(self, after: str, block_ms: int | None) -> list[Entry]:
        reply = self._call(
            lambda: self.client.xreadgroup(
                self.group, self.owner, {self.entries_key: after}, count=self.batch,
                block=block_ms,
            ),
            "read stream",
        )
        return streams.read_reply(reply)

    # -- leaving --------------------------------------------------------------------

    def _leave(self) -> None:
        """End the pass: stop the threads, hand over every entry not resolved, and
        remove the consumer if it owns nothing any more."""
        with self._cond:
            self._closing = True
            self._cond.notify_all()
        self._kick.set()
        events.remove_observer(self._observe)
        for thread in self._threads:
            if thread is not threading.current_thread():
                thread.join()
        with self._cond:
            for entry_id, _ in self._ready:
                self._held.pop(entry_id, None)  # never handed out: only handed over
            rest = [e for e in self._held if e not in self._given] + [
                e for e, _ in self._ready
            ]
            self._ready.clear()
            self._left = True
            empty = not self._held
        try:
            if rest:
                self._hand_over(rest)
        except FAILURES as exc:  # claimed at the lease's end instead
            self.log.warning(KEEP_FAILED, step="hand over", error=events.describe(exc))
        if empty:
            self._remove_consumer()

    def _remove_consumer(self) -> None:
        try:
            self._call(
                lambda: streams.LEAVE(
                    self.client, [self.entries_key], [self.group, self.owner]
                ),
                "leave the consumer group of stream",
            )
        except FAILURES as exc:
            self.log.warning(KEEP_FAILED, step="leave", error=events.describe(exc))
