"""Section 10 of docs/benchmarks.md: the views with a million finished jobs
(:mod:`benchmarks.views`), and ``--only views``, which puts it into the page."""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from pathlib import Path

from benchmarks import views, views_fill
from benchmarks.common import spread
from benchmarks.report_failover import splice_into
from benchmarks.views import TARGET, ViewsRun, ViewsSection, ViewTime

HEADING = "## 10. Views with a million finished jobs"
SUMMARY_PREFIX = "- views with "


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:,.0f}"


def _verdict(ok: bool) -> str:
    return "met" if ok else "**not met**"


def _cell(found: ViewTime | None) -> tuple[str, str, str, str]:
    """median ms, range, SCANs per run, verdict."""
    if found is None:
        return "-", "", "", ""
    if found.projected is not None:
        return (f"not run (~{found.projected:,.0f} s, scaled from the size before)",
                "", "", "**not met**")
    if found.error:
        return f"error: {found.error}", "", "", "**not met**"
    low, high = spread(found.times)
    shown = (f"{_ms(low)}-{_ms(high)}" if len(found.times) > 1 else "1 run")
    verdict = "" if found.part else _verdict(found.met)
    return _ms(found.seconds), shown, f"{found.scans:,.0f}", verdict


def _sized(jobs: int) -> str:
    return f"{jobs:,} finished"


def table(section: ViewsSection) -> list[str]:
    runs = section.runs
    head = "| view |" + "".join(
        f" {_sized(r.jobs)}: ms (median) | range | SCANs / run | < {TARGET * 1000:.0f} ms |"
        for r in runs
    )
    out = [head, "|---|" + "---:|---:|---:|---|" * len(runs)]
    for found in runs[0].views:
        cells = [" | ".join(_cell(r.view(found.name))) for r in runs]
        out.append(f"| {found.name} | " + " | ".join(cells) + " |")
    out.append("")
    out.append("| server | " + " | ".join(_sized(r.jobs) for r in runs) + " |")
    out.append("|---|" + "---:|" * len(runs))
    rows: list[tuple[str, Callable[[ViewsRun], str]]] = [
        ("finished jobs written in (raw pipelines)", lambda r: f"{r.fill_seconds:.1f} s"),
        ("the held, given-up and other namespaces' jobs, through the protocol",
         lambda r: f"{r.setup_seconds:.1f} s"),
        ("keys (`DBSIZE`)", lambda r: f"{r.keys:,}"),
        ("used memory (`INFO memory`)", lambda r: f"{r.used_memory / 2**20:,.0f} MiB"),
        ("used memory the finished jobs added, per job",
         lambda r: f"{r.fill_memory / r.jobs:,.0f} B"),
    ]
    for label, cell in rows:
        out.append(f"| {label} | " + " | ".join(cell(r) for r in runs) + " |")
    out.append("")
    return out


def section(found: ViewsSection | None) -> list[str]:
    out = [HEADING, ""]
    done, held, gave_up = views_fill.OTHER_JOBS
    if found is None or not found.runs:
        return [*out, "Not run.", "", *(f"- {s}" for s in (found.skipped if found else []))]
    out.append(
        f"Measured {found.date} by `{found.command}`. "
        "Each size on a server of its own: that many finished jobs in namespace "
        f"`{views_fill.NAMESPACE}` (a DONE state key each, written directly with the value "
        "and time to live (`done_retention`) a clean completion writes, checked against "
        f"a job first completed through the protocol), {views_fill.HELD:,} jobs held there "
        f"(`ScriptProtocol.acquire`, an hour's lease) and {views_fill.GAVE_UP} given up (an "
        "attempt failed with `max_attempts=1`), and "
        f"{len(views_fill.OTHERS)} more namespaces ({', '.join(views_fill.OTHERS)}) with "
        f"{done} finished, {held} held and {gave_up} given-up jobs each; every namespace "
        "registered, as a worker registers it. Nothing else runs against the server "
        "(idle). Each view runs in this process, once untimed (it loads the scripts), then "
        f"{found.runs_per_view} times; the table gives the median wall time and the "
        f"range; a view's runs stop at the first slower than {views.SLOW:g} s, and a "
        f"view whose time scaled from the size before passes {views.CAP:g} s is not run "
        "at the larger size (both: walks of every key). The command lines go "
        "through `lockworker.cli.main.main` with their output sent to `/dev/null`: a "
        f"command typed in a shell adds the interpreter's start and imports, "
        f"{found.startup_seconds:.2f} s here (`lockworker --version`). SCANs / run: "
        "the `SCAN` commands the server ran per run (`INFO commandstats`), i.e. a walk "
        "of the keyspace. `reset --state gave_up` and `Worker.reset_all` reset the "
        f"{views_fill.GAVE_UP} given-up jobs each run (checked); they are given up again, "
        "untimed, before the next."
    )
    out.append("")
    out.extend(table(found))
    for skipped in found.skipped:
        out.append(f"- {skipped}")
    if found.skipped:
        out.append("")
    out.extend(notes(found))
    return out


def _walkers(found: ViewsSection) -> list[str]:
    """The views (the dashboard's apart) that made a SCAN at any size."""
    return [v.name for v in found.runs[0].views
            if v.name != views.DASHBOARD and not v.part and any(
                (w := r.view(v.name)) is not None and w.scans >= 1 for r in found.runs)]


def _busy(found: ViewsSection) -> bool:
    try:
        return float(found.load.split(",")[0]) > found.cores
    except ValueError:
        return False


