"""The one command: ``python -m benchmarks [--quick] [--only SECTION] [--output PATH]``.

Starts its own servers on free loopback ports (one, plus two more masters for
Redlock), runs every benchmark against them (uncontended cycles, contended locks,
handover after a failure and between leaders, takeover after SIGKILL, a stream served
by a primary and two backups, jobs in flight at scale, the "Redis in Action"
marketplace, a cluster, a stream's failover beside the worker frameworks), prints a
summary with the targets and writes the figures and charts to ``docs/`` (a full run) or
beside ``--output``.

``--only failover`` measures section 9 alone (the stream's failover, the frameworks),
``--only stream`` section 5 (a stream served by ``serve()`` beside consumer groups),
``--only views`` section 10 (the views with many finished jobs: ``--views-jobs``),
and puts it, with its summary lines, into the page already at the output path, leaving
the other sections' figures as they were (a page that does not exist yet gets that
section only).
"""

from __future__ import annotations

import argparse
import os
import random
import time
import uuid
from collections.abc import Callable
from pathlib import Path

from benchmarks import (
    charts,
    common,
    contended,
    cycle,
    failover,
    leaders,
    market,
    masters,
    outsider,
    peers,
    report,
    report_failover,
    report_stream,
    report_views,
    scale,
    stream,
    stream_failover,
    views,
)
from benchmarks.common import counting_client, installed, machine, quiet_logging
from lockworker.testing.server import RedisServer

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "benchmarks.md"

FULL = report.Settings(
    command="python -m benchmarks",
    rounds=10,
    seconds=1.0,
    handover_trials=20,
    takeover_trials=10,
    peer_takeover_trials=5,
    takeover_lease=2.0,
    contended_seconds=5.0,
    stream_jobs=5_000,
    stream_rounds=3,
    stream_kill_lease=2.0,
    stream_cap=30.0,
    stream_memory_jobs=100_000,
    stream_cluster_jobs=5_000,
    scale_jobs=10_000,
    market_seconds=3.0,
    masters_jobs=4_000,
    failover_jobs=4_000,
    failover_cap=30.0,
    failover_lease=stream_failover.LEASE,
    peer_jobs=5_000,
    peer_bound=120.0,
    peer_hold=30.0,
)
QUICK = report.Settings(
    command="python -m benchmarks --quick",
    rounds=1,
    seconds=0.2,
    handover_trials=2,
    takeover_trials=1,
    peer_takeover_trials=1,
    takeover_lease=1.0,
    contended_seconds=0.25,
    stream_jobs=200,
    stream_rounds=1,
    stream_kill_lease=1.0,
    stream_cap=10.0,
    stream_memory_jobs=2_000,
    stream_cluster_jobs=200,
    scale_jobs=500,
    market_seconds=0.5,
    masters_jobs=200,
    failover_jobs=400,
    failover_cap=2.5,
    failover_lease=1.0,
    peer_jobs=300,
    peer_bound=3.0,
    peer_hold=2.0,
    peer_side_by_side=True,
    views_jobs=(10_000,),
    views_runs=2,
)
SECTIONS = ("failover", "stream", "locks", "views")
OUTSIDER_ROUNDS = 2
"""Rounds of the contended section's fresh-process harness (benchmarks/outsider.py)."""


