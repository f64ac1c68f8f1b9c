"""Time, behind a seam that tests control.

The only module of lockworker that imports :mod:`time`. Everything that reads time or
waits goes through a :class:`Clock`, so tests swap in
:class:`lockworker.testing.FakeClock` and drive leases and deadlines without sleeping.

Only a monotonic clock is used for liveness: wall-clock time jumps (NTP, DST) and
must never decide whether a lease is still valid.
"""

from __future__ import annotations

import threading
import time
from typing import Protocol


class Clock(Protocol):
    """What lockworker needs of time."""

    def monotonic(self) -> float:
        """Seconds on a clock that never goes backwards."""
        ...

    def sleep(self, seconds: float) -> None:
        """Block for ``seconds``."""
        ...

    def wait(self, event: threading.Event, timeout: float) -> bool:
        """Block until ``event`` is set or ``timeout`` seconds pass; True if it was set."""
        ...


class SystemClock:
    """The real clock: :func:`time.monotonic` and real waiting."""

    def monotonic(self) -> float:
        return time.monotonic()

    def sleep(self, seconds: float) -> None:
        if seconds > 0:
            time.sleep(seconds)

    def wait(self, event: threading.Event, timeout: float) -> bool:
        return event.wait(max(0.0, timeout))


def wall_time() -> float:
    """Seconds since the epoch, for display only (never for leases)."""
    return time.time()