def notes(found: ViewsSection) -> list[str]:
    walkers = _walkers(found)
    dashboard = max((r.view(views.DASHBOARD) for r in found.runs),
                    key=lambda v: 0.0 if v is None else v.scans)
    return [
        "What the figures mean:",
        "",
        "- **The forms that read only the index** (`--state gave_up`, `--state held`, "
        "`--job`, `reset --state gave_up`, `Worker.reset_all`) do not grow with the "
        "finished jobs: they make no SCAN. Their cost is the index's reads, one script "
        "per namespace and kind that looks at each of the 16,384 slot keys (the last "
        "row: one such read, the keys sent as its arguments), and the listed jobs' "
        "keys (1,000 held jobs' rows for `--state held`).",
        *([] if not walkers else [
        f"- **The forms that walk** ({', '.join(walkers)}) "
        "still SCAN the keyspace for what the registry does not "
        "hold yet (as of this run): the workers' presence sets (`cli/workers.py`, `worker_rows`: "
        "SCAN with redis-py's default COUNT of 10 when no namespace is given, so one "
        "round trip per 10 keys, most of the SCANs in the table), the leaders "
        "(`cli/status.py`, `leader_rows`), the streams' readers (`cli/readers.py`, "
        "`stream_names`) and the schedules (`cli/schedules.py`, `schedule_keys`), each "
        "a SCAN of every key with COUNT 1000; the memory footprint's sample "
        "(`runtime/footprint.py`) is bounded (10,000 keys). Their time grows with the "
        "keys, finished jobs included."]),
        *([] if dashboard is None or dashboard.scans < 1 else [
        "- **The dashboard's read** (`lockworker/cli/web/view.py`, `Collector.read`) "
        "is measured as it is: it still walks every job's state key "
        "(`indexed.walk`) and reads every job, finished ones included, until it is "
        "moved onto the index as the status was. Its time is the walk's."]),
        "- **What the index costs a job**: nothing in round trips (its entry is written "
        "by the step's own script or transaction); on the server, a clean job's scripts "
        "run two commands more than without it (one ZADD at the grant, one ZREM at the DONE; "
        "`tests/integration/test_protocol.py` counts them), and a failure, give-up or "
        "reset adds a ZADD and two trims. The outcomes per minute cost no call per job "
        "(the presence loop sends them, at most every 5 s).",
        "- **The metrics** (`lockworker/metrics`) read nothing from the server: every "
        "gauge is set from the process's own events (a server check's verdict, the "
        "leases it holds), so they have no row.",
        f"- Machine load before the run (1/5/15 min): {found.load}"
        + (f", above its {found.cores} cores: the figures come from a busy machine"
           if _busy(found) else "")
        + f". The machine is a shared {found.cores}-core one (see Machine above) on "
        "which other work may run at the same time; a median over the runs shrugs off "
        "a burst, but single runs (the slow views) carry it.",
        "",
    ]


def summary(found: ViewsSection | None) -> list[str]:
    """One line per size: the target, how many views met it, and the others."""
    if found is None:
        return []
    lines = []
    for run in found.runs:
        targets = [v for v in run.views if not v.part]
        met = [v for v in targets if v.met]
        missed = [
            f"{v.name} " + (
                f"not run (~{v.projected:,.0f} s scaled)" if v.projected is not None
                else f"error: {v.error}" if v.error
                else f"{_ms(v.seconds)} ms ({v.scans:,.0f} SCANs a run)"
            )
            for v in targets if not v.met
        ]
        line = (
            f"views with {run.jobs:,} finished jobs, {views_fill.HELD:,} held, "
            f"{views_fill.GAVE_UP} given up: each < {TARGET * 1000:.0f} ms: "
            f"{len(met)} of {len(targets)} met "
            f"({', '.join(f'{v.name} {_ms(v.seconds)} ms' for v in met)})"
        )
        if missed:
            line += f"; **not met**: {', '.join(missed)}"
        lines.append(line)
    lines.extend(f"views with {s}" for s in found.skipped)
    return lines


def only(sizes: tuple[int, ...], runs: int, command: str, output: Path | None) -> int:
    """``--only views``: section 10 alone, spliced into the page at ``output``."""
    started = time.monotonic()

    def say(text: str) -> None:
        print(f"[{time.monotonic() - started:5.1f}s] {text}", flush=True)

    found = views.run(sizes, runs, command, say)
    lines = summary(found)
    print()
    for line in lines:
        print(line)
    if output is not None:
        page = output.read_text(encoding="utf-8") if output.exists() else "# Benchmarks\n"
        output.parent.mkdir(parents=True, exist_ok=True)
        output.write_text(
            splice_into(with_command(page), HEADING, (SUMMARY_PREFIX,), section(found),
                        lines),
            encoding="utf-8",
        )
        print(f"wrote {output}")
    return 0


RERUN = "python -m benchmarks --only views    # section 10 (--views-jobs 1000000,10000000)"
"""The page's line that says how to measure this section again (:func:`report.render`)."""


def with_command(page: str) -> str:
    """``page`` with :data:`RERUN` in its "Re-run with" block (after the ``--only
    stream`` line) if it is not there yet."""
    if RERUN in page:
        return page
    lines = page.split("\n")
    at = next((i for i, line in enumerate(lines)
               if line.startswith("python -m benchmarks --only stream")), None)
    if at is None:
        return page
    lines.insert(at + 1, RERUN)
    return "\n".join(lines)


def sizes(text: str) -> tuple[int, ...]:
    """``--views-jobs``: positive counts, comma-separated."""
    try:
        found = tuple(int(part) for part in text.split(","))
    except ValueError:
        found = ()
    if not found or min(found) < 1:
        raise argparse.ArgumentTypeError(f"expected positive counts such as 1000000, "
                                         f"comma-separated; got {text!r}")
    return found
