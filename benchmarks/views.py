"""Section 10: the operator's views on a server holding many finished jobs.

Finished jobs are the many: at 1,000 jobs/s, an hour of ``done_retention`` keeps 3.6
million DONE records. The views (``lockworker status`` in every form, ``reset --state``,
``Worker.reset_all``, the dashboard) must answer from the namespace's index and the
registry, not from a walk of every key. Each size gets its own server, filled by
:mod:`benchmarks.views_fill`.

Each view is timed in this process (wall clock, the median of a few runs after one
untimed run that loads the scripts): the command line through
``lockworker.cli.main.main`` with its output sent to ``os.devnull``, the library's calls
directly. A view whose first timed run takes longer than :data:`SLOW` s runs once.
"""

from __future__ import annotations

import contextlib
import io
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import redis
import structlog

import lockworker
from benchmarks.common import median, quiet_logging
from benchmarks.views_fill import GAVE_UP, NAMESPACE, give_up, populate
from lockworker.model.codec import Holder, new_run
from lockworker.protocol import ScriptProtocol
from lockworker.testing.server import RedisServer

SLOW = 5.0
"""Seconds: a view slower than this on its first timed run is not run again."""
CAP = 120.0
"""Seconds: a view whose time, scaled from the previous size, would pass this is left
out at the next size (a walk of every key), its projection given instead."""
TARGET = 0.5
DASHBOARD = "dashboard read (`Collector.read`)"
FILL_CAP = 300.0
"""Seconds the fill of one size may take; a larger size whose fill, scaled from the
smaller one's, would pass it is not run."""


@dataclass
class ViewTime:
    name: str
    times: list[float] = field(default_factory=list)
    error: str = ""
    projected: float | None = None
    """Not run at this size: the seconds the previous size's time scales to."""
    scans: float = 0.0
    """SCAN commands the server ran per timed run (``INFO commandstats``): a walk."""
    part: bool = False
    """A part of the views above (one index read), not a view with a target."""

    @property
    def seconds(self) -> float:
        return median(self.times)

    @property
    def met(self) -> bool:
        return not self.error and bool(self.times) and self.seconds < TARGET


@dataclass
class ViewsRun:
    jobs: int
    fill_seconds: float = 0.0
    setup_seconds: float = 0.0
    used_memory: int = 0
    fill_memory: int = 0
    """``used_memory`` the finished jobs added."""
    keys: int = 0
    views: list[ViewTime] = field(default_factory=list)
    error: str = ""

    def view(self, name: str) -> ViewTime | None:
        return next((v for v in self.views if v.name == name), None)


@dataclass
class ViewsSection:
    runs: list[ViewsRun]
    runs_per_view: int
    command: str
    load: str
    startup_seconds: float = float("nan")
    """``lockworker --version`` in a new interpreter: what a typed command adds."""
    skipped: list[str] = field(default_factory=list)
    """Sizes not run, each with why."""
    cores: int = field(default_factory=lambda: os.cpu_count() or 1)
    date: str = field(default_factory=lambda: time.strftime("%Y-%m-%d %H:%M UTC",
                                                            time.gmtime()))


def cli_view(url: str, *args: str) -> Callable[[], None]:
    """``lockworker ARGS`` in this process, its output to ``os.devnull``."""
    from lockworker.cli.main import main

    argv = [*args, "--redis", url, "--log-level", "warning"]

    def view() -> None:
        errors = io.StringIO()
        with (open(os.devnull, "w") as sink, contextlib.redirect_stdout(sink),
              contextlib.redirect_stderr(errors)):
            code = main(argv)
        if code != 0:
            raise RuntimeError(f"lockworker {' '.join(args)} exited {code}: "
                               f"{errors.getvalue().strip()[:150]}")

    return view


@dataclass
class View:
    """One view: how to call it, what to set up before each run and check after it."""

    name: str
    call: Callable[[], object]
    prepare: Callable[[], object] | None = None
    check: Callable[[object], None] | None = None
    part: bool = False


def scan_calls(client: redis.Redis) -> int:
    """SCAN commands the server has run so far, from every client."""
    stats: dict[str, Any] = client.info("commandstats")
    return int(stats.get("cmdstat_scan", {}).get("calls", 0))


def timed(client: redis.Redis, view: View, runs: int, before: ViewTime | None,
          scale: float) -> ViewTime:
    """``view``'s wall times: one untimed run first (it loads the scripts), then
    ``runs``; left out if ``before`` (the previous size's) scales past :data:`CAP`."""
    result = ViewTime(view.name, part=view.part)
    scans = 0
    if before is not None and before.times and before.seconds * scale > CAP:
        result.projected = before.seconds * scale
        return result
    try:
        for n in range(runs + 1):
            if view.prepare is not None:
                view.prepare()
            scanned = scan_calls(client)
            started = time.monotonic()
            answer = view.call()
            took = time.monotonic() - started
            scanned = scan_calls(client) - scanned
            if view.check is not None:
                view.check(answer)
            if n or took > SLOW:  # a slow first run is the one run
                result.times.append(took)
                scans += scanned
                result.scans = scans / len(result.times)
            if took > SLOW:
                break
    except Exception as exc:  # the page says what broke
        result.error = f"{type(exc).__name__}: {exc}"[:200]
    return result


