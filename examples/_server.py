"""Where the examples find Redis: $LOCKWORKER_REDIS_URL (the variable the ``lockworker``
command reads), or an embedded real server they start."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

from lockworker.testing import RedisServer


@contextlib.contextmanager
def redis_url() -> Iterator[str]:
    """$LOCKWORKER_REDIS_URL if set, else the URL of a server started (and stopped) here."""
    url = os.environ.get("LOCKWORKER_REDIS_URL")
    if url:
        yield url
        return
    with RedisServer() as server:
        yield server.url
