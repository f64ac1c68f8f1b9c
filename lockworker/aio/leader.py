"""``lockworker.aio.Leader``: leader election on ``redis.asyncio``, hooks awaited.

The same keys, values, Lua steps, contender loop (:mod:`lockworker.serving.contend`),
settings and events as :class:`lockworker.Leader`, so sync and async processes elect
one leader among them. ``on_acquired(term)`` is awaited while this process leads;
returning, raising or being cancelled resigns at once (the lease is released and
followers are woken, never left to run out). In an ``async def`` hook,
``await term.wait(seconds)`` is the asyncio form of ``term.wait``; a plain hook runs in
a worker thread, where ``term.wait(seconds)`` blocks as in a sync leader.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from dataclasses import dataclass, field
from typing import Any

import redis

from lockworker.aio import contend
from lockworker.aio.lease import AsyncHeartbeat, Background, Reports
from lockworker.aio.permissions import require_permissions
from lockworker.aio.protocol import AsyncScriptProtocol
from lockworker.aio.wake import AsyncWaits, wait
from lockworker.aio.worker import AsyncHook, check_async_client, check_local_script
from lockworker.clock import Clock, SystemClock, wall_time
from lockworker.errors import LockworkerError, StopRequested
from lockworker.model.codec import LockValue
from lockworker.model.state import Durability, Grant, ProtocolKind, Role, Snapshot
from lockworker.protocol.luacall import ready
from lockworker.runtime import events, registering, retry
from lockworker.runtime.lease import Lease, revoke
from lockworker.runtime.signals import stop_on_signals
from lockworker.serving.contend import Next
from lockworker.serving.leadership import (
    ELECTED,
    HOOK_ERROR,
    LOST,
    MAX_TERMS,
    CampaignBase,
    LeaderInfo,
    LeaderSettings,
    leader_info,
    leader_keys,
)
from lockworker.serving.term import Term


@dataclass(eq=False)
class AsyncTerm(Term):
    """A :class:`~lockworker.serving.term.Term` whose :meth:`wait` is awaited on the
    loop, and blocks in a plain hook's worker thread."""

    _awake: asyncio.Event = field(default_factory=asyncio.Event, repr=False)

    def wait(self, seconds: float) -> Any:
        """Up to ``seconds``; True once the term is over (lost or stopping), False
        after a full, uneventful wait. In an ``async def`` hook, on the loop, it returns
        a coroutine: ``while not await term.wait(1.0): ...``. In a plain hook, which
        runs in a worker thread, it blocks that thread as :meth:`Term.wait` does and
        returns the bool: ``while not term.wait(1.0): ...``."""
        try:
            asyncio.get_running_loop()
        except RuntimeError:  # no loop in this thread: a plain hook's worker thread
            return Term.wait(self, seconds)
        return self._wait_on_loop(seconds)

    async def _wait_on_loop(self, seconds: float) -> bool:
        clock = self._clock or SystemClock()
        end = clock.monotonic() + max(0.0, seconds)
        while True:
            step = self._step(end, clock.monotonic())
            if isinstance(step, bool):
                return step
            await wait(self._awake, step)

    def _wake_all(self) -> None:
        """In the loop: wake its waits on the loop and in a plain hook's thread."""
        self._awake.set()
        self._wake.set()


