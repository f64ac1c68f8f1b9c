"""The slots of ``Worker.serve``, and parking: a job waiting on another holder holds none.

A slot is the right to work on a job: run its Redis steps and its hooks. ``serve``
takes one for each delivery and gives it back when the job ends (or, in the lane, when
its hook returned: its DONE is then group-committed without it), so at most
``concurrency`` jobs work at once. A job that finds another process holding its lease
(alive, or dead with time left on its lease) has nothing to do until that lease ends
or a wake message says the holder finished, failed or released it. It **parks**: it
gives its slot back, so the slot serves the next job, and waits (its thread asleep on
the job's wake channel, with the lease's end on this process's clock as its
deadline). When the wait ends it takes a slot again, ahead of new deliveries, and looks
at the job again.

Parked jobs are not lost: a parked job is still a running ``process`` call, which
ends DONE, DONE_ELSEWHERE, GAVE_UP or STOPPED like any other, and ``serve`` returns
only once it ended. At most :data:`PARK_LIMIT` jobs park at once; past that a job waits
in its slot, as every waiting job did before parking existed.

``serve`` runs each job through the worker's public ``process`` (so a subclass that
overrides it sees every served job), and lends the slots to that call through
:class:`Lending`, a context variable: ``process`` keeps its public signature.
"""

from __future__ import annotations

import contextlib
import contextvars
import threading
from collections.abc import Iterator
from typing import Generic, TypeVar

G = TypeVar("G")

PARK_LIMIT = 256
"""Jobs of one ``serve`` call parked at once, at most (each costs a sleeping thread)."""


class Slots:
    """``size`` slots for working jobs; parked jobs take theirs back before new ones.

    Thread-safe. ``take``/``give`` bracket a job; ``park``/``unpark`` bracket a wait
    inside it (``unpark`` blocks until a slot is free again).
    """

    def __init__(self, size: int, park_limit: int = PARK_LIMIT) -> None:
        self.size = size
        self.park_limit = park_limit
        self._cond = threading.Condition()
        self._free = size
        self._parked = 0
        """Jobs that gave their slot back and have not taken one again."""
        self._returning = 0
        """Parked jobs whose wait ended, waiting for a slot: they go before new jobs."""

    def first_look(self) -> None:
        """Nothing seen beforehand (see :class:`lockworker.daemons.serve.Seen`)."""
        return None

    def lain_free(self) -> None:
        """No free clock beforehand (see :class:`lockworker.daemons.serve.Seen`)."""
        return None

    @property
    def parked(self) -> int:
        with self._cond:
            return self._parked

    @property
    def working(self) -> int:
        """Slots taken now (jobs working, not parked)."""
        with self._cond:
            return self.size - self._free

    def take(self) -> None:
        """A slot for a new job; waits while none is free or a parked job wants one."""
        with self._cond:
            while self._free == 0 or self._returning:
                self._cond.wait()
            self._free -= 1

    def give(self) -> None:
        """Give back the slot of a job that ended."""
        with self._cond:
            self._free += 1
            self._cond.notify_all()

    def park(self) -> bool:
        """Give the caller's slot back for a wait; False (keep it) if too many parked."""
        with self._cond:
            if self._parked >= self.park_limit:
                return False
            self._parked += 1
            self._free += 1
            self._cond.notify_all()
            return True

    def unpark(self) -> None:
        """Take a slot again after a parked wait, ahead of new jobs."""
        self._take_first(parked=True)

    def retake(self) -> None:
        """Take a slot again, ahead of new jobs, for a job that gave its own back when
        its hook returned and has more to do than its group-committed DONE (the lane:
        a lost lease's contest, a step sent again alone, a next delivery of its id)."""
        self._take_first(parked=False)

    def _take_first(self, *, parked: bool) -> None:
        with self._cond:
            self._returning += 1
            while self._free == 0:
                self._cond.wait()
            self._free -= 1
            self._returning -= 1
            if parked:
                self._parked -= 1
            if not self._returning:
                self._cond.notify_all()  # new jobs may go again


class Lending(Generic[G]):
    """The slots ``serve`` lends to the ``process`` call it makes for one delivery.

    ``serve`` calls the worker's public ``process`` inside :meth:`lend`; the worker's
    run takes the slots with :meth:`borrow`. A context variable carries them, so they
    reach the run through any override of ``process`` that calls ``super().process``
    in the same thread or task, and nothing else: a ``process`` call of another worker,
    or one made inside the run (a hook processing another job), borrows nothing and
    waits in its caller's slot.
    """

    def __init__(self, name: str) -> None:
        self._lent: contextvars.ContextVar[tuple[object, G, object] | None] = (
            contextvars.ContextVar(name, default=None)
        )

    @contextlib.contextmanager
    def lend(self, worker: object, gate: G, decoded: object = None) -> Iterator[None]:
        """Around ``worker.process(...)``: its run may park with ``gate``. ``decoded``:
        the delivery's payload, if its source decoded it from strict JSON text."""
        token = self._lent.set((worker, gate, decoded))
        try:
            yield
        finally:
            self._lent.reset(token)

    def decoded(self, worker: object, payload: object) -> bool:
        """Whether ``payload``, given to ``worker.process``, is the very object lent as
        decoded from JSON text (so already what every process sees); an override of
        ``process`` that passes another payload, or a call outside ``serve``, gets
        False. Asked before :meth:`borrow`."""
        lent = self._lent.get()
        return lent is not None and lent[0] is worker and lent[2] is not None and (
            lent[2] is payload
        )

    @contextlib.contextmanager
    def borrow(self, worker: object) -> Iterator[G | None]:
        """Around a run of ``worker``: the gate lent to it, if any (None if not);
        calls nested inside the run borrow nothing."""
        lent = self._lent.get()
        token = self._lent.set(None)
        try:
            yield lent[1] if lent is not None and lent[0] is worker else None
        finally:
            self._lent.reset(token)
