"""What the views list, by name: the namespaces, streams, schedules and leaders served.

Each is read from the registry (:mod:`lockworker.model.registry`): one SMEMBERS, however
many keys the server holds. What was served by release 0.3.0, or by this release before
the registry existed, is not registered until it is served again; so while nothing of a
kind is registered, that kind is found as before, by SCAN over the keyspace (seconds
with millions of finished jobs' keys). Once one thing of a kind is registered, the
others of that kind not served since are not listed (``lockworker index`` registers
the namespaces it finds).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from lockworker.daemons.leader import NAMESPACE as LEADERS
from lockworker.model.keys import Space, parse_state_key, state_pattern, unescape
from lockworker.model.presence import MEMBERS_PATTERN, parse_members_key
from lockworker.model.registry import LEADER, NAMESPACE, SCHEDULE, STREAM
from lockworker.protocol import registry, text
from lockworker.protocol.schedules import parse_schedule_key, schedule_pattern

STREAMS_PATTERN = "lw:stream:streams:{*}:readers"
"""Every stream that has or had a fan-out reader (its ``readers`` key)."""


def _scan(client: Any, pattern: str) -> Iterable[str]:
    return (text(raw) for raw in client.scan_iter(match=pattern, count=1000))


def namespaces(client: Any) -> list[str]:
    """Every namespace served (the fallback: those whose presence set exists)."""
    found = registry.found(client, NAMESPACE)
    if found is not None:
        return [names[0] for names in found]
    parsed = (parse_members_key(k) for k in _scan(client, MEMBERS_PATTERN))
    return [n for n in parsed if n is not None]


def streams(client: Any) -> list[str]:
    """Every stream read (the fallback: those with a fan-out reader's key)."""
    found = registry.found(client, STREAM)
    if found is not None:
        return [names[0] for names in found]
    head, tail = "lw:stream:streams:{", "}:readers"
    return [
        unescape(k[len(head) : -len(tail)]) for k in _scan(client, STREAMS_PATTERN)
        if k.startswith(head) and k.endswith(tail)
    ]


def schedules(client: Any, namespace: str | None = None) -> list[tuple[str, str]]:
    """``(namespace, name)`` of every schedule served (of ``namespace``, if given; the
    fallback: those whose hash exists)."""
    found = registry.found(client, SCHEDULE)
    if found is not None:
        pairs = [(n[0], n[1]) for n in found if len(n) == 2]
    else:
        parsed = (parse_schedule_key(k) for k in _scan(client, schedule_pattern(namespace)))
        pairs = [p for p in parsed if p is not None]
    return [p for p in pairs if namespace in (None, p[0])]


def leaders(client: Any) -> list[str]:
    """Every leader name that campaigned (the fallback: those whose term's state
    exists)."""
    found = registry.found(client, LEADER)
    if found is not None:
        return [names[0] for names in found]
    pattern = state_pattern(Space.LEADER, LEADERS)
    parsed = (parse_state_key(k, Space.LEADER) for k in _scan(client, pattern))
    return [p[1] for p in parsed if p is not None]
