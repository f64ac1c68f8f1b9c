"""Helpers for testing code that uses lockworker (and for lockworker's own tests).

- :class:`FakeClock`: time that moves only when told to.
- :class:`RedisServer`: a real server on a free loopback port, started and stopped by you.
- :func:`capture_events`: the events lockworker emitted, as dicts.
- ``lockworker.testing.plugin``: pytest fixtures built on these.
"""

from __future__ import annotations

from lockworker.testing.clock import FakeClock
from lockworker.testing.events import capture_events
from lockworker.testing.server import RedisServer, ServerNotFound, find_server_binary

__all__ = ["FakeClock", "RedisServer", "ServerNotFound", "capture_events", "find_server_binary"]
