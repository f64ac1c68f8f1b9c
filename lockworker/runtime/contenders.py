"""Which of one worker's job runs contend for each job id now, so that a lease its
run id re-enters is handed only to the run that took it.

A worker writes one run id into every lease it takes (presence and a backup's
deferral read it), so the server's acquire step cannot tell two ``process`` calls of
one worker apart: the second call's acquire would "re-enter" the first call's lease
and run the hook again with the same token. Re-entry exists for one reason only, a
retry of an acquire whose reply was lost, and so is scoped here to that run:

- a fresh grant (``Grant.reentered`` false) was made by this very send: it is the
  run's;
- a re-entered grant is the run's only if the run sent an acquire before whose answer
  it never read (the lost reply), and no other run of this worker contends for the
  id; otherwise another run holds it (or may), and this run treats the job as held
  by another process would: it looks, reports ``on_locked`` and waits.

The doubt is settled towards safety: in the rare case of a lost reply while another
run of the same worker contends for the id, neither takes the re-entered lease, which
then runs out as a dead holder's would (an attempt spent, never two holders).

No I/O, no waiting: a lock guards a dict; runs register when they start contending
and leave when their contest ends. Entries are weak, so a run dropped without leaving
(a serving's claim dropped at its stop) leaves by itself.
"""

from __future__ import annotations

import threading
import weakref
from typing import Any

from lockworker.model.state import Grant


class Contenders:
    """The runs of one worker (sync or asyncio) contending for each job id."""

    __slots__ = ("_lock", "_runs")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._runs: dict[str, weakref.WeakSet[Any]] = {}

    def enter(self, job_id: str, run: Any) -> None:
        """``run`` contends for ``job_id`` from now on (before its first acquire)."""
        with self._lock:
            runs = self._runs.get(job_id)
            if runs is None:
                runs = self._runs[job_id] = weakref.WeakSet()
            runs.add(run)

    def leave(self, job_id: str, run: Any) -> None:
        """``run``'s contest for ``job_id`` ended (or its attempt was settled)."""
        with self._lock:
            runs = self._runs.get(job_id)
            if runs is None:
                return
            runs.discard(run)
            if not runs:
                del self._runs[job_id]

    def alone(self, job_id: str, run: Any) -> bool:
        """True if no run of this worker but ``run`` contends for ``job_id``."""
        with self._lock:
            runs = self._runs.get(job_id)
            return runs is None or all(other is run for other in runs)

    def owns(self, job_id: str, run: Any, grant: Grant, *, unread: bool) -> bool:
        """Whether ``grant``, the answer to ``run``'s acquire of ``job_id``, is that
        run's: a fresh grant always is; a re-entered one only after a send of the
        run's whose answer was lost (``unread``), with no other run contending."""
        if not grant.reentered:
            return True
        return unread and self.alone(job_id, run)

    def __len__(self) -> int:
        """Job ids some run contends for (tests read it: nothing is left behind)."""
        with self._lock:
            return sum(1 for runs in self._runs.values() if runs)
