"""Is this process healthy, and is it ready for work? The decisions behind
``lockworker run``'s ``/healthz`` and ``/readyz``: readings in, a verdict out, no I/O
and no clock of their own (``now`` is given), so tests decide them on a fake clock.

**Alive** (``/healthz``) means the process's heartbeat, which renews every lease it
holds about every third of the lease, is keeping time (:func:`alive`):

- no renewal in flight for longer than :attr:`Bounds.call` (the lease, then the
  client's own retries of the last try: longer, and the call is stuck, not slow);
- while none is in flight, no held lease whose renewal was due more than
  :attr:`Bounds.late` ago (the heartbeat did not get to it: stalled or starved);
- while none is in flight, the heartbeat's loop ran within its period plus
  :attr:`Bounds.late` (a thread sleeps at most a period between two looks; asyncio's
  heartbeat tasks have no loop of their own, their leases show their lateness).

A Redis outage alone is not a failure of liveness: renewals then fail or time out
within their bounds and their leases are lost, which the heartbeat notices in time.
Restarting the process would not bring Redis back; readiness says it.

**Ready** (``/readyz``) means alive, and Redis answered a PING lately, and the daemon
takes work: it started serving (or campaigning) and is not stopping (:func:`ready`).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Pulse:
    """What a heartbeat shows at one moment (its ``pulse()``), times on the monotonic
    clock of the process."""

    period: float
    """Seconds between two renewals of a lease (a third of the lease)."""
    ran_at: float | None = None
    """When the heartbeat's loop last ran; None if it has none running (not started,
    closed, or asyncio tasks)."""
    renewing_since: float | None = None
    """When the oldest renewal still in flight was sent; None if none is."""
    due: float | None = None
    """The earliest time a renewal was due among the held leases not being renewed."""
    held: int = 0
    """Leases held now."""


@dataclass(frozen=True)
class Bounds:
    """How late is too late for a heartbeat, in seconds."""

    late: float
    """A due renewal not started, or a loop that has not run, this long past its time."""
    call: float
    """One renewal in flight for this long (its retries within the lease, then the
    client's retries of its last try)."""


@dataclass(frozen=True)
class Verdict:
    """A probe's answer: 200 if ``ok``, else 503, with a one-line ``reason``."""

    ok: bool
    reason: str


def alive(pulse: Pulse, now: float, bounds: Bounds) -> Verdict:
    """Whether the heartbeat that ``pulse`` shows keeps time at ``now`` (see the module)."""
    if pulse.renewing_since is not None:
        busy = now - pulse.renewing_since
        if busy > bounds.call:
            return Verdict(False, f"heartbeat stuck: a lease renewal in flight for {busy:.1f}s "
                           f"(bound {bounds.call:.1f}s)")
        return Verdict(True, f"heartbeat renewing: {pulse.held} lease(s) held")
    if pulse.due is not None and now - pulse.due > bounds.late:
        return Verdict(False, f"heartbeat stalled: a lease renewal is {now - pulse.due:.1f}s "
                       f"overdue (bound {bounds.late:.1f}s)")
    if pulse.ran_at is not None and now - pulse.ran_at > pulse.period + bounds.late:
        return Verdict(False, f"heartbeat stalled: it has not run for {now - pulse.ran_at:.1f}s "
                       f"(period {pulse.period:.1f}s)")
    if pulse.held:
        return Verdict(True, f"heartbeat on time: {pulse.held} lease(s) held")
    return Verdict(True, "alive: no lease held")


def ready(health: Verdict, redis: Verdict, *, started: bool, stopping: bool) -> Verdict:
    """Whether the daemon takes work: the first reason it does not, in this order:
    stopping, not started yet, Redis unreachable, not alive."""
    if stopping:
        return Verdict(False, "stopping: taking no new work")
    if not started:
        return Verdict(False, "starting: not serving yet")
    if not redis.ok:
        return redis
    if not health.ok:
        return health
    return Verdict(True, f"ready: serving; {redis.reason}")
