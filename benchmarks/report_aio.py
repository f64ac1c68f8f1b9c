"""The page's asyncio figures, each read against its sync twin: summary lines, the
notes under the uncontended table, and the leadership handover table."""

from __future__ import annotations

from benchmarks.common import spread
from benchmarks.contended import Contended
from benchmarks.cycle import CycleResult
from benchmarks.leaders import ASYNC, SETTLE, SYNC, LeaderHandover

REDIS_PY_ASYNC = "redis-py asyncio Lock"


def _n(value: float, digits: int = 0) -> str:
    return f"{value:,.{digits}f}"


def _ms(seconds: float, digits: int = 2) -> str:
    return f"{seconds * 1000:,.{digits}f}"


def _ratio(ours: float, theirs: float) -> str:
    return f"{ours / theirs:.2f}x" if theirs else "n/a"


def cycle_lines(cycles: list[CycleResult]) -> list[str]:
    """The uncontended asyncio figures against their twins (no targets)."""
    by = {result.name: result for result in cycles}
    lines = []
    lock, peer = by.get("lockworker aio.Lock"), by.get(REDIS_PY_ASYNC)
    if lock is not None and peer is not None:
        lines.append(
            f"uncontended aio.Lock acquire+release: {_n(lock.rate)} ops/s = "
            f"{_ratio(lock.rate, peer.rate)} redis-py asyncio Lock ({_n(peer.rate)}/s), "
            f"{_ratio(lock.rate, by['lockworker Lock'].rate)} lockworker Lock"
        )
    semaphore = by.get("lockworker aio.Semaphore")
    if semaphore is not None:
        sync = by["lockworker Semaphore"]
        lines.append(
            f"uncontended aio.Semaphore acquire+release: {_n(semaphore.rate)} ops/s = "
            f"{_ratio(semaphore.rate, sync.rate)} lockworker Semaphore ({_n(sync.rate)}/s)"
        )
    hit, ahit = by.get("lockworker compute_once (hit)"), by.get("lockworker aio.compute_once (hit)")
    miss = by.get("lockworker compute_once (miss)")
    amiss = by.get("lockworker aio.compute_once (miss)")
    if hit and ahit and miss and amiss:
        lines.append(
            f"compute_once, cached key: {_n(hit.rate)} calls/s, aio {_n(ahit.rate)}/s = "
            f"{_ratio(ahit.rate, hit.rate)}; new key (compute + store): {_n(miss.rate)}/s, "
            f"aio {_n(amiss.rate)}/s = {_ratio(amiss.rate, miss.rate)}"
        )
    worker = by.get("lockworker aio.Worker")
    if worker is not None and peer is not None:
        lines.append(
            f"aio.Worker job cycle (script protocol): {_n(worker.rate)} jobs/s = "
            f"{_ratio(worker.rate, peer.rate)} redis-py asyncio Lock ({_n(peer.rate)}/s), "
            f"{_ratio(worker.rate, by['lockworker script'].rate)} the sync Worker job cycle"
        )
    return lines


def contended_line(results: list[Contended]) -> list[str]:
    """Contended aio.Lock handovers/s in each setting, beside the sync Lock's."""
    rows = [r for r in results if r.kind.asyncio and not r.kind.semaphore]
    if not rows:
        return []
    sync = next((r for r in results if r.kind.name == "lockworker Lock (reused)"), None)
    ours = ", ".join(f"{r.kind.name} {_n(r.handover_rate)}" for r in rows)
    line = f"contended handovers/s, asyncio: {ours}"
    if sync is not None:
        line += f"; lockworker Lock (reused), 4 sync processes: {_n(sync.handover_rate)}"
    return [line]


def leader_line(results: list[LeaderHandover]) -> list[str]:
    """Each pairing's median leadership handover."""
    if not results:
        return []
    pairs = ", ".join(f"{r.kind} {_ms(r.median)}" for r in results)
    return [f"leadership handover, stop to election (median ms): {pairs}"]


def cycle_notes() -> list[str]:
    """The bullets under the uncontended table that read the asyncio rows."""
    return [
        "- **The asyncio rows** (`aio.`, `redis-py asyncio Lock`) run their sync twin's "
        "cycle awaited in one task on a `redis.asyncio` client, the whole timed loop "
        "inside one event loop, and sit right under that twin; the ratio column still "
        "divides by the sync redis-py Lock, so read an asyncio row against the row above "
        "it. Each asyncio class takes its twin's steps (the same scripts), so round trips "
        "and server commands match the sync row, and what differs is the client side: "
        "the event loop's cost per await, against redis-py's blocking socket calls.",
        "- `aio.Lock` and `redis-py asyncio Lock` are the asyncio pair of `lockworker "
        "Lock` and `redis-py Lock`; `aio.Semaphore` is `lockworker Semaphore`'s cycle "
        "(one permit of limit 2, its renewal a task rather than a thread).",
        "- **compute_once** has two rows per side. A **hit** reads a key the warm-up "
        "cached: one GET and the value decoded, the price of every call once a value is "
        "there. A **miss** asks for a new key every cycle: it looks, subscribes to the "
        "key's wake channel, takes the compute lock, looks again, computes (a constant "
        "here), stores the value with a publish, and releases, so the rate is the cost "
        "of filling the cache, not of a stampede (nobody else waits). "
        "`aio.compute_once` takes the same steps on `redis.asyncio`, its subscription "
        "shared through the loop's hub instead of a reader thread.",
        "- **The asyncio job cycle** (`lockworker aio.Worker`) is the `lockworker script` "
        "cycle awaited: `await worker.process(new_job_id)` in one task with an empty "
        "`async def on_acquired`, the same two scripts (acquire, complete) and so the same "
        "round trips and server commands; what it adds is a heartbeat task per job and the "
        "awaits.",
    ]


def leaders(results: list[LeaderHandover], trials: int) -> list[str]:
    """The leadership handover table, sync and asyncio leaders, and how to read it."""
    if not results:
        return []
    out = ["### Leadership: from a leader's stop to the next one's election", ""]
    add = out.append
    add(
        f"Two long-lived OS processes, a fresh leader name per trial, {trials} trials "
        "per pairing, interleaved. The holder's leader leads; the follower's leader of "
        f"the same name sees it (`on_locked`) and waits; {SETTLE * 1000:.0f} ms later "
        "the holder's `on_acquired` calls `leader.stop()` and returns. Latency = from "
        "that `stop()` to the start of the follower's `on_acquired` (its election): the "
        "holder's release, which publishes on the leader's wake channel, the follower's "
        "wake-up, its acquire, and the record of its term, three round trips in all. "
        f"`{SYNC}` is `lockworker.Leader` in the process's main thread, `{ASYNC}` is "
        "`lockworker.aio.Leader` in an event loop."
    )
    add("")
    add("| holder -> follower | median ms | min-max ms | trials |")
    add("|---|---:|---:|---:|")
    for r in results:
        low, high = spread(r.latencies)
        add(
            f"| {r.kind} | {_ms(r.median)} | {_ms(low)}-{_ms(high)} | {len(r.latencies)} |"
        )
    add("")
    add(
        f"Read the `{ASYNC} -> {ASYNC}` row against `{SYNC} -> {SYNC}`: both sides run "
        "the same contender loop and scripts, so the difference is where the wake-up "
        "lands (a sync follower's pub/sub reader thread wakes its waiting thread; an "
        "asyncio follower's hub task sets an event in the same loop) and the awaits on "
        "the way. The mixed rows hand one leadership between a sync and an asyncio "
        "process: a figure close to the unmixed rows means neither kind waits longer "
        "for the other."
    )
    add("")
    return out
