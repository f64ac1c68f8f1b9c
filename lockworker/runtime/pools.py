"""Whether a client's connection pool can lend what a ``serve`` call may ask of it.

``serve(source, concurrency=n)`` runs up to ``n`` hooks at once. A hook that uses the
worker's client takes a connection from its pool for each command, beside the few
that the serving's own threads or tasks hold (the wake-up subscription, a blocking
stream read, the batches in flight, a heartbeat's renewals). redis-py's default pool
lends 100 and then raises ``MaxConnectionsError`` ("Too many connections") instead of
waiting: a hook fails with it (and is retried on the job's schedule), and lockworker's
own steps are retried and, past their budget, reported as ``RedisUnavailable``.
Nothing is lost, but a stream crawls on retries with its cause far from its symptom,
so ``serve`` says so when it starts (:func:`shortfall`). A pool that waits for a free
connection (``BlockingConnectionPool``) and a cluster client (a pool per node) are
left alone.
"""

from __future__ import annotations

from typing import Any

import redis
import redis.asyncio

POOL_SMALL = "serve.pool_small"
"""The event ``serve`` logs (WARNING) when the client's pool may run out."""

OWN = 10
"""Connections a serving's own threads or tasks may hold at once, beside its hooks'."""

SPARE = 32
"""What the advice adds to ``concurrency``: lockworker's own, and room for a hook that
sends a command of its own beside a pipeline."""

_WAITING_POOLS = (redis.BlockingConnectionPool, redis.asyncio.BlockingConnectionPool)


def lends_at_most(client: Any) -> int | None:
    """How many connections ``client``'s pool lends before it raises, or None if it
    has no such limit: a pool that waits when all are lent, a client without one pool
    (a cluster client), or a limit that is not a number."""
    pool = getattr(client, "connection_pool", None)
    if pool is None or isinstance(pool, _WAITING_POOLS):
        return None
    limit = getattr(pool, "max_connections", None)
    return limit if isinstance(limit, int) and not isinstance(limit, bool) else None


def shortfall(client: Any, concurrency: int) -> dict[str, int] | None:
    """The fields of :data:`POOL_SMALL` when ``concurrency`` hooks, each with a command
    in flight, and the serving's own :data:`OWN` may need more connections than
    ``client``'s pool lends; None when they fit (or the pool waits)."""
    limit = lends_at_most(client)
    if limit is None or limit >= concurrency + OWN:
        return None
    return {
        "max_connections": limit, "concurrency": concurrency,
        "advice_max_connections": concurrency + SPARE,
    }


def client_options(concurrency: int, pool_class: Any = redis.ConnectionPool) -> dict[str, int]:
    """Options for a client made to serve at ``concurrency`` (the CLI makes its own):
    ``max_connections`` of ``concurrency +`` :data:`SPARE` when redis-py's default
    ``pool_class`` would be short (:func:`shortfall`), else none. A ``max_connections``
    in a URL still wins (redis-py lets the URL's options override)."""
    default = getattr(pool_class(), "max_connections", None)
    if not isinstance(default, int) or default >= concurrency + OWN:
        return {}
    return {"max_connections": concurrency + SPARE}


def say_if_short(log: Any, client: Any, concurrency: int) -> None:
    """Log :data:`POOL_SMALL` (WARNING) if :func:`shortfall` finds the pool too small:
    both ``serve`` twins call this as they start."""
    short = shortfall(client, concurrency)
    if short is not None:
        log.warning(POOL_SMALL, **short)
