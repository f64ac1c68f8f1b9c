"""The page's sections under load: contended locks, scale, the marketplace, masters."""

from __future__ import annotations

from benchmarks.contended import Contended
from benchmarks.market import BOOK_SECONDS, MarketRun
from benchmarks.masters import CONCURRENCY, PROCESSES, MastersRun
from benchmarks.scale import STATUS_TARGET, ScaleRun


def _n(value: float, digits: int = 0) -> str:
    return f"{value:,.{digits}f}"


def contended(results: list[Contended], seconds: float, chart: str | None) -> list[str]:
    out = ["## 2. Contended: processes on one lock", ""]
    add = out.append
    add(
        f"Each process loops acquire -> `GET counter; SET counter n+1` -> release for "
        f"{seconds:g} s, all starting at one instant; 4 processes on 2 cores, the server on "
        "the same cores, a 5 s lease. The value `n` each section read orders the sections "
        "globally, so **handovers/s** counts sections whose process differs from the "
        "previous section's (the lock really changed hands), while **sections/s** counts "
        "every pass, including a process re-taking the lock it just released. **shares** "
        "are the sections per process (min-max, and the largest distance from the mean). "
        "**exclusive**: the counter's final value equals the number of sections and no "
        "value was read twice (a lost update would show). One run of each contender, "
        "one after another, on the same long-lived processes."
    )
    add("")
    add(
        "| contender | processes | waiter waits by | sections/s | handovers/s "
        "| shares min-max | max deviation | counter = sections | release errors "
        "| server commands / section | server CPU µs / section |"
    )
    add("|---|---:|---|---:|---:|---:|---:|---|---:|---:|---:|")
    for r in results:
        low, high = min(r.shares), max(r.shares)
        if r.kind.semaphore:
            handovers = "-"
            check = (
                f"{'yes' if r.exclusive else '**no**'} ({_n(r.final)}); "
                f"at most {r.peak_inside} inside (limit 2)"
            )
        else:
            handovers = _n(r.handover_rate)
            check = (
                f"{'yes' if r.exclusive else '**no**'} ({_n(r.final)} = {_n(r.sections)}"
                f"{f', {r.duplicates} lost updates' if r.duplicates else ''})"
            )
        add(
            f"| {r.kind.name} | {r.kind.holders} | {r.kind.waits_by} | {_n(r.rate)} "
            f"| {handovers} | {_n(low)}-{_n(high)} | {r.max_deviation:.0f} % | {check} "
            f"| {r.release_errors} | {r.commands_per_section:.1f} "
            f"| {r.server_us_per_section:.0f} |"
        )
    add("")
    add(
        "The semaphore lets 2 of its 6 processes in at once, so its section is "
        "`INCR inside; INCR sections; DECR inside` and the check is the peak of `inside`. "
        "The Redlock rows take the lock on 3 masters (quorum 2), the counter lives on the "
        "first. A lock whose waiters poll or sleep (redis-py's 0.1 s, pottery's random "
        "0-0.2 s) passes mostly to the process that just released it: many sections, few "
        "handovers, uneven shares; lockworker's Redlock wakes its waiters on the release "
        "(its random pause is the fallback), so most of its sections change hands, while "
        "a waiter still races the releaser. Server commands count those a "
        "script runs too (the Redlock rows: the first master only). On this machine every "
        "round trip costs the client and the server far more CPU than the commands "
        "themselves, and 4 processes and the server share 2 cores, so sections/s follow "
        "the work per section: lockworker's `Lock` hands over on every release and wakes "
        "only the next holder, which needs no request of its own to take the lock, but a "
        "process coming back queues and blocks in one round trip (its look and its pop "
        "pipelined, once its last acquisition found the lock held)."
    )
    add("")
    add(
        "**The asyncio rows** run the same section awaited, each holder a task with a "
        "lock object of its own on a `redis.asyncio` client, and read against "
        "`lockworker Lock (reused)`: `aio.Lock (4 tasks, 1 process)` puts the four "
        "holders in one event loop of one process (a handover between two tasks counts "
        "as one between processes; shares are per task), `aio.Lock (4 processes)` is the "
        "sync row's setting with asyncio processes, and `Lock + aio.Lock (2 + 2 "
        "processes)` has two sync and two asyncio processes in one queue, the handover "
        "from either kind to the other. `redis-py asyncio Lock (4 tasks, 1 process)` is "
        "the peer's asyncio lock in the same setting: its waiters poll, as its sync "
        "twin's do."
    )
    add("")
    if chart:
        add(f"![contended handovers/s and sections/s per contender]({chart})")
        add("")
    return out


