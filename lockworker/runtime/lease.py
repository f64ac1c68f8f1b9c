"""Leases judged by this process's own clock, and the heartbeat that renews them.

A holder never asks Redis whether it still holds its lease; it knows. Validity is
computed from the local monotonic time taken *before* the request that granted or
renewed the lease, minus a drift allowance::

    valid_until = sent_at + lease * (1 - DRIFT_FACTOR) - DRIFT_FIXED

If that moment passes without a confirmed renewal (the process was paused, Redis was
unreachable), the lease is *lost*, whatever Redis would say later. The server then
refuses the holder's completion, because its lock value no longer matches.

One :class:`Heartbeat` thread per worker renews all of its leases, each about every
third of the lease. It only calls ``renew``; hooks and logging are the caller's, through
the ``on_renewed``/``on_lost`` callbacks.

A held lease ends in exactly one of two ways, decided here once for every holder with
an ``on_lost`` hook (a worker's job, a leader's term, sync or asyncio):

- **lost**: the heartbeat could not renew it in time, a renewal was refused, the holder
  let go of it after its validity had passed (:meth:`Heartbeat.end`: the hook saw
  ``lost`` and returned before the heartbeat woke), or the server refused the step
  that ended it (:func:`lose` with ``after_release``). ``on_lost`` is called once,
  by whichever path notices first, with the reason;
- **released**: the holder let go of it while it was still valid and the server
  accepted the step that ended it; ``on_lost`` is never called.
"""

from __future__ import annotations

import heapq
import itertools
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from lockworker.clock import Clock
from lockworker.model.health import Pulse

_ENDING = threading.Lock()
"""Makes "lost" and "released" one decision per lease, whichever thread comes first."""

EXPIRED_IN_HOOK = "lease expired before the holder let go of it (process paused?)"
REFUSED_AT_END = "the server refused the step ending the lease: lost on the server"

DRIFT_FACTOR = 0.01
DRIFT_FIXED = 0.002


def valid_until(sent_at: float, lease: float) -> float:
    """The last moment, on the local monotonic clock, this process may trust a lease."""
    return sent_at + lease * (1.0 - DRIFT_FACTOR) - DRIFT_FIXED


@dataclass(eq=False)
class Lease:
    """One held lease: when it must be renewed and until when it can be trusted."""

    renew: Callable[[float], Any]
    """Renew on the server, retrying until the given deadline; True if still held (for
    the asyncio side, a coroutine function whose result says so)."""
    lease: float
    valid_until: float
    next_renewal: float
    lost: bool = False
    """Set once the lease can no longer be trusted; never cleared."""
    released: bool = False
    on_renewed: Callable[[Lease], None] | None = None
    on_lost: Callable[[Lease, str], None] | None = None
    step: Any = None
    """The protocol step that renews it, for a heartbeat that renews many leases in one
    round trip (:class:`Heartbeat` with ``send_many``); None: ``renew`` alone."""
    answer: Callable[[Any], bool] | None = None
    """With ``step``: whether the step's result says the lease is still held."""

    @classmethod
    def granted(
        cls,
        renew: Callable[[float], Any],
        lease: float,
        sent_at: float,
        *,
        on_lost: Callable[[Lease, str], None] | None = None,
        on_renewed: Callable[[Lease], None] | None = None,
    ) -> Lease:
        """A lease granted by a request sent at ``sent_at``: trusted until its validity,
        renewed first a third of the lease later."""
        return cls(
            renew=renew, lease=lease, valid_until=valid_until(sent_at, lease),
            next_renewal=sent_at + lease / 3, on_renewed=on_renewed, on_lost=on_lost,
        )

    def is_valid(self, now: float) -> bool:
        return not self.lost and now < self.valid_until


SendMany = Callable[[list[Any], float], list[Any]]
"""Sends many renewal steps in one round trip, retried until the deadline: per step,
its result or the exception it stands for (:func:`lockworker.protocol.batch.send`)."""

MAX_BATCH = 256
"""Leases renewed in one round trip at most."""


