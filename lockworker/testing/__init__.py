"""Helpers for testing code that uses lockworker (and for lockworker's own tests).

- :class:`FakeClock`: time that moves only when told to.
- :class:`RedisServer`: a real server on a free loopback port, started and stopped by you.
- :class:`Cluster`, :class:`SentinelGroup`: a real Redis Cluster, and a master with
  replicas and sentinels, from the same binary (:mod:`lockworker.testing.topology`).
- :func:`capture_events`: the events lockworker emitted, as dicts.
- ``lockworker.testing.plugin``: pytest fixtures built on these.
"""

from __future__ import annotations

from lockworker.testing.clock import FakeClock
from lockworker.testing.events import capture_events
from lockworker.testing.server import RedisServer, ServerNotFound, find_server_binary
from lockworker.testing.topology import Cluster, SentinelGroup, TopologyError

__all__ = [
    "Cluster",
    "FakeClock",
    "RedisServer",
    "SentinelGroup",
    "ServerNotFound",
    "TopologyError",
    "capture_events",
    "find_server_binary",
]
