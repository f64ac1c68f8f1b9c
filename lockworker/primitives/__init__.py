"""Coordination primitives on the lockworker protocol: Lock, Semaphore, Redlock, compute_once.

See docs/primitives.md for each one's guarantees and caveats.
"""

from __future__ import annotations

from lockworker.primitives.common import AlreadyHeld
from lockworker.primitives.lock import Lock
from lockworker.primitives.once import JSON, Codec, JSONCodec, compute_once
from lockworker.primitives.redlock import Redlock
from lockworker.primitives.semaphore import Semaphore

__all__ = [
    "JSON",
    "AlreadyHeld",
    "Codec",
    "JSONCodec",
    "Lock",
    "Redlock",
    "Semaphore",
    "compute_once",
]
