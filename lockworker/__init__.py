"""lockworker: every job done once, by one process at a time, and nothing lost.

A primary process and any number of backups share jobs through Redis. For each job they
race for a lease that counts attempts; the winner runs ``on_acquired``, the others watch
and take over if it dies or fails. See README.md and docs/.
"""

from __future__ import annotations

from lockworker.clock import Clock, SystemClock
from lockworker.daemons.leader import Leader, LeaderInfo
from lockworker.daemons.schedules import ScheduleSource
from lockworker.daemons.sources import Delivery, StreamSource, submit
from lockworker.daemons.worker import Worker
from lockworker.errors import (
    AcquireTimeout,
    AlreadyHeld,
    ConcurrentUse,
    Contended,
    ExtraNotInstalled,
    ForeignValueError,
    GiveUp,
    InvalidConfig,
    InvalidHook,
    JobNotFound,
    LockLost,
    LockworkerError,
    NotHeld,
    NotReplicated,
    PermissionDenied,
    QuorumNotReached,
    RedisPyTooOld,
    RedisUnavailable,
    Retry,
    StopRequested,
)
from lockworker.model.history import AttemptEnd, AttemptRecord
from lockworker.model.schedule import Cron, Every, Schedule
from lockworker.model.state import (
    Durability,
    JobStatus,
    Outcome,
    ProtocolKind,
    Reset,
    Role,
    Snapshot,
)
from lockworker.primitives import JSONCodec, Lock, Redlock, Semaphore, compute_once
from lockworker.runtime.retry import RetryPolicy
from lockworker.serving.job import Job
from lockworker.serving.term import Term

__version__ = "0.3.0"

__all__ = [
    "AcquireTimeout",
    "AlreadyHeld",
    "AttemptEnd",
    "AttemptRecord",
    "Clock",
    "ConcurrentUse",
    "Contended",
    "Cron",
    "Delivery",
    "Durability",
    "Every",
    "ExtraNotInstalled",
    "ForeignValueError",
    "GiveUp",
    "InvalidConfig",
    "InvalidHook",
    "JSONCodec",
    "Job",
    "JobNotFound",
    "JobStatus",
    "Leader",
    "LeaderInfo",
    "Lock",
    "LockLost",
    "LockworkerError",
    "NotHeld",
    "NotReplicated",
    "Outcome",
    "PermissionDenied",
    "ProtocolKind",
    "QuorumNotReached",
    "RedisPyTooOld",
    "RedisUnavailable",
    "Redlock",
    "Reset",
    "Retry",
    "RetryPolicy",
    "Role",
    "Schedule",
    "ScheduleSource",
    "Semaphore",
    "Snapshot",
    "StopRequested",
    "StreamSource",
    "SystemClock",
    "Term",
    "Worker",
    "__version__",
    "compute_once",
    "submit",
]
