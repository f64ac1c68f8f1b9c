"""Render one benchmark run as docs/benchmarks.md."""

from __future__ import annotations

from dataclasses import dataclass, field

from benchmarks import (
    outsider,
    report_aio,
    report_failover,
    report_handover,
    report_load,
    report_stream,
    report_views,
)
from benchmarks.common import Machine, median, spread
from benchmarks.contended import Contended
from benchmarks.cycle import BASELINE, CycleResult
from benchmarks.failover import Handover, Takeover
from benchmarks.leaders import LeaderHandover
from benchmarks.market import MarketRun
from benchmarks.masters import MastersRun
from benchmarks.report_handover import HANDOVER_TARGET_MS, NEAR, TAKEOVER_TARGET_MS
from benchmarks.scale import ScaleRun
from benchmarks.stream import StreamSection
from benchmarks.views import ViewsSection

CYCLE_TARGET = 1.0
LOCK_TARGET = 1.0
HANDOVERS_TARGET = 1.5


@dataclass(frozen=True)
class Settings:
    """How the run was made, printed with its figures."""

    command: str
    rounds: int
    seconds: float
    handover_trials: int
    takeover_trials: int
    peer_takeover_trials: int
    takeover_lease: float
    contended_seconds: float = 5.0
    stream_jobs: int = 5_000
    stream_rounds: int = 3
    stream_kill_lease: float = 2.0
    stream_cap: float = 30.0  # s a stream's SIGKILL run waits at most after the kill
    stream_memory_jobs: int = 100_000
    stream_cluster_jobs: int = 5_000  # per stream of the 3-stream cluster rows
    scale_jobs: int = 10_000
    market_seconds: float = 3.0
    masters_jobs: int = 4_000
    failover_jobs: int = 4_000
    failover_cap: float = 30.0
    """Seconds the failover rows wait at most after the primary's signal."""
    failover_lease: float = 2.0
    peer_jobs: int = 5_000
    peer_bound: float = 120.0
    """Seconds a killed worker's job is watched for its rerun."""
    peer_hold: float = 30.0
    """Seconds that job works."""
    views_jobs: tuple[int, ...] = (1_000_000, 10_000_000)
    """Finished jobs on the server of each size of section 10 (views)."""
    views_runs: int = 5
    peer_side_by_side: bool = False
    """The killed-job trials run during the jobs/s rows (a quick run's shortcut)."""
    wall_seconds: float = 0.0


@dataclass(frozen=True)
class Run:
    machine: Machine
    settings: Settings
    cycles: list[CycleResult]
    overhead_us: float
    handovers: list[Handover]
    takeovers: list[Takeover]
    missing: list[str]
    """Optional peers left out because they are not installed."""
    contended: list[Contended] = field(default_factory=list)
    streams: StreamSection | None = None
    scale: ScaleRun | None = None
    market: list[MarketRun] = field(default_factory=list)
    masters: MastersRun | None = None
    leaders: list[LeaderHandover] = field(default_factory=list)
    failover: report_failover.FailoverSection | None = None
    outsiders: list[outsider.OutsiderResult] = field(default_factory=list)
    views: ViewsSection | None = None
    """The contended section measured by fresh processes (benchmarks/outsider.py)."""
    charts: dict[str, str] = field(default_factory=dict)
    """Chart kind ("handovers", "takeover", "stream") -> file name beside the page."""

    def baseline(self) -> CycleResult:
        return next(result for result in self.cycles if result.name == BASELINE)

    def cycle(self, name: str) -> CycleResult:
        return next(result for result in self.cycles if result.name == name)


def _n(value: float, digits: int = 0) -> str:
    return f"{value:,.{digits}f}"


def _ms(seconds: float, digits: int = 1) -> str:
    return f"{seconds * 1000:,.{digits}f}"


def _verdict(ok: bool) -> str:
    return "met" if ok else "**not met**"


def _cost(result: CycleResult) -> str:
    return (
        f"{result.round_trips:.2f} round trips, {result.server_commands:.1f} server commands, "
        f"{result.client_us:.0f} µs client CPU per op"
    )


def _ratio_target(run: Run, name: str, target: float, what: str) -> str:
    base = run.baseline()
    result = run.cycle(name)
    ratio = result.rate / base.rate
    line = (
        f"{what}: {_n(result.rate)} ops/s = {ratio:.2f}x redis-py Lock ({_n(base.rate)}/s); "
        f"target >= {target:g}x: {_verdict(ratio >= target)}"
    )
    if ratio < target:
        line += f" (measured: {_cost(result)}; redis-py Lock: {_cost(base)})"
    return line


