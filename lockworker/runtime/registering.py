"""Registering what starts being served (:mod:`lockworker.model.registry`), once.

A stream's reader, a schedule's source and a leader each add themselves to the registry
when they start being served, so the views find them without walking every key. One
SADD per object's lifetime: a :class:`Registration` remembers that it succeeded. A
failure is not the serving's business (the views fall back, or the next start adds
it): it is suppressed, and the next start tries again.
"""

from __future__ import annotations

import contextlib
from typing import Any

from lockworker.model import registry as names
from lockworker.model.registry import Registered
from lockworker.protocol import registry
from lockworker.runtime.presence import FAILURES

__all__ = ["Registration", "leader", "stream"]


class Registration:
    """Adds ``found`` (and what each call adds to it) to the registry at the first call
    that succeeds; later calls do nothing."""

    def __init__(self, client: Any, *found: Registered) -> None:
        self.client = client
        self.found = found
        self.done = False

    def __call__(self, *more: Registered) -> None:
        if self.done or not (self.found or more):
            return
        with contextlib.suppress(*FAILURES):
            registry.register(self.client, *self.found, *more)
            self.done = True

    async def acall(self, *more: Registered) -> None:
        """The call on a ``redis.asyncio`` client."""
        if self.done or not (self.found or more):
            return
        with contextlib.suppress(*FAILURES):
            await registry.aregister(self.client, *self.found, *more)
            self.done = True


def stream(client: Any, name: str) -> Registration:
    return Registration(client, names.stream(name))


def leader(client: Any, name: str) -> Registration:
    return Registration(client, names.leader(name))