class Heartbeat:
    """A daemon thread renewing every held lease about every ``interval`` seconds.

    The thread starts on the first :meth:`hold` and sleeps at most ``interval`` when idle;
    since every lease's first renewal is due ``interval`` after it is held, a new lease
    never needs to wake the thread early, and :meth:`hold` costs no thread switch.
    """

    def __init__(
        self,
        clock: Clock,
        interval: float,
        *,
        thread_factory: Callable[..., threading.Thread] = threading.Thread,
        send_many: SendMany | None = None,
    ) -> None:
        self._clock = clock
        self._interval = interval
        self._send_many = send_many
        self._thread_factory = thread_factory
        self._heap: list[tuple[float, int, Lease]] = []
        self._seq = itertools.count()
        self._mutex = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._ran_at: float | None = None
        self._renewing: float | None = None

    def hold(self, lease: Lease) -> None:
        """Start renewing ``lease``."""
        with self._mutex:
            heapq.heappush(self._heap, (lease.next_renewal, next(self._seq), lease))
            if self._thread is None:
                self._thread = self._thread_factory(
                    target=self._run, name="lockworker-heartbeat", daemon=True
                )
                self._thread.start()

    def end(self, lease: Lease) -> bool:
        """The holder lets go of ``lease`` (its hook returned, raised or was cancelled):
        True if it was still held; if not, the loss is reported now unless the
        heartbeat already did (see :func:`let_go`). Then it is no longer renewed."""
        held = let_go(lease, self._clock.monotonic())
        self.drop(lease)
        return held

    def drop(self, lease: Lease) -> None:
        """Stop renewing ``lease`` (it is skipped the next time it comes due), saying
        nothing of whether it was still held (:meth:`end` does).

        Released leases at the head of the queue are discarded at once, so a worker
        running many short jobs does not keep every finished lease (and its job and
        closures) alive until the next beat; that garbage made the collector's full
        passes a large share of a short job's cost.
        """
        lease.released = True
        with self._mutex:
            heap = self._heap
            while heap and heap[0][2].released:
                heapq.heappop(heap)

    def _next_due(self) -> Lease | None:
        """Pop the next lease whose renewal is due now, or return None."""
        with self._mutex:
            while self._heap:
                due, _, lease = self._heap[0]
                if lease.released:
                    heapq.heappop(self._heap)
                    continue
                if due > self._clock.monotonic():
                    return None
                heapq.heappop(self._heap)
                return lease
            return None

    def _due_with(self, first: Lease) -> list[Lease]:
        """``first`` and, when leases can share a round trip, every other one whose
        renewal comes due within half an interval: renewed a little early, they all go
        in one batch instead of one round trip each."""
        leases = [first]
        if self._send_many is None or first.step is None:
            return leases
        horizon = self._clock.monotonic() + self._interval / 2
        with self._mutex:
            later: list[tuple[float, int, Lease]] = []
            while self._heap and self._heap[0][0] <= horizon and len(leases) < MAX_BATCH:
                entry = heapq.heappop(self._heap)
                if entry[2].released:
                    continue
                if entry[2].step is None:
                    later.append(entry)
                else:
                    leases.append(entry[2])
            for entry in later:
                heapq.heappush(self._heap, entry)
        return leases

    def _sleep_for(self) -> float:
        with self._mutex:
            if not self._heap:
                return self._interval
            return max(0.0, min(self._interval, self._heap[0][0] - self._clock.monotonic()))

    def pulse(self) -> Pulse:
        """What the heartbeat shows now, for a liveness probe
        (:func:`lockworker.model.health.alive`); safe from any thread."""
        if self._stop.is_set():
            return Pulse(self._interval)  # closed: renews nothing any more
        with self._mutex:
            waiting = [e[2].next_renewal for e in self._heap if not (e[2].released or e[2].lost)]
        renewing = self._renewing
        return Pulse(
            self._interval, ran_at=self._ran_at, renewing_since=renewing,
            due=min(waiting, default=None),
            held=len(waiting) + (renewing is not None),
        )

    def _run(self) -> None:
        while not self._stop.is_set():
            self._ran_at = self._clock.monotonic()
            lease = self._next_due()
            if lease is None:
                self._clock.wait(self._stop, self._sleep_for())
                continue
            leases = self._due_with(lease)
            if len(leases) == 1:
                self.beat(lease)
            else:
                self.beat_many(leases)
            with self._mutex:
                for each in leases:
                    if not each.released and not each.lost:
                        heapq.heappush(self._heap, (each.next_renewal, next(self._seq), each))

    def beat(self, lease: Lease) -> None:
        """Renew one lease now, or declare it lost (public for tests that step by hand)."""
        sent_at = self._clock.monotonic()
        if not renewal_due(lease, sent_at):
            return
        self._renewing = sent_at
        try:
            held = lease.renew(lease.valid_until)
        except Exception as exc:
            # RedisUnavailable after bounded retries, or an unexpected reply: either way
            # this process can no longer vouch for the lease, and the thread must live on
            # to renew the others.
            lose(lease, f"could not renew: {exc!r}")
            return
        finally:
            self._renewing = None
        renewal_answered(lease, sent_at, bool(held), self._interval)

    def beat_many(self, leases: list[Lease]) -> None:
        """Renew ``leases`` (each with a ``step``) in one round trip; each is renewed or
        declared lost by its own answer, as :meth:`beat` does for one."""
        assert self._send_many is not None
        sent_at = self._clock.monotonic()
        live = [lease for lease in leases if renewal_due(lease, sent_at)]
        if not live:
            return
        self._renewing = sent_at
        try:
            answers = self._send_many(
                [lease.step for lease in live], min(lease.valid_until for lease in live)
            )
        except Exception as exc:  # as in beat: the thread lives on for the others
            for lease in live:
                lose(lease, f"could not renew: {exc!r}")
            return
        finally:
            self._renewing = None
        for lease, answer in zip(live, answers, strict=True):
            if isinstance(answer, BaseException):
                lose(lease, f"could not renew: {answer!r}")
            else:
                assert lease.answer is not None
                renewal_answered(lease, sent_at, lease.answer(answer), self._interval)

    def close(self, *, wait: bool = True) -> None:
        """Stop the thread; held leases are no longer renewed. ``wait``: until it ended
        (a renewal in flight finishes first); without, it ends on its own after that."""
        self._stop.set()
        thread, self._thread = self._thread, None
        if wait and thread is not None and thread is not threading.current_thread():
            thread.join(timeout=5.0)


