"""Section 9 of the page: a stream's failover, and lockworker beside the worker
frameworks (:mod:`benchmarks.report_peers`).

The section can be measured on its own (``python -m benchmarks --only failover``): then
:func:`splice` puts it, and its summary lines, into the page a full run wrote, leaving
every other section's figures as they were.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from benchmarks import report_peers
from benchmarks.common import Machine
from benchmarks.peers import PeersRun
from benchmarks.stream_failover import (
    BACKUP_DELAY,
    CONCURRENCY,
    TARGET_RATIO,
    WINDOW,
    FailoverRun,
)

HEADING = "## 9. Failover of a stream, beside the worker frameworks"
FORMER_HEADINGS = ("## 9. Failover of a stream, beside RQ and Celery",)
"""The section's heading on pages written before it had the frameworks (replaced too)."""
SUMMARY_PREFIXES = ("- stream failover", "- beside RQ and Celery", report_peers.SUMMARY_PREFIX)
KINDS = {"sync": "sync (`Worker`)", "aio": "asyncio (`aio.Worker`)"}


@dataclass(frozen=True)
class FailoverSection:
    streams: list[FailoverRun]
    peers: PeersRun | None
    machine: Machine
    command: str
    wall_seconds: float


def _n(value: float, digits: int = 0) -> str:
    return "-" if math.isnan(value) else f"{value:,.{digits}f}"  # NaN: nothing measured


def _s(seconds: float | None, cap: float) -> str:
    return f"not within {cap:g} s" if seconds is None else f"{seconds:.2f} s"


def _short_of(run: FailoverRun) -> str:
    """Why a row misses the target, beyond a steady rate never reached (said apart)."""
    why = []
    if run.left:
        why.append(f"{run.left} jobs left")
    if run.ratio < TARGET_RATIO:
        why.append(f"{run.ratio:.3f}x < {TARGET_RATIO:g}x")
    if run.steady_after is not None and run.steady_after > run.steady_target:
        why.append(f"0.8x only after {run.steady_after:.2f} s > {run.steady_target:g} s")
    return f" ({'; '.join(why)})" if why else ""


def summary(section: FailoverSection) -> list[str]:
    lines = []
    if section.streams:
        cases = ", ".join(
            f"{r.how} {r.kind} {r.ratio:.2f}x"
            + ("" if r.steady_after is not None else f" (0.8x not within {r.cap:g} s)")
            + _short_of(r)
            for r in section.streams
        )
        met = all(r.met for r in section.streams)
        lines.append(
            f"stream failover, the backups' jobs/s after the primary went / the primary's "
            f"before: {cases}; target >= {TARGET_RATIO:g}x within the lease + 1 s after "
            f"SIGKILL, 1 s after SIGTERM: {'met' if met else '**not met**'}"
        )
    if section.peers is not None:
        lines.extend(report_peers.summary(section.peers, section.machine.cores))
    return lines


