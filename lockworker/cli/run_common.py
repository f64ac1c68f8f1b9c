"""What a ``lockworker run`` process does around its daemon, sync or asyncio alike.

The daemon is made from the options by one function and runs inside one
:func:`session`, whichever kind it is, so both kinds take the same options, log the
same events, serve the same metrics and stop on signals the same way (the behaviour is
described in :mod:`lockworker.cli.run`). Only running the daemon differs: in the main
thread (:mod:`lockworker.cli.run`) or under ``asyncio.run``
(:mod:`lockworker.cli.run_aio`).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import threading
from collections.abc import Callable, Iterator
from types import ModuleType
from typing import Any

import redis

from lockworker.cli import periodic
from lockworker.cli import probes as http
from lockworker.cli.common import EXIT_INTERRUPTED, EXIT_USAGE, CliError, safe_url
from lockworker.cli.schedule import give_up_on
from lockworker.cli.stopping import INTERRUPTED, exit_now
from lockworker.cli.target import is_asyncio, is_leader
from lockworker.errors import InvalidConfig, InvalidHook
from lockworker.model.servercheck import Status
from lockworker.runtime import events, health, servercheck
from lockworker.runtime.signals import stop_on_signals

EXIT_GRACE_EXPIRED = 1

STARTED = "run.started"
STOPPING = "run.stopping"
STOPPED = "run.stopped"
GRACE_EXPIRED = "run.grace_expired"
NO_OWNER = "run.no_owner"

WORKER_ONLY = (
    "max_attempts", "concurrency", "stream", "group", "retry_delay", "give_up_on",
    "retention", "done_retention", "every", "cron", "tz", "catch_up", "overlap",
)


def socket_timeout(lock_timeout: float) -> float:
    """Socket timeout of the daemon's client: below the lease where possible (so a hung
    connection cannot outlast it), above the stream's 0.25 s blocking read."""
    return max(0.75, min(5.0, lock_timeout / 2))


def build(cls: Any, client: Any, args: argparse.Namespace) -> Any:
    """An instance of ``cls`` (any of the four kinds) from the options; the CLI installs
    signal handlers itself. The asyncio classes take no durability options: the
    command refused them before (:func:`lockworker.cli.run_aio.check`)."""
    common: dict[str, Any] = {
        "lock_timeout": args.lock_timeout, "owner": args.owner, "role": args.role,
        "backup_delay": args.backup_delay, "handle_signals": False,
    }
    if not is_asyncio(cls):
        common.update(durability=args.durability, replicas=args.replicas)
    try:
        if is_leader(cls):
            return cls(client, name=args.namespace, **common)
        schedule: dict[str, Any] = {}
        if args.give_up_on:
            schedule["give_up_on"] = give_up_on(args.give_up_on, args.app_dir)
        if args.retry_delay is not None:
            schedule["retry_delay"] = args.retry_delay
        for name in ("retention", "done_retention"):
            if getattr(args, name, None) is not None:
                schedule[name] = getattr(args, name)
        worker = cls(
            client, namespace=args.namespace,
            max_attempts=args.max_attempts if args.max_attempts is not None else 5,
            **schedule, **common,
        )
        hooks = getattr(worker, "_hooks", None)
        if hooks is not None:  # a daemon runs jobs: say so now, not at its first job
            hooks.require(" to run a worker")
        return worker
    except (InvalidConfig, InvalidHook) as exc:
        raise CliError(str(exc)) from exc
    except TypeError as exc:  # a subclass whose constructor takes other arguments
        raise CliError(f"cannot construct {cls.__qualname__}: {exc}") from exc


def stream_source(client: redis.Redis, args: argparse.Namespace, owner: str) -> Any:
    """What the worker serves, read on a sync client (the asyncio Worker reads it in a
    worker thread): its stream (``--stream``, else the namespace), under its owner, in
    consumer group ``--group`` if given; or the schedules of ``--every``/``--cron``,
    beside ``--stream`` if given (:mod:`lockworker.cli.periodic`). A name it refuses is
    one line, exit 2."""
    return periodic.source(client, args, owner)


def require_safe(client: Any, args: argparse.Namespace) -> None:
    """With ``--require-safe-server``: one line and exit 2 if a check of the server's
    eviction and persistence settings fails (the daemon logs every finding itself)."""
    if not args.require_safe_server:
        return
    failed = [f for f in servercheck.settings_findings(client) if f.status is Status.FAILURE]
    if failed:
        raise CliError("--require-safe-server: " + "; ".join(
            f"{f.check} on {f.server}: {f.value}: {f.meaning}; fix: {f.fix}" for f in failed
        ), EXIT_USAGE)


