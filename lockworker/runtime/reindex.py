"""Indexing a namespace's older jobs: the loop of ``lockworker index``, and a worker's
own pass when it is the first to serve a namespace that is not marked indexed.

The steps are :mod:`lockworker.protocol.reindex`'s (its docstring says why they are
safe while workers serve). A worker indexes its namespace by itself only when it finds
no other worker registered there: then no process of 0.3.0 serves it (whose steps
write no entries), so what the walk indexes stays true; that covers a new namespace (a
walk that finds nothing, or only this worker's own jobs, which are indexed already)
and an upgrade that stopped every process first. Otherwise it logs ``index.missing``
with the command to run once the last 0.3.0 process has stopped.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from lockworker.errors import ForeignValueError
from lockworker.model import registry as names
from lockworker.model.index import Kind
from lockworker.model.keys import JobKeys, state_pattern
from lockworker.protocol import registry
from lockworker.protocol.decode import server_ms
from lockworker.protocol.reindex import (
    INDEX_SCRIPT,
    Indexed,
    index_jobs,
    indexed_reply,
    job_of,
    scan_jobs,
)
from lockworker.protocol.script import script_keys

RETENTION_MS = 86_400_000
"""The retention a worker's own pass assumes when it dates pending and given-up
entries from their states' time to live (the default; a wrong guess only dates them
as now)."""
BATCH = 1000
"""Jobs indexed per call of :func:`lockworker.protocol.reindex.index_jobs` (a few
round trips: it sends 256 steps at a time)."""
PROGRESS = 10_000
"""A progress line every this many jobs."""

WORDS = {Kind.HELD: "held", Kind.BACKOFF: "backing off", Kind.PENDING: "pending",
         Kind.GAVE_UP: "given up", None: "done/forgotten"}


@dataclass
class Tally:
    """What the command wrote in one namespace."""

    kinds: Counter[Kind | None] = field(default_factory=Counter)
    foreign: list[str] = field(default_factory=list)

    @property
    def jobs(self) -> int:
        return sum(self.kinds.values())

    def line(self, namespace: str) -> str:
        counts = ", ".join(f"{word} {self.kinds[kind]}" for kind, word in WORDS.items())
        return f"indexed {self.jobs} jobs in namespace {namespace}: {counts}"


def index_all(
    client: Any, namespace: str | None, retention_ms: int,
    say: Callable[[str], None] = lambda line: None,
) -> dict[str, Tally]:
    """Index every job (of ``namespace``, or of every namespace), register the
    namespaces found, and mark them (and the registered ones in scope) indexed once
    the scan is complete; what was written, by namespace. ``say``: progress lines."""
    tallies: dict[str, Tally] = {}
    pending: list[JobKeys] = []
    done = 0

    def flush() -> None:
        nonlocal done
        for keys, result in zip(pending, index_jobs(client, pending, retention_ms),
                                strict=True):
            tally = tallies[keys.namespace]
            if isinstance(result, Indexed):
                tally.kinds[result.kind] += 1
            elif isinstance(result, ForeignValueError):
                tally.foreign.append(f"job {keys.job_id!r}: {result}")
            else:
                raise result
        before, done = done, done + len(pending)
        pending.clear()
        if done // PROGRESS > before // PROGRESS:
            say(f"... {done} jobs so far")

    for keys in scan_jobs(client, namespace):
        if keys.namespace not in tallies:
            tallies[keys.namespace] = Tally()
            registry.register(client, names.namespace(keys.namespace))
        pending.append(keys)
        if len(pending) >= BATCH:
            flush()
    flush()
    in_scope = set(registry.names(client, names.NAMESPACE))
    if namespace is not None:
        in_scope &= {namespace}
    now = server_ms(client.time())
    for name in sorted(in_scope | set(tallies)):
        registry.mark_indexed(client, name, now)
        tallies.setdefault(name, Tally())
    return tallies




async def aindex_namespace(client: Any, namespace: str, retention_ms: int) -> int:
    """:func:`index_all` of one namespace on a ``redis.asyncio`` client, one step at a
    time (a worker's background pass); the jobs indexed. Marks it indexed at the end."""
    jobs = 0
    async for raw in client.scan_iter(match=state_pattern(namespace=namespace), count=1000):
        keys = job_of(raw)
        if keys is None or keys.namespace != namespace:
            continue
        reply = await INDEX_SCRIPT.acall(client, script_keys(keys), (retention_ms,))
        try:
            indexed_reply(keys, reply)
        except ForeignValueError:
            continue  # left alone, as the command leaves it
        jobs += 1
    await client.hset(names.INDEXED, namespace, server_ms(await client.time()))
    return jobs
