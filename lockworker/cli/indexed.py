"""The jobs ``lockworker status`` lists, found through the index, not by a walk.

Finished jobs are the many and are never listed by a walk any more: the rows come from
each namespace's index (:mod:`lockworker.protocol.index`), the newest ``limit`` of each
listed state, then only those jobs' keys are read (:func:`lockworker.cli.status.job_rows`),
so the row shows the job as it is now, not as its entry said. An entry whose job has no
state any more (expired meanwhile) gives no row. The counts come from the index too:
one script per server, whatever the number of finished jobs; the DONE ones from the
workers' per-minute counts (:func:`lockworker.runtime.rates.done_in_window`).
``--job`` reads the one job's keys, in the namespace given or in each registered one.

``--state done`` is the exception: DONE jobs have no entry (a DONE is the end of a job's
entry), so that form still walks the namespace's state keys, and says so.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

import redis

from lockworker.model.index import STATES
from lockworker.model.keys import JobKeys, Space, parse_state_key, state_pattern
from lockworker.model.registry import NAMESPACE
from lockworker.protocol import index, registry, text
from lockworker.runtime.rates import done_in_window
from lockworker.serving.settings import DONE_RETENTION

Key = tuple[str, str, str]
"""(state key, namespace, job id): a job as the status' reader takes it."""


def namespaces(client: redis.Redis, given: str | None) -> list[str]:
    """``given``, or every registered namespace; with none registered (a server written
    only by releases before the registry), the namespaces of the job keys a walk finds."""
    if given is not None:
        return [given]
    found = registry.names(client, NAMESPACE)
    if found:
        return found
    return sorted({ns for _, ns, _ in walk(client, None)})


def walk(client: redis.Redis, namespace: str | None) -> Iterator[Key]:
    """Every job state key (of ``namespace`` if given), by SCAN: the old way, for DONE
    jobs and servers without a registry."""
    for raw in client.scan_iter(match=state_pattern(Space.JOB, namespace), count=1000):
        key = text(raw)
        found = parse_state_key(key, Space.JOB)
        if found is not None and (namespace is None or found[0] == namespace):
            yield key, *found


def key_of(namespace: str, job_id: str) -> Key:
    return JobKeys(namespace, job_id).state, namespace, job_id


def listed(
    client: redis.Redis, spaces: Iterable[str], states: Iterable[str], limit: int | None
) -> list[Key]:
    """The newest ``limit`` jobs (None: all) of each of ``states`` in each namespace,
    from the index; each job once."""
    seen: dict[tuple[str, str], Key] = {}
    for ns in spaces:
        found: index.Counts | None = None
        for state in states:
            if state == "done":
                for key in walk(client, ns):
                    seen.setdefault((ns, key[2]), key)
                continue
            if found is None:  # one count saves the lists of the kinds it finds empty
                found = index.count(client, ns)
            for kind in STATES[state]:
                if not found.of(kind):
                    continue
                for e in index.listed(client, ns, kind, limit):
                    seen.setdefault((ns, e.job_id), key_of(ns, e.job_id))
    return list(seen.values())


def counts(
    client: redis.Redis, spaces: Iterable[str], since_ms: int,
    done_window: float = DONE_RETENTION,
) -> dict[str, Any]:
    """Per namespace, the jobs the index holds in each listed state (``held`` counts
    leases that may have run out since: the rows tell them), and ``done``: the jobs the
    workers counted done in the last ``done_window`` seconds (their per-minute counts,
    :mod:`lockworker.model.rates`: the last hours only), as the index holds none."""
    out: dict[str, Any] = {}
    for ns in spaces:
        c = index.count(client, ns, since_ms)
        out[ns] = {"pending": c.pending + c.backoff, "held": c.held, "gave_up": c.gave_up,
                   "done": done_in_window(client, ns, done_window)}
    return out


def in_state(client: redis.Redis, spaces: Iterable[str], state: str, since_ms: int) -> int:
    """How many jobs of ``spaces`` the index holds in ``state`` (0 for ``done``, which it
    does not hold): what ``--state`` says is left out of a table cut to ``--limit``."""
    if state not in STATES:
        return 0
    return sum(seen[state] for seen in counts(client, spaces, since_ms).values())