class Leader(LeaderSettings):
    """Keeps one leader among all processes (sync or async) of the same ``name``; see
    :class:`lockworker.Leader` for every argument. Hooks may be ``async def`` (awaited
    on the loop) or plain (run in a worker thread)."""

    def __init__(
        self,
        client: Any,
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
        on_acquired: AsyncHook | None = None,
        on_locked: AsyncHook | None = None,
        on_lost: AsyncHook | None = None,
    ) -> None:
        self.client = check_async_client(client, twin="Leader")
        check_local_script(ProtocolKind.SCRIPT, durability, twin="Leader")
        # ``replicas``/``replica_timeout`` mean something only with replicated
        # durability, which is refused above; kept so both sides take one signature.
        del replicas, replica_timeout
        self.durability = Durability.LOCAL
        self._configure(
            Leader, name=name, lock_timeout=lock_timeout, owner=owner, role=role,
            backup_delay=backup_delay, clock=clock, logger=logger, redis_retry=redis_retry,
            handle_signals=handle_signals,
            hooks={"on_acquired": on_acquired, "on_locked": on_locked, "on_lost": on_lost},
        )
        self.protocol = AsyncScriptProtocol(client)
        self._call = retry.AsyncCaller(self.clock, self.redis_retry, self._log)
        self._stop = threading.Event()
        self._heartbeat = AsyncHeartbeat(self.clock, self.lock_timeout / 3)
        self._hub = AsyncWaits(client)
        self._term: AsyncTerm | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._background = Background()
        self._registration = registering.leader(client, self.name)

    # -- hooks -----------------------------------------------------------------------

    async def on_acquired(self, term: AsyncTerm) -> None:
        """Lead until ``term.lost`` or ``term.stopping``; returning resigns. Required."""
        await self._hooks.given_async("on_acquired", term)

    async def on_locked(self, term: Term) -> None:
        """Another process leads (``term.holder``, ``term.token``)."""
        await self._hooks.given_async("on_locked", term)

    async def on_lost(self, term: AsyncTerm) -> None:
        """This process's term can no longer be trusted; stop acting as leader."""
        await self._hooks.given_async("on_lost", term)

    # -- public API ------------------------------------------------------------------

    @staticmethod
    async def current(client: Any, name: str) -> LeaderInfo | None:
        """Who leads ``name`` now and since when, or None if nobody does."""
        keys = leader_keys(name)
        await ready(client)
        pipe = client.pipeline(transaction=True)
        pipe.get(keys.lock)
        pipe.pttl(keys.lock)
        pipe.hgetall(keys.extra("term"))
        return leader_info(keys, *await pipe.execute())

    async def run(self) -> None:
        """Campaign, lead, resign and campaign again until :meth:`stop`. First checks
        that the Redis user may do what leading needs (:class:`~lockworker.PermissionDenied`
        naming the grant, before any hook runs). A second, concurrent call raises
        :class:`~lockworker.ConcurrentUse` and leaves the first alone."""
        with self._one_campaign():
            await self._run_campaign()

    async def _run_campaign(self) -> None:
        self._loop = asyncio.get_running_loop()
        await ready(self.client)
        try:
            await require_permissions(self.client, self.keys)
            await self._registration.acall()  # the views' list, at the first campaign
            with stop_on_signals(lambda _signum: self.stop(), enabled=self.handle_signals):
                async with self._hub.listen(self.keys.wake) as wake:
                    await contend.run(_Campaign(self, wake))
        finally:
            await self.close()

    def stop(self) -> None:
        """End :meth:`run`; see :meth:`lockworker.Leader.stop`. Safe from any thread."""
        self._stop.set()
        term = self._term
        if term is not None:
            term._wake.set()  # a plain hook's wait, in its thread
        loop = self._loop
        if loop is not None and not loop.is_closed():
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(self._wake_all)

    def _wake_all(self) -> None:
        self._hub.wake_all()
        term = self._term
        if term is not None:
            term._wake_all()

    @property
    def stopping(self) -> bool:
        return self._stop.is_set()

    async def close(self) -> None:
        """End the heartbeat and hook tasks."""
        await self._heartbeat.close()
        self._hub.wake_all()
        await self._background.cancel_all()

    async def _hook(self, log: events.EventLog, name: str, term: Term) -> None:
        await self._hooks.guarded_async(log, name, term)


