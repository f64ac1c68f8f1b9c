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

:func:`schedule` is the plan, shared by :class:`Nudger` (a thread beside a blocking
call) and the asyncio side's task (:mod:`lockworker.aio.lock`).
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from typing import Any

from lockworker.clock import Clock

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
    """Nudges with ``poke()`` at the times of :func:`schedule`, in a daemon thread,
    until the ``with`` block (the blocking pop) ends. Errors of a nudge are ignored:
    it is only a hint, and the pop reports its own."""

    def __init__(self, clock: Clock, poke: Callable[[], Any], at: float) -> None:
        self._clock = clock
        self._poke = poke
        self._at = at
        self._done = threading.Event()

    def __enter__(self) -> Nudger:
        threading.Thread(target=self._run, name="lockworker-nudge", daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._done.set()

    def _run(self) -> None:
        for when in schedule(self._at):
            if self._clock.wait(self._done, when - self._clock.monotonic()):
                return
            with contextlib.suppress(Exception):
                self._poke()
