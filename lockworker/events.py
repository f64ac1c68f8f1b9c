"""The one log vocabulary: structlog event names lockworker emits.

Events are emitted only by the control layer (worker, leader, primitives), never by the
protocol. Each job's events carry ``job_id``, ``namespace``, ``owner``, and where they
apply ``attempt`` and ``token``. lockworker never configures structlog; applications
(or the ``lockworker`` CLI) do.
"""

from __future__ import annotations

from typing import Any

import structlog

ACQUIRED = "job.acquired"
LOCKED = "job.locked"
RENEWED = "lease.renewed"
DONE = "job.done"
DONE_ELSEWHERE = "job.done_elsewhere"
FAILED = "job.failed"
LOST = "lease.lost"
RELEASED = "job.released"
GAVE_UP = "job.gave_up"
STOPPED = "job.stopped"
REDIS_UNAVAILABLE = "redis.unavailable"
HOOK_ERROR = "hook.error"
STATE_LOST = "server.state_lost"
"""A lease's job state vanished while the lease was held: the server lost its data
(a restart without persistence, a failover to a replica that had not received it).
Work finished before the loss may run again; see docs/guarantees.md."""

ALL = (
    ACQUIRED, LOCKED, RENEWED, DONE, DONE_ELSEWHERE, FAILED, LOST, RELEASED, GAVE_UP,
    STOPPED, REDIS_UNAVAILABLE, HOOK_ERROR, STATE_LOST,
)


def logger(base: Any = None, **context: Any) -> Any:
    """A structlog logger bound to ``context`` (the caller's logger if given)."""
    log = base if base is not None else structlog.get_logger("lockworker")
    return log.bind(**context)
