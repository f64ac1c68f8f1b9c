"""The Redis user's permissions, checked before the first handler runs, on a
``redis.asyncio`` client: the same probe, verdict and error as
:func:`lockworker.runtime.servercheck.require_permissions`, awaited.

A step refused after a handler's side effects (a completion whose PUBLISH the user may
not send) would report work as failed that was done; the check refuses first, naming
what to grant (:class:`~lockworker.PermissionDenied`).
"""

from __future__ import annotations

import contextlib
from typing import Any

import redis

from lockworker.model import servercheck as verdicts
from lockworker.model.keys import JobKeys
from lockworker.model.servercheck import Denied
from lockworker.protocol import permissions
from lockworker.protocol.decode import text
from lockworker.runtime.servercheck import ERRORS, refuse_if_denied

__all__ = ["require_permissions"]


async def require_permissions(client: Any, keys: JobKeys) -> bool:
    """Raise :class:`~lockworker.PermissionDenied` naming the grants the user lacks for
    ``keys``' namespace. True if checked, False if the server could not be asked (the
    steps then report what is wrong themselves; try again on the next use)."""
    try:
        refusals = await _probe(client, keys)
        refusals += await _subscribe_denied(client, permissions.probe_keys(keys).wake)
        user = await _user(client)
    except ERRORS:
        return False
    refuse_if_denied(verdicts.permissions(refusals, user), keys)
    return True


async def _probe(client: Any, keys: JobKeys) -> list[Denied]:
    script, names, args = permissions.probe_call(keys)
    try:
        return permissions.decode_probe(await script.acall(client, names, args))
    except redis.ResponseError as exc:
        return permissions.refused("EVALSHA", names[0], exc)


async def _subscribe_denied(client: Any, channel: str) -> list[Denied]:
    """Subscribe to ``channel`` and leave at once, on a connection of its own."""
    pubsub = client.pubsub()
    try:
        await pubsub.subscribe(channel)
        for _ in range(3):  # the confirmation, or the refusal
            if await pubsub.get_message(timeout=1.0) is not None:
                break
        await pubsub.unsubscribe(channel)
    except redis.ResponseError as exc:
        return permissions.refused("SUBSCRIBE", channel, exc)
    finally:
        with contextlib.suppress(*ERRORS):
            await pubsub.aclose()
    return []


async def _user(client: Any) -> str | None:
    try:
        return text(await client.execute_command("ACL", "WHOAMI"))
    except ERRORS:
        return None
