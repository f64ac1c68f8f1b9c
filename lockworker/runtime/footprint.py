"""Sampling what a server holds, within a budget (the classes and the arithmetic are
:mod:`lockworker.model.footprint`'s; printing is the CLI's and the dashboard's).

Never a walk of every key: on each master, SCAN from the start (hash order, so a fair
sample) until :data:`SAMPLE_KEYS` keys are seen or the time budget runs out, then
``MEMORY USAGE`` (its default of 5 samples per aggregate: a constant cost per key) on
at most :data:`SIZED_PER_CLASS` keys of each class seen. A server of 10^6 keys is
sampled in a few tens of milliseconds; a smaller one is walked whole, and its counts
are exact.
"""

from __future__ import annotations

from typing import Any

import redis

from lockworker.clock import Clock, SystemClock
from lockworker.model.footprint import Class, Footprint, Sample, classify, estimate
from lockworker.protocol.decode import text
from lockworker.runtime.servercheck import masters

SAMPLE_KEYS = 10_000
"""Keys seen at most (over every master) before the estimate is made."""
BUDGET = 0.3
"""Seconds the sampling may take (a scan or sizing batch under way is finished)."""
SCAN_COUNT = 1_000
"""Keys asked of one SCAN call."""
SIZED_PER_CLASS = 50
"""Keys of one (namespace, kind) whose MEMORY USAGE is asked."""
SIZED_AT_ONCE = 500
"""MEMORY USAGE calls in one round trip."""
SIZE_SHARE = 0.3
"""The part of each master's time left for sizing, not scanning."""


def sample(
    client: Any, *, keys: int = SAMPLE_KEYS, budget: float = BUDGET, clock: Clock | None = None
) -> Footprint:
    """The footprint of everything behind ``client`` (every master of a cluster),
    estimated from at most ``keys`` keys within about ``budget`` seconds. Raises what
    the client raises (the server unreachable)."""
    clock = clock or SystemClock()
    started = clock.monotonic()
    nodes = masters(client)
    samples = []
    read: list[dict[str, int | None]] = []
    for i, (_name, node) in enumerate(nodes):
        left = len(nodes) - i
        share = max(0.0, started + budget - clock.monotonic()) / left
        samples.append(one(node, max(1, keys // len(nodes)), share, clock))
        read.append(read_memory(node))
    memory = {name: sum(v for r in read if (v := r[name]) is not None)
              if any(r[name] is not None for r in read) else None
              for name in ("used_memory", "maxmemory")}
    return estimate(samples, clock.monotonic() - started, memory)


def one(node: redis.Redis, keys: int, budget: float, clock: Clock) -> Sample:
    """One master's sample: at least one SCAN call and one sizing batch, whatever the
    budget, so a short budget still gives figures."""
    started = clock.monotonic()
    found = Sample(total=int(node.dbsize()))
    scan_until = started + budget * (1 - SIZE_SHARE)
    seen: set[Any] = set()  # SCAN may return a key twice (the table resized meanwhile)
    picks: dict[Class, list[Any]] = {}
    cursor: Any = 0
    while True:
        cursor, batch = node.scan(cursor, count=SCAN_COUNT)
        for raw in batch:
            if raw in seen:
                continue
            seen.add(raw)
            cls = classify(text(raw))
            found.seen[cls] += 1
            chosen = picks.setdefault(cls, [])
            if len(chosen) < SIZED_PER_CLASS:
                chosen.append(raw)
        if int(cursor) == 0:
            found.complete = True
            break
        if len(seen) >= keys or clock.monotonic() >= scan_until:
            break
    size(node, found, picks, started + budget, clock)
    return found


def size(
    node: redis.Redis, found: Sample, picks: dict[Class, list[Any]], deadline: float,
    clock: Clock,
) -> None:
    """``MEMORY USAGE`` of the picked keys into ``found.sizes``, a batch at a time
    until ``deadline``: every class's first pick first, so a budget that runs out
    leaves few classes unsized. A key gone meanwhile, or a refused command, adds
    nothing."""
    order = []
    for rank in range(SIZED_PER_CLASS):
        order += [(cls, keys[rank]) for cls, keys in picks.items() if rank < len(keys)]
    for start in range(0, len(order), SIZED_AT_ONCE):
        if start and clock.monotonic() >= deadline:
            return
        batch = order[start : start + SIZED_AT_ONCE]
        pipe = node.pipeline(transaction=False)
        for _cls, key in batch:
            pipe.memory_usage(key)
        for (cls, _key), reply in zip(batch, pipe.execute(raise_on_error=False), strict=True):
            if isinstance(reply, int):
                found.sizes.setdefault(cls, []).append(reply)


def read_memory(node: redis.Redis) -> dict[str, int | None]:
    """``used_memory`` and ``maxmemory`` of ``INFO memory`` (None if refused)."""
    try:
        info = node.info("memory")
    except redis.ResponseError:
        return {"used_memory": None, "maxmemory": None}
    return {name: _int(info.get(name)) for name in ("used_memory", "maxmemory")}


def _int(raw: object) -> int | None:
    try:
        return int(raw)  # type: ignore[call-overload, no-any-return]
    except (TypeError, ValueError):
        return None