def renewal_due(lease: Lease, sent_at: float) -> bool:
    """Whether to send a renewal of ``lease`` at ``sent_at``: False (and the lease lost)
    if it can no longer be trusted. One rule for the heartbeat thread and the asyncio
    heartbeat tasks (:mod:`lockworker.aio.lease`)."""
    if sent_at >= lease.valid_until:
        lose(lease, "lease expired before it could be renewed (process paused?)")
        return False
    return True


def renewal_answered(lease: Lease, sent_at: float, held: bool, interval: float) -> None:
    """Apply the server's answer to a renewal sent at ``sent_at``."""
    if lease.released:
        return
    if not held:
        lose(lease, "lease taken over or expired on the server")
        return
    lease.valid_until = valid_until(sent_at, lease.lease)
    lease.next_renewal = sent_at + interval
    if lease.on_renewed is not None:
        lease.on_renewed(lease)


def lose(lease: Lease, reason: str, *, after_release: bool = False) -> bool:
    """Mark ``lease`` lost and call its ``on_lost`` with ``reason``: True if this call
    did, False if the lease was lost already (it is reported once, whichever path comes
    first) or released. With ``after_release``, the server refused the step that ended
    a released lease: it was lost before it was let go."""
    with _ENDING:
        if lease.lost or (lease.released and not after_release):
            return False
        lease.lost = True
    if lease.on_lost is not None:
        lease.on_lost(lease, reason)
    return True


def let_go(lease: Lease, now: float) -> bool:
    """The holder lets go of ``lease`` at ``now``: released (True) if it was still
    valid, else lost (False; reported by this call unless the heartbeat did first). One
    rule for the heartbeat thread and the asyncio heartbeat tasks."""
    with _ENDING:
        if lease.lost:
            return False
        if now < lease.valid_until:
            lease.released = True
            return True
    lose(lease, EXPIRED_IN_HOOK)
    return False


def ended(lease: Lease, *, refused: bool) -> None:
    """After the step that ended a let-go lease (complete, fail, release, resign): if
    the server refused it, the lease was lost before it was let go; reported unless it
    was already. One rule for jobs and terms, sync and asyncio."""
    if refused:
        lose(lease, REFUSED_AT_END, after_release=True)


def revoke(lease: Lease) -> None:
    """The holder gave ``lease`` up while code holding its handle may still run (an
    asyncio task cancelled while its plain hook runs on in a worker thread, which
    cannot be stopped): from now on the handle's ``lost`` is true, so that code stops
    trusting it. Not a loss (``on_lost`` is not called): call it after
    :meth:`Heartbeat.end`."""
    lease.valid_until = float("-inf")


class Flag(Protocol):
    """A stop flag: a ``threading.Event`` in a thread, an ``asyncio.Event`` in a task."""

    def is_set(self) -> bool: ...


class LeaseView:
    """``lost`` and ``stopping`` for the handles hooks receive (``Job``, ``Term``).

    Both are judged locally: ``lost`` from the lease's validity on the monotonic clock,
    so it turns true on time even while the heartbeat is stuck in a network call;
    ``stopping`` from the owner's stop event. A handle without a lease (one describing
    another process's hold) is never lost.
    """

    _clock: Clock | None
    _lease: Lease | None
    _stopping: Flag | None

    @property
    def lost(self) -> bool:
        """True once this process can no longer be sure it holds the lease."""
        lease = self._lease
        if lease is None or self._clock is None:
            return False
        return not lease.is_valid(self._clock.monotonic())

    @property
    def stopping(self) -> bool:
        """True once the owner was asked to stop (``stop()``, SIGTERM, SIGINT)."""
        return self._stopping is not None and self._stopping.is_set()