def _stream(runs: list[FailoverRun]) -> list[str]:
    out: list[str] = []
    add = out.append
    if not runs:
        return out
    r0 = runs[0]
    add("### The stream's jobs/s before and after its primary goes")
    add("")
    add(
        f"A backlog of {_n(r0.jobs)} jobs is submitted to one stream; a primary and two "
        f"backups (`role=\"backup\"`, `backup_delay={BACKUP_DELAY:g}`, a {r0.lease:g} s "
        f"lease) each read the whole stream (fan-out) and `serve` it with concurrency "
        f"{CONCURRENCY}; each job's `on_acquired` makes one round trip (recording when it "
        f"started, and where). Once {_n(r0.kill_after)} jobs have run, the primary gets "
        "SIGKILL (a crash) or SIGTERM (a clean stop, as in a deploy). **primary before**: "
        "its jobs/s from its first job to the signal. **first job**: from the signal to "
        "the backups' first job. **0.8x after**: from the signal until the backups' jobs/s "
        f"over a {WINDOW:g} s window first reaches {TARGET_RATIO:g}x the primary's. "
        "**backups after**: their jobs/s from their first job to their last. The run "
        f"waits at most {r0.cap:g} s after the signal; **jobs left** counts those that had "
        "not run by then. **ran twice**: jobs run more than once, which a crash allows "
        "for the jobs the primary was running (at least once), a clean stop does not."
    )
    add("")
    add(
        "| primary stopped by | processes | primary before (jobs/s) | first job | 0.8x after "
        "| target | backups after (jobs/s) | after / before | jobs left | ran twice "
        "| jobs by primary / backups |"
    )
    add("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in runs:
        backups = sum(count for role, count in r.by_role.items() if role != "primary")
        left = (
            "0" if not r.left
            else f"{_n(r.left)} (did not finish in {r.cap:g} s)"
        )
        add(
            f"| {r.how} | {KINDS[r.kind]} | {_n(r.before_rate)} | {_s(r.first_after, r.cap)} "
            f"| {_s(r.steady_after, r.cap)} | <= {r.steady_target:g} s "
            f"| {_n(r.after_rate, 1)} | {r.ratio:.3f}x | {left} | {r.twice} "
            f"| {_n(r.by_role.get('primary', 0))} / {_n(backups)} |"
        )
    add("")
    add(
        f"Target: after the primary is gone the backups serve at least {TARGET_RATIO:g}x "
        "the primary's jobs/s, reached within the lease plus one second after a crash, "
        "within a round trip plus one second after a clean stop (taken as 1 s). A backup "
        f"that lets every free job lie for `backup_delay` before it competes serves "
        f"about concurrency / backup_delay = {CONCURRENCY / BACKUP_DELAY:g} jobs/s, "
        "whatever the handler costs (the two backups defer the same jobs, so the second "
        "adds nothing), so while backups defer also when no primary is alive the rows "
        "show that crawl, and a run that stops at its time limit says how many jobs were "
        "left. Once the primary is gone the first backup (by owner) serves as the primary "
        "and the other holds back behind it, as behind a primary. After a crash both still "
        "defer to the dead primary until its registration ends, but a backup takes it for "
        "stalled once a job nobody took has lain free for `backup_delay` (the SIGKILL "
        "rows' first second), and from then serves each job at once."
    )
    add("")
    return out


def section(section: FailoverSection | None) -> list[str]:
    out = [HEADING, ""]
    if section is None:
        out += ["Not run.", ""]
        return out
    m = section.machine
    out.append(
        f"Measured {m.date} with `{section.command}` ({section.wall_seconds:.0f} s wall), "
        f"lockworker {m.lockworker}, {section.peers.versions if section.peers else ''}, "
        f"{m.server.split(' sha=')[0]}; the machine ({m.cores} cores) was shared with other "
        f"work, load before the run {m.load} (1/5/15 min), so read the figures against "
        "each other, not as absolutes."
    )
    out.append("")
    out.extend(_stream(section.streams))
    if section.peers is not None:
        out.extend(report_peers.section(section.peers, section.machine.cores))
    return out


def splice(page: str, section_lines: list[str], summary_lines: list[str]) -> str:
    """``page`` with section 9 and its summary lines replaced by (or given) these."""
    return splice_into(
        page, HEADING, SUMMARY_PREFIXES, section_lines, summary_lines, former=FORMER_HEADINGS
    )


def splice_into(page: str, heading: str, prefixes: tuple[str, ...],
                section_lines: list[str], summary_lines: list[str], *,
                former: tuple[str, ...] = ()) -> str:
    """``page`` with the section under ``heading`` (or one of its ``former`` headings)
    and its summary lines (those starting with one of ``prefixes``) replaced by (or
    given) these."""
    lines = page.split("\n")
    # The section: from its heading to the next "## " heading (or the end).
    start = next((i for i, line in enumerate(lines) if line in (heading, *former)), None)
    if start is None:
        if lines and lines[-1] != "":
            lines.append("")
        lines.extend(section_lines)
    else:
        end = next(
            (i for i in range(start + 1, len(lines)) if lines[i].startswith("## ")), len(lines)
        )
        lines[start:end] = section_lines
    # The summary: drop this section's old lines, add the new ones after the others.
    top = next((i for i, line in enumerate(lines) if line == "## Summary"), None)
    if top is not None:
        end = next(
            (i for i in range(top + 1, len(lines)) if lines[i].startswith("## ")), len(lines)
        )
        block = [line for line in lines[top + 1:end] if not line.startswith(prefixes)]
        last = max((i for i, line in enumerate(block) if line.startswith("- ")), default=0)
        block[last + 1:last + 1] = [f"- {line}" for line in summary_lines]
        lines[top + 1:end] = block
    return "\n".join(lines)
