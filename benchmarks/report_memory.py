"""The memory part of section 5: a large backlog served, the server's memory per job and
the serving processes' resident memory, and what a DONE record costs."""

from __future__ import annotations

from benchmarks.stream_memory import DONE_TARGET, MemoryRun
from lockworker.serving.settings import DONE_RETENTION

DAY_RATE = 1000
"""Jobs per second of the day the page sizes: issue's yardstick of a busy fleet."""
DAY_TARGET = 2**30
"""A day at :data:`DAY_RATE` keeps at most this many bytes of finished-job records."""


def day_kept(m: MemoryRun) -> float:
    """Bytes of finished-job records a day of serving at :data:`DAY_RATE` jobs/s keeps
    with the defaults: the records of the last ``done_retention`` (an hour), each as
    large as a DONE record measured here (a day's records beyond the window expired)."""
    return DAY_RATE * min(86400.0, DONE_RETENTION) * m.done_record


def day_line(m: MemoryRun) -> str:
    kept = day_kept(m)
    return (f"{kept / 2**30:.2f} GiB ({DAY_RATE:,} jobs/s x {DONE_RETENTION:,.0f} s of "
            f"`done_retention` x {_n(m.done_record)} B a record)")

FLAT = 1.25
"""A memory figure stays flat if its largest sample is at most this times its smallest."""


def _n(value: float, digits: int = 0) -> str:
    return f"{value:,.{digits}f}"


def _why(error: str) -> str:
    return error if error.startswith("not available") else f"error: {error}"


def _verdict(ok: bool) -> str:
    return "met" if ok else "**not met**"


def server_flat(m: MemoryRun) -> tuple[bool, str] | None:
    """Serving a job late costs the server what it cost midway (the start is left out:
    a few hundred jobs in, fixed costs such as the scripts' cache still weigh)."""
    middle, end = m.at(0.5), (m.samples[-1] if m.samples else None)
    if middle is None or end is None:
        return None
    a, b = m.per_served(middle), m.per_served(end)
    return b <= FLAT * a, f"middle {_n(a)} B, end {_n(b)} B per job served"


def memory_flat(m: MemoryRun) -> bool | None:
    start, end = m.at(0.05), (m.samples[-1] if m.samples else None)
    if start is None or end is None:
        return None
    return all(end.rss[k] <= FLAT * start.rss[k] for k in start.rss if start.rss[k])


def rss_line(m: MemoryRun) -> str:
    points = [m.at(0.05), m.at(0.5), m.samples[-1] if m.samples else None]
    parts = []
    for name in ("primary", "backup 1", "backup 2"):
        values = [p.rss.get(name, 0) / 2**20 for p in points if p is not None]
        parts.append(f"{name} " + " / ".join(f"{v:.1f}" for v in values) + " MiB")
    return "start / middle / end: " + "; ".join(parts)


def memory(m: MemoryRun | None) -> list[str]:
    out = ["### Memory: a large backlog served", ""]
    if m is None:
        return [*out, "Not run.", ""]
    out.append(
        f"{_n(m.jobs)} jobs backlogged in one stream, then served by a primary and two "
        "backups (`serve()`, concurrency 16; the handler's log on another server). Server "
        "memory per job = (`used_memory` - `used_memory` before the backlog) / jobs. "
        "Resident memory: each serving process's `VmRSS`, sampled every 0.25 s; start = "
        "the sample nearest 5 % of the jobs served, middle = 50 %, end = the last."
    )
    out.append("")
    if m.error:
        return [*out, _why(m.error), ""]
    start, middle, end = m.at(0.05), m.at(0.5), m.samples[-1] if m.samples else None
    out += ["| measure | value |", "|---|---:|",
            f"| jobs served in | {m.seconds:.1f} s |",
            "| server memory per job, backlogged (before serving) "
            f"| {_n(m.per_job(m.backlogged))} B |"]
    for label, point in (("start", start), ("middle", middle), ("end", end)):
        if point is not None:
            out.append(f"| server memory per job of the backlog, {label} ({_n(point.served)} "
                       f"served) | {_n(m.per_job(point.used))} B |")
    for label, point in (("start", start), ("middle", middle), ("end", end)):
        if point is not None:
            out.append(f"| server memory added per job served, clients' buffers left out, "
                       f"{label} | {_n(m.per_served(point))} B |")
    out.append(f"| server memory per job, processes stopped | {_n(m.per_job(m.after))} B |")
    out.append(f"| a DONE record (`MEMORY USAGE`, {m.done_keys}) | {_n(m.done_record)} B "
               f"(target <= {DONE_TARGET} B: {_verdict(m.done_record <= DONE_TARGET)}) |")
    out.append(f"| a bare key of the same name, a one-byte value and the same TTL "
               f"(`MEMORY USAGE`): one key per record costs at least | "
               f"{_n(m.done_floor)} B |")
    out.append(f"| a day at {DAY_RATE:,} jobs/s keeps, with the defaults | {day_line(m)} "
               f"(target <= 1 GiB: {_verdict(day_kept(m) <= DAY_TARGET)}) |")
    out.append(f"| serving processes' resident memory | {rss_line(m)} |")
    out.append("")
    return out