def scale(result: ScaleRun | None) -> list[str]:
    out = ["## 6. Scale: jobs in flight", ""]
    add = out.append
    if result is None:
        add("Not run.")
        add("")
        return out
    r = result
    add(
        f"{_n(r.jobs)} jobs held at once by {r.processes} processes ("
        f"`Worker.serve(ids, concurrency=share)` with a blocking `on_acquired`, 30 s "
        "leases renewed by each process's heartbeat), then every job settled DONE."
    )
    add("")
    add("| measure | value |")
    add("|---|---:|")
    add(f"| jobs held at once | {_n(r.jobs)} |")
    add(f"| time until all were held | {r.ramp_seconds:.1f} s |")
    add(
        f"| server memory per held job (`used_memory` delta / jobs) "
        f"| {_n(r.bytes_per_held_job)} B |"
    )
    add(
        f"| of which the held jobs' keys (client buffers excluded) "
        f"| {_n(r.bytes_per_held_data)} B |"
    )
    add(f"| server memory per DONE record, after all settled | {_n(r.bytes_per_done_job)} B |")
    status = (
        f"{r.status_seconds:.2f} s, {_n(r.status_rows)} rows"
        + (f" (error: {r.status_error})" if r.status_error else "")
    )
    add(f"| `lockworker status --namespace ...` wall time (new interpreter) | {status} |")
    add(f"| of which start-up (`lockworker --version`, same interpreter) "
        f"| {r.startup_seconds:.2f} s |")
    add(
        f"| its collection step alone (SCAN + batched reads) | {r.collect_seconds:.2f} s, "
        f"{_n(r.collect_rows)} rows |"
    )
    add("")
    add(
        "A held job keeps its lease and state keys, and a connection of its process "
        "(each job runs on its own thread, with its own connection from the pool), whose "
        "server-side buffers dominate the first figure; the second excludes the clients' "
        f"memory (`mem_clients_normal`). Target for `status`: under {STATUS_TARGET:g} s "
        f"for every job: {'met' if r.status_ok else '**not met**'}."
    )
    add("")
    return out


def market(results: list[MarketRun], seconds: float) -> list[str]:
    out = ['## 7. The "Redis in Action" marketplace', ""]
    add = out.append
    add(
        "Chapter 6.2 of *Redis in Action* (J. Carlson, Manning 2013) lists and buys items "
        "in a shared market, first with WATCH/MULTI/EXEC alone, then under one coarse "
        "lock, and reports 60 s runs. Here each setup runs "
        f"{seconds:g} s in separate OS processes (listers, buyers), with `lockworker.Lock` "
        "as the lock; the \"per 60 s\" columns scale the measured counts by "
        f"{BOOK_SECONDS / seconds:g}, which assumes a steady rate (the book's runs were "
        "longer, on other hardware, with Redis 2.6-era clients): compare the shape (how "
        "retries and waits grow with contention, and what the lock changes), not the "
        "absolute numbers. The book's figures are given as commonly cited; they were not "
        "checked against the book's text here."
    )
    add("")
    add(
        "| lock | listers/buyers | listed | bought | purchase retries | avg wait per purchase "
        "| listed per 60 s | bought per 60 s | retries per 60 s "
        "| book: listed / bought / retries / wait |"
    )
    add("|---|---|---:|---:|---:|---:|---:|---:|---:|---|")
    for r in results:
        book = " / ".join(r.book)
        add(
            f"| {'lockworker Lock' if r.locked else 'none (WATCH)'} | {r.listers}/{r.buyers} "
            f"| {_n(r.listed)} | {_n(r.bought)} | {_n(r.retries)} | {r.wait_ms:,.1f} ms "
            f"| {_n(r.per_minute(r.listed))} | {_n(r.per_minute(r.bought))} "
            f"| {_n(r.per_minute(r.retries))} | {book} |"
        )
    add("")
    add(
        "Without a lock every listing changes the watched market, so a buyer's "
        "transaction fails and retries while listers are busy, and more listers starve it; "
        "with the lock, purchases no longer retry (the buyer's own hash is the only "
        "watched key left) and take turns with listings, at the cost of fewer listings. "
        "A purchase still running when the window closes is given up (the book gave up "
        "after 10 s)."
    )
    add("")
    return out


def masters_summary(r: MastersRun) -> str:
    rates = ", ".join(f"{name} {_n(rate)} jobs/s" for name, rate in r.rates.items())
    return (
        f"beyond one server ({PROCESSES} processes): {rates}; {_n(r.held)} jobs in flight "
        f"on the cluster, `lockworker status` {r.status_seconds:.2f} s"
    )


def masters(result: MastersRun | None) -> list[str]:
    out = ["## 8. Beyond one server: a 3-master cluster", ""]
    add = out.append
    if result is None:
        add("Not run.")
        add("")
        return out
    r = result
    add(
        f"{PROCESSES} processes serve {_n(r.jobs)} jobs between them "
        f"(`Worker.serve(ids, concurrency={CONCURRENCY})`, an empty `on_acquired`), "
        "first against one server, then against a Redis Cluster of 3 masters started "
        "from the same binary on the same machine (`lockworker.testing.Cluster`)."
    )
    add("")
    add("| topology | jobs/s |")
    add("|---|---:|")
    for name, rate in r.rates.items():
        add(f"| {name} | {_n(rate)} |")
    add("")
    if r.held:
        spread_ = ", ".join(_n(n) for n in r.held_per_master)
        add(
            f"Then {_n(r.held)} jobs held at once on the cluster (each hook blocks): taken "
            f"in {r.ramp_seconds:.1f} s, spread over the masters as {spread_}; "
            f"`lockworker status --redis redis+cluster://...` listed {_n(r.status_rows)} of "
            f"them in {r.status_seconds:.2f} s (one script per hash slot, every master "
            "scanned)."
        )
        add("")
    if r.error:
        add(f"Error: {r.error}")
        add("")
    add(
        "All the servers share this machine's 2 cores with the 8 client processes, so "
        "more masters add no CPU here: the cluster's figure shows the cost of routing "
        "(the client finds each job's master by its hash slot) rather than the growth a "
        "cluster brings when its masters have machines of their own."
    )
    add("")
    return out
