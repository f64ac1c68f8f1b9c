"""Section 5 of the page: a stream of jobs, lockworker's ``serve()`` beside consumer groups.

The section can be measured on its own (``python -m benchmarks --only stream``): then
it and its summary lines are put into the page a full run wrote
(:func:`benchmarks.report_failover.splice_into`).
"""

from __future__ import annotations

import math

from benchmarks.report_floor import floor_targets
from benchmarks.report_memory import (
    DAY_RATE,
    DAY_TARGET,
    FLAT,
    day_kept,
    day_line,
    memory,
    memory_flat,
    rss_line,
    server_flat,
)
from benchmarks.stream import (
    AIO_GROUP_3,
    ALL_READ,
    FANOUT,
    FANOUT_16,
    FLOOR_FANOUT,
    FLOOR_GROUP,
    GROUP_3,
    GROUP_3_ONE,
    PRIMARY_ONLY,
    TASKS_ONLY,
    THREADS_ONLY,
    Row,
    StreamSection,
    where,
)
from benchmarks.stream_children import BACKUP_DELAY, POLL
from benchmarks.stream_cluster import CONCURRENCY, MANY, ONE, PER_STREAM, ClusterRun, Topology
from benchmarks.stream_memory import DONE_TARGET

HEADING = "## 5. A stream of jobs: lockworker beside a consumer group"
SUMMARY_PREFIX = "- stream"
SERVE_TARGET = 0.8
GROUP_TARGET = 0.5
CORES_BUSY = 0.85
"""Share of the cores busy from which a row counts as bound by the cores."""
DETAILED = (FANOUT_16, GROUP_3, FLOOR_FANOUT, PRIMARY_ONLY, ALL_READ)


def _n(value: float, digits: int = 0) -> str:
    return "-" if math.isnan(value) else f"{value:,.{digits}f}"


def _verdict(ok: bool) -> str:
    return "met" if ok else "**not met**"


def _why(error: str) -> str:
    """A row's reason for having no figures: ``not available: ...`` or ``error: ...``."""
    return error if error.startswith("not available") else f"error: {error or 'none measured'}"


def _ratio(a: float, b: float) -> float:
    return a / b if b and not math.isnan(b) else float("nan")


def _fanout(section: StreamSection) -> list[Row]:
    """The ``serve()`` rows of a primary and two backups, sync and asyncio."""
    return [
        r for r in section.rows
        if r.contender.kind in ("serve", "aio") and r.contender.roles == FANOUT
    ]


def _label(row: Row) -> str:
    c = row.contender
    return f"{'asyncio, ' if c.kind == 'aio' else ''}concurrency {c.concurrency}"


def best_serve(section: StreamSection) -> Row | None:
    rows = [r for r in _fanout(section) if r.outcomes]
    return max(rows, key=lambda r: r.rate) if rows else None


def waits(row: Row) -> str:
    """How often the row's busiest process waited per job: its voluntary context
    switches (a thread waiting for a reply, for another thread, or for the interpreter
    lock), each a wake-up costing CPU and time."""
    return f"{row.cost.per_job(row.cost.busiest_switches):.1f} waits per job"


def bound(row: Row, cores: int) -> str:
    """What limited a row: the cores, the busiest process's one core, the handler, or the
    round trips of the protocol; and how often its busiest process waited per job."""
    return f"{_bound(row, cores)} (busiest process: {waits(row)})"


def _bound(row: Row, cores: int) -> str:
    busy, handler = row.busy_cores, row.handler_bound
    if busy >= CORES_BUSY * cores:
        return f"the cores ({busy:.1f} of {cores} busy)"
    if row.busiest_core >= CORES_BUSY:
        return (
            f"the busiest process's one core ({row.busiest_core:.2f} of a core busy: its "
            f"Python runs one thread at a time; {busy:.1f} of {cores} cores busy in all)"
        )
    seconds = row.cost.handler_seconds * 1000
    if row.rate >= 0.7 * handler:
        return (
            f"the handler (its round trip took {seconds:.2f} ms: at most {_n(handler)} jobs/s "
            f"at concurrency {row.contender.concurrency}; {busy:.1f} of {cores} cores busy)"
        )
    return (
        f"neither the cores ({busy:.1f} of {cores} busy), the busiest process's one core "
        f"({row.busiest_core:.2f} of a core busy) nor the handler ({seconds:.2f} ms: "
        f"{_n(handler)} jobs/s at most): the protocol's "
        f"{row.cost.per_job(row.cost.round_trips):.1f} round trips per job wait on the server"
    )


