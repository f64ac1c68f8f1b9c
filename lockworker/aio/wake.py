"""Waking asyncio waiters when a job, lock or permit changes hands.

The same channels, messages and rules as :mod:`lockworker.runtime.wake` (read that
module's docstring for why pub/sub and a client-side deadline): a waiter subscribes,
waits until the server confirmed the subscription, re-reads, then waits on an
``asyncio.Event`` until a message or its own deadline. One :class:`AsyncWakeHub` per
event loop and connection pool: one pub/sub connection and one reader task, shared by
every ``lockworker.aio`` object on that pool, closed by itself after
:data:`~lockworker.runtime.wake.IDLE_CLOSE` seconds without a channel.

A broken connection wakes every waiter to re-read, and again once its channel is
subscribed anew (redis-py's asyncio pub/sub subscribes again when it reconnects; on a
cluster the reader listens on another node instead, as the thread does).
"""

from __future__ import annotations

import asyncio
import contextlib
import weakref
from collections.abc import AsyncIterator, Awaitable
from typing import Any, TypeVar

import redis

from lockworker.runtime.subscriptions import KeepsMessage, replacement, route
from lockworker.runtime.wake import (
    BROKEN_PAUSE,
    CONFIRM_TIMEOUT,
    IDLE_CLOSE,
    LINGER,
    READ_TIMEOUT,
)

CONNECTING_PAUSE = 0.001
"""Seconds the reader waits while the pub/sub's first connection is being made."""

T = TypeVar("T")


