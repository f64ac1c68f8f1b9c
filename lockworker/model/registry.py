"""What the server holds, by name: the namespaces, streams, schedules and leaders in use.

The views list namespaces, streams, schedules and leaders. Finding them by SCAN walks
every key of the server, finished jobs included: seconds with millions of keys. So each
is registered once, when it starts being served (a worker's first registration in its
namespace, a stream's reader, a schedule's source, a leader's first campaign): one
SADD to one set, ``lw:registry``, whose members are JSON arrays ``[kind, name...]``
(injective whatever the names hold). The set is small (one member per thing ever
served) and has no time to live: a namespace nobody serves any more is still listed,
with nothing in it (``SREM`` takes it out).

A second key, ``lw:registry:indexed`` (a hash: namespace -> server ms), records the
namespaces whose jobs written before the index existed have all been indexed
(:mod:`lockworker.model.index`): the views say when a namespace is not yet.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

REGISTRY = "lw:registry"
INDEXED = "lw:registry:indexed"

NAMESPACE = "namespace"
STREAM = "stream"
SCHEDULE = "schedule"
LEADER = "leader"
KINDS = (NAMESPACE, STREAM, SCHEDULE, LEADER)


@dataclass(frozen=True, slots=True)
class Registered:
    """One registered thing: its kind and its names (a schedule has two: its
    namespace and its name)."""

    kind: str
    names: tuple[str, ...]

    def member(self) -> str:
        return json.dumps([self.kind, *self.names], separators=(",", ":"), ensure_ascii=False)


def parse(raw: str) -> Registered | None:
    """The member ``raw`` as registered (None if lockworker did not write it)."""
    try:
        found: Any = json.loads(raw)
    except ValueError:
        return None
    if (not isinstance(found, list) or len(found) < 2 or found[0] not in KINDS
            or not all(isinstance(x, str) for x in found)):
        return None
    return Registered(found[0], tuple(found[1:]))


def namespace(name: str) -> Registered:
    return Registered(NAMESPACE, (name,))


def stream(name: str) -> Registered:
    return Registered(STREAM, (name,))


def schedule(namespace: str, name: str) -> Registered:
    return Registered(SCHEDULE, (namespace, name))


def leader(name: str) -> Registered:
    return Registered(LEADER, (name,))
