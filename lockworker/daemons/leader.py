"""Leader election: one leader at a time among many processes, for a long-running role.

Built on the job lock itself, in a key space of its own: a term is an
attempt that never runs out (``acquire`` with a practically unbounded attempt count),
its token is the fencing token, its lease is renewed by the same
:class:`~lockworker.runtime.lease.Heartbeat`, and ending a term is a ``release``, which
publishes on the wake channel so followers compete at once. Keys of leader ``sched``::

    lw:leader:leaders:{sched}:lock    the term's lease: holder, its run, term number, token
    lw:leader:leaders:{sched}:state   the token counter (kept a year; tokens never repeat)
    lw:leader:leaders:{sched}:wake    pub/sub channel: a term ended
    lw:leader:leaders:{sched}:term    hash: holder, token and wall time of the current term

Each ``Leader`` object has its own run id in its lease, so a leader restarted with the
same ``owner`` label is not elected again into its dead predecessor's term: it waits
for that lease to end and then takes a new term with a larger token.

Loop of :meth:`Leader.run`: try to acquire; on success run ``on_acquired(term)`` under
the renewed lease, then resign (release) and step back ``retry_delay`` so a follower
takes over; otherwise report the holder (``on_locked``) and wait for a wake message or
the end of its lease. A backup first looks, and competes only once leadership has
been free for ``backup_delay``.

A term is judged lost by this process's own monotonic clock (see
:mod:`lockworker.runtime.lease`): ``term.lost`` turns true before the server lets the lease
expire, so before anyone else can be elected.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable
from typing import Any, TypeVar

import redis

from lockworker import config
from lockworker.clock import Clock, SystemClock, wall_time
from lockworker.errors import StopRequested
from lockworker.model.codec import LockValue
from lockworker.model.state import Durability, Grant, ProtocolKind, Role, Snapshot
from lockworker.runtime import events, registering, retry, servercheck
from lockworker.runtime.lease import Heartbeat, Lease
from lockworker.runtime.signals import stop_on_signals
from lockworker.runtime.wake import Waits
from lockworker.serving import contend
from lockworker.serving.contend import Next
from lockworker.serving.settings import make_protocol
from lockworker.serving.term import Term

T = TypeVar("T")

from lockworker.serving.leadership import (  # noqa: E402
    ELECTED,
    FOLLOWING,
    HOOK_ERROR,
    LOST,
    MAX_TERMS,
    NAMESPACE,
    RESIGNED,
    RETENTION,
    CampaignBase,
    LeaderInfo,
    LeaderSettings,
    leader_info,
    leader_keys,
)

__all__ = [
    "ELECTED", "FOLLOWING", "HOOK_ERROR", "LOST", "MAX_TERMS", "NAMESPACE", "RESIGNED",
    "RETENTION", "Leader", "LeaderInfo", "leader_keys",
]


class Leader(LeaderSettings):
    """Keeps one leader among all processes running a ``Leader`` of the same ``name``.

    Subclass it and override ``on_acquired`` (and ``on_locked``/``on_lost``), or pass
    them as functions. ``on_acquired(term)`` runs in the thread that called
    :meth:`run` while this process leads; returning (or raising) resigns. ``on_lost``
    runs once for every term that ends other than by a clean resignation: in the
    heartbeat thread when the lease can no longer be trusted, or in the :meth:`run`
    thread when ``on_acquired`` returns after it ran out or the server refuses the
    resignation (docs/hooks.md); keep it short.
    ``on_locked(term)`` runs when another process is seen leading a new term.

    :param lock_timeout: the lease in seconds: bounds the takeover after a crash.
    :param role: ``"backup"`` lets free leadership lie ``backup_delay`` seconds before
        competing, so a live primary normally leads.
    :param handle_signals: stop on SIGTERM/SIGINT while :meth:`run` runs (main thread).
    :param durability: ``"local"`` (default) or ``"replicated"``: a step (a new term,
        its renewal, the resignation) counts once ``replicas`` replicas acknowledged it
        (``WAIT``, at most ``replica_timeout`` seconds per try, retried within
        ``redis_retry``), so a term that ``on_acquired`` was given survives the failover
        of the master to one of them; as :class:`lockworker.Worker`'s (docs/topologies.md).

    :meth:`run` raises :class:`~lockworker.RedisUnavailable` when Redis stays
    unreachable past the retry budget (a daemon then exits and its supervisor restarts
    it) and :class:`~lockworker.ForeignValueError` if the leader's keys hold values
    lockworker did not write.
    """

    def __init__(
        self,
        client: redis.Redis,
        *,
        name: str,
        lock_timeout: float = 10.0,
        owner: str | None = None,
        role: Role | str = Role.PRIMARY,
        backup_delay: float = 0.5,
        clock: Clock | None = None,
        logger: Any = None,
        durability: Durability | str = Durability.LOCAL,
        replicas: int = 1,
        replica_timeout: float = 0.5,
        redis_retry: retry.RetryPolicy | None = None,
        handle_signals: bool = True,
        on_acquired: Callable[[Term], None] | None = None,
        on_locked: Callable[[Term], None] | None = None,
        on_lost: Callable[[Term], None] | None = None,
    ) -> None:
        config.client(client, twin="Leader")
        self._configure(
            Leader, name=name, lock_timeout=lock_timeout, owner=owner, role=role,
            backup_delay=backup_delay, clock=clock, logger=logger, redis_retry=redis_retry,
            handle_signals=handle_signals,
            hooks={"on_acquired": on_acquired, "on_locked": on_locked, "on_lost": on_lost},
        )
        self.client = client
        self.protocol = make_protocol(
            client, ProtocolKind.SCRIPT, durability, replicas, replica_timeout
        )
        self.durability = Durability(durability)
        self._call = retry.Caller(self.clock, self.redis_retry, self._log)
        self._stop = threading.Event()
        self._heartbeat = Heartbeat(self.clock, self.lock_timeout / 3)
        self._hub = Waits(client)
        self._term: Term | None = None
        self._registration = registering.leader(client, self.name)

    # -- hooks -----------------------------------------------------------------------

    def on_acquired(self, term: Term) -> None:
        """Lead until ``term.lost`` or ``term.stopping``; returning resigns. Required."""
        self._hooks.given("on_acquired", term)

    def on_locked(self, term: Term) -> None:
        """Another process leads (``term.holder``, ``term.token``)."""
        self._hooks.given("on_locked", term)

    def on_lost(self, term: Term) -> None:
        """This process's term can no longer be trusted; stop acting as leader."""
        self._hooks.given("on_lost", term)

    # -- public API ------------------------------------------------------------------

    @staticmethod
    def current(client: redis.Redis, name: str) -> LeaderInfo | None:
        """Who leads ``name`` now and since when, or None if nobody does."""
        keys = leader_keys(name)
        pipe = client.pipeline(transaction=True)
        pipe.get(keys.lock)
        pipe.pttl(keys.lock)
        pipe.hgetall(keys.extra("term"))
        return leader_info(keys, *pipe.execute())

    def run(self) -> None:
        """Campaign, lead, resign and campaign again until :meth:`stop` (or SIGTERM).

        First checks that the Redis user may do what leading needs
        (:class:`~lockworker.PermissionDenied` naming the grant, before any hook runs),
        and the server's eviction and persistence settings (``server.check`` events,
        again every few minutes: :mod:`lockworker.runtime.servercheck`).

        One object runs once at a time: a second, concurrent call raises
        :class:`~lockworker.ConcurrentUse` and leaves the first alone."""
        with self._one_campaign():
            self._run_campaign()

    def _run_campaign(self) -> None:
        try:
            with contextlib.ExitStack() as stack:
                servercheck.require_permissions(self.client, self.keys)
                self._registration()  # the views' list, at the first campaign
                stack.callback(servercheck.watching(self.client, self._log, SystemClock()))
                stack.enter_context(
                    stop_on_signals(lambda _signum: self.stop(), enabled=self.handle_signals)
                )
                wake = stack.enter_context(self._hub.listen(self.keys.wake))
                _Campaign(self, wake).run()
        finally:
            self.close()

    def stop(self) -> None:
        """End :meth:`run`: the term in hand (if any) sees ``term.stopping``; once
        ``on_acquired`` returns, leadership is released and followers woken at once.
        Thread- and signal-safe; permanent for this object."""
        self._stop.set()
        self._hub.wake_all()
        term = self._term
        if term is not None:
            term._wake.set()

    @property
    def stopping(self) -> bool:
        return self._stop.is_set()

    def close(self) -> None:
        """Stop the background threads (heartbeat, wake reader)."""
        self._heartbeat.close()
        self._hub.close()

    # -- internals -------------------------------------------------------------------

    def _hook(self, log: events.EventLog, name: str, term: Term) -> None:
        self._hooks.guarded(log, name, term)


