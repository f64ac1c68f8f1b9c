"""What the workers did, per namespace and minute, as ``lockworker status`` and the
dashboard show it: jobs done, attempts failed, jobs given up and handed over
(:mod:`lockworker.model.rates` says what each counts and how approximate it is).

Read without a walk of the jobs: one script per namespace over its last hour hashes
(:func:`lockworker.runtime.rates.rates`). The namespaces are the one asked for, else
the registered ones (:func:`namespaces`).

``lockworker status`` (:mod:`lockworker.cli.statusmain`) prints a line per namespace
(last minute and last hour), or, with ``--json``, adds ``"rates"``. Not with ``--job``
or ``--state``, which ask for jobs only.
"""

from __future__ import annotations

from typing import Any

import redis

from lockworker.cli.cells import natural, printable
from lockworker.clock import wall_time
from lockworker.model import rates as model
from lockworker.model.rates import KINDS, Bucket
from lockworker.model.registry import NAMESPACE
from lockworker.protocol import registry, text
from lockworker.runtime.rates import rates

SHOWN = 61
"""Minutes read: the 60 whole minutes before the current one, and it so far."""
LABELS = {"done": "done", "failed": "failed", "gave_up": "gave up",
          "handed_over": "handed over"}
COLOURS = {"done": "#1f7a3a", "failed": "#8a6d00", "gave_up": "#b3261e",
           "handed_over": "#1f5fa8"}
"""The chart's line per kind (the dashboard's colours for held, pending, given up)."""
WIDTH, HEIGHT = 360, 80
"""The chart's drawing area, in SVG units."""


def namespaces(client: redis.Redis, namespace: str | None) -> list[str]:
    """``namespace``, or every registered namespace (:mod:`lockworker.model.registry`:
    a worker registers its namespace as it starts serving); with none registered (a
    server written only by releases before the registry), those whose counts are kept,
    by a SCAN matching only the hour hashes' names."""
    if namespace is not None:
        return [namespace]
    found = registry.names(client, NAMESPACE)
    if not found:
        found = [n for n in (model.parse_rates_key(text(k)) for k in
                             client.scan_iter(match=model.RATES_PATTERN, count=1000))
                 if n is not None]
    return sorted(set(found), key=natural)


def read(
    client: redis.Redis, namespace: str | None, *, now: float | None = None
) -> dict[str, list[Bucket]]:
    """Each namespace's :data:`SHOWN` minutes, oldest first."""
    at = wall_time() if now is None else now
    return {ns: rates(client, ns, SHOWN, now=at) for ns in namespaces(client, namespace)}


def summary(found: list[Bucket]) -> dict[str, dict[str, int]]:
    """``last_minute``: the latest whole minute; ``last_hour``: every minute read (the
    60 before the current one, and it so far)."""
    last = found[-2][1] if len(found) > 1 else dict.fromkeys(KINDS, 0)
    return {"last_minute": dict(last), "last_hour": model.total(found)}


def as_json(read_: dict[str, list[Bucket]]) -> dict[str, Any]:
    """Per namespace: the summary and the minutes (start in ISO 8601, UTC)."""
    return {
        ns: {**summary(found),
             "minutes": [{"start": start.isoformat(), **counts} for start, counts in found]}
        for ns, found in read_.items()
    }


def counts_text(counts: dict[str, int]) -> str:
    return ", ".join(f"{counts.get(kind, 0)} {LABELS[kind]}" for kind in KINDS)


def lines(read_: dict[str, list[Bucket]]) -> list[str]:
    """One line per namespace with counts in the last hour (none if no namespace has)."""
    out = []
    for ns, found in read_.items():
        shown = summary(found)
        if any(shown["last_hour"].values()):
            out.append(f"rates of {printable(ns)}: last minute "
                       f"{counts_text(shown['last_minute'])}; last hour "
                       f"{counts_text(shown['last_hour'])}")
    return out


def chart(found: list[Bucket]) -> dict[str, str]:
    """Each kind's polyline points over the minutes of ``found`` (x by minute, y by
    count, scaled to the busiest minute of any kind), for an inline SVG."""
    top = max((counts.get(kind, 0) for _start, counts in found for kind in KINDS), default=0)
    step = WIDTH / max(1, len(found) - 1)
    scale = (HEIGHT - 2) / top if top else 0.0
    return {
        kind: " ".join(
            f"{i * step:.1f},{HEIGHT - 1 - counts.get(kind, 0) * scale:.1f}"
            for i, (_start, counts) in enumerate(found)
        )
        for kind in KINDS
    }


def charted(
    read_: dict[str, list[Bucket]], namespace: str | None
) -> list[tuple[str, list[Bucket]]]:
    """The namespaces the dashboard charts: ``namespace`` alone if given, else every
    one read, with counts in the hour or not."""
    return [(ns, found) for ns, found in read_.items() if namespace in (None, ns)]


def busiest(found: list[Bucket]) -> int:
    """The largest count of one kind in one minute (the chart's scale)."""
    return max((counts.get(kind, 0) for _start, counts in found for kind in KINDS), default=0)
