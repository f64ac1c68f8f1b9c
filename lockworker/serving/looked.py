"""A held-back job that a backup's look saw, reported as its contest would, without one.

A backup's batched looks (:mod:`lockworker.daemons.defer`) mostly find jobs held by the
primary or done by it. Each is reported here exactly as the job's contest reports it
(the same events, the same hooks), without starting the contest:

- a job held by another: ``job.locked`` and ``on_locked``, once per holder (the backup
  keeps watch in its batches);
- a job done by another run: ``job.done_elsewhere``, after which ``serve`` settles the
  delivery (resolved) at once. A contest would only look at the job, find it DONE and
  report the same, at the cost of a slot, a thread hop (a task in asyncio) and a run.
  This holds only when nothing else could tell the two apart: the worker's class
  serves every job through its own ``process`` (an override sees every job, so every
  job is handed to it, as the docs promise), and ``process`` would take the delivery's
  id and payload (it says why when it would not).
"""

from __future__ import annotations

from typing import Any

from lockworker.errors import LockworkerError
from lockworker.model.codec import payload_view
from lockworker.model.keys import JobKeys
from lockworker.model.state import JobStatus, Snapshot
from lockworker.serving.delivery import Delivery
from lockworker.serving.runbase import report_done


def watched(worker: Any, delivery: Delivery) -> tuple[JobKeys, Any, Any] | None:
    """The keys, payload and log of a held-back job a backup reports, as its contest
    would; None for an id or payload ``process`` refuses (when the delivery comes due,
    serve says why)."""
    try:
        keys = JobKeys.of(worker.namespace, delivery.job_id)
        payload = delivery.payload if delivery.decoded else payload_view(delivery.payload)
    except LockworkerError:
        return None
    return keys, payload, worker._log.bind(job_id=delivery.job_id)


def serves_through_its_own_process(worker: Any) -> bool:
    """Whether ``worker.process`` is ``process`` as lockworker defines it (each worker
    class names its own ``_OWN_PROCESS``): not overridden by a subclass, nor replaced
    on the object. An override must see every job."""
    own = getattr(type(worker), "_OWN_PROCESS", None)
    return own is not None and getattr(worker.process, "__func__", None) is own


def done_elsewhere(worker: Any, delivery: Delivery, seen: Snapshot) -> bool:
    """True if ``seen`` shows the delivery's job DONE by another run and ``serve`` may
    settle it without a contest (see the module docstring); ``job.done_elsewhere`` is
    then logged, as the contest would log it."""
    if seen.status is not JobStatus.DONE or (seen.owner, seen.run) == (
        worker.owner, worker.run_id
    ) or not serves_through_its_own_process(worker):
        return False
    found = watched(worker, delivery)
    if found is None:
        return False
    report_done(found[2], seen, mine=False)
    return True
