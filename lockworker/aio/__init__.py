"""lockworker on asyncio: the same products over ``redis.asyncio`` clients.

``Worker``, ``Leader``, ``Lock``, ``Semaphore``, ``Redlock`` and ``compute_once`` take
the same arguments and give the same outcomes, errors, events and guarantees as their
sync twins in :mod:`lockworker`, and they share the keys, values, Lua steps, contender loop
and decisions with them, so sync and async processes can contend for one job, one
leadership or one lock. Hooks may be ``async def`` (awaited on the loop) or plain
(run in a worker thread); heartbeats are tasks; cancelling a task that holds something
releases it (never leaves it to run out).

The asyncio side speaks the script protocol with ``durability="local"``, on a single
server or a ``redis.asyncio.RedisCluster``. See docs/daemons.md and docs/primitives.md.
"""

from lockworker.aio.leader import AsyncTerm, Leader
from lockworker.aio.lock import Lock
from lockworker.aio.once import compute_once
from lockworker.aio.redlock import Redlock
from lockworker.aio.semaphore import Semaphore
from lockworker.aio.worker import Worker
from lockworker.errors import GiveUp, Retry

__all__ = [
    "AsyncTerm", "GiveUp", "Leader", "Lock", "Redlock", "Retry", "Semaphore", "Worker",
    "compute_once",
]
