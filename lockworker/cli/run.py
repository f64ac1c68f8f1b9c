"""``lockworker run MODULE:CLASS``: one Worker (serving a stream) or Leader, as a daemon.

Start-up checks everything it can before doing any work: the options (and, with
``--metrics-port``, that the ``metrics`` extra is installed), the class (its import and
its kind), the constructor's arguments, Redis (a PING), and the metrics port (it
listens before the first job). Each failure is one line on stderr and exit code 2 (or 1
for Redis).

Stopping: the first SIGTERM or SIGINT stops taking work. Running hooks see
``job.stopping`` / ``term.stopping``; a hook that checks it hands its job over at once
(no attempt spent), others finish. When all ended the process exits 0. If that takes
longer than ``--grace`` seconds the process exits 1 at once: the jobs still in hand are
taken over by another process when their leases run out. supervisord's
``stopwaitsecs`` must exceed ``--grace``, or supervisord SIGKILLs first. A second
SIGTERM or SIGINT logs ``run.interrupted`` and exits 130 at once, without waiting for
anything: the jobs still in hand stay pending, their leases left to run out, and
another process takes them over then (the next attempt).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import threading
from collections.abc import Callable
from types import ModuleType
from typing import Any, NoReturn

import redis

from lockworker.cli.common import (
    EXIT_INTERRUPTED,
    EXIT_OK,
    CliError,
    connect,
    redis_url,
    safe_url,
)
from lockworker.cli.target import load
from lockworker.daemons.leader import Leader
from lockworker.daemons.sources import StreamSource
from lockworker.daemons.worker import Worker
from lockworker.errors import InvalidConfig, InvalidHook
from lockworker.runtime import events
from lockworker.runtime.signals import stop_on_signals

EXIT_GRACE_EXPIRED = 1
LAST_WORDS = 1.0
"""Seconds the last log line of an exit may take before the process exits anyway."""

STARTED = "run.started"
STOPPING = "run.stopping"
STOPPED = "run.stopped"
GRACE_EXPIRED = "run.grace_expired"
INTERRUPTED = "run.interrupted"
NO_OWNER = "run.no_owner"

WORKER_ONLY = ("max_attempts", "concurrency", "stream")


def socket_timeout(lock_timeout: float) -> float:
    """Socket timeout of the daemon's client: below the lease where possible (so a hung
    connection cannot outlast it), above the stream's 0.25 s blocking read."""
    return max(0.75, min(5.0, lock_timeout / 2))


def build(cls: type[Worker] | type[Leader], client: redis.Redis, args: argparse.Namespace) -> Any:
    """An instance of ``cls`` from the options; the CLI installs signal handlers itself."""
    common: dict[str, Any] = {
        "lock_timeout": args.lock_timeout, "owner": args.owner, "role": args.role,
        "backup_delay": args.backup_delay, "handle_signals": False,
    }
    try:
        if issubclass(cls, Leader):
            return cls(client, name=args.namespace, **common)
        return cls(
            client, namespace=args.namespace,
            max_attempts=args.max_attempts if args.max_attempts is not None else 3,
            durability=args.durability, replicas=args.replicas, **common,
        )
    except (InvalidConfig, InvalidHook) as exc:
        raise CliError(str(exc)) from exc
    except TypeError as exc:  # a subclass whose constructor takes other arguments
        raise CliError(f"cannot construct {cls.__qualname__}: {exc}") from exc


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


def exit_now(code: int, last_words: Callable[[], None]) -> NoReturn:
    """Log ``last_words``, flush, and end the process with ``code`` without waiting for
    the threads still running jobs (their leases run out; others take the jobs over).

    The line is written from a thread given :data:`LAST_WORDS` seconds, so a stalled
    stderr (a full pipe) cannot keep the process alive.
    """

    def say() -> None:
        last_words()
        for stream in (sys.stderr, sys.stdout):
            with contextlib.suppress(Exception):  # a closed stream: nothing more to say
                stream.flush()

    speaker = threading.Thread(target=say, name="lockworker-exit", daemon=True)
    speaker.start()
    speaker.join(LAST_WORDS)
    os._exit(code)


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


def serve_metrics(metrics: ModuleType, args: argparse.Namespace) -> str:
    """Count the events and serve them on ``--metrics-host:--metrics-port``; the URL.
    A port that cannot be listened on is one line, exit 2."""
    host = args.metrics_host or metrics.DEFAULT_HOST
    where = f"{host}:{args.metrics_port}"
    try:
        metrics.serve_http(args.metrics_port, host=host)
    except OSError as exc:
        raise CliError(f"--metrics-port: cannot listen on {where}: {exc.strerror or exc}") from exc
    return f"http://{where}/metrics"


def main(args: argparse.Namespace) -> int:
    metrics = metrics_extra(args)
    cls = load(args.target, args.app_dir)
    if issubclass(cls, Leader):
        given = [name for name in WORKER_ONLY if getattr(args, name) is not None]
        if given:
            flags = ", ".join("--" + name.replace("_", "-") for name in given)
            raise CliError(f"{flags}: only for Worker classes; {args.target} is a Leader")
    url = redis_url(args.redis)
    client = connect(url, socket_timeout=socket_timeout(args.lock_timeout))
    daemon = build(cls, client, args)
    kind = "leader" if isinstance(daemon, Leader) else "worker"
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

    try:
        served = {} if metrics is None else {"metrics": serve_metrics(metrics, args)}
        with stop_on_signals(on_stop, on_again=on_again):
            log.info(
                STARTED, redis=safe_url(url), namespace=args.namespace, pid=os.getpid(),
                **served,
            )
            if args.owner is None and kind == "worker":
                log.warning(NO_OWNER, hint="pass a stable --owner so a restart resumes the stream")
            if isinstance(daemon, Leader):
                daemon.run()
            else:
                _serve(daemon, client, args)
    finally:
        grace.cancel()
        daemon.close()
        client.close()
    log.info(STOPPED)
    return EXIT_OK


def _serve(worker: Worker, client: redis.Redis, args: argparse.Namespace) -> None:
    try:
        source = StreamSource(client, args.stream or args.namespace, owner=worker.owner)
    except InvalidConfig as exc:
        raise CliError(str(exc)) from exc
    worker.serve(source, concurrency=args.concurrency or 4)