def _handover_targets(run: Run) -> list[str]:
    return [*handover_targets(run.contended),
            *outsider.summary(run.outsiders, HANDOVERS_TARGET)]


def handover_targets(contended: list[Contended]) -> list[str]:
    """The contended Lock rows against python-redis-lock, one line each."""
    by_name = {r.kind.name: r for r in contended}
    peer = by_name.get("python-redis-lock")
    lines = []
    for name in ("lockworker Lock (reused)", "lockworker Lock (new object per use)"):
        ours = by_name.get(name)
        if ours is None or peer is None:
            continue
        ratio = ours.handover_rate / peer.handover_rate if peer.handover_rate else float("nan")
        line = (
            f"contended handovers/s, {name}: {_n(ours.handover_rate)} = {ratio:.2f}x "
            f"python-redis-lock ({_n(peer.handover_rate)}); target >= {HANDOVERS_TARGET:g}x: "
            f"{_verdict(ratio >= HANDOVERS_TARGET)}"
        )
        if not ratio >= HANDOVERS_TARGET:
            line += (
                f" (measured: {_n(ours.rate)} sections/s of which {_n(ours.handover_rate)} "
                f"changed hands; python-redis-lock {_n(peer.rate)} sections/s, "
                f"{_n(peer.handover_rate)} changed hands; bound by the work of a handover: "
                f"{ours.commands_per_section:.1f} server commands and "
                f"{ours.server_us_per_section:.0f} µs of server CPU per section against "
                f"python-redis-lock's {peer.commands_per_section:.1f} and "
                f"{peer.server_us_per_section:.0f} µs: a FIFO queue that hands the lock to "
                "the longest waiter every time (the release grants it in a script and wakes "
                "it on a list of its own, which it BLPOPs), where python-redis-lock lets "
                "whichever waiter wakes first take it; the table below has each one's "
                "commands)"
            )
        lines.append(line)
    return lines


def summary(run: Run) -> list[str]:
    """The headline figures and targets, one line each (printed by the command, too)."""
    txn = run.cycle("lockworker txn")
    base = run.baseline().rate
    lines = [
        _ratio_target(run, "lockworker Lock", LOCK_TARGET, "uncontended Lock acquire+release"),
        _ratio_target(
            run, "lockworker script", CYCLE_TARGET, "Worker job cycle (script protocol)"
        ),
        f"Worker job cycle (txn protocol): {_n(txn.rate)} jobs/s = {txn.rate / base:.2f}x "
        "redis-py Lock",
        *report_aio.cycle_lines(run.cycles),
        *_handover_targets(run),
        *report_aio.contended_line(run.contended),
    ]
    for result in run.contended:
        if not result.exclusive:
            lines.append(f"MUTUAL EXCLUSION BROKEN: {result.kind.name}")
    peer = next((h for h in run.handovers if h.kind == "python-redis-lock"), None)
    for handover in run.handovers:
        if handover.kind == "lockworker":
            ok = handover.median * 1000 <= HANDOVER_TARGET_MS * NEAR
            low, high = spread(handover.latencies)
            why = f"measured range {_ms(low, 2)}-{_ms(high, 2)} ms"
            if peer is not None:
                why += (
                    f"; python-redis-lock {_ms(peer.median, 2)} ms in the same run: two round "
                    "trips each, plus lockworker's failure handling before the release and "
                    "the hop from the backup's wake-up thread to its waiting thread"
                )
            line = (
                f"handover after a failed attempt: median {_ms(handover.median, 2)} ms; "
                f"target ~{HANDOVER_TARGET_MS:g} ms (<= {HANDOVER_TARGET_MS * NEAR:g}): "
                f"{_verdict(ok)}" + ("" if ok else f" ({why})")
            )
            if peer is not None:
                line += (
                    f"; target no slower than python-redis-lock ({_ms(peer.median, 2)} ms "
                    f"in the same run): {_verdict(handover.median <= peer.median)}"
                    + ("" if handover.median <= peer.median or not ok else f" ({why})")
                )
            lines.append(line)
    lines.extend(report_aio.leader_line(run.leaders))
    for takeover in run.takeovers:
        if takeover.kind == "lockworker":
            beyond = median(takeover.beyond)
            ok = beyond * 1000 <= TAKEOVER_TARGET_MS * NEAR
            low, high = spread(takeover.beyond)
            lines.append(
                f"takeover after SIGKILL: median {_ms(median(takeover.latencies), 0)} ms, "
                f"{_ms(beyond, 1)} ms beyond the lease; target ~{TAKEOVER_TARGET_MS:g} ms "
                f"(<= {TAKEOVER_TARGET_MS * NEAR:g}): {_verdict(ok)}"
                + ("" if ok else f" (measured range {_ms(low, 1)}-{_ms(high, 1)} ms)")
            )
    lines.extend(report_stream.summary(run.streams))
    if run.masters is not None and run.masters.rates:
        lines.append(report_load.masters_summary(run.masters))
    if run.scale is not None:
        sc = run.scale
        lines.append(
            f"scale: {_n(sc.jobs)} jobs held, {_n(sc.bytes_per_held_data)} B of keys per job; "
            f"`lockworker status` {sc.status_seconds:.2f} s; target < 1 s: "
            f"{_verdict(sc.status_ok)}"
            + ("" if sc.status_ok else (
                f" (measured: {sc.startup_seconds:.2f} s of it is the interpreter's start "
                f"and imports, `lockworker --version`; collecting the rows "
                f"{sc.collect_seconds:.2f} s)"
            ))
        )
    if run.failover is not None:
        lines.extend(report_failover.summary(run.failover))
    lines.extend(report_views.summary(run.views))
    return lines