def ceiling(section: StreamSection, primary_rate: float) -> str:
    """What the threads-only and tasks-only rows say of the target: ``serve()`` runs each
    handler in a pool thread or a task, and those alone, with no protocol, cost this
    much."""
    said = []
    for name, kind in ((THREADS_ONLY, "threads"), (TASKS_ONLY, "asyncio tasks")):
        row = section.row(name)
        if row is None or not row.outcomes:
            continue
        said.append(
            f"{row.contender.concurrency} {kind} running only the handler, no protocol at "
            f"all, reach {_n(row.rate)} jobs/s = {_ratio(row.rate, primary_rate):.2f}x: the "
            f"ceiling of serving in {kind} here"
        )
    return "".join(f". {text[0].upper()}{text[1:]}" for text in said)


def floor(section: StreamSection, name: str, base: float) -> str:
    """What the floor row ``name`` says of a target whose base is ``base`` jobs/s: the
    least any protocol that keeps a lease and a state key per job costs here."""
    row = section.row(name)
    if row is None or not row.outcomes:
        return ""
    return (
        f". A lease and a state key per job and nothing else (plain redis-py, the floor "
        f"row) reach {_n(row.rate)} jobs/s = {_ratio(row.rate, base):.2f}x: the ceiling "
        "of any protocol that keeps per-job keys here"
    )


def targets(section: StreamSection) -> list[tuple[str, str, bool | None]]:
    """``(target, measured, met)``; ``met`` None when it could not be measured."""
    out: list[tuple[str, str, bool | None]] = []
    primary, every = section.row(PRIMARY_ONLY), section.row(ALL_READ)
    best = best_serve(section)
    if best is not None and primary is not None and primary.outcomes:
        ratio = _ratio(best.rate, primary.rate)
        out.append((
            f"`serve()` primary + 2 backups >= {SERVE_TARGET:g}x the primary-only consumer group",
            f"{_n(best.rate)} jobs/s ({_label(best)}) / "
            f"{_n(primary.rate)} = {ratio:.2f}x; bound by {bound(best, section.cores)}"
            f"{ceiling(section, primary.rate)}"
            f"{floor(section, FLOOR_FANOUT, primary.rate)}",
            ratio >= SERVE_TARGET,
        ))
    groups = [
        r for r in (section.row(GROUP_3), section.row(GROUP_3_ONE), section.row(AIO_GROUP_3))
        if r is not None
    ]
    measured = [r for r in groups if r.outcomes]
    group = max(measured, key=lambda r: r.rate) if measured else (groups[0] if groups else None)
    if group is not None and every is not None:
        if group.outcomes and every.outcomes:
            ratio = _ratio(group.rate, every.rate)
            out.append((
                f"shared group of 3 (`group=`) >= {GROUP_TARGET:g}x the all-read consumer group",
                f"{_n(group.rate)} ({_label(group)})"
                f" / {_n(every.rate)} jobs/s = {ratio:.2f}x; bound by "
                f"{bound(group, section.cores)}{floor(section, FLOOR_GROUP, every.rate)}",
                ratio >= GROUP_TARGET,
            ))
        else:
            out.append((
                f"shared group of 3 (`group=`) >= {GROUP_TARGET:g}x the all-read consumer group",
                _why(group.error or every.error), None,
            ))
    m = section.memory
    if m is not None and not m.error:
        out.append((
            f"a DONE record's server memory <= {DONE_TARGET} B",
            f"{_n(m.done_record)} B (`MEMORY USAGE` of its {m.done_keys} key; a bare key "
            f"of that name with a one-byte value and a TTL costs {_n(m.done_floor)} B)"
            + ("" if m.done_record <= DONE_TARGET else (
                f"; bound by the key's name and the value: one key per record costs "
                f"{_n(m.done_floor)} B here whatever it holds, and the value is "
                f"{_n(m.done_value)} B (the grammar's version, the outcome, the attempt, "
                "the finish time, the token and the owner, which latecomers, fencing and "
                "the views read) adds the rest")),
            m.done_record <= DONE_TARGET,
        ))
        out.append((
            f"a day at {DAY_RATE:,} jobs/s keeps <= 1 GiB of finished-job records with the "
            "defaults", day_line(m), day_kept(m) <= DAY_TARGET,
        ))
        served = server_flat(m)
        if served is not None:
            out.append((f"server memory added per job served stays flat (end <= {FLAT:g}x "
                        "middle)", served[1], served[0]))
        flat = memory_flat(m)
        if flat is not None:
            out.append(("the serving processes' resident memory stays flat (end <= "
                        f"{FLAT:g}x start)", rss_line(m), flat))
    out += floor_targets(section)
    for row in section.kills:
        if row.outcomes:
            o = row.outcomes[0]
            out.append((
                f"SIGKILL, {row.contender.name}: every job done at least once",
                f"{o.distinct} of {o.jobs}; {o.twice} ran twice; stall {_n(o.stall * 1000)} ms",
                o.at_least_once,
            ))
    return out


