"""Section 5's targets read against the floor rows: what any protocol that keeps a
lease and a state key per job costs on this machine, rather than a consumer group,
which keeps nothing per job. lockworker is read at its best concurrency (the row of
each mode with the most jobs/s); the floor rows keep their definition run after run,
so pages stay comparable.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from benchmarks.stream import (
    FANOUT,
    FLOOR_FANOUT,
    FLOOR_GROUP,
    Row,
    StreamSection,
)

FANOUT_VS_FLOOR = 1.0
GROUP_VS_FLOOR = 0.8
BACKUPS_ADD = 0.05
"""At most this share of server CPU per job added by two following backups."""
SERVER_VS_FLOOR = 1.2
PROCESSES_VS_FLOOR = 1.5

Target = tuple[str, str, "bool | None"]


def _lockworker(section: StreamSection, group: bool) -> list[Row]:
    return [
        r for r in section.rows
        if r.contender.kind in ("serve", "aio") and r.outcomes
        and (
            r.contender.group if group else r.contender.roles == FANOUT
        )
    ]


def _alone(section: StreamSection, concurrency: int) -> Row | None:
    return next((
        r for r in section.rows
        if r.contender.kind == "serve" and r.contender.roles == ("primary",)
        and r.contender.concurrency == concurrency and r.outcomes
    ), None)


def _best(rows: list[Row]) -> Row | None:
    return max(rows, key=lambda r: r.rate) if rows else None


def _per_job_us(row: Row, cpu: Callable[[Row], float]) -> float:
    return row.cost.per_job(cpu(row)) * 1e6


def _server(row: Row) -> float:
    return row.cost.server_cpu


def _processes(row: Row) -> float:
    return row.cost.client_cpu


def _ratio(a: float, b: float) -> float:
    return a / b if b and not math.isnan(b) else float("nan")


def _label(row: Row) -> str:
    c = row.contender
    side = "aio " if c.kind == "aio" else ""
    return f"{side}concurrency {c.concurrency}"


def floor_targets(section: StreamSection) -> list[Target]:
    """``(target, measured, met)`` of the floor-relative targets; ``met`` None when a
    row they need was not measured."""
    out: list[Target] = []
    modes = (
        ("fan-out, primary + 2 backups", False, FLOOR_FANOUT, FANOUT_VS_FLOOR),
        ("3 processes in a group", True, FLOOR_GROUP, GROUP_VS_FLOOR),
    )
    for mode, group, floor_name, at_least in modes:
        best, floor = _best(_lockworker(section, group)), section.row(floor_name)
        if best is None or floor is None or not floor.outcomes:
            out.append((f"{mode} >= {at_least:g}x the floor's row", "not measured", None))
            continue
        ratio = _ratio(best.rate, floor.rate)
        out.append((
            f"{mode} >= {at_least:g}x the floor's row (jobs/s)",
            f"{best.rate:,.0f} ({_label(best)}) / {floor.rate:,.0f} = {ratio:.2f}x"
            + ("" if ratio >= at_least else f"; bound by {_cpu_bound(best, floor)}"),
            ratio >= at_least,
        ))
        for what, cpu, most in (("server", _server, SERVER_VS_FLOOR),
                                ("processes'", _processes, PROCESSES_VS_FLOOR)):
            mine, theirs = _per_job_us(best, cpu), _per_job_us(floor, cpu)
            ratio = _ratio(mine, theirs)
            out.append((
                f"{mode}: {what} CPU per job <= {most:g}x the floor's",
                f"{mine:,.0f} µs ({_label(best)}) / {theirs:,.0f} µs = {ratio:.2f}x"
                + ("" if ratio <= most else f"; bound by {_why(what, best, floor)}"),
                ratio <= most,
            ))
    out.append(_backups_add(section))
    return out


def _backups_add(section: StreamSection) -> Target:
    """What two following backups add to the server's CPU per job: the fan-out row
    beside the primary-alone row of the same concurrency (sync ``serve()``), at the
    fan-out's best concurrency that has one."""
    target = f"following backups add <= {BACKUPS_ADD:.0%} to the server's CPU per job"
    pairs = [
        (r, alone) for r in _lockworker(section, group=False)
        if r.contender.kind == "serve"
        and (alone := _alone(section, r.contender.concurrency)) is not None
    ]
    if not pairs:
        return (target, "not measured", None)
    fanout, alone = max(pairs, key=lambda pair: pair[0].rate)
    mine, base = _per_job_us(fanout, _server), _per_job_us(alone, _server)
    added = _ratio(mine, base) - 1
    a, b = fanout.cost, alone.cost
    commands, own = a.per_job(a.server_commands), b.per_job(b.server_commands)
    return (
        target,
        f"{mine:,.0f} µs with 2 backups / {base:,.0f} µs alone ({_label(fanout)}): "
        f"{added:+.0%}; the server ran {commands:.2f} commands per job with the backups "
        f"against {own:.2f} alone ({_ratio(commands, own) - 1:+.1%}: the backups' trailing "
        "polls, presence and the looks at what the progress does not cover)",
        added <= BACKUPS_ADD,
    )


def _cpu_bound(mine: Row, floor: Row) -> str:
    """What caps a row's jobs/s beside the floor's: the CPU each job costs the server
    and the processes together, which share this machine's cores."""
    a, b = mine.cost, floor.cost
    total = a.per_job(a.server_cpu + a.client_cpu) * 1e6
    theirs = b.per_job(b.server_cpu + b.client_cpu) * 1e6
    return (
        f"the CPU per job, server and processes together: {total:,.0f} µs against the "
        f"floor's {theirs:,.0f} µs ({_ratio(total, theirs):.2f}x; the rows below say "
        "where each part goes)"
    )


def _why(what: str, mine: Row, floor: Row) -> str:
    """What separates a row from the floor's: the server's work per job (its commands
    and scripts: each script's start and Lua work cost the server more than the calls
    inside it), or the processes' (round trips and the Python around each job)."""
    a, b = mine.cost, floor.cost
    if what == "server":
        return (
            f"the work per job: {a.per_job(a.server_commands):.1f} server commands against "
            f"the floor's {b.per_job(b.server_commands):.1f} (the attempt count, fencing "
            "token, history, index, wake-up and renewals the floor does without), each "
            "script's start and Lua work costing more than the calls inside it "
            "(docs/protocol.md, \"What a job costs the server\")"
        )
    return (
        f"{a.per_job(a.round_trips):.2f} round trips per job against the floor's "
        f"{b.per_job(b.round_trips):.2f}, and the Python of each job's contest, lease, "
        "hooks, events and outcome, which the floor's loop does without"
    )