class _Campaign(CampaignBase):
    """The I/O of one :meth:`Leader.run` (the loop is :mod:`lockworker.serving.contend`'s,
    the decisions :class:`~lockworker.serving.leadership.CampaignBase`'s)."""

    def __init__(self, leader: Leader, wake: asyncio.Event) -> None:
        super().__init__(leader)
        self.l = leader
        self.wake = wake

    async def look(self) -> Snapshot:
        lead = self.l
        return await lead._call(lambda: lead.protocol.inspect(lead.keys), "inspect leader")

    async def acquire(self) -> Grant | Snapshot:
        lead = self.l
        try:
            return await lead._call(
                lambda: lead.protocol.acquire(
                    lead.keys, lead._who, lead._lease_ms, MAX_TERMS, lead._retention_ms
                ),
                "acquire leadership",
            )
        except asyncio.CancelledError:
            await asyncio.shield(self.abandon())
            raise

    async def abandon(self) -> None:
        """After a cancelled acquire whose grant may have landed unread: ask again (the
        same run re-enters its own term) and resign it at once (best effort)."""
        lead = self.l
        with contextlib.suppress(LockworkerError, redis.RedisError):
            answer = await lead.protocol.acquire(
                lead.keys, lead._who, lead._lease_ms, MAX_TERMS, lead._retention_ms
            )
            if isinstance(answer, Grant):
                held = lead._who.value(answer.token, answer.attempt)
                await lead.protocol.release(lead.keys, held, lead._retention_ms)

    async def hold(self, grant: Grant, sent_at: float) -> None:
        await self.lead(grant, sent_at)
        self.stepped_back()

    async def seen(self, snapshot: Snapshot) -> Next:
        lead = self.l
        if snapshot.resolved:  # reset by hand to DONE/GAVE_UP: make it electable again
            await lead._call(
                lambda: lead.protocol.reset(lead.keys, lead._retention_ms), "reset leader"
            )
            return Next.AGAIN
        term = self.news(snapshot)
        if term is not None:
            await lead._hook(lead._log, "on_locked", term)
        return Next.WAIT

    async def wait(self, deadline: float, *, park: bool, observe: bool) -> None:
        lead = self.l
        remaining = deadline - lead.clock.monotonic()
        if remaining > 0 and not lead.stopping and await wait(self.wake, remaining):
            self.wake.clear()

    async def stopped(self) -> None:
        return None

    async def lead(self, grant: Grant, sent_at: float) -> None:
        """Hold the term while ``on_acquired`` runs, then resign (also when cancelled)."""
        lead = self.l
        held = lead._who.value(grant.token, grant.attempt)
        log = lead._log.bind(token=grant.token)
        since = wall_time()

        async def renew(deadline: float) -> bool:
            renewal = await lead._call(
                lambda: lead.protocol.renew(lead.keys, held, lead._lease_ms, lead._retention_ms),
                "renew leadership", deadline=deadline,
            )
            return events.renewed(renewal, log)

        reports = Reports(lead._background)

        def lost(_lease: Lease, reason: str) -> None:
            log.warning(LOST, reason=reason)
            term._wake_all()
            reports.spawn(lead._hook(log, "on_lost", term))

        lease = Lease.granted(renew, lead.lock_timeout, sent_at, on_lost=lost)
        term = AsyncTerm(
            lead.name, grant.token, lead.owner, since,
            _clock=lead.clock, _lease=lease, _stopping=lead._stop,
        )
        lead._term = term
        if lead.stopping:
            term._wake_all()
        lead._heartbeat.hold(lease)
        await self.record(grant.token, since, log)
        log.info(ELECTED, reentered=grant.reentered)
        cancelled = False
        try:
            await lead._hooks.call_async("on_acquired", term)
        except StopRequested:
            pass
        except Exception as exc:
            log.error(HOOK_ERROR, hook="on_acquired", error=events.describe(exc))
        except asyncio.CancelledError:
            cancelled = True
            raise
        finally:
            # A term that ran out before the hook returned is reported lost here, if
            # the heartbeat has not yet; a refused resignation in ``resign``.
            lead._heartbeat.end(lease)
            if cancelled:  # a plain hook may run on in its thread: it sees the end
                revoke(lease)
                term._wake_all()
            lead._term = None
            with contextlib.suppress(Exception):
                await asyncio.shield(self.resign(held, lease, log))
            if not cancelled:  # else it runs on in its task, holding nothing up
                await reports.done()  # on_lost has run before the next campaign

    async def record(self, token: int, since: float, log: events.EventLog) -> None:
        """Write who leads since when, for :meth:`Leader.current` (display only)."""
        lead = self.l
        key = lead.keys.extra("term")
        try:
            pipe = lead.client.pipeline(transaction=True)
            pipe.hset(key, mapping={"holder": lead.owner, "token": token, "since": since})
            pipe.pexpire(key, lead._retention_ms)
            await pipe.execute()
        except redis.RedisError as exc:
            log.warning("leader.record_failed", error=events.describe(exc))

    async def resign(self, held: LockValue, lease: Lease, log: events.EventLog) -> None:
        """Release the lease (waking followers); report a loss not reported yet."""
        lead = self.l
        settled = await lead._call(
            lambda: lead.protocol.release(lead.keys, held, lead._retention_ms),
            "resign leadership",
        )
        self.resigned(settled, lease, log)