def summary(section: StreamSection | None) -> list[str]:
    if section is None:
        return []
    lines = []
    for target, measured, met in targets(section):
        verdict = "not measured" if met is None else _verdict(met)
        lines.append(f"stream: {target}: {measured}: {verdict}")
    cluster = section.cluster
    if cluster is not None:
        rates = ", ".join(
            f"{t.name} {_n(t.outcome.rate) if t.outcome else _why(t.error)}"
            for t in cluster.topologies
        )
        lines.append(f"stream, 3 streams through shared groups (jobs/s): {rates}")
    return lines


def _row_line(r: Row, section: StreamSection, base: float) -> str:
    c = r.contender
    name = f"{'lockworker ' if c.kind in ('serve', 'aio') else ''}{c.name}"
    if not r.outcomes:
        return f"| {name} | {len(c.roles)} | {_why(r.error)} | | | | | | | | | |"
    cost = r.cost
    low, high = min(r.rates), max(r.rates)
    once = "yes" if r.exactly_once else "**no** (" + ", ".join(
        f"{o.runs} runs of {o.distinct}" for o in r.outcomes) + ")"
    roles: dict[str, int] = {}
    for o in r.outcomes:
        for role, count in o.by_role.items():
            roles[role] = roles.get(role, 0) + count
    by = ", ".join(f"{role} {_n(count / len(r.outcomes))}" for role, count in roles.items())
    scripts = sum(cost.inside_scripts(name) for name in cost.server)
    return (
        f"| {name} | {len(c.roles)} | {_n(r.rate)} | {_n(low)}-{_n(high)} "
        f"| {_ratio(r.rate, base):.2f} | {once} | {by} "
        f"| {cost.per_job(cost.round_trips):.2f} | {cost.per_job(cost.server_commands):.2f} "
        f"| {cost.per_job(scripts):.2f} | {cost.per_job(cost.client_cpu) * 1e6:.0f} "
        f"/ {cost.per_job(cost.server_cpu) * 1e6:.0f} | {r.busy_cores:.2f} |"
    )


def _commands(r: Row) -> list[str]:
    cost = r.cost
    out = [f"**{r.contender.name}** ({_n(cost.jobs)} jobs over the rounds):", "",
           "| command | server calls / job | sent by the processes / job "
           "| run inside scripts / job | what it is for |", "|---|---:|---:|---:|---|"]
    for name, calls in sorted(cost.server.items(), key=lambda kv: -kv[1]):
        inside = cost.inside_scripts(name)
        purpose = where(name) or ("inside lockworker's scripts" if inside else "")
        out.append(
            f"| {name} | {cost.per_job(calls):.3f} | {cost.per_job(cost.sent.get(name, 0)):.3f} "
            f"| {cost.per_job(inside):.3f} | {purpose} |"
        )
    out.append("")
    return out


def _kills(section: StreamSection) -> list[str]:
    out = [
        "### A process killed mid-stream", "",
        f"The same contenders with a {section.kill_lease:g} s lease (lockworker's lease; "
        "the consumer groups' XAUTOCLAIM idle time): once a quarter of the jobs has run, "
        "the primary (or, where all read, the first member) gets SIGKILL. **first job "
        "after**: from the kill to the next job run by another process. **stall**: the "
        "longest gap between consecutive job runs from the last run before the kill to "
        f"the end. The run ends when every job has run or {section.cap:g} s after the kill.",
        "", "| contender | first job after | stall | every job at least once "
        "| exactly once | ran twice | jobs by role |", "|---|---:|---:|---|---|---:|---|",
    ]
    for r in section.kills:
        if not r.outcomes:
            out.append(f"| {r.contender.name} | {_why(r.error)} | | | | | |")
            continue
        o = r.outcomes[0]
        by = ", ".join(f"{role} {_n(count)}" for role, count in o.by_role.items())
        out.append(
            f"| {r.contender.name} | {_n(o.first_after * 1000)} ms | {_n(o.stall * 1000)} ms "
            f"| {'yes' if o.at_least_once else f'**no** ({o.distinct} of {o.jobs})'} "
            f"| {'yes' if o.exactly_once else 'no'} | {o.twice} | {by} |"
        )
    out.append("")
    return out