class AsyncWakeHub:
    """One pub/sub connection and reader task, shared by the waiters of one loop.

    It keeps no reference to its loop: the registry forgets the hubs of a loop once
    the loop is gone (``asyncio.run`` makes a new loop each time)."""

    def __init__(self, client: Any) -> None:
        self._client = client
        self._pubsub: Any = None
        self._waiters: dict[str, set[asyncio.Event]] = {}
        self._confirmed: dict[str, asyncio.Event] = {}
        self._linger: dict[str, float] = {}
        self._rejoin: set[str] = set()
        self._unsent: dict[str, asyncio.Event] = {}  # joined, not yet subscribed
        self._task: asyncio.Task[None] | None = None

    def subscribed(self, channel: str) -> bool:
        confirmed = self._confirmed.get(channel)
        return confirmed is not None and confirmed.is_set()

    @contextlib.asynccontextmanager
    async def listen(
        self, channel: str, *, confirm_timeout: float = CONFIRM_TIMEOUT
    ) -> AsyncIterator[asyncio.Event]:
        """Subscribe to ``channel`` for the block; yield the event a message sets.

        Enters only once the server confirmed the subscription (or ``confirm_timeout``
        passed, and then the event is set, so the caller re-reads rather than trusts).
        """
        event = AsyncWakeEvent()
        self._waiters.setdefault(channel, set()).add(event)
        self._linger.pop(channel, None)
        confirmed = self._confirmed.get(channel)
        try:
            if confirmed is None:
                confirmed = self._confirmed[channel] = asyncio.Event()
                if self._pubsub is None:
                    self._pubsub = self._client.pubsub()
                try:
                    await self._pubsub.subscribe(channel)
                except (redis.RedisError, OSError, RuntimeError, AttributeError) as exc:
                    if isinstance(exc, (RuntimeError, AttributeError)) and not _clash(exc):
                        raise
                    # Not listening: the caller re-reads, and its own retries report;
                    # the reader subscribes the channel with the others it lacks.
                    self._confirmed.pop(channel, None)
                    event.set()
            self._start_reader()
            if not event.is_set():
                try:
                    await asyncio.wait_for(confirmed.wait(), confirm_timeout)
                except asyncio.TimeoutError:
                    event.set()
            yield event
        finally:
            self.leave(channel, event)

    def join(self, channel: str, event: asyncio.Event) -> asyncio.Event:
        """Let a message on ``channel`` set ``event`` until :meth:`leave`, awaiting
        nothing: the reader task subscribes. Returns the subscription's confirmation
        (:meth:`lockworker.runtime.wake.WakeHub.join`)."""
        self._waiters.setdefault(channel, set()).add(event)
        self._linger.pop(channel, None)
        if self._pubsub is None:
            self._pubsub = self._client.pubsub()
        confirmed = self._confirmed.get(channel) or self._unsent.get(channel)
        if confirmed is None:
            confirmed = self._unsent[channel] = asyncio.Event()
        self._start_reader()
        return confirmed

    def leave(self, channel: str, event: asyncio.Event) -> None:
        """``event`` no longer waits on ``channel`` (which lingers if nobody else does)."""
        waiters = self._waiters.get(channel, set())
        waiters.discard(event)
        if not waiters:
            self._waiters.pop(channel, None)
            self._unsent.pop(channel, None)
            self._linger[channel] = asyncio.get_running_loop().time() + LINGER

    def _start_reader(self) -> None:
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._read(), name="lockworker-wake")
            self._task.add_done_callback(self._reader_ended)

    def _reader_ended(self, task: asyncio.Task[None]) -> None:
        # Also when the loop cancels it at its end: a finished task (and through it,
        # the loop) is not kept.
        if self._task is task:
            self._task = None

    def wake_all(self) -> None:
        for waiters in self._waiters.values():
            for event in waiters:
                event.set()

    async def _read(self) -> None:
        """Dispatch messages until idle; a broken connection wakes every waiter."""
        idle = 0.0
        while True:
            await self._unsubscribe_lingering()
            pubsub = self._pubsub
            if pubsub is None or (
                not self._confirmed and not self._unsent and idle >= IDLE_CLOSE
            ):
                await self._stop()
                return
            try:
                for channel in [c for c in self._waiters if c not in self._confirmed]:
                    unsent = self._unsent.pop(channel, None)
                    self._confirmed[channel] = unsent or asyncio.Event()
                    await _own_task(pubsub.subscribe(channel))
                if getattr(pubsub, "connection", True) is None:
                    # Another task's first subscribe is still connecting (or failed, and
                    # the next turn subscribes anew): nothing to read yet, and
                    # get_message would raise.
                    idle = 0.0 if self._confirmed else idle + CONNECTING_PAUSE
                    await asyncio.sleep(CONNECTING_PAUSE)
                    continue
                message = await _own_task(pubsub.get_message(timeout=READ_TIMEOUT))
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                self._broken(exc)
                if not self._waiters and not self._unsent:
                    # Nobody waits: lingering channels are not worth a reconnect (a
                    # server gone for good would have it tried forever).
                    await self._stop()
                    return
                await asyncio.sleep(BROKEN_PAUSE)
                continue
            if message is None:
                idle = 0.0 if self._confirmed else idle + READ_TIMEOUT
                continue
            idle = 0.0
            self._dispatch(message)

    def _dispatch(self, message: dict[str, Any]) -> None:
        route(message, self._confirmed, self._rejoin, self._waiters)

    def _broken(self, exc: Exception) -> None:
        """Messages may be lost: every waiter re-reads; what replaces the connection is
        :func:`~lockworker.runtime.subscriptions.replacement`'s to say."""
        fresh = replacement(self._client, self._pubsub, exc)
        if fresh is not None:
            old, self._pubsub = self._pubsub, fresh
            for confirmed in self._confirmed.values():
                confirmed.set()  # a listen awaiting it enters, woken to re-read (below)
            self._confirmed.clear()
            if old is not None:
                asyncio.get_running_loop().create_task(_close(old))
        for confirmed in self._confirmed.values():
            confirmed.clear()
        self._rejoin.update(self._waiters)
        self.wake_all()

    async def _unsubscribe_lingering(self) -> None:
        now = asyncio.get_running_loop().time()
        for channel, until in list(self._linger.items()):
            if until <= now and channel not in self._waiters:
                del self._linger[channel]
                self._confirmed.pop(channel, None)
                if self._pubsub is not None:
                    with contextlib.suppress(Exception):
                        await _own_task(self._pubsub.unsubscribe(channel))

    async def _stop(self) -> None:
        pubsub, self._pubsub, self._task = self._pubsub, None, None
        self._confirmed.clear()
        self._linger.clear()
        self._rejoin.clear()
        if pubsub is not None:
            await _own_task(_close(pubsub))


