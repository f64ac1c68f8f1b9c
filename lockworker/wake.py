"""Waking waiting processes at once when a job changes hands.

Every step that ends an attempt (complete, fail, release, give up) publishes on the
job's wake channel. A :class:`WakeHub` holds one pub/sub connection per worker and one
reader thread; a waiter registers the job's channel, re-reads the job, then blocks on a
local event until a message arrives or its own deadline passes.

Why pub/sub and a client-side deadline: a message reaches every waiter at once (a DONE
must release them all, not one), and the deadline is kept by this process's own timer,
so a waiter whose holder died wakes when the lease ends, not when the server's
blocking-command timer gets round to it (measured up to 100 ms late).

Lost messages cannot hang anyone: a waiter subscribes (and waits for the server's
confirmation) before it re-reads the job, and always wakes at the lease's end anyway;
when the pub/sub connection breaks, every waiter is woken to re-read.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from typing import Any

import redis

from lockworker.clock import Clock
from lockworker.protocol import text

READ_TIMEOUT = 0.5
"""How long the reader thread blocks on the socket before checking whether to close."""


class WakeHub:
    """One pub/sub connection shared by all waiters of a worker."""

    def __init__(self, client: redis.Redis, clock: Clock) -> None:
        self._client = client
        self._clock = clock
        self._lock = threading.Lock()
        self._waiters: dict[str, set[threading.Event]] = {}
        self._confirmed: dict[str, threading.Event] = {}
        self._pubsub: Any = None
        self._thread: threading.Thread | None = None
        self._closed = threading.Event()

    def _ensure_reader(self) -> None:
        # Started after the first SUBSCRIBE, so the reader never polls an idle connection.
        if self._thread is None:
            self._thread = threading.Thread(target=self._read, name="lockworker-wake", daemon=True)
            self._thread.start()

    @contextlib.contextmanager
    def listen(self, channel: str, *, confirm_timeout: float = 5.0) -> Iterator[threading.Event]:
        """Subscribe to ``channel`` for the ``with`` block; yield the event it sets.

        Returns only once the server confirmed the subscription, so a change made after
        the caller's next read cannot be missed.
        """
        event = threading.Event()
        with self._lock:
            if self._pubsub is None:
                self._pubsub = self._client.pubsub()  # type: ignore[no-untyped-call]
            waiters = self._waiters.setdefault(channel, set())
            waiters.add(event)
            first = len(waiters) == 1
            confirmed = self._confirmed.setdefault(channel, threading.Event())
            if first:
                confirmed.clear()
                self._pubsub.subscribe(channel)
            self._ensure_reader()
        try:
            if not self._clock.wait(confirmed, confirm_timeout):
                event.set()  # no confirmation: let the caller re-read rather than trust it
            yield event
        finally:
            with self._lock:
                waiters = self._waiters.get(channel, set())
                waiters.discard(event)
                if not waiters:
                    self._waiters.pop(channel, None)
                    self._confirmed.pop(channel, None)
                    with contextlib.suppress(redis.RedisError, OSError):
                        self._pubsub.unsubscribe(channel)

    def wake_all(self) -> None:
        """Wake every waiter (on stop, or when messages may have been lost)."""
        with self._lock:
            for waiters in self._waiters.values():
                for event in waiters:
                    event.set()
            for confirmed in self._confirmed.values():
                confirmed.set()

    def _read(self) -> None:
        while not self._closed.is_set():
            try:
                message = self._pubsub.get_message(timeout=READ_TIMEOUT)
            except (redis.RedisError, OSError, ValueError, AttributeError):
                # The connection broke: messages may be lost, so everyone re-reads.
                self.wake_all()
                if self._closed.is_set():
                    return
                self._clock.sleep(0.05)
                continue
            if message is None:
                continue
            channel = text(message.get("channel"))
            with self._lock:
                if message.get("type") == "subscribe":
                    confirmed = self._confirmed.get(channel)
                    if confirmed is not None:
                        confirmed.set()
                elif message.get("type") == "message":
                    for event in self._waiters.get(channel, ()):
                        event.set()

    def close(self) -> None:
        """Stop the reader thread and close the connection."""
        self._closed.set()
        self.wake_all()
        thread, self._thread = self._thread, None
        if thread is not None:
            thread.join(timeout=READ_TIMEOUT * 4)
        if self._pubsub is not None:
            with contextlib.suppress(redis.RedisError, OSError):
                self._pubsub.close()
            self._pubsub = None
