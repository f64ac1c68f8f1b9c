"""The workers section of ``lockworker status`` and of the dashboard: who is registered
in each namespace (:mod:`lockworker.model.presence`), and which backups serve as
primaries, since when."""

from __future__ import annotations

import datetime
from dataclasses import dataclass

import redis

from lockworker.cli import registered
from lockworker.cli.cells import aligned, duration, natural, printable
from lockworker.model.presence import (
    presence_keys,
    serving_as_primary,
)
from lockworker.protocol import presence


@dataclass(frozen=True)
class WorkerRow:
    """One live worker of a namespace (times in seconds)."""

    namespace: str
    owner: str
    role: str
    host: str
    pid: int
    run: str
    last_seen: float
    """Since it last refreshed its registration (every third of its lock_timeout)."""
    expires_in: float
    """Until its registration ends unless refreshed (a crashed worker's ends so)."""
    serving_as_primary: bool = False
    """A backup doing the primaries' work: no primary of its namespace is registered."""
    serving_since: float | None = None
    """Since when it does (Unix time, the server's clock), where the backup recorded it
    (a backup of an earlier release does not)."""

    @property
    def shown_role(self) -> str:
        """The role as a person reads it: ``backup, serving as primary since 14:02:11``."""
        if not self.serving_as_primary:
            return self.role
        if self.serving_since is None:
            return f"{self.role}, serving as primary"
        since = datetime.datetime.fromtimestamp(self.serving_since).strftime("%H:%M:%S")
        return f"{self.role}, serving as primary since {since}"


def namespace_workers(client: redis.Redis, ns: str) -> list[WorkerRow]:
    """The workers registered in ``ns``, each backup serving as a primary marked so."""
    keys = presence_keys(ns)
    found = presence.read(client, keys)
    serving = serving_as_primary(found)
    since = presence.acting_since(client, keys) if serving else {}
    return [
        WorkerRow(
            ns, r.member.owner, r.member.role.value, r.member.host, r.member.pid,
            r.member.run, round(r.last_seen, 3), round(r.left, 3), r.member.run in serving,
            since[r.member.run] / 1000.0 if r.member.run in since else None,
        )
        for r in found
    ]


def worker_rows(client: redis.Redis, namespace: str | None) -> list[WorkerRow]:
    """The workers registered in ``namespace`` (in every namespace if None): primaries
    first, then by owner."""
    if namespace is not None:
        namespaces = [namespace]
    else:
        namespaces = sorted(set(registered.namespaces(client)), key=natural)
    rows = [row for ns in namespaces for row in namespace_workers(client, ns)]
    order = {ns: i for i, ns in enumerate(namespaces)}
    return sorted(rows, key=lambda w: (order[w.namespace], w.role != "primary", natural(w.owner)))


WORKERS_HEADER = ("WORKER", "NAMESPACE", "ROLE", "HOST", "PID", "LAST SEEN", "EXPIRES IN")


def workers_table(workers: list[WorkerRow]) -> str:
    """The live workers, aligned with a header (empty when there are none)."""
    if not workers:
        return ""
    cells = [WORKERS_HEADER] + [
        (printable(w.owner), printable(w.namespace), w.shown_role, printable(w.host),
         str(w.pid),
         duration(w.last_seen), duration(w.expires_in))
        for w in workers
    ]
    return aligned(cells)