def measure(
    servers: list[RedisServer], settings: report.Settings, *, log: bool = True
) -> report.Run:
    server = servers[0]
    def say(text: str) -> None:
        if log:
            print(f"[{time.monotonic() - started:5.1f}s] {text}", flush=True)

    started = time.monotonic()
    quick = settings.rounds == 1
    say(f"server: {server.version()} on 127.0.0.1:{server.port} "
        f"(+{len(servers) - 1} Redlock masters)")
    say(f"1/10 uncontended: {settings.rounds} rounds x {len(cycle.CONTENDERS)} contenders "
        f"x {settings.seconds:g} s")
    cycles = cycle.run(
        servers, rounds=settings.rounds, seconds=settings.seconds, warmup=20 if quick else 200
    )
    probe = counting_client(server)
    try:
        overhead = cycle.python_overhead(probe, 200 if quick else 5000)
    finally:
        probe.close()

    namespace = f"bench-{uuid.uuid4().hex[:8]}"
    rng = random.Random()
    kinds = [kind for kind in failover.KINDS if installed(failover.NEEDS.get(kind))]
    handovers = [failover.Handover(kind, failover.WAITS_BY[kind]) for kind in kinds]
    takeovers = [
        failover.Takeover(kind, failover.RENEWS[kind], failover.WAITS_BY[kind])
        for kind in kinds
    ]
    client = server.client()
    kinds = contended.kinds()
    say(f"2/10 contended: {len(kinds)} contenders x {settings.contended_seconds:g} s")
    contention = contended.run(
        [s.port for s in servers], client, settings.contended_seconds
    )
    outsiders = outsider.run(
        server.port, client, seconds=settings.contended_seconds,
        rounds=1 if settings.rounds == 1 else OUTSIDER_ROUNDS,
    )
    pair = failover.Pair(server.port, namespace)
    try:
        say(f"3/10 handover: {settings.handover_trials} trials x {len(handovers)} contenders, "
            f"then x {len(leaders.PAIRS)} leader pairings")
        for _ in range(settings.handover_trials):
            for handover in handovers:
                failover.handover_trial(pair, handover)
        by_leaders = leaders.run(server.port, settings.handover_trials)
        say(f"4/10 takeover after SIGKILL: {settings.takeover_trials} trials (lockworker), "
            f"{settings.peer_takeover_trials} per peer, {settings.takeover_lease:g} s lease")
        for trial in range(max(settings.takeover_trials, settings.peer_takeover_trials)):
            for takeover in takeovers:
                wanted = (
                    settings.takeover_trials
                    if takeover.kind == "lockworker"
                    else settings.peer_takeover_trials
                )
                if trial < wanted:
                    failover.takeover_trial(pair, client, takeover, settings.takeover_lease, rng)
    finally:
        pair.close()
    try:
        say(f"5/10 stream: {settings.stream_jobs} jobs x {len(stream.CONTENDERS)} contenders "
            f"x {settings.stream_rounds} rounds, SIGKILL runs, memory, a cluster")
        streams = measure_stream(servers, settings, say)
        say(f"6/10 scale: {settings.scale_jobs} jobs in flight over {scale.PROCESSES} processes")
        scaled = scale.run(server.port, server.url, client, settings.scale_jobs)
        say(f"7/10 marketplace: {2 * len(market.SETUPS)} setups x {settings.market_seconds:g} s")
        markets = market.run(server.port, settings.market_seconds)
    finally:
        client.close()
    say(f"8/10 masters: {settings.masters_jobs} jobs through serve() on 1 server and on a "
        f"{masters.MASTERS}-master cluster, then {settings.scale_jobs} in flight on it")
    by_masters = masters.run(settings.masters_jobs, settings.scale_jobs)
    say(f"9/10 failover of a stream ({len(stream_failover.CASES)} rows), then the worker "
        "frameworks")
    failover_section = measure_failover(server, settings, say, time.monotonic())
    say(f"10/10 views with {', '.join(f'{n:,}' for n in settings.views_jobs)} finished jobs")
    views_section = views.run(settings.views_jobs, settings.views_runs, settings.command, say)
    settings = report.Settings(
        **{**settings.__dict__, "wall_seconds": time.monotonic() - started}
    )
    missing = [
        name for name, _, _, module in cycle.CONTENDERS if not installed(module)
    ]
    return report.Run(
        machine(server), settings, cycles, overhead, handovers, takeovers, missing,
        contended=contention, streams=streams, scale=scaled, market=markets,
        masters=by_masters, leaders=by_leaders, failover=failover_section,
        outsiders=outsiders, views=views_section,
    )


def measure_stream(
    servers: list[RedisServer], settings: report.Settings, say: Callable[[str], None]
) -> stream.StreamSection:
    """Section 5: the stream served by ``serve()`` beside plain consumer groups."""
    client = servers[0].client()
    try:
        return stream.run(
            servers[0].port, client, jobs=settings.stream_jobs, rounds=settings.stream_rounds,
            kill_lease=settings.stream_kill_lease, cap=settings.stream_cap,
            memory_jobs=settings.stream_memory_jobs, cluster_jobs=settings.stream_cluster_jobs,
            record_port=servers[1].port, cores=os.cpu_count() or 1, say=say,
        )
    finally:
        client.close()