def views(server: RedisServer, client: redis.Redis, protocol: ScriptProtocol,
          worker: Any) -> list[View]:
    """Every view of issue 40, in the order the page lists them (``worker``: a
    ``lockworker.Worker`` of :data:`NAMESPACE`, for ``reset_all``)."""
    from lockworker.cli.web.view import Collector
    from lockworker.protocol import index

    url = server.url
    who = Holder("bench-views-again", new_run())

    def again() -> None:  # the given-up jobs a reset made pending, given up again
        if index.count(client, NAMESPACE).gave_up != GAVE_UP:
            give_up(protocol, NAMESPACE, GAVE_UP, who)

    def all_reset(_answer: object) -> None:
        left = index.count(client, NAMESPACE).gave_up
        if left:
            raise RuntimeError(f"{left} given-up jobs left after the reset")

    def reset_all_check(answer: object) -> None:
        if not isinstance(answer, dict) or len(answer) != GAVE_UP:
            raise RuntimeError(f"reset_all reset {answer!r}, not {GAVE_UP} jobs")

    def dashboard() -> object:
        found = Collector(client).read()
        if found.error is not None:
            raise RuntimeError(found.error)
        return found

    return [
        View("`lockworker status`", cli_view(url, "status")),
        View(f"`lockworker status --namespace {NAMESPACE}`",
             cli_view(url, "status", "--namespace", NAMESPACE)),
        View("`lockworker status --state gave_up`", cli_view(url, "status", "--state", "gave_up")),
        View("`lockworker status --state held`", cli_view(url, "status", "--state", "held")),
        View("`lockworker status --job done-7`", cli_view(url, "status", "--job", "done-7")),
        View("`lockworker status --json`", cli_view(url, "status", "--json")),
        View(f"`lockworker reset --namespace {NAMESPACE} --state gave_up --yes`",
             cli_view(url, "reset", "--namespace", NAMESPACE, "--state", "gave_up", "--yes"),
             prepare=again, check=all_reset),
        View('`Worker.reset_all("gave_up")`', lambda: worker.reset_all("gave_up"),
             prepare=again, check=reset_all_check),
        View(DASHBOARD, dashboard),
        View(f"one index read (`protocol.index.count`, namespace {NAMESPACE})",
             lambda: index.count(client, NAMESPACE), part=True),
    ]


def measure(jobs: int, runs: int, previous: ViewsRun | None,
            say: Callable[[str], None]) -> ViewsRun:
    """One size on a server of its own."""
    result = ViewsRun(jobs)
    with RedisServer() as server:
        populate(server, result)
        say(f"  {jobs:,} finished jobs written in {result.fill_seconds:.1f} s; "
            f"{result.keys:,} keys, {result.used_memory / 2**20:,.0f} MiB")
        client = server.client()
        worker = lockworker.Worker(client, namespace=NAMESPACE, handle_signals=False)
        try:
            protocol = ScriptProtocol(client)
            for view in views(server, client, protocol, worker):
                structlog.reset_defaults()  # a command line configured its own logging
                quiet_logging(to_devnull=True)  # a library call's warnings not shown
                before = previous.view(view.name) if previous is not None else None
                scale = jobs / previous.jobs if previous is not None else 1.0
                found = timed(client, view, runs, before, scale)
                shown = (f"{found.seconds * 1000:,.0f} ms (runs: {len(found.times)})"
                         if found.times else found.error or "not run")
                say(f"  {view.name}: {shown}")
                result.views.append(found)
        finally:
            worker.close()
            client.close()
            structlog.reset_defaults()  # the command line configured its own logging
            quiet_logging()
    return result


def run(sizes: tuple[int, ...], runs: int, command: str,
        say: Callable[[str], None]) -> ViewsSection:
    """Every size in turn (smallest first); a size whose fill would pass
    :data:`FILL_CAP` is skipped, with why."""
    from benchmarks.common import cli

    load = ", ".join(f"{value:.2f}" for value in os.getloadavg())
    section = ViewsSection([], runs, command, load)
    cli("--version", timeout=120)  # compiles the bytecode, as an install does
    started = time.monotonic()
    cli("--version", timeout=120)
    section.startup_seconds = time.monotonic() - started
    previous: ViewsRun | None = None
    for jobs in sorted(sizes):
        if previous is not None and previous.fill_seconds * jobs / previous.jobs > FILL_CAP:
            section.skipped.append(
                f"{jobs:,} finished jobs: not run, the fill would take about "
                f"{previous.fill_seconds * jobs / previous.jobs:,.0f} s (more than "
                f"{FILL_CAP:,.0f} s)"
            )
            continue
        say(f"views with {jobs:,} finished jobs")
        previous = measure(jobs, runs, previous, say)
        section.runs.append(previous)
    return section
