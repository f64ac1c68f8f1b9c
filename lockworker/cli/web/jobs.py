"""The dashboard's jobs, from each namespace's index (:mod:`lockworker.model.index`).

Finished jobs are the many (millions of DONE keys on a busy server); the dashboard shows
the few that are not: held, backing off, pending and given up. Each namespace's index
counts those (``ZCOUNT``, whatever the number of finished jobs) and lists the newest
:data:`LISTED` of each kind; only the listed jobs' keys are read (:func:`job_rows`), so
a read costs what it shows. Finished jobs are not listed (``done`` is filled in by
the collector from the last hour's outcomes per minute, :mod:`lockworker.cli.
throughput`); ``lockworker status --job`` or a job's page shows one.

The namespaces are the registered ones (:mod:`lockworker.cli.registered`). While none
is registered (every worker of release 0.3.0, or of this release before the registry
existed), the dashboard walks the state keys as before (:func:`scanned`): every job,
done ones included, counted and listed. A namespace whose jobs predate its index shows
only those stepped since, until ``lockworker index`` has indexed it.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from lockworker.cli import indexed, status
from lockworker.cli.cells import natural
from lockworker.cli.kept import Kept
from lockworker.cli.status import Row
from lockworker.model.index import Entry, Kind
from lockworker.model.registry import NAMESPACE
from lockworker.protocol import index, registry

STATES = ("held", "pending", "done", "gave_up", "foreign")
"""The states a job row can have, in the order the counts show them."""
LISTED = 1000
"""The newest jobs of each kind (held, backing off, pending, given up) listed per
namespace: what the pages show, newest first within a kind."""

Counts = dict[str, dict[str, int | None]]
"""namespace -> state -> number of jobs (None: not counted)."""


def count(rows: Iterable[Row]) -> Counts:
    """Jobs per state per namespace, counted from ``rows`` (every state present)."""
    counts: Counts = {}
    for row in rows:
        states = counts.setdefault(row.namespace, dict.fromkeys(STATES, 0))
        states[row.state] = (states.get(row.state) or 0) + 1
    return counts


def read(client: Any, namespace: str | None, kept: Kept) -> tuple[list[Row], Counts]:
    """The jobs to show (of ``namespace``, if given) and their counts: from the index
    of each registered namespace, or, while none is registered, :func:`scanned`."""
    found = registry.found(client, NAMESPACE)
    if found is None:
        return scanned(client, namespace, kept)
    names = [namespace] if namespace is not None else sorted({n[0] for n in found}, key=natural)
    rows: list[Row] = []
    counts: Counts = {}
    for ns in names:
        listed, counts[ns] = of_namespace(client, ns, kept)
        rows.extend(listed)
    return rows, counts


def of_namespace(
    client: Any, namespace: str, kept: Kept
) -> tuple[list[Row], dict[str, int | None]]:
    """One namespace's listed jobs, read now, and its index's counts."""
    since = round(kept.retention * 1000)
    seen = index.count(client, namespace, since)
    entries: list[Entry] = []
    for kind in (k for k in Kind if seen.of(k)):  # a kind counted none lists none
        entries.extend(
            e for e in index.listed(client, namespace, kind, LISTED)
            if kind is Kind.HELD or e.ms > seen.now_ms - since  # its state has expired
        )
    keys = [indexed.key_of(namespace, i) for i in {e.job_id for e in entries}]
    rows = status.read_rows(client, keys, kept)  # none for a job gone since
    counts: dict[str, int | None] = {
        "held": seen.held, "pending": seen.pending + seen.backoff, "done": None,
        "gave_up": seen.gave_up, "foreign": sum(r.state == "foreign" for r in rows),
    }
    return rows, counts


def scanned(client: Any, namespace: str | None, kept: Kept) -> tuple[list[Row], Counts]:
    """Every job (of ``namespace``, if given), found by SCAN over the state keys."""
    keys = sorted(
        indexed.walk(client, namespace), key=lambda k: (natural(k[1]), natural(k[2]))
    )
    rows = status.job_rows(client, keys, kept)
    return rows, count(rows)