def render(run: Run) -> str:
    m, s = run.machine, run.settings
    base = run.baseline().rate
    out: list[str] = []
    add = out.append
    add("# Benchmarks")
    add("")
    add("<!-- Written by `python -m benchmarks`; edit benchmarks/report.py, not this file. -->")
    add("")
    add(
        "How fast lockworker's locks and jobs run, alone and contended, hand over after a "
        "failure and take over after a crash, next to the Redis locks people already use "
        "and (section 9) the worker frameworks on a Redis broker (RQ, Celery, Dramatiq, "
        "arq, saq, streaq, taskiq-redis, huey), all measured in one run against servers "
        "that the run started itself (one; three for Redlock). Re-run with:"
    )
    add("")
    add("```")
    add("pip install -e '.[bench]'   # the peers, hiredis and a server binary")
    add(s.command)
    add("python -m benchmarks --only stream   # or failover: section 5 (9) alone, into this page")
    add(report_views.RERUN)
    add("```")
    add("")
    add("## Summary")
    add("")
    for line in summary(run):
        add(f"- {line}")
    add("")
    add("## Machine")
    add("")
    add("| | |")
    add("|---|---|")
    add(f"| date | {m.date} |")
    add(f"| cores (nproc) | {m.cores} |")
    add(f"| CPU | {m.cpu} |")
    add(f"| Python | {m.python} |")
    add(f"| server | `{m.server}` (loopback, `--save \"\" --appendonly no`, default config) |")
    add(f"| redis-py | {m.redis_py} (hiredis {m.hiredis}) |")
    add(f"| peers | {m.peers} |")
    add(f"| lockworker | {m.lockworker}; matplotlib {m.matplotlib} (charts) |")
    add(f"| run | {s.wall_seconds:.0f} s wall |")
    add(f"| machine load before the run (1/5/15 min) | {m.load} |")
    add("")
    add(
        "**Noise.** This is a small shared machine (the figures above), on which other "
        "work, test suites included, may run at the same time as the benchmark; the "
        "client, the server and those share the same cores. Absolute figures move by "
        "tens of percent from run to run. That is why every contender runs in the same "
        "run, against the same server, interleaved round by round: compare figures "
        "within this page, not across runs or machines."
    )
    add("")
    if run.missing:
        add(
            f"Left out (not installed): {', '.join(run.missing)}. "
            "`pip install -e '.[bench]'` installs every peer."
        )
        add("")
    add("## 1. Uncontended: locks and job cycle")
    add("")
    add(
        f"One client runs cycles back to back for {s.seconds:g} s per contender and round; "
        f"{s.rounds} short rounds rather than a few long ones, the contenders interleaved "
        "in a rotating order, so that a burst of other work on the machine hits all of "
        "them alike and a median over many rounds shrugs it off. Each asks for a "
        "10 s lease. jobs/s is the median over the rounds, with the range over the rounds "
        "beside it; the ratio divides the medians, and \"per round\" gives the range of "
        "the ratios taken round by round (contenders close in time). Round "
        "trips are the client's socket writes (a pipeline or MULTI/EXEC block counts once); "
        "server commands are the `INFO commandstats` delta, which counts the commands a Lua "
        "script runs as well as the EVALSHA itself. CPU per job: the benchmark process's "
        "`time.process_time()` and the server's `INFO cpu` (user + system), both over "
        "the measured cycles."
    )
    add("")
    add(
        "| contender | one cycle | ops/s (median) | range | x redis-py Lock | per round "
        "| round trips / op | server commands / op | client CPU µs / op "
        "| server CPU µs / op |"
    )
    add("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    base_rates = run.baseline().rates
    for result in run.cycles:
        low, high = spread(result.rates)
        ratio_low, ratio_high = spread(
            [rate / b for rate, b in zip(result.rates, base_rates, strict=True)]
        )
        add(
            f"| {result.name} | {result.what} | {_n(result.rate)} | {_n(low)}-{_n(high)} "
            f"| {result.rate / base:.2f} | {ratio_low:.2f}-{ratio_high:.2f} "
            f"| {result.round_trips:.2f} | {result.server_commands:.2f} "
            f"| {result.client_us:.0f} | {result.server_us:.0f} |"
        )
    add("")
    add(
        f"lockworker's own Python costs {run.overhead_us:.0f} µs per job (`Worker.process` "
        "over a protocol that answers at once, without I/O: the lease, the job handle, the "
        "heartbeat registration, the log calls); the rest of a cycle is the two round trips."
    )
    add("")
    add("What the figures mean:")
    add("")
    add(
        "- **A job cycle does more than a lock cycle.** lockworker's cycle counts an "
        "attempt, issues a fencing token, takes a lease, runs the hook under a heartbeat, "
        "and leaves a DONE record that latecomers read; redis-py's `Lock` sets a key and "
        "deletes it. The target is at least 1.0x redis-py's cycles/s, as for `Lock`."
    )
    add(
        "- **Why the script protocol exists.** The design lockworker started from does "
        "each step as a WATCH/MULTI/EXEC transaction: WATCH the keys, read them, then "
        "MULTI..EXEC the writes, 3 round trips per step and 6 per job (the `txn` row, "
        "`protocol=\"txn\"`). The round trips, not the server's work, bound a cycle on "
        "loopback, so that design runs at well under half of redis-py's rate. The default "
        "`protocol=\"script\"` runs the same steps, with the same results, as Lua scripts: "
        "1 round trip per step, 2 per job, like redis-py's `Lock`. Both protocols stay, "
        "and are tested against each other (docs/protocol.md); `txn` serves servers or "
        "proxies that forbid scripts."
    )
    add(
        "- **Where a cycle's time goes.** On loopback each round trip costs the client "
        "far more CPU (redis-py, hiredis, the kernel's socket calls) than the server "
        "spends on the commands, so round trips decide the rate. lockworker's server work "
        "per job is higher than a lock's, since each job writes two keys with TTLs (the "
        "lease and the state that outlives it) and publishes a wake-up, but it is the "
        "smaller share; its own Python adds the per-job figure above."
    )
    add(
        "- python-redis-lock pays a third round trip (its acquire GETs the key before "
        "SET NX); pottery's Redlock makes 2 round trips but starts a thread pool for "
        "every acquire and release."
    )
    out.extend(report_aio.cycle_notes())
    add("")
    out.extend(
        report_load.contended(run.contended, s.contended_seconds, run.charts.get("handovers"))
    )
    if run.outsiders:
        out.extend(outsider.render(run.outsiders, s.contended_seconds, 2))
    out.extend(report_handover.handover(run.handovers, s.handover_trials))
    out.extend(report_aio.leaders(run.leaders, s.handover_trials))
    out.extend(report_handover.takeover(
        run.takeovers, s.takeover_lease, (s.takeover_trials, s.peer_takeover_trials),
        run.charts.get("takeover"),
    ))
    out.extend(report_stream.section(run.streams, run.charts.get("stream")))
    out.extend(report_load.scale(run.scale))
    out.extend(report_load.market(run.market, s.market_seconds))
    out.extend(report_load.masters(run.masters))
    out.extend(report_failover.section(run.failover))
    if run.views is not None:
        out.extend(report_views.section(run.views))
    return "\n".join(out)