def _clash(exc: RuntimeError | AttributeError) -> bool:
    """True when a subscribe that reconnects the pub/sub (the server restarted) meets
    the reader task on the same connection, which is not the caller's failure: asyncio
    refuses a second reader on one stream (RuntimeError), or the reader dropped the
    connection while the subscribe was writing its handshake, and redis-py writes to
    the stream it no longer has (AttributeError on ``None``)."""
    if isinstance(exc, RuntimeError):
        return "another coroutine is already waiting" in str(exc)
    return "'NoneType' object has no attribute" in str(exc)


class AsyncWakeEvent(KeepsMessage, asyncio.Event):
    """:class:`lockworker.runtime.wake.WakeEvent` on the loop."""


async def _own_task(call: Awaitable[T]) -> T:
    """Await a redis-py call in a task of its own, so that cancelling the reader always
    ends it, on every Python.

    Before Python 3.12, ``asyncio.wait_for`` returns the result of an awaitable that
    finished as the awaiting task was cancelled, dropping the cancellation, and
    redis-py awaits one for every write: a reader cancelled while it reconnected (its
    client closed, then the loop ended by ``asyncio.run``) read on until idle, about
    7 s. Here the reader awaits only ``asyncio.wait``, which never drops one; the call
    is cancelled too, and ends at the latest with its own read or connect timeout."""
    task = asyncio.ensure_future(_settled(call))
    try:
        await asyncio.wait({task})
    except asyncio.CancelledError:
        task.cancel()
        raise
    value, error = task.result()
    if error is not None:
        raise error
    return value  # type: ignore[return-value]


async def _settled(call: Awaitable[T]) -> tuple[T | None, Exception | None]:
    """The call's result or its error, as a value: the task never ends with an
    exception, so one abandoned by a cancelled reader (or cancelled by ``asyncio.run``
    at its end, which reports every task that ended with one) is nobody's to report."""
    try:
        return await call, None
    except Exception as exc:
        return None, exc


async def _close(pubsub: Any) -> None:
    with contextlib.suppress(Exception):
        await pubsub.aclose()


_Hubs = weakref.WeakKeyDictionary[Any, AsyncWakeHub]
_hubs: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Hubs] = weakref.WeakKeyDictionary()


def hub_for(client: Any) -> AsyncWakeHub:
    """The hub of the running loop for ``client``'s connection pool (for an asyncio
    ``RedisCluster``, for the client)."""
    loop = asyncio.get_running_loop()
    pool = getattr(client, "connection_pool", None)
    key = client if pool is None else pool
    hubs = _hubs.setdefault(loop, weakref.WeakKeyDictionary())
    hub = hubs.get(key)
    if hub is None:
        hub = hubs[key] = AsyncWakeHub(client)
    return hub


class AsyncWaits:
    """The waits of one object on its loop's hub; :meth:`wake_all` wakes only its own."""

    def __init__(self, client: Any) -> None:
        self._client = client
        self._events: set[asyncio.Event] = set()

    def subscribed(self, channel: str) -> bool:
        return hub_for(self._client).subscribed(channel)

    @contextlib.asynccontextmanager
    async def listen(self, channel: str) -> AsyncIterator[asyncio.Event]:
        async with hub_for(self._client).listen(channel) as event:
            self._events.add(event)
            try:
                yield event
            finally:
                self._events.discard(event)

    def wake_all(self) -> None:
        """Wake this object's waiters (on stop). Safe from any thread only through
        ``loop.call_soon_threadsafe``; the objects do that themselves."""
        for event in self._events:
            event.set()


async def wait(event: asyncio.Event, timeout: float) -> bool:
    """Wait for ``event`` at most ``timeout`` seconds; True if it was set."""
    if event.is_set():
        return True
    if timeout <= 0:
        return False
    try:
        await asyncio.wait_for(event.wait(), timeout)
    except asyncio.TimeoutError:
        return False
    return True