class _Campaign(CampaignBase):
    """The I/O of one :meth:`Leader.run` call, in its thread."""

    def __init__(self, leader: Leader, wake: threading.Event) -> None:
        super().__init__(leader)
        self.l = leader
        self.wake = wake

    # -- the contest (lockworker.serving.contend) ------------------------------------

    def run(self) -> None:
        contend.run(self)

    def look(self) -> Snapshot:
        lead = self.l
        return lead._call(lambda: lead.protocol.inspect(lead.keys), "inspect leader")

    def acquire(self) -> Grant | Snapshot:
        lead = self.l
        return lead._call(
            lambda: lead.protocol.acquire(
                lead.keys, lead._who, lead._lease_ms, MAX_TERMS, lead._retention_ms
            ),
            "acquire leadership",
        )

    def hold(self, grant: Grant, sent_at: float) -> None:
        """Lead, resign, then step back so a follower takes over."""
        self.lead(grant, sent_at)
        self.stepped_back()

    def seen(self, snapshot: Snapshot) -> Next:
        if snapshot.resolved:  # reset by hand to DONE/GAVE_UP: make it electable again
            lead = self.l
            lead._call(lambda: lead.protocol.reset(lead.keys, lead._retention_ms), "reset leader")
            return Next.AGAIN
        self.follow(snapshot)
        return Next.WAIT

    def wait(self, deadline: float, *, park: bool, observe: bool) -> None:
        self.wait_until(deadline)

    def stopped(self) -> None:
        return None

    def wait_until(self, deadline: float) -> None:
        """Until ``deadline``, a wake message (a term ended) or a stop."""
        lead = self.l
        remaining = deadline - lead.clock.monotonic()
        if remaining > 0 and not lead.stopping and lead.clock.wait(self.wake, remaining):
            self.wake.clear()

    def follow(self, seen: Snapshot) -> None:
        """Report a new leader (once per term seen)."""
        term = self.news(seen)
        if term is not None:
            self.l._hook(self.l._log, "on_locked", term)

    def lead(self, grant: Grant, sent_at: float) -> None:
        """Hold the term while ``on_acquired`` runs, then resign."""
        lead = self.l
        held = lead._who.value(grant.token, grant.attempt)
        log = lead._log.bind(token=grant.token)
        since = wall_time()

        def renew(deadline: float) -> bool:
            renewal = lead._call(
                lambda: lead.protocol.renew(
                    lead.keys, held, lead._lease_ms, lead._retention_ms
                ),
                "renew leadership",
                deadline=deadline,
            )
            return events.renewed(renewal, log)

        def lost(_lease: Lease, reason: str) -> None:
            log.warning(LOST, reason=reason)
            term._wake.set()
            lead._hook(log, "on_lost", term)

        lease = Lease.granted(renew, lead.lock_timeout, sent_at, on_lost=lost)
        term = Term(
            lead.name, grant.token, lead.owner, since,
            _clock=lead.clock, _lease=lease, _stopping=lead._stop,
        )
        lead._term = term
        if lead.stopping:
            term._wake.set()
        lead._heartbeat.hold(lease)
        self.record(grant.token, since, log)
        log.info(ELECTED, reentered=grant.reentered)
        try:
            lead.on_acquired(term)
        except StopRequested:
            pass
        except Exception as exc:
            log.error(HOOK_ERROR, hook="on_acquired", error=events.describe(exc))
        finally:
            # A term that ran out before the hook returned is reported lost here, if
            # the heartbeat has not yet; a refused resignation in ``resign``.
            lead._heartbeat.end(lease)
            lead._term = None
            with contextlib.suppress(Exception):
                self.resign(held, lease, log)

    def record(self, token: int, since: float, log: events.EventLog) -> None:
        """Write who leads since when, for :meth:`Leader.current` (display only)."""
        lead = self.l
        key = lead.keys.extra("term")
        try:
            pipe = lead.client.pipeline(transaction=True)
            pipe.hset(key, mapping={"holder": lead.owner, "token": token, "since": since})
            pipe.pexpire(key, lead._retention_ms)
            pipe.execute()
        except redis.RedisError as exc:
            log.warning("leader.record_failed", error=events.describe(exc))

    def resign(self, held: LockValue, lease: Lease, log: events.EventLog) -> None:
        """Release the lease (waking followers); report a loss not reported yet."""
        lead = self.l
        settled = lead._call(
            lambda: lead.protocol.release(lead.keys, held, lead._retention_ms),
            "resign leadership",
        )
        self.resigned(settled, lease, log)
