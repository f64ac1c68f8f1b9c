"""Waking waiting processes at once when a job, lock or permit changes hands.

Every step that ends a hold (complete, fail, release, give up) publishes on the
wake channel of what it held. A process keeps **one** :class:`WakeHub` per connection
pool of its clients: one pub/sub connection and one reader thread, shared by every
``Lock``, ``Semaphore``, ``Redlock`` (per master), ``compute_once``, ``Worker`` and
``Leader`` using that pool (:func:`hub_for`). A new object pays no connection or thread
start of its own: ``with Lock(client, "x"):`` in a loop costs the same as reusing one.

A waiter registers the channel, waits until the server *confirmed* the subscription
(skipped when the channel was already subscribed for another waiter of this process),
re-reads, then blocks on a local event until a message arrives or its own deadline
passes. A release can thus never fall between a waiter's failed read and its wait
unseen: either the release came before the confirmed subscription, and the re-read
sees it, or after, and the message wakes the waiter.

Why pub/sub and a client-side deadline: a message reaches every waiter at once (a DONE
must release them all, not one), and the deadline is kept by this process's own timer,
so a waiter whose holder died wakes when the lease ends, not when the server's
blocking-command timer gets round to it (measured up to 100 ms late).

Lost messages cannot hang anyone: when the pub/sub connection breaks, every waiter is
woken to re-read, and again once its channel is subscribed anew (a message sent while
the connection was down is lost); and every waiter wakes at the lease's end anyway.
On a cluster the connection then moves to another node (:mod:`.subscriptions`), since
its own may be a master that failed over and never comes back. The hub closes its
connection and ends its thread after :data:`IDLE_CLOSE` seconds without a channel; a
forked child starts with no hub (its parent's connection and thread are not its own).
"""

from __future__ import annotations

import contextlib
import os
import select
import threading
import weakref
from collections.abc import Iterator
from typing import Any

import redis

from lockworker.clock import SystemClock
from lockworker.runtime.subscriptions import KeepsMessage, replacement, route

READ_TIMEOUT = 0.2
"""How long the reader thread blocks on the socket before checking whether to stop."""
IDLE_CLOSE = 5.0
"""Seconds without any subscribed channel after which a hub closes its connection."""
LINGER = 2.0
"""Seconds a channel stays subscribed after its last waiter left, so that a process
that keeps contending for a lock does not subscribe and unsubscribe for every wait."""
CONFIRM_TIMEOUT = 5.0
"""Seconds to wait for the server to confirm a subscription before re-reading anyway."""
BROKEN_PAUSE = 0.05
"""Seconds the reader pauses after a failed read before it tries (and reconnects) again."""


