"""``lockworker status``'s streams: each fan-out reader, how far it is behind its
namespace's progress, and whether trimming waits for it.

A stream's keys share one slot, so one script reads a stream at one moment. A reader
of a namespace (under ``Worker.serve``) is behind its namespace's progress by the time
between the two entry ids; trimming never waits for it past that progress (what it
missed is resolved there: it skips it when it comes back). A reader of no namespace (a
0.3.0 process, a source read without ``serve``) holds trimming back at its own
position until its registration runs out (``reader_ttl``):
:mod:`lockworker.daemons.sources`.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import redis

from lockworker.cli import registered
from lockworker.cli.cells import aligned, duration, natural, printable
from lockworker.daemons.sources import stream_keys
from lockworker.protocol import text
from lockworker.protocol.delayed import delayed_key
from lockworker.protocol.streams import entry_order, fanout_keys

# READ_STREAM: KEYS the stream's fanout_keys (entries, positions, readers, namespaces,
# progress), then its delayed jobs. Returns its length, its first entry's id
# (or ''), the readers with their registrations' ends, the positions, the readers'
# namespaces, the namespaces' progress (flat lists), the server's TIME, how many
# delayed jobs wait and the first one's due time ('' if none).
READ_STREAM = """
local length, first = 0, ''
if redis.call('TYPE', KEYS[1])['ok'] == 'stream' then
  length = redis.call('XLEN', KEYS[1])
  local head = redis.call('XRANGE', KEYS[1], '-', '+', 'COUNT', 1)
  if #head > 0 then first = head[1][1] end
end
return {length, first, redis.call('ZRANGE', KEYS[3], 0, -1, 'WITHSCORES'),
        redis.call('HGETALL', KEYS[2]), redis.call('HGETALL', KEYS[4]),
        redis.call('HGETALL', KEYS[5]), redis.call('TIME'), redis.call('ZCARD', KEYS[6]),
        redis.call('ZRANGE', KEYS[6], 0, 0, 'WITHSCORES')[2] or ''}
"""


@dataclass(frozen=True)
class ReaderRow:
    """One registered fan-out reader of a stream (times in seconds)."""

    owner: str
    namespace: str | None
    """None: it named none (a 0.3.0 process, a source read without ``serve``)."""
    position: str | None
    behind: float | None
    """How far its saved position is behind its namespace's progress, by entry time,
    of the entries still in the stream (what it skips when it comes back)."""
    expires_in: float
    trimming_waits: bool
    """Whether trimming keeps the entries after this reader's own position."""


@dataclass(frozen=True)
class StreamRow:
    """One stream: its entries, each namespace's progress, its readers."""

    stream: str
    entries: int
    first: str | None
    progress: dict[str, str] = field(default_factory=dict)
    readers: list[ReaderRow] = field(default_factory=list)
    delayed: int = 0
    """Jobs waiting off the stream until due (``submit(..., delay=)``)."""
    next_due_in: float | None = None
    """Seconds until the first of them is due, by the server's clock (None: none)."""


def _pairs(flat: Any) -> dict[str, str]:
    items = [text(x) for x in flat or ()]
    return dict(zip(items[0::2], items[1::2], strict=True))


def stream_names(client: redis.Redis) -> Iterator[str]:
    """Every stream read (:func:`lockworker.cli.registered.streams`)."""
    yield from registered.streams(client)


def stream_row(client: redis.Redis, stream: str, namespace: str | None = None) -> StreamRow:
    """``stream`` as one script read it (its readers of ``namespace`` only, if given)."""
    keys = stream_keys(stream)
    reply = client.register_script(READ_STREAM)(keys=[*fanout_keys(keys), delayed_key(keys)])
    length, first, registered, positions, namespaces, progress, now, waiting, due = reply
    now_ms = int(now[0]) * 1000 + int(now[1]) // 1000
    due_in = round((float(text(due)) - now_ms) / 1000.0, 3) if text(due) else None
    ends = _pairs(registered)
    positions, namespaces, progress = _pairs(positions), _pairs(namespaces), _pairs(progress)
    readers = []
    for owner in sorted(ends, key=natural):
        ns = namespaces.get(owner)
        if namespace is not None and ns != namespace:
            continue
        pos, reached = positions.get(owner), progress.get(ns or "")
        behind = None
        if ns is not None and pos is not None and reached is not None:
            since = max(entry_order(pos), entry_order(text(first) or reached))
            behind = max(0, entry_order(reached)[0] - since[0]) / 1000.0
        readers.append(ReaderRow(
            owner, ns, pos, behind, round((float(ends[owner]) - now_ms) / 1000.0, 3),
            trimming_waits=ns is None,
        ))
    return StreamRow(
        stream, int(length), text(first) or None, progress, readers, int(waiting), due_in
    )


def stream_rows(client: redis.Redis, namespace: str | None = None) -> list[StreamRow]:
    """Every stream with a registered fan-out reader (of ``namespace``, if given)."""
    names = sorted(set(stream_names(client)), key=natural)
    rows = [stream_row(client, s, namespace) for s in names]
    return [r for r in rows if r.readers]


HEADER = ("STREAM", "READER", "NAMESPACE", "POSITION", "BEHIND", "EXPIRES IN", "TRIMMING WAITS")


def table(rows: list[StreamRow]) -> str:
    """A line per stream (its entries, its namespaces' progress), then its readers."""
    if not rows:
        return ""
    lines = []
    for r in rows:
        reached = ", ".join(f"{printable(ns)} {at}" for ns, at in sorted(r.progress.items()))
        lines.append(
            f"stream {printable(r.stream)}: {r.entries} entries"
            + (f" from {r.first}" if r.first else "")
            + (f"; progress: {reached}" if reached else "")
            + (f"; {r.delayed} delayed, the next due in {duration(max(0.0, r.next_due_in))}"
               if r.delayed and r.next_due_in is not None else "")
        )
    cells = [HEADER] + [
        (printable(r.stream), printable(x.owner), printable(x.namespace or "-"),
         x.position or "-", duration(x.behind), duration(x.expires_in),
         "yes (no namespace)" if x.trimming_waits else "no")
        for r in rows for x in r.readers
    ]
    return "\n".join(lines) + "\n" + aligned(cells)
