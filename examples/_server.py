"""Where the examples find Redis: $REDIS_URL, or an embedded real server they start."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

from lockworker.testing import RedisServer


@contextlib.contextmanager
def redis_url() -> Iterator[str]:
    """$REDIS_URL if set, else the URL of a server started (and stopped) here."""
    if os.environ.get("REDIS_URL"):
        yield os.environ["REDIS_URL"]
        return
    with RedisServer() as server:
        yield server.url