class WakeHub:
    """One pub/sub connection and reader thread shared by all waiters of a process.

    Created by :func:`hub_for`, one per connection pool; never closed by the objects
    that use it (it closes itself when idle).
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        # One thread at a time does I/O on the pub/sub connection: redis-py reconnects
        # inside whichever call finds the socket broken, and a reconnect racing a read
        # in another thread lets that read steal the handshake's reply. The reader holds
        # it only for non-blocking reads; it waits for data without it.
        self._io = threading.RLock()
        self._waiters: dict[str, set[threading.Event]] = {}
        self._confirmed: dict[str, threading.Event] = {}
        self._pubsub: Any = None
        self._thread: threading.Thread | None = None
        self._linger: dict[str, float] = {}
        self._unsent: dict[str, threading.Event] = {}  # joined, not yet subscribed
        self._rejoin: set[str] = set()
        """Channels subscribed again after a break: their waiters re-read once the
        subscription is back, since a message sent while it was down is lost."""
        self._closed = False
        self._clock = SystemClock()
        self._client: redis.Redis | None = None
        """A client of this hub's pool, to open a new pub/sub connection after a reset."""

    def subscribed(self, channel: str) -> bool:
        """True if the server confirmed this hub's subscription to ``channel``."""
        confirmed = self._confirmed.get(channel)
        return confirmed is not None and confirmed.is_set()

    def lingering(self, channel: str) -> bool:
        """True if ``channel`` is subscribed though nobody of this process waits on it
        (it then counts among PUBLISH's receivers without being a waiter)."""
        return channel in self._linger and self.subscribed(channel)

    @contextlib.contextmanager
    def listen(
        self, client: redis.Redis, channel: str, *, confirm_timeout: float = CONFIRM_TIMEOUT
    ) -> Iterator[threading.Event]:
        """Subscribe to ``channel`` for the ``with`` block; yield the event it sets.

        Returns only once the server confirmed the subscription, so a change made after
        the caller's next read cannot be missed. If no confirmation comes within
        ``confirm_timeout`` the event is set, so the caller re-reads rather than trusts.
        """
        event = WakeEvent()
        with self._lock:
            self._client = client
            if self._pubsub is None:
                self._pubsub = client.pubsub()  # type: ignore[no-untyped-call]
            pubsub = self._pubsub
            self._waiters.setdefault(channel, set()).add(event)
            self._linger.pop(channel, None)
            confirmed = self._confirmed.get(channel)
            join = confirmed is None
            if confirmed is None:
                confirmed = self._confirmed[channel] = threading.Event()
        listening = not join or self._subscribe(pubsub, channel)
        if not listening:
            event.set()  # not listening: the caller re-reads, and its own retries report
        with self._lock:
            if self._thread is None and not self._closed:
                # Started after the first SUBSCRIBE, so it never polls an idle connection.
                self._thread = threading.Thread(
                    target=self._read, name="lockworker-wake", daemon=True
                )
                self._thread.start()
        try:
            if listening and not confirmed.wait(confirm_timeout):
                event.set()
            yield event
        finally:
            self.leave(channel, event)

    def join(self, client: redis.Redis, channel: str, event: threading.Event) -> threading.Event:
        """Let a message on ``channel`` set ``event`` until :meth:`leave`, without any
        I/O in the caller: the reader thread subscribes (so a master that is down or
        silent never holds the caller up). Returns the subscription's confirmation,
        set once the server confirmed it; before then a message can be missed."""
        with self._lock:
            self._client = client
            if self._pubsub is None:
                self._pubsub = client.pubsub()  # type: ignore[no-untyped-call]
            self._waiters.setdefault(channel, set()).add(event)
            self._linger.pop(channel, None)
            confirmed = self._confirmed.get(channel) or self._unsent.get(channel)
            if confirmed is None:  # the reader subscribes it, as after a failed SUBSCRIBE
                confirmed = self._unsent[channel] = threading.Event()
            if self._thread is None and not self._closed:
                self._thread = threading.Thread(
                    target=self._read, name="lockworker-wake", daemon=True
                )
                self._thread.start()
        return confirmed

    def leave(self, channel: str, event: threading.Event) -> None:
        """``event`` no longer waits on ``channel`` (which lingers if nobody else does)."""
        with self._lock:
            waiters = self._waiters.get(channel, set())
            waiters.discard(event)
            if not waiters:
                self._waiters.pop(channel, None)
                self._unsent.pop(channel, None)
                self._linger[channel] = self._clock.monotonic() + LINGER

    def _subscribe(self, pubsub: Any, channel: str) -> bool:
        """SUBSCRIBE ``channel``; False if the connection failed (never raises): the
        caller's next read retries by its policy, the reader subscribes again."""
        try:
            with self._io:
                pubsub.subscribe(channel)
        except Exception:  # redis-py raises more than RedisError on a broken socket
            with self._lock:
                self._confirmed.pop(channel, None)
            return False
        return True

    def _unsubscribe_lingering_locked(self) -> None:
        now = self._clock.monotonic()
        for channel, until in list(self._linger.items()):
            if until <= now:
                del self._linger[channel]
                self._confirmed.pop(channel, None)
                if self._pubsub is not None:
                    with self._io, contextlib.suppress(Exception):
                        self._pubsub.unsubscribe(channel)

    def wake_all(self) -> None:
        """Wake every waiter (when messages may have been lost)."""
        with self._lock:
            for waiters in self._waiters.values():
                for event in waiters:
                    event.set()
            for confirmed in self._confirmed.values():
                confirmed.set()

    def _read(self) -> None:
        """The reader thread: dispatch messages until closed or idle. It never dies of
        an error: a broken connection wakes every waiter and is retried."""
        idle = 0.0
        while True:
            with self._lock:
                pubsub = self._pubsub
                if self._linger:
                    self._unsubscribe_lingering_locked()
                unused = not self._confirmed and not self._unsent
                if self._closed or (unused and idle >= IDLE_CLOSE):
                    self._stop_locked()
                    return
                missing = [c for c in self._waiters if c not in self._confirmed]
            try:
                for channel in missing:  # joined, or a subscription failed: (again)
                    with self._lock:
                        unsent = self._unsent.pop(channel, None) or threading.Event()
                        self._confirmed.setdefault(channel, unsent)
                    if not self._subscribe(pubsub, channel):
                        raise redis.ConnectionError(f"could not subscribe to {channel!r}")
                messages = self._drain(pubsub)
            except Exception as exc:
                self._broken(pubsub, exc)
                with self._lock:
                    if not self._waiters and not self._unsent:
                        # Nobody waits: lingering channels are not worth a reconnect
                        # (a server gone for good would have it tried forever).
                        self._stop_locked()
                        return
                continue
            if messages:
                idle = 0.0
                self._dispatch(messages)
            else:
                idle = 0.0 if self._confirmed else idle + READ_TIMEOUT
                self._wait_readable(pubsub)

    def _drain(self, pubsub: Any) -> list[dict[str, Any]]:
        """Every message already readable, without blocking (so subscribers never wait
        for the reader's timeout)."""
        messages: list[dict[str, Any]] = []
        with self._io:
            while True:
                message = pubsub.get_message(timeout=0)
                if message is None:
                    return messages
                messages.append(message)

    def _wait_readable(self, pubsub: Any) -> None:
        """Block until the socket has data or READ_TIMEOUT passed, holding no lock."""
        sock = getattr(getattr(pubsub, "connection", None), "_sock", None)
        try:
            if sock is None:
                raise OSError("not connected")
            select.select([sock], [], [], READ_TIMEOUT)
        except (OSError, ValueError, TypeError):
            threading.Event().wait(BROKEN_PAUSE)

    def _dispatch(self, messages: list[dict[str, Any]]) -> None:
        with self._lock:
            for message in messages:
                route(message, self._confirmed, self._rejoin, self._waiters)

    def _broken(self, pubsub: Any, exc: Exception) -> None:
        """The connection broke, or redis-py failed leaving it unsure: messages may be
        lost, so every waiter re-reads; :func:`replacement` says what listens now."""
        fresh = None if self._client is None else replacement(self._client, pubsub, exc)
        with self._lock:
            for confirmed in self._confirmed.values():
                confirmed.clear()
            self._rejoin.update(self._waiters)
            replace = fresh is not None and self._pubsub is pubsub
            if replace:
                self._confirmed.clear()
                self._pubsub = fresh
            for waiters in self._waiters.values():
                for event in waiters:
                    event.set()
        if replace:
            with self._io, contextlib.suppress(Exception):
                pubsub.close()
        threading.Event().wait(BROKEN_PAUSE)

    def _stop_locked(self) -> None:
        pubsub, self._pubsub, self._thread = self._pubsub, None, None
        self._confirmed.clear()
        self._linger.clear()
        self._rejoin.clear()
        if pubsub is not None:
            with self._io, contextlib.suppress(Exception):
                pubsub.close()

    def close(self) -> None:
        """Stop the reader thread and close the connection (tests, interpreter exit)."""
        thread = self._closing()
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=READ_TIMEOUT * 4)

    def _closing(self) -> threading.Thread | None:
        """Tell the reader to stop (at its next turn); its thread, to join."""
        with self._lock:
            self._closed = True
            thread = self._thread
        self.wake_all()
        return thread


