"""Writing and reading the registry (:mod:`lockworker.model.registry`), sync and asyncio."""

from __future__ import annotations

from typing import Any

from lockworker.model.registry import INDEXED, REGISTRY, Registered, parse
from lockworker.protocol.decode import text


def register(client: Any, *found: Registered) -> None:
    """Add ``found`` to the registry (one SADD; nothing if already there)."""
    client.sadd(REGISTRY, *(r.member() for r in found))


def forget(client: Any, *found: Registered) -> None:
    """Take ``found`` out of the registry, and a namespace's mark (a run that removes
    every key it wrote: ``lockworker demo``)."""
    client.srem(REGISTRY, *(r.member() for r in found))
    spaces = [r.names[0] for r in found if r.kind == "namespace"]
    if spaces:
        client.hdel(INDEXED, *spaces)


async def aregister(client: Any, *found: Registered) -> None:
    """:func:`register` on a ``redis.asyncio`` client."""
    await client.sadd(REGISTRY, *(r.member() for r in found))


def decoded(raw: Any) -> list[Registered]:
    """SMEMBERS' reply as registered things, sorted by kind and names."""
    found = (parse(text(m)) for m in raw or ())
    return sorted((r for r in found if r is not None), key=lambda r: (r.kind, r.names))


def registered(client: Any, kind: str | None = None) -> list[Registered]:
    """Everything registered (of ``kind``, if given)."""
    return [r for r in decoded(client.smembers(REGISTRY)) if kind in (None, r.kind)]


def names(client: Any, kind: str) -> list[str]:
    """The first name of everything registered of ``kind``."""
    return [r.names[0] for r in registered(client, kind)]


def indexed(client: Any) -> dict[str, int]:
    """Namespace -> server ms at which its jobs were all indexed."""
    return {text(k): int(v) for k, v in (client.hgetall(INDEXED) or {}).items()}


def mark_indexed(client: Any, namespace: str, ms: int) -> None:
    client.hset(INDEXED, namespace, ms)


def is_indexed(client: Any, namespace: str) -> bool:
    """Whether ``namespace`` is marked indexed (one HEXISTS)."""
    return bool(client.hexists(INDEXED, namespace))


async def ais_indexed(client: Any, namespace: str) -> bool:
    """:func:`is_indexed` on a ``redis.asyncio`` client."""
    return bool(await client.hexists(INDEXED, namespace))


def found(client: Any, kind: str) -> list[tuple[str, ...]] | None:
    """The names of everything registered of ``kind``; None if nothing of that kind is:
    what was served by release 0.3.0, or before the registry existed, is not registered
    until it is served again, so the views walk the keyspace for that kind instead."""
    names = [r.names for r in registered(client, kind)]
    return names or None
