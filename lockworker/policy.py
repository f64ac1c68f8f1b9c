"""Pure decisions of the worker loop: no Redis, no clock, no threads.

Given what the protocol observed and the current time, these functions say when to
look again. They are unit-tested with plain numbers.
"""

from __future__ import annotations

from dataclasses import dataclass

from lockworker.state import Snapshot

EXPIRY_MARGIN = 0.001
"""Seconds added after a lease's end before re-checking, so the check lands after it."""


@dataclass(frozen=True)
class Timing:
    """The worker's time settings, in seconds."""

    lock_timeout: float
    retry_delay: float
    """How long a process whose attempt failed waits before competing again."""
    backup_delay: float = 0.0
    """How long a backup lets a free job lie before competing (0 for a primary)."""


def recheck_at(seen: Snapshot, now: float, timing: Timing) -> float:
    """When a waiter that saw ``seen`` should try again, at the latest.

    At the end of the holder's lease (from the server's PTTL, measured now), plus a
    margin; a message on the wake channel may wake it sooner. A lease whose time left is
    unknown is re-checked after a full ``lock_timeout``.
    """
    if seen.pttl_ms is None:
        return now + timing.lock_timeout
    return now + seen.pttl_ms / 1000.0 + EXPIRY_MARGIN


def compete_after_failure(now: float, timing: Timing) -> float:
    """When a process whose own attempt just failed may compete again.

    It steps back for ``retry_delay`` so that a waiting process takes the next attempt
    first; alone, it retries after the delay.
    """
    return now + timing.retry_delay


def is_news(previous: Snapshot | None, seen: Snapshot) -> bool:
    """True if ``seen`` shows a holder or attempt not reported before (for ``on_locked``)."""
    if previous is None:
        return True
    return (previous.holder, previous.token) != (seen.holder, seen.token)
