"""What the server holds, as ``lockworker status`` prints it (and ``--json`` and the
dashboard give it): keys and bytes per namespace by kind, estimated from a sample
(:mod:`lockworker.runtime.footprint`), and saying so.
"""

from __future__ import annotations

from typing import Any

from lockworker.cli.cells import aligned, duration, printable
from lockworker.model.footprint import Footprint, Kind, Share, size
from lockworker.runtime import footprint

MAX_ROWS = 20
"""Shares given a line of their own, largest first; the rest are summed in one."""
NOT_OURS = "(not lockworker)"
ALL = "(all)"
"""The namespace column of what serves every namespace (the registry)."""
"""The namespace column of keys of no lockworker product."""
HEADER = ("NAMESPACE", "KIND", "KEYS", "BYTES")


def read(client: Any, namespace: str | None = None) -> Footprint:
    """The server's footprint (every namespace's; only ``namespace``'s shares if given)."""
    return footprint.sample(client).of(namespace)


def number(count: float) -> str:
    """``1,000,000``."""
    return f"{round(count):,}"


def headline(found: Footprint) -> str:
    """``server memory: 1.2 GiB used of 2.0 GiB maxmemory (60 %), 1,000,000 keys``."""
    used = "unknown memory" if found.used_memory is None else f"{size(found.used_memory)} used"
    if found.maxmemory:
        limit = f" of {size(found.maxmemory)} maxmemory"
        if found.used_memory is not None:
            limit += f" ({100 * found.used_memory / found.maxmemory:.0f} %)"
    elif found.maxmemory == 0:
        limit = " (no maxmemory)"
    else:
        limit = ""
    return f"server memory: {used}{limit}, {number(found.total_keys)} keys"


def basis(found: Footprint) -> str:
    """How the figures were made: exact counts, or an estimate from a sample of N."""
    sizing = (f"bytes by MEMORY USAGE of up to {footprint.SIZED_PER_CLASS} keys per kind, "
              f"in {duration(found.seconds)}")
    if found.exact:
        return f"every key counted; {sizing}"
    return (f"estimates from a sample of {number(found.sampled)} of "
            f"{number(found.total_keys)} keys; {sizing}")


def rows(shares: tuple[Share, ...] | list[Share]) -> list[tuple[str, str, str, str]]:
    """A row per share, the smallest beyond :data:`MAX_ROWS` summed in one."""
    shown, rest = list(shares[:MAX_ROWS]), list(shares[MAX_ROWS:])
    out = [(printable(s.namespace if s.namespace is not None else
                      ALL if s.kind is Kind.REGISTRY else NOT_OURS), s.kind.label,
            number(s.keys), size(s.bytes)) for s in shown]
    if rest:
        known = [s.bytes for s in rest if s.bytes is not None]
        out.append((f"({len(rest)} more)", "", number(sum(s.keys for s in rest)),
                    size(sum(known) if known else None)))
    return out


def lines(found: Footprint) -> list[str]:
    """The section ``lockworker status`` prints."""
    out = [headline(found)]
    if found.shares:
        out.append(aligned([HEADER, *rows(found.shares)]))
    else:
        out.append("no keys found")
    out.append(f"({basis(found)})")
    return out


def as_json(found: Footprint) -> dict[str, Any]:
    """``--json``'s ``memory``: every share (namespace null for keys of no lockworker
    product), with the figures it rests on."""
    return {
        "used_memory": found.used_memory,
        "maxmemory": found.maxmemory,
        "total_keys": found.total_keys,
        "sampled_keys": found.sampled,
        "exact": found.exact,
        "seconds": round(found.seconds, 3),
        "shares": [
            {"namespace": s.namespace, "kind": s.kind.value, "keys": s.keys,
             "bytes": s.bytes, "sampled": s.sampled}
            for s in found.shares
        ],
    }
