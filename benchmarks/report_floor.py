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
    AIO_FANOUT,
    AIO_FANOUT_LAYER,
    AIO_GROUP_3,
    AIO_GROUP_3_LAYER,
    ALONE_1,
    ALONE_1_LAYER,
    FANOUT,
    FLOOR_FANOUT,
    FLOOR_GROUP,
    GROUP_3,
    GROUP_3_LAYER,
    Row,
    StreamSection,
)

FANOUT_VS_FLOOR = 1.0
GROUP_VS_FLOOR = 0.8
BACKUPS_ADD = 0.05
WIRE_PAYS = 0.15
"""Writing commands on a pooled connection (``lockworker.protocol.wire``, and
``lockworker.aio.wire`` on the asyncio side) is kept, side by side, only if it makes
that side's rows at least this much faster than redis-py's client layer."""
"""At most this share of server CPU per job added by two following backups."""
SERVER_VS_FLOOR = 1.2
PROCESSES_VS_FLOOR = 1.5

Target = tuple[str, str, "bool | None"]


def _lockworker(section: StreamSection, group: bool) -> list[Row]:
    return [
        r for r in section.rows
        if r.contender.kind in ("serve", "aio") and r.outcomes
        and not r.contender.client_layer and (
            r.contender.group if group else r.contender.roles == FANOUT
        )
    ]


def _alone(section: StreamSection, concurrency: int) -> Row | None:
    return next((
        r for r in section.rows
        if r.contender.kind == "serve" and r.contender.roles == ("primary",)
        and r.contender.concurrency == concurrency and r.outcomes
        and not r.contender.client_layer
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
    out.extend(_wire(section, side) for side in ("sync", "asyncio"))
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


def _wire(section: StreamSection, side: str) -> Target:
    """What writing the commands on a pooled connection is worth to one side (``sync``:
    the primary alone at concurrency 1 and the group of 3; ``asyncio``: the fan-out at
    concurrency 64 and the group of 3), each row beside its twin whose client
    takes redis-py's client layer for every command. Each side keeps its wire only if
    this holds on every pair."""
    module = "lockworker.protocol.wire" if side == "sync" else "lockworker.aio.wire"
    target = (f"{side}: the direct wire ({module}) makes serving >= {WIRE_PAYS:.0%} faster "
              "than redis-py's client layer")
    pairs = ((ALONE_1, ALONE_1_LAYER), (GROUP_3, GROUP_3_LAYER)) if side == "sync" else (
        (AIO_FANOUT, AIO_FANOUT_LAYER), (AIO_GROUP_3, AIO_GROUP_3_LAYER))
    said, gains = [], []
    for name, twin in pairs:
        direct, layer = section.row(name), section.row(twin)
        if direct is None or layer is None or not direct.outcomes or not layer.outcomes:
            continue
        gain = _ratio(direct.rate, layer.rate) - 1
        gains.append(gain)
        said.append(
            f"{direct.contender.name}: {direct.rate:,.0f} against {layer.rate:,.0f} jobs/s "
            f"({gain:+.0%}; processes' CPU {_per_job_us(direct, _processes):,.0f} against "
            f"{_per_job_us(layer, _processes):,.0f} µs per job)"
        )
    if not gains:
        return (target, "not measured", None)
    return (target, "; ".join(said), min(gains) >= WIRE_PAYS)


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