class _Registry:
    """This process's hubs, one per connection pool, forgotten when the pool is."""

    def __init__(self) -> None:
        self.forget()

    def forget(self) -> None:
        # Also run in a forked child: the parent's hubs belong to threads it lacks.
        self.hubs: weakref.WeakKeyDictionary[Any, WakeHub] = weakref.WeakKeyDictionary()
        self.lock = threading.Lock()

    def get(self, pool: Any) -> WakeHub:
        with self.lock:
            hub = self.hubs.get(pool)
            if hub is None or hub._closed:
                hub = self.hubs[pool] = WakeHub()
            return hub


_registry = _Registry()
os.register_at_fork(after_in_child=_registry.forget)


def close_all() -> list[threading.Thread]:
    """Close every hub of this process, all at once (a waiter that comes later gets a
    new one); return their reader threads, which end at their next turn (within
    :data:`READ_TIMEOUT`) unless redis-py is still retrying a broken connection in
    them. For tests, which end with nothing of theirs left running."""
    with _registry.lock:
        hubs = list(_registry.hubs.values())
    threads = [hub._closing() for hub in hubs]
    return [t for t in threads if t is not None and t is not threading.current_thread()]


def hub_for(client: redis.Redis) -> WakeHub:
    """The wake hub of this process for ``client``'s connection pool (for a
    ``RedisCluster``, which has no pool of its own, for the client)."""
    pool = getattr(client, "connection_pool", None)
    return _registry.get(client if pool is None else pool)


class WakeEvent(KeepsMessage, threading.Event):
    """A waiter's event, keeping the last wake message it was set by."""


class Waits:
    """The waits of one object (a worker, a leader, a lock) on the shared hub.

    :meth:`wake_all` and :meth:`close` wake only this object's waiters, never those of
    other objects sharing the process's hub.
    """

    def __init__(self, client: redis.Redis) -> None:
        self._client = client
        self._lock = threading.Lock()
        self._events: set[threading.Event] = set()

    def hub(self) -> WakeHub:
        return hub_for(self._client)

    def subscribed(self, channel: str) -> bool:
        """True if this process listens on ``channel`` already (no round trip to join)."""
        return self.hub().subscribed(channel)

    def lingering(self, channel: str) -> bool:
        """See :meth:`WakeHub.lingering`."""
        return self.hub().lingering(channel)

    @contextlib.contextmanager
    def listen(self, channel: str) -> Iterator[threading.Event]:
        """:meth:`WakeHub.listen` on the process's hub, wakeable by :meth:`wake_all`."""
        with self.hub().listen(self._client, channel) as event:
            with self._lock:
                self._events.add(event)
            try:
                yield event
            finally:
                with self._lock:
                    self._events.discard(event)

    def wake_all(self) -> None:
        """Wake this object's waiters (on stop)."""
        with self._lock:
            for event in self._events:
                event.set()

    def close(self) -> None:
        """Wake this object's waiters; the shared connection stays for the others."""
        self.wake_all()
