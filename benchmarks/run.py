"""The one command: ``python -m benchmarks [--quick] [--output PATH]``.

Starts its own servers on free loopback ports (one, plus two more masters for
Redlock), runs every benchmark against them (uncontended cycles, contended locks,
handover after a failure and between leaders, takeover after SIGKILL, a stream served
by a primary and two backups, jobs in flight at scale, the "Redis in Action"
marketplace), prints a summary with the targets and writes the figures and charts to
``docs/`` (a full run) or beside ``--output``.
"""

from __future__ import annotations

import argparse
import random
import time
import uuid
from pathlib import Path

from benchmarks import (
    charts,
    contended,
    cycle,
    failover,
    leaders,
    market,
    masters,
    report,
    scale,
    stream,
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
    stream_jobs=10_000,
    scale_jobs=10_000,
    market_seconds=3.0,
    masters_jobs=4_000,
)
QUICK = report.Settings(
    command="python -m benchmarks --quick",
    rounds=1,
    seconds=0.2,
    handover_trials=2,
    takeover_trials=1,
    peer_takeover_trials=1,
    takeover_lease=1.0,
    contended_seconds=1.0,
    stream_jobs=300,
    scale_jobs=500,
    market_seconds=0.5,
    masters_jobs=200,
)


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
    say(f"1/8 uncontended: {settings.rounds} rounds x {len(cycle.CONTENDERS)} contenders "
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
    say(f"2/8 contended: {len(kinds)} contenders x {settings.contended_seconds:g} s")
    contention = contended.run(
        [s.port for s in servers], client, settings.contended_seconds
    )
    pair = failover.Pair(server.port, namespace)
    try:
        say(f"3/8 handover: {settings.handover_trials} trials x {len(handovers)} contenders, "
            f"then x {len(leaders.PAIRS)} leader pairings")
        for _ in range(settings.handover_trials):
            for handover in handovers:
                failover.handover_trial(pair, handover)
        by_leaders = leaders.run(server.port, settings.handover_trials)
        say(f"4/8 takeover after SIGKILL: {settings.takeover_trials} trials (lockworker), "
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
        say(f"5/8 stream: {settings.stream_jobs} jobs x concurrency {stream.CONCURRENCY}")
        streams = stream.run(server.port, client, settings.stream_jobs)
        say(f"6/8 scale: {settings.scale_jobs} jobs in flight over {scale.PROCESSES} processes")
        scaled = scale.run(server.port, server.url, client, settings.scale_jobs)
        say(f"7/8 marketplace: {2 * len(market.SETUPS)} setups x {settings.market_seconds:g} s")
        markets = market.run(server.port, settings.market_seconds)
    finally:
        client.close()
    say(f"8/8 masters: {settings.masters_jobs} jobs through serve() on 1 server and on a "
        f"{masters.MASTERS}-master cluster, then {settings.scale_jobs} in flight on it")
    by_masters = masters.run(settings.masters_jobs, settings.scale_jobs)
    settings = report.Settings(
        **{**settings.__dict__, "wall_seconds": time.monotonic() - started}
    )
    missing = [
        name for name, _, _, module in cycle.CONTENDERS if not installed(module)
    ]
    return report.Run(
        machine(server), settings, cycles, overhead, handovers, takeovers, missing,
        contended=contention, streams=streams, scale=scaled, market=markets,
        masters=by_masters, leaders=by_leaders,
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
    args = parser.parse_args(argv)
    settings = QUICK if args.quick else FULL
    output = args.output if args.output is not None else (None if args.quick else DOC)
    quiet_logging()
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
        ):
            name = draw(data, folder)  # type: ignore[operator]
            if name:
                run.charts[kind] = name
                print(f"wrote {folder / name}")
        output.write_text(report.render(run), encoding="utf-8")
        print(f"wrote {output}")
    return 0
