"""Ending a blocking pop on time: nudge the server at the waiter's deadline.

A Redis server times out a blocked client (BLPOP) only when its event loop turns: at
once when any client sends it something, else on its next tick, every ``1 / hz``
seconds (100 ms at the default ``hz 10``). An idle server therefore answers a pop of
``t`` seconds up to 100 ms late, and a waiter whose deadline is the pop's end returns
that late. So the last wait before a deadline asks the server to time the pop out a
little early (:data:`LEAD`) and, from the deadline on, *nudges* it: sends one cheap
command on another connection (an ``EXISTS`` of the popped key, so a cluster client
sends it to the pop's node), which turns the event loop and ends the pop. The pop's
own reply is read as usual, so a grant that lands at the deadline is still seen;
the nudge only decides *when* the server answers. A nudge that arrives a hair before
the pop's timeout changes nothing, so the nudges go on every :data:`EVERY` seconds
until the pop answered, :data:`TIMES` of them at most.

:func:`schedule` is the plan, shared by :class:`Nudger` (beside a blocking call) and
the asyncio side's task (:mod:`lockworker.aio.lock`). On the system clock every
:class:`Nudger` of the process is served by one daemon thread (:class:`_Nudges`),
started once: a wait with a deadline costs a heap entry, not a thread, and most such
waits end with a grant long before their first nudge is due.
"""

from __future__ import annotations

import contextlib
import heapq
import itertools
import os
import threading
from collections.abc import Callable, Iterator
from typing import Any

from lockworker.clock import Clock, SystemClock

LEAD = 0.002
"""Seconds before the deadline the server is asked to time the last pop out."""
EVERY = 0.005
"""Seconds between two nudges of one pop."""
TIMES = 40
"""Nudges of one pop at most (200 ms: the pop has answered long before, or failed)."""


def pop(
    pause: float, now: float, deadline: float | None, least: float
) -> tuple[float, float | None]:
    """A wait of ``pause`` seconds from ``now`` as a pop: its server timeout, and when
    to nudge (None: no nudge, the wait ends before ``deadline``, at a slice or a lease's
    end, where a late answer only costs a look that comes later)."""
    if deadline is None or now + pause < deadline:
        return pause, None
    return max(least, pause - LEAD), now + pause


def schedule(at: float) -> Iterator[float]:
    """When to nudge, on the monotonic clock: at ``at``, then every :data:`EVERY`."""
    for n in range(TIMES):
        yield at + n * EVERY


class Nudger:
    """Nudges with ``poke()`` at the times of :func:`schedule` until the ``with`` block
    (the blocking pop) ends. Errors of a nudge are ignored: it is only a hint, and the
    pop reports its own.

    On the system clock the process's one nudging thread makes the nudges; on another
    clock (a test's) a thread of its own does, waiting on that clock."""

    __slots__ = ("_at", "_clock", "_done", "_left", "_poke")

    def __init__(self, clock: Clock, poke: Callable[[], Any], at: float) -> None:
        self._clock = clock
        self._poke = poke
        self._at = at
        self._left = TIMES
        self._done = threading.Event()

    def __enter__(self) -> Nudger:
        if type(self._clock) is SystemClock:
            _shared().add(self)
        else:
            threading.Thread(target=self._run, name=THREAD_NAME, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._done.set()
        self._poke = _nothing  # a pending entry keeps no client (or Lock) alive

    def _run(self) -> None:
        for when in schedule(self._at):
            if self._clock.wait(self._done, when - self._clock.monotonic()):
                return
            self._nudge()

    def _nudge(self) -> None:
        with contextlib.suppress(Exception):
            self._poke()

    def _next(self) -> float | None:
        """After a nudge made by the shared thread: when the next one is due, if any."""
        self._left -= 1
        if self._left <= 0 or self._done.is_set():
            return None
        self._at += EVERY
        return self._at


THREAD_NAME = "lockworker-nudge"


def _nothing() -> None:
    """The poke of a nudge whose pop has ended."""


class _Nudges:
    """The process's nudging thread: a heap of pending nudges ordered by time.

    Adding one wakes the thread only when it is due before everything already
    pending; a nudge whose pop ended is dropped when it reaches the top, so the thread
    wakes about once per wait that did reach its deadline, not once per wait."""

    def __init__(self) -> None:
        self._clock = SystemClock()
        self._ready = threading.Condition(threading.Lock())
        self._heap: list[tuple[float, int, Nudger]] = []
        self._order = itertools.count()
        self._thread: threading.Thread | None = None

    def add(self, nudger: Nudger) -> None:
        with self._ready:
            heapq.heappush(self._heap, (nudger._at, next(self._order), nudger))
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name=THREAD_NAME,
                                                daemon=True)
                self._thread.start()
            elif self._heap[0][2] is nudger:
                self._ready.notify()

    def _due(self) -> Nudger:
        """Block until a pending nudge is due; take it off the heap."""
        with self._ready:
            while True:
                while self._heap and self._heap[0][2]._done.is_set():
                    heapq.heappop(self._heap)
                if not self._heap:
                    self._ready.wait()
                    continue
                left = self._heap[0][0] - self._clock.monotonic()
                if left <= 0:
                    return heapq.heappop(self._heap)[2]
                self._ready.wait(left)

    def _run(self) -> None:
        while True:
            nudger = self._due()
            nudger._nudge()  # outside the lock: a round trip
            at = nudger._next()
            if at is not None:
                with self._ready:
                    heapq.heappush(self._heap, (at, next(self._order), nudger))


_nudges: _Nudges | None = None
_nudges_lock = threading.Lock()


def _shared() -> _Nudges:
    global _nudges  # noqa: PLW0603 - one per process, made on first use
    nudges = _nudges
    if nudges is None:
        with _nudges_lock:
            if _nudges is None:
                _nudges = _Nudges()
            nudges = _nudges
    return nudges


def _forget_after_fork() -> None:
    """A forked child has none of its parent's threads: it starts its own on first use."""
    global _nudges, _nudges_lock
    _nudges, _nudges_lock = None, threading.Lock()


os.register_at_fork(after_in_child=_forget_after_fork)