def _cluster_why(one: Topology, many: Topology, cores: int) -> str:
    def cpu(t: Topology) -> float:
        assert t.costs is not None
        return t.costs.per_job(t.costs.client_cpu + t.costs.server_cpu) * 1e6

    assert one.outcome is not None and many.outcome is not None
    win, lose = (many, one) if many.outcome.rate > one.outcome.rate else (one, many)
    saturated = all(t.busy_cores >= CORES_BUSY * cores for t in (one, many))
    assert win.costs is not None and lose.costs is not None
    return (
        f"**Why {win.name} wins here**: it spent {cpu(win):.0f} µs of CPU per job (processes + "
        f"servers) against {cpu(lose):.0f} µs, in {win.costs.per_job(win.costs.round_trips):.1f} "
        f"against {lose.costs.per_job(lose.costs.round_trips):.1f} round trips per job; "
        f"{many.busy_cores:.1f} of {cores} cores were busy on the cluster, "
        f"{one.busy_cores:.1f} on one server"
        + (", so the cores bound both and the cheaper job wins: masters add throughput only "
           "when they add cores (their own machines), and each job's keys hash to any master, "
           "so a process's steps go to all three." if saturated else
           ", so the cores did not bind both: the difference is the requests each job "
           "waits on (on a cluster, a process's steps go to the master of each job's key).")
    )


def _cluster(r: ClusterRun | None) -> list[str]:
    out = ["### Three streams through shared groups: 3 masters or 1 server", ""]
    if r is None:
        return [*out, "Not run.", ""]
    out.append(
        f"Three streams of {_n(r.jobs)} jobs each, each stream on its own master of a "
        f"{MANY} (its name chosen so), {PER_STREAM} processes per stream, each a member "
        f"of its stream's shared group (`serve(StreamSource(..., group=...), concurrency="
        f"{CONCURRENCY})`); then the same streams and processes on {ONE}."
    )
    out += ["", "| topology | jobs/s | exactly once | round trips / job | server commands / job "
            "| CPU µs / job, processes / servers | server CPU s per master | busy cores |",
            "|---|---:|---|---:|---:|---:|---|---:|"]
    for t in r.topologies:
        if t.outcome is None or t.costs is None:
            out.append(f"| {t.name} | {_why(t.error)} | | | | | | |")
            continue
        c = t.costs
        out.append(
            f"| {t.name} | {_n(t.outcome.rate)} | {'yes' if t.outcome.exactly_once else '**no**'} "
            f"| {c.per_job(c.round_trips):.2f} | {c.per_job(c.server_commands):.2f} "
            f"| {c.per_job(c.client_cpu) * 1e6:.0f} / {c.per_job(c.server_cpu) * 1e6:.0f} "
            f"| {', '.join(f'{s:.2f}' for s in t.per_master_cpu)} | {t.busy_cores:.2f} |"
        )
    out.append("")
    one, many = r.get(ONE), r.get(MANY)
    if one and many and one.outcome and many.outcome and one.costs and many.costs:
        out += [_cluster_why(one, many, r.cores), ""]
    return out


