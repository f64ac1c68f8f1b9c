"""A clock that tests move by hand."""

from __future__ import annotations

import threading

from lockworker import config


class FakeClock:
    """A :class:`lockworker.clock.Clock` whose time moves only when told to.

    ``sleep`` and ``wait`` advance fake time instead of blocking (``wait`` returns at
    once if the event is already set), so a loop that waits for a deadline runs to its
    end instantly and deterministically. Thread-safe.
    """

    def __init__(self, start: float = 1000.0) -> None:
        self._now = start
        self._lock = threading.Lock()
        self.sleeps: list[float] = []

    def monotonic(self) -> float:
        with self._lock:
            return self._now

    def advance(self, seconds: float) -> None:
        """Move time forward by ``seconds`` (a finite number >= 0)."""
        step = config.seconds(seconds, "seconds", positive=False)
        with self._lock:
            self._now += step

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        with self._lock:  # what the library waits for, unchecked (advance checks callers)
            self._now += max(0.0, seconds)

    def wait(self, event: threading.Event, timeout: float) -> bool:
        if event.is_set():
            return True
        self.sleep(timeout)
        return event.is_set()