def measure_failover(
    server: RedisServer, settings: report.Settings, say: Callable[[str], None],
    started: float,
) -> report_failover.FailoverSection:
    """Section 9: the stream's failover rows, then lockworker beside the worker frameworks."""
    facts = machine(server)  # the load before this section's run
    client = server.client()
    try:
        streams = stream_failover.run(
            server.port, client, jobs=settings.failover_jobs, cap=settings.failover_cap,
            lease=settings.failover_lease, say=say,
        )
        by_peers = peers.run(
            server.port, client, jobs=settings.peer_jobs, bound=settings.peer_bound,
            hold=settings.peer_hold, side_by_side=settings.peer_side_by_side, say=say,
        )
    finally:
        client.close()
    return report_failover.FailoverSection(
        streams, by_peers, facts, settings.command, time.monotonic() - started
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks",
        description="Measure lockworker against redis-py Lock, python-redis-lock and "
        "pottery on a server this command starts on 127.0.0.1.",
    )
    parser.add_argument(
        "--quick", action="store_true",
        help="a smoke run of a few seconds; writes no file unless --output is given",
    )
    parser.add_argument(
        "--output", type=Path, default=None,
        help=f"where to write the report (default: {DOC.relative_to(ROOT)} for a full run)",
    )
    parser.add_argument(
        "--only", choices=SECTIONS, default=None,
        help="measure one section (stream: section 5, a stream served beside consumer "
        "groups; failover: section 9, a stream's failover beside the worker frameworks; "
        "both put into the page at the output path, the rest kept; locks: the contended "
        "locks, "
        "both harnesses, printed only; views: section 10, the views with many finished "
        "jobs)",
    )
    parser.add_argument(
        "--views-jobs", type=report_views.sizes, default=None, metavar="N[,N...]",
        help="finished jobs of each of section 10's servers (default 1000000,10000000; "
        "--quick: 10000)",
    )
    args = parser.parse_args(argv)
    settings = QUICK if args.quick else FULL
    if args.views_jobs is not None:
        settings = report.Settings(**{**settings.__dict__, "views_jobs": args.views_jobs})
    common.FAST_START = args.quick  # children from a fork server: a quick check only
    output = args.output if args.output is not None else (None if args.quick else DOC)
    quiet_logging()
    if args.only == "stream":
        return only_stream(settings, output)
    if args.only == "locks":
        return only_locks(settings)
    if args.only == "views":
        return report_views.only(settings.views_jobs, settings.views_runs,
                                 f"{settings.command} --only views", output)
    if args.only is not None:
        return only_failover(settings, args.only, output)
    with RedisServer() as server, RedisServer() as second, RedisServer() as third:
        run = measure([server, second, third], settings)
    print()
    for line in report.summary(run):
        print(line)
    if output is not None:
        folder = output.resolve().parent
        folder.mkdir(parents=True, exist_ok=True)
        for kind, draw, data in (
            ("handovers", charts.handovers, run.contended),
            ("takeover", charts.takeover, run.takeovers),
            ("stream", charts.stream_rates, run.streams),
        ):
            name = draw(data, folder)  # type: ignore[operator]
            if name:
                run.charts[kind] = name
                print(f"wrote {folder / name}")
        output.write_text(report.render(run), encoding="utf-8")
        print(f"wrote {output}")
    return 0


def only_failover(settings: report.Settings, only: str, output: Path | None) -> int:
    """``--only failover``: section 9 alone, spliced into the page at ``output``."""
    command = f"{settings.command} --only {only}"
    settings = report.Settings(**{**settings.__dict__, "command": command})
    started = time.monotonic()

    def say(text: str) -> None:
        print(f"[{time.monotonic() - started:5.1f}s] {text}", flush=True)

    with RedisServer() as server:
        say(f"server: {server.version()} on 127.0.0.1:{server.port}")
        say(f"failover of a stream ({len(stream_failover.CASES)} rows), then the worker "
            "frameworks")
        section = measure_failover(server, settings, say, started)
    lines = report_failover.summary(section)
    print()
    for line in lines:
        print(line)
    if output is not None:
        page = output.read_text(encoding="utf-8") if output.exists() else "# Benchmarks\n"
        output.parent.mkdir(parents=True, exist_ok=True)
        output.write_text(
            report_failover.splice(page, report_failover.section(section), lines),
            encoding="utf-8",
        )
        print(f"wrote {output}")
    return 0


def only_stream(settings: report.Settings, output: Path | None) -> int:
    """``--only stream``: section 5 alone, spliced into the page at ``output``."""
    started = time.monotonic()

    def say(text: str) -> None:
        print(f"[{time.monotonic() - started:5.1f}s] {text}", flush=True)

    with RedisServer() as server, RedisServer() as second:
        say(f"server: {server.version()} on 127.0.0.1:{server.port}")
        section = measure_stream([server, second], settings, say)
    lines = report_stream.summary(section)
    print()
    for line in lines:
        print(line)
    if output is not None:
        page = output.read_text(encoding="utf-8") if output.exists() else "# Benchmarks\n"
        output.parent.mkdir(parents=True, exist_ok=True)
        chart = charts.stream_rates(section, output.resolve().parent)
        output.write_text(
            report_failover.splice_into(
                page, report_stream.HEADING, (report_stream.SUMMARY_PREFIX,),
                report_stream.section(section, chart), lines,
            ),
            encoding="utf-8",
        )
        print(f"wrote {output}")
    return 0


def only_locks(settings: report.Settings) -> int:
    """``--only locks``: the contended section, the long-lived processes' harness and
    the fresh processes' one (:mod:`benchmarks.outsider`), printed, no page written."""
    rounds = 1 if settings.rounds == 1 else OUTSIDER_ROUNDS
    with RedisServer() as server, RedisServer() as second, RedisServer() as third:
        client = server.client()
        try:
            ports = [s.port for s in (server, second, third)]
            found = contended.run(ports, client, settings.contended_seconds)
            fresh = outsider.run(
                server.port, client, seconds=settings.contended_seconds, rounds=rounds
            )
        finally:
            client.close()
    print()
    for line in report.handover_targets(found):
        print(line)
    for line in outsider.summary(fresh, report.HANDOVERS_TARGET):
        print(line)
    print()
    for line in outsider.render(fresh, settings.contended_seconds, rounds):
        print(line)
    return 0
