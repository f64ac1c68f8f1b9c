"""What a leader is on either side (:class:`lockworker.Leader` in a thread,
:class:`lockworker.aio.Leader` in a task): its settings, keys, event names, and what
the lease and the term record say of who leads. No I/O here.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Protocol

from lockworker.clock import Clock, SystemClock
from lockworker.config import default_owner, lease
from lockworker.errors import ConcurrentUse, ForeignValueError
from lockworker.model import policy
from lockworker.model.codec import Holder, decode_lock, new_run
from lockworker.model.keys import JobKeys, Space, check_name
from lockworker.model.state import Role, Settle, Snapshot
from lockworker.protocol.decode import text
from lockworker.runtime import events, retry
from lockworker.runtime.lease import Lease, ended
from lockworker.serving.contend import ContestantBase
from lockworker.serving.hooks import Hooks
from lockworker.serving.term import Term

NAMESPACE = "leaders"
MAX_TERMS = 10**15
"""Attempt limit passed to ``acquire``: never reached, a leader name never gives up."""
RETENTION = 365 * 86400.0
"""Seconds the token counter outlives the last term, so fencing tokens never repeat."""

ELECTED = "leader.elected"
FOLLOWING = "leader.following"
LOST = "leader.lost"
RESIGNED = "leader.resigned"
HOOK_ERROR = events.HOOK_ERROR


@dataclass(frozen=True)
class LeaderInfo:
    """Who leads ``name`` now, as :meth:`Leader.current` reads it."""

    holder: str
    token: int
    lease_left: float
    """Seconds left of the leader's lease (it is renewed every third of it)."""
    since: float | None
    """Wall-clock time (epoch seconds) the term began, if recorded."""


def leader_keys(name: str) -> JobKeys:
    return JobKeys(NAMESPACE, check_name(name, "name"), Space.LEADER)


def leader_info(keys: JobKeys, raw_lock: Any, pttl: Any, record: Any) -> LeaderInfo | None:
    """What the lease and the term record (GET, PTTL, HGETALL) say of who leads."""
    if raw_lock is None:
        return None
    lock = decode_lock(raw_lock)
    if lock is None:
        raise ForeignValueError(keys.lock, text(raw_lock))
    fields = {text(k): text(v) for k, v in (record or {}).items()}
    since = None
    if fields.get("token") == str(lock.token):
        with contextlib.suppress(ValueError):
            since = float(fields.get("since", ""))
    return LeaderInfo(lock.owner, lock.token, max(0, int(pttl)) / 1000.0, since)


class LeaderSettings:
    """A leader's settings, for :class:`Leader` and :class:`lockworker.aio.Leader`
    alike, checked by :meth:`_configure`: one validator per argument, in one place."""

    keys: JobKeys
    name: str
    lock_timeout: float
    owner: str
    run_id: str
    """This object's run id: only it re-enters a term its lease records."""
    role: Role
    backup_delay: float
    timing: policy.Timing
    clock: Clock
    redis_retry: retry.RetryPolicy
    handle_signals: bool
    _who: Holder
    _hooks: Hooks
    _log: events.EventLog
    _lease_ms: int
    _retention_ms: int

    def _configure(
        self, base: type, *, name: str, lock_timeout: float, owner: str | None,
        role: Role | str, backup_delay: float, clock: Clock | None, logger: Any,
        redis_retry: retry.RetryPolicy | None, handle_signals: bool, hooks: dict[str, Any],
    ) -> None:
        self.keys = leader_keys(name)
        self.name = name
        self.lock_timeout = lease(lock_timeout, "lock_timeout")
        self.owner = check_name(owner, "owner") if owner is not None else default_owner()
        self.run_id = new_run()
        self._who = Holder(self.owner, self.run_id)
        self.role, self.backup_delay = policy.check_role(role, backup_delay)
        self._hooks = Hooks(self, base, hooks)
        self._hooks.require()
        self.timing = policy.Timing.of(self.lock_timeout, self.role, self.backup_delay)
        self.clock = clock or SystemClock()
        self.redis_retry = redis_retry or retry.DEFAULT
        self.handle_signals = handle_signals
        self._log = events.logger(
            events.LEADER, logger, leader=name, owner=self.owner, run=self.run_id
        )
        self._lease_ms = max(1, round(self.lock_timeout * 1000))
        self._retention_ms = round(RETENTION * 1000)
        self._running = threading.Lock()

    @contextlib.contextmanager
    def _one_campaign(self) -> Iterator[None]:
        """One ``run`` of this object at a time: a second one meanwhile (another thread
        or task) raises :class:`~lockworker.ConcurrentUse` before doing anything. Both
        would campaign with this object's one run id, so the second would re-enter
        the first's term: two ``on_acquired`` leading at once with one token."""
        if not self._running.acquire(blocking=False):
            raise ConcurrentUse(
                f"leader {self.name!r}: run() is already running on this Leader object "
                "(in another thread or task); one object campaigns once at a time, make "
                "one Leader per campaign"
            )
        try:
            yield
        finally:
            self._running.release()


class Campaigner(Protocol):
    """What a campaign on either side reads of its leader (no I/O)."""

    name: str
    owner: str
    role: Role
    timing: policy.Timing
    clock: Clock
    _log: events.EventLog

    @property
    def stopping(self) -> bool: ...


class CampaignBase(ContestantBase):
    """What one ``Leader.run`` is and decides on either side: the contest's settings,
    whether a term seen is news (``on_locked``), and what a resignation's answer means.
    The I/O is the sides' own (:class:`lockworker.daemons.leader._Campaign`, and the
    asyncio one)."""

    base: Campaigner

    def __init__(self, leader: Campaigner) -> None:
        self.base = leader
        self.previous: Snapshot | None = None
        self.not_before = 0.0


    def stepped_back(self) -> None:
        """After a term ended here: step back, so a follower takes the next one."""
        self.not_before = policy.compete_after_failure(self.now(), self.timing)

    def news(self, seen: Snapshot) -> Term | None:
        """The term to report to ``on_locked`` if ``seen`` shows a new leader (once per
        term seen), logged as ``leader.following``; else None."""
        if seen.holder is None or not policy.is_news(self.previous, seen):
            return None
        self.previous = seen
        lead = self.base
        lead._log.info(FOLLOWING, holder=seen.holder, token=seen.token, lease_ms=seen.pttl_ms)
        return Term(lead.name, seen.token, seen.holder)

    def resigned(self, settled: Settle, lease: Lease, log: events.EventLog) -> None:
        """What the release at the end of a term said: resigned, or lost before it (a
        term that ran out before it was let go was reported by the heartbeat's ``end``)."""
        if settled is Settle.RELEASED:
            log.info(RESIGNED, stopping=self.base.stopping)
        ended(lease, refused=settled.refused)