def section(s: StreamSection | None, chart: str | None = None) -> list[str]:
    out = [HEADING, ""]
    if s is None:
        return [*out, "Not run.", ""]
    add = out.append
    add(
        f"A backlog of {_n(s.jobs)} jobs in one stream (the entries `lockworker.submit` "
        "writes), served by OS processes on the same server; each job's handler makes one "
        "round trip that records who ran it (an RPUSH). lockworker: a primary and two "
        f"backups (`role=\"backup\"`, `backup_delay={BACKUP_DELAY:g}`) each reading every "
        "entry (fan-out), or members of one shared group (`group=`), serving with "
        "`Worker.serve(StreamSource(...), concurrency=c)` (the asyncio row: "
        "`lockworker.aio.Worker`). The consumer groups, plain redis-py: XREADGROUP COUNT "
        "100, the handler for each entry in turn, one XACK per batch; where only the "
        f"primary reads, the two backups send XAUTOCLAIM and XINFO CONSUMERS every {POLL:g} s "
        "and read too once the primary has been idle longer than the lease. The threads-only "
        "and tasks-only rows read as that group does and run each handler in a pool thread "
        "or an asyncio task, as `serve()` does, with nothing else: what serving in threads "
        "or tasks costs on this machine before any protocol. The floor rows keep a "
        "lease and a state key per job and nothing else, in plain redis-py: a process "
        "claims 16 jobs in one script (GET state, SET lease NX PX, SET state), runs their "
        "handlers in turn and marks them DONE in one script (GET lease, SET state, DEL "
        "lease); a fan-out backup reads every entry and looks at 16 jobs per script "
        "until they are DONE. No attempt count, history, fencing token, wake-up or "
        "takeover: the least any protocol that keeps per-job keys costs here. Time runs from "
        "the start signal until every job has run; jobs/s is the median over "
        f"{s.rounds} round(s), the contenders interleaved in a rotating order."
    )
    add("")
    add(
        "lockworker runs its default `protocol=\"script\"`, whose steps batch: the "
        "grants, completions and renewals of a process's jobs share round trips (group "
        "commit of the per-job scripts; a serving primary claims the jobs it reads in "
        "batches and group-commits their DONE through its lane), and a backup behind a "
        "live primary looks at its held-back deliveries in one round trip per batch "
        "(docs/protocol.md, \"Batches\"). At concurrency 1 the sync `serve()` does "
        "the lane's work in its serving thread: it claims the entries read ahead (up "
        "to 16) in one round trip and runs their handlers in turn, with no thread "
        "hand-off per job. "
        "`protocol=\"txn\"` (WATCH/MULTI/EXEC) sends each step alone and is not measured "
        "here."
    )
    add("")
    add(
        "**round trips / job**: requests the serving processes waited on (their socket "
        "writes, counted in each process: a pipeline or transaction counts once), the "
        "handler's one included. **server commands / job**: the `INFO commandstats` delta "
        "(the watching parent's LLEN/LRANGE and INFO left out), which counts the commands a "
        "script runs as well as its EVALSHA; **in scripts** is the part run inside scripts "
        "(server calls less those the processes sent). CPU per job: the processes' "
        "`time.process_time()` and the server's `INFO cpu`. **busy cores**: both CPU "
        f"figures over the wall time ({s.cores} cores)."
    )
    add("")
    primary = s.row(PRIMARY_ONLY)
    base = primary.rate if primary is not None and primary.outcomes else float("nan")
    add("| contender | processes | jobs/s | range | x primary-only group | exactly once "
        "| jobs by role (per round) | round trips / job | server commands / job "
        "| in scripts / job | CPU µs / job, processes / server | busy cores |")
    add("|---|---:|---:|---:|---:|---|---|---:|---:|---:|---:|---:|")
    for r in s.rows:
        add(_row_line(r, s, base))
    add("")
    if chart:
        add(f"![jobs/s per contender]({chart})")
        add("")
    add("**Targets** (from this run's figures):")
    add("")
    add("| target | measured | verdict |")
    add("|---|---|---|")
    for target, measured, met in targets(s):
        add(f"| {target} | {measured} | {'not measured' if met is None else _verdict(met)} |")
    add("")
    add("**Where the bound lies**, per `serve()` row: " + "; ".join(
        f"{_label(r)}: {bound(r, s.cores)}"
        for r in _fanout(s) if r.outcomes
    ) + ".")
    add("")
    add(
        "**Waits per job**: the busiest process's voluntary context switches per job: "
        "a thread waiting for a reply, for a job handed over by another thread, or for "
        "the interpreter lock (its Python runs one thread at a time). Each is a wake-up "
        "that costs CPU and time; a process that runs its jobs in one thread hardly "
        "waits. Beside the rows above: " + "; ".join(
            f"{r.contender.name}: {waits(r)}"
            for r in (s.row(PRIMARY_ONLY), s.row(THREADS_ONLY), s.row(TASKS_ONLY))
            if r is not None and r.outcomes
        ) + "."
    )
    add("")
    add("### Where each job's commands go")
    add("")
    for name in DETAILED:
        r = s.row(name)
        if r is not None and r.outcomes:
            out.extend(_commands(r))
    out.extend(_kills(s))
    out.extend(memory(s.memory))
    out.extend(_cluster(s.cluster))
    return out
