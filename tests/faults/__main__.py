"""The fault battery as a soak: the same scenarios, longer, until enough handovers.

    python -m tests.faults --soak            # every scenario, passes until >= 10,000 handovers
    python -m tests.faults --quick           # every scenario once, at the battery's size
    python -m tests.faults --soak --only sigkill proxy --handovers 2000

Prints a line per scenario run as it ends, then a summary table (scenario, runs,
rounds, handovers, faults, violations, seconds) and the violations found. Exits 1 if
any violation was found. Histories are kept (and their directory printed) when a
scenario finds a violation, or always with ``--workdir``.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .history import Violation
from .scenarios import SCENARIOS, Mix, Result

SOAK_MIX = Mix(
    workers=2, lockers=4, leaders=3, locks=("A", "B", "C"), steps=(1, 3), step=0.005,
    fail_rate=0.2, gap=0.002,
)
"""A fleet that hands over often: short sections, several contended locks."""

SOAK: dict[str, dict[str, Any]] = {
    "sigkill": {"rounds": 40, "jobs": 120, "mix": SOAK_MIX, "max_attempts": 10},
    "sigstop": {"rounds": 16, "jobs": 60},
    "same_owner_restart": {"rounds": 12, "jobs": 16},
    "same_owner_crash": {},
    "leader_same_owner": {"rounds": 10},
    "proxy": {"rounds": 40, "jobs": 120, "mix": SOAK_MIX},
    "startup_outage": {"rounds": 4},
    "server_restart_durable": {"rounds": 25, "jobs": 120, "mix": SOAK_MIX},
    "server_restart_volatile": {"rounds": 25, "jobs": 120, "mix": SOAK_MIX},
    "clock_jumps": {"rounds": 30, "jobs": 120, "mix": SOAK_MIX},
    "redlock3_durable": {"rounds": 40, "contenders": 4},
    "redlock5_durable": {"rounds": 40, "contenders": 4},
    "redlock3_volatile": {"rounds": 20, "contenders": 4},
    "batch_sigkill": {"rounds": 30},
    "batch_sigstop": {"rounds": 12},
    "batch_proxy": {"rounds": 30},
    "batch_server_restart": {"rounds": 20},
    "group_sigkill": {"rounds": 30},
    "group_sigstop": {"rounds": 12},
    "inline_sigkill": {"rounds": 30},
    "inline_sigstop": {"rounds": 12},
    "shared_sigkill": {"rounds": 30},
    "fanout_sigkill": {"rounds": 30, "jobs": 360},
    "fanout_sigstop": {"rounds": 12, "jobs": 150},
    "fanout_progress_restart": {"jobs": 120},
    "group_progress_restart": {"jobs": 120},
    "done_window": {"retention": 5.0},
    "schedule_sigkill": {"rounds": 12, "ticks": 40},
    "fanout_backup_partitioned": {"rounds": 12, "batch": 20},  # 4 of them kill the primary
    "fanout_passed_over": {"rounds": 12, "batch": 16},  # 4 of them kill the primary
    "fanout_mixed_release": {"rounds": 16, "jobs": 160},
}
"""Soak sizes per scenario (the battery's sizes are the scenarios' defaults)."""


@dataclass
class Row:
    runs: int = 0
    rounds: int = 0
    handovers: int = 0
    faults: int = 0
    seconds: float = 0.0
    violations: list[Violation] = field(default_factory=list)

    def add(self, result: Result) -> None:
        self.runs += 1
        self.rounds += result.rounds
        self.handovers += result.handovers
        self.faults += result.faults
        self.seconds += result.seconds
        self.violations += result.violations


def table(rows: dict[str, Row]) -> str:
    head = ("scenario", "runs", "rounds", "handovers", "faults", "violations", "seconds")
    body = [
        (name, str(r.runs), str(r.rounds), str(r.handovers), str(r.faults),
         str(len(r.violations)), f"{r.seconds:.0f}")
        for name, r in rows.items()
    ]
    total = Row()
    for r in rows.values():
        total.runs += r.runs
        total.rounds += r.rounds
        total.handovers += r.handovers
        total.faults += r.faults
        total.seconds += r.seconds
        total.violations += r.violations
    body.append(("total", str(total.runs), str(total.rounds), str(total.handovers),
                 str(total.faults), str(len(total.violations)), f"{total.seconds:.0f}"))
    widths = [max(len(line[i]) for line in (head, *body)) for i in range(len(head))]

    def fmt(line: tuple[str, ...]) -> str:
        cells = zip(line, widths, strict=True)
        return "  ".join(
            cell.ljust(w) if i == 0 else cell.rjust(w) for i, (cell, w) in enumerate(cells)
        )

    rule = "  ".join("-" * w for w in widths)
    return "\n".join([fmt(head), rule, *(fmt(line) for line in body[:-1]), rule, fmt(body[-1])])


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m tests.faults", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    size = parser.add_mutually_exclusive_group()
    size.add_argument("--soak", action="store_true", help="large sizes, passes until --handovers")
    size.add_argument("--quick", action="store_true", help="every scenario once, battery size")
    parser.add_argument("--only", nargs="+", choices=sorted(SCENARIOS), metavar="SCENARIO",
                        help=f"run only these: {', '.join(SCENARIOS)}")
    parser.add_argument("--handovers", type=int, default=10_000,
                        help="soak: run passes until this many handovers (default 10000)")
    parser.add_argument("--workdir", type=Path, help="keep every history under this directory")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse(sys.argv[1:] if argv is None else argv)
    soak = bool(args.soak)
    names = args.only or list(SCENARIOS)
    root = args.workdir or Path(tempfile.mkdtemp(prefix="lockworker-faults-"))
    rows = {name: Row() for name in names}
    started = time.monotonic()
    passes = 0
    while True:
        passes += 1
        for name in names:
            workdir = root / f"{name}-{passes}"
            result = SCENARIOS[name](workdir, **(SOAK[name] if soak else {}))
            rows[name].add(result)
            print(f"[pass {passes}] {result.report(limit=5)}", flush=True)
            if not result.violations and args.workdir is None:
                shutil.rmtree(workdir, ignore_errors=True)
            elif args.workdir is None:
                print(f"  histories kept in {workdir}", flush=True)
        total = sum(r.handovers for r in rows.values())
        if not soak or total >= args.handovers:
            break
        print(f"{total} handovers so far, {args.handovers} wanted: another pass", flush=True)
    print()
    print(table(rows))
    found = [(name, v) for name, r in rows.items() for v in r.violations]
    kinds: dict[str, int] = {}
    for _name, v in found:
        kinds[v.kind] = kinds.get(v.kind, 0) + 1
    print(f"\n{passes} pass(es) in {time.monotonic() - started:.0f} s; violations: "
          + (", ".join(f"{k}={n}" for k, n in sorted(kinds.items())) or "none"))
    for name, v in found[:40]:
        print(f"  {name}: {v}")
    if len(found) > 40:
        print(f"  ... and {len(found) - 40} more")
    if args.workdir is None and not found:
        shutil.rmtree(root, ignore_errors=True)
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