class GraceTimer:
    """Exits the process if the stop takes longer than the grace period.

    Started by the signal handler; a daemon thread, so it never keeps a process alive
    that stopped in time.
    """

    def __init__(self, grace: float, log: Any) -> None:
        self.grace = grace
        self.log = log
        self._timer: threading.Timer | None = None

    def start(self) -> None:
        if self._timer is None:
            self._timer = threading.Timer(self.grace, self._expire)
            self._timer.daemon = True
            self._timer.start()

    def cancel(self) -> None:
        if self._timer is not None:
            self._timer.cancel()

    def _expire(self) -> None:
        exit_now(EXIT_GRACE_EXPIRED, lambda: self.log.error(
            GRACE_EXPIRED, grace=self.grace, exit_code=EXIT_GRACE_EXPIRED
        ))


def metrics_extra(args: argparse.Namespace) -> ModuleType | None:
    """:mod:`lockworker.metrics` if ``--metrics-port`` was given, checked before any work:
    without the extra, one line naming it (exit 2). Never imported otherwise, so a run
    without metrics does not load ``prometheus_client``."""
    if args.metrics_port is None:
        if args.metrics_host is not None:
            raise CliError("--metrics-host: only with --metrics-port")
        return None
    try:
        from lockworker import metrics  # noqa: PLC0415 - only when asked for
    except ImportError as exc:  # ExtraNotInstalled, naming the install line
        raise CliError(f"--metrics-port: {exc}") from exc
    return metrics


def serve_metrics(
    metrics: ModuleType, args: argparse.Namespace, daemon: Any, url: str
) -> tuple[str, health.Probes]:
    """Count the events and serve them on ``--metrics-host:--metrics-port``, beside the
    daemon's probes (:mod:`lockworker.cli.probes`); the URL and the probes. A port that
    cannot be listened on is one line, exit 2."""
    probes = http.for_daemon(daemon, url, socket_timeout(args.lock_timeout))
    host = args.metrics_host or metrics.DEFAULT_HOST
    where = f"{host}:{args.metrics_port}"
    try:
        served = http.app(probes, metrics.wsgi_app())
        http.serve(served, args.metrics_port, host)
    except OSError as exc:
        raise CliError(f"--metrics-port: cannot listen on {where}: {exc.strerror or exc}") from exc
    return f"http://{where}/metrics", probes


@contextlib.contextmanager
def session(
    daemon: Any, args: argparse.Namespace, url: str, metrics: ModuleType | None
) -> Iterator[Callable[[], None]]:
    """Around the daemon's run: the metrics and probes endpoint, the signal handlers
    (first signal: ``daemon.stop()`` and the grace timer; second: exit 130 at once),
    and the command's own events; the start-up's handlers (``args.startup``,
    :mod:`lockworker.cli.stopping`) end here. ``daemon.stop()`` is called from a courier thread,
    never from the signal handler itself: both kinds' ``stop`` are safe there. Yields
    what to call when the daemon begins to serve or campaign (``/readyz`` waits for it)."""
    kind = "leader" if is_leader(type(daemon)) else "worker"
    log = events.logger(
        events.CLI, None, kind=kind, target=args.target, owner=daemon.owner, role=args.role
    )
    grace = GraceTimer(args.grace, log)

    def on_stop(signum: int) -> None:
        log.info(STOPPING, signal=signum, grace=args.grace)
        daemon.stop()
        grace.start()

    def on_again(signum: int) -> None:
        exit_now(EXIT_INTERRUPTED, lambda: log.warning(
            INTERRUPTED, signal=signum, exit_code=EXIT_INTERRUPTED,
            hint="jobs in hand are taken over when their leases run out",
        ))

    started: Callable[[], None] = lambda: None  # noqa: E731 - no probes without metrics
    try:
        served = {}
        if metrics is not None:
            served["metrics"], probes = serve_metrics(metrics, args, daemon, url)
            started = probes.started
        with stop_on_signals(on_stop, on_again=on_again):
            startup = getattr(args, "startup", None)
            if startup is not None:  # the command's start-up handlers: replaced now
                startup.handed_over()
            log.info(
                STARTED, redis=safe_url(url), namespace=args.namespace, pid=os.getpid(),
                asyncio=is_asyncio(type(daemon)), **served,
            )
            if args.owner is None and kind == "worker":
                log.warning(NO_OWNER, hint="pass a stable --owner so a restart resumes the stream")
            yield started
    finally:
        grace.cancel()
    log.info(STOPPED)
