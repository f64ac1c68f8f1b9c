"""The redis-py release a client needs, checked when the client is given.

lockworker installs with ``redis>=5.0``: a single server and Sentinel work from there, on
both sides. A cluster client needs more of redis-py than 5.0 has, and fails without it
deep in a run (``transaction is deprecated in cluster mode``, an asyncio cluster client
without ``pubsub``); :func:`require` names the release at construction instead, like
any other argument lockworker cannot work with.

A leaf: it imports nothing from lockworker but the errors.
"""

from __future__ import annotations

import re

import redis
from redis.asyncio.cluster import RedisCluster as AsyncRedisCluster
from redis.cluster import RedisCluster

from lockworker.errors import RedisPyTooOld

SYNC_CLUSTER = (6, 1)
"""A ``redis.cluster.RedisCluster`` client: transactions in its pipelines (MULTI/EXEC on
one slot: a job's state read with its lease, a leader's term written whole)."""

ASYNC_CLUSTER = (8, 0)
"""A ``redis.asyncio.RedisCluster`` client: pub/sub (the wake-ups) came in 8.0, after
its pipelines' transactions (7.0)."""


def installed(version: str | None = None) -> tuple[int, int]:
    """The major and minor release of redis-py (``version``, by default the imported one)."""
    found = re.match(r"(\d+)\.(\d+)", version or redis.__version__)
    return (int(found[1]), int(found[2])) if found else (0, 0)


def needed(client: object) -> tuple[tuple[int, int], str] | None:
    """The release ``client``'s kind needs and what for, or None if redis-py 5.0 will do."""
    if isinstance(client, AsyncRedisCluster):
        return ASYNC_CLUSTER, "an asyncio RedisCluster client (its pub/sub and transactions)"
    if isinstance(client, RedisCluster):
        return SYNC_CLUSTER, "a RedisCluster client (transactions in its pipelines)"
    return None


def require(client: object, argument: str = "client") -> None:
    """Refuse ``client`` if the installed redis-py is older than its kind needs, naming
    the release and the install line."""
    need = needed(client)
    if need is None or installed() >= need[0]:
        return
    (major, minor), what = need
    release = f"{major}.{minor}"
    raise RedisPyTooOld(
        f"{argument}: {what} needs redis-py {release} or later, and {redis.__version__} is "
        f"installed: pip install 'redis>={release}' (a single server or Sentinel works "
        "with redis-py 5.0 and later)",
        needed=release, installed=redis.__version__,
    )
