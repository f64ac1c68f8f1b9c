"""``lockworker``: argument parsing and dispatch; the process's exit code.

Subcommands live in their own modules (:mod:`~lockworker.cli.run`,
:mod:`~lockworker.cli.jobs`, :mod:`~lockworker.cli.status`, :mod:`~lockworker.cli.demo`,
:mod:`~lockworker.cli.server`). Every error a user can fix ends as one line on stderr,
``lockworker <command>: <what is wrong>``, and a non-zero exit code (2 for a command
line that cannot work, 1 for a failure at run time); never a traceback. Output into a
closed pipe (``lockworker status | head``) ends quietly, exit 141.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Callable, Sequence
from typing import Any, NoReturn, TypeVar

import redis

from lockworker import __version__, config
from lockworker.cli import (
    check,
    dashboard,
    delay,
    history,
    kept,
    logs,
    periodic,
    schedule,
    server,
    stopping,
    summary,
)
from lockworker.cli.common import (
    DEFAULT_URL,
    ENV_URL,
    EXIT_FAILURE,
    EXIT_INTERRUPTED,
    EXIT_USAGE,
    CliError,
    check_url,
)
from lockworker.errors import InvalidConfig, LockworkerError

T = TypeVar("T")


EXIT_BROKEN_PIPE = 141
"""Whoever read the output went away (``lockworker status | head``): 128 + SIGPIPE, as
a shell reports a command that SIGPIPE ended; nothing is printed."""


class HelpFormatter(argparse.HelpFormatter):
    """Every option's default at the end of its help, unless the help names it itself."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        if (
            "default" in text or not action.option_strings
            or action.default in (None, False, argparse.SUPPRESS)
        ):
            return text
        return f"{text} (default: %(default)s)"


class Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line (and a hint), not usage text plus a line."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", HelpFormatter)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"{self.prog}: {message} (see {self.prog} --help)\n")

    def exit(self, status: int = 0, message: str | None = None) -> NoReturn:
        # --help and --version print to stdout: flush here, inside main(), so a closed
        # pipe is the quiet BrokenPipeError main() handles, not a message at exit.
        sys.stdout.flush()
        super().exit(status, message)


def _checked(text: str, parse: Callable[[str], T], check: Callable[[T], T], kind: str) -> T:
    """``check(parse(text))``: the library's own rule (:mod:`lockworker.config`) for an
    option's value, so the command line refuses exactly what the constructors refuse."""
    try:
        value = parse(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected {kind}, got {text!r}") from None
    try:
        return check(value)
    except InvalidConfig as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _seconds(text: str, *, allow_zero: bool) -> float:
    """A finite number of seconds, > 0 (or >= 0 with ``allow_zero``)."""
    return _checked(
        text, float, lambda v: config.seconds(v, "the value", positive=not allow_zero),
        "a number of seconds",
    )


def positive_float(text: str) -> float:
    """A number of seconds > 0."""
    return _seconds(text, allow_zero=False)


def lease_seconds(text: str) -> float:
    """A lease: seconds, at least :data:`lockworker.config.MIN_LEASE`."""
    return _checked(text, float, lambda v: config.lease(v, "the value"), "a number of seconds")


def non_negative_float(text: str) -> float:
    """A number of seconds >= 0."""
    return _seconds(text, allow_zero=True)


def positive_int(text: str) -> int:
    """An int >= 1."""
    return _checked(text, int, lambda v: config.count(v, "the value"), "an integer")


def tcp_port(text: str) -> int:
    """A port to listen on: an int from 1 to 65535."""
    return _checked(text, int, lambda v: config.port(v, "the value"), "a port number")


def _common(*, top: bool, redis: bool = True) -> Parser:
    """Options every subcommand takes, before or after its name.

    The top-level parser holds their defaults; a subcommand's copies default to nothing
    (``SUPPRESS``), so ``lockworker --log-level debug status`` is not undone by the
    subcommand's default. The defaults are therefore written out in the help.
    """
    common = Parser(add_help=False)
    absent: dict[str, Any] = {} if top else {"default": argparse.SUPPRESS}
    if redis:
        common.add_argument(
            "--redis", metavar="URL", **(absent or {"default": None}),
            help=f"Redis URL (default: ${ENV_URL}, else {DEFAULT_URL})",
        )
    common.add_argument(
        "--log-format", choices=logs.FORMATS, **(absent or {"default": "auto"}),
        help="json lines, or console lines (default: auto: console on a terminal, else json)",
    )
    common.add_argument(
        "--log-level", choices=logs.LEVELS, **(absent or {"default": "info"}),
        help="the least severe events shown (default: info)",
    )
    return common


def _add_run(sub: argparse._SubParsersAction[Parser], common: Parser) -> None:
    run = sub.add_parser(
        "run", parents=[common], help="run a Worker (serving a stream) or a Leader",
        description="Run MODULE:CLASS, a lockworker.Worker subclass (serving a stream of "
        "jobs) or a lockworker.Leader subclass, or a subclass of their lockworker.aio "
        "twins (under asyncio.run), until SIGTERM/SIGINT. The first signal "
        "finishes or hands over the work in hand within --grace and exits 0; a second "
        f"one exits {EXIT_INTERRUPTED} at once.",
    )
    run.add_argument("target", metavar="MODULE:CLASS")
    run.add_argument(
        "--namespace", "--name", dest="namespace", required=True,
        help="Worker: the jobs' namespace; Leader: the leader's name (required)",
    )
    run.add_argument(
        "--role", choices=("primary", "backup"), default="primary",
        help="a backup lets a free job lie --backup-delay before competing while a "
        "primary of its namespace serves (leadership: always)",
    )
    run.add_argument(
        "--owner", help="this process's id; keep it stable per deployed process so a "
        "restart resumes its stream position (default: host:pid:random)",
    )
    run.add_argument(
        "--lock-timeout", type=lease_seconds, default=10.0, metavar="SECONDS",
        help="the lease: bounds the takeover after a crash",
    )
    run.add_argument(
        "--backup-delay", type=non_negative_float, default=0.5, metavar="SECONDS",
        help="how long a backup lets a free job or leadership lie before competing",
    )
    run.add_argument(
        "--max-attempts", type=positive_int, metavar="N",
        help="Worker only: attempts before giving a job up (default: 5)",
    )
    schedule.add_options(run)
    periodic.add_options(run)
    kept.add_run_options(run, positive_float)
    run.add_argument(
        "--concurrency", type=positive_int, metavar="N",
        help="Worker only: jobs run at a time (default: 4)",
    )
    run.add_argument(
        "--durability", choices=("local", "replicated"), default="local",
        help="'replicated' counts a step (a job's or a leader's) once --replicas replicas "
        "acknowledged it (WAIT; docs/topologies.md); lockworker.aio classes: local only",
    )
    run.add_argument(
        "--replicas", type=positive_int, default=1, metavar="N",
        help="with --durability replicated: replicas that must acknowledge",
    )
    run.add_argument("--stream", help="Worker only: the stream to serve (default: namespace)")
    run.add_argument("--group", metavar="NAME", help="Worker only: share the stream with "
                     "consumer group NAME, each entry to one member (default: all read all)")
    run.add_argument(
        "--grace", type=non_negative_float, default=10.0, metavar="SECONDS",
        help="after the first SIGTERM/SIGINT, time to finish or hand over the work in "
        "hand before exiting 1 anyway; keep supervisord's stopwaitsecs above it",
    )
    run.add_argument(
        "--app-dir", default=".", metavar="DIR",
        help="directory put first on sys.path to import MODULE from",
    )
    run.add_argument(
        "--metrics-port", type=tcp_port, metavar="PORT",
        help="serve Prometheus metrics over HTTP at /metrics on this port, and the "
        "probes /healthz and /readyz; needs pip install 'lockworker[metrics]' (default: "
        "none, no metrics server)",
    )
    run.add_argument(
        "--metrics-host", metavar="HOST",
        help="the address --metrics-port listens on (default: 0.0.0.0, every IPv4 "
        "interface; 127.0.0.1 keeps it on this host)",
    )
    check.add_run_option(run)


def _add_jobs(sub: argparse._SubParsersAction[Parser], common: Parser) -> None:
    delay.add_parser(sub, common)

    status = sub.add_parser(
        "status", parents=[common], help="jobs and leaders as a table",
        description="Every job and leader Redis knows of: their counts by state, then "
        "a table of the first --limit rows (or JSON: all of them).",
    )
    status.add_argument("--namespace", help="only this namespace (default: all)")
    status.add_argument("--json", action="store_true", help="one JSON document, for "
                        "scripts: every row (never cut) and the counts by state")
    shown = status.add_mutually_exclusive_group()
    shown.add_argument(
        "--limit", type=positive_int, default=summary.DEFAULT_LIMIT, metavar="N",
        help="the table's rows shown, after the counts by state; a last line says how "
        "many more there are",
    )
    shown.add_argument("--all", action="store_true", help="every row in the table")
    kept.add_age_options(status, positive_float, "")
    history.add_status_options(status)

    reset = sub.add_parser(
        "reset", parents=[common], help="make jobs pending again (one, or all in a state)",
        description="Make a done or gave_up job pending again with no attempt spent "
        "(asks first; a job held by a live process only with --force), or every job of "
        "a namespace in one state (--state gave_up), and re-drive it: a stream's job that "
        "gave up is added to its stream again, so the workers serving it run it; one "
        "whose payload was not kept is named with the `lockworker submit` command to run.",
    )
    history.add_reset_options(reset)
    reset.add_argument("--namespace", required=True, help="the job's namespace (required)")
    reset.add_argument("--yes", "-y", action="store_true", help="do not ask")
    reset.add_argument("--force", action="store_true", help="reset even while it is held")
    reset.add_argument(
        "--retention", type=positive_float, default=86400.0, metavar="SECONDS",
        help="how long the reset state is kept " + kept.RETENTION_HELP,
    )


def _add_demo(sub: argparse._SubParsersAction[Parser]) -> None:
    demo = sub.add_parser(
        "demo", parents=[_common(top=False, redis=False)],
        help="primary + two backups, one killed",
        description="A primary and two backups (`lockworker run` processes) share a "
        "stream of jobs; the primary is SIGKILLed part way; a summary checks that every "
        "job was done exactly once. Runs on an embedded server it starts and stops, "
        "unless --redis is given.",
    )
    demo.add_argument(
        "--redis", metavar="URL", default=argparse.SUPPRESS,
        help="run on this server instead, under a namespace of its own whose keys are "
        f"deleted at the end (default: an embedded server; ${ENV_URL} is not read)",
    )
    demo.add_argument("--jobs", type=positive_int, default=30, metavar="N",
                      help="how many jobs to submit")
    demo.add_argument(
        "--duration", type=positive_float, default=6.0, metavar="SECONDS",
        help="seconds over which the jobs are submitted",
    )
    demo.add_argument("--lock-timeout", type=lease_seconds, default=1.0, metavar="SECONDS",
                      help="the workers' lease")
    demo.add_argument(
        "--backup-delay", type=non_negative_float, default=0.3, metavar="SECONDS",
        help="how long a backup lets a free job lie before competing",
    )
    demo.add_argument("--seed", type=int, default=None,
                      help="job durations' random seed (default: a random one)")


def build_parser() -> Parser:
    """The whole command line (also used by the parsing unit tests)."""
    common = _common(top=False)
    parser = Parser(
        prog="lockworker", description="Failover workers and leaders on Redis.",
        parents=[_common(top=True)],
    )
    parser.add_argument("--version", action="version", version=f"lockworker {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND",
                                parser_class=Parser)
    _add_run(sub, common)
    _add_jobs(sub, common)
    _add_demo(sub)
    server.add_parser(sub, _common(top=False, redis=False), tcp_port)
    check.add_parser(sub, common, positive_float, positive_int)
    dashboard.add_parser(sub, common, positive_float, tcp_port)
    return parser


def parse(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """The command line as ``main`` reads it: an argument nobody knows is reported by
    the subcommand's parser (``lockworker run: unrecognized arguments: ...``)."""
    parser = build_parser()
    args, extras = parser.parse_known_args(argv)
    if extras:
        commands = next(
            a.choices for a in parser._actions if isinstance(a, argparse._SubParsersAction)
        )
        commands.get(args.command, parser).error(f"unrecognized arguments: {' '.join(extras)}")
    return args


HANDLERS = {
    "run": ("run", "main"), "submit": ("jobs", "submit_main"),
    "reset": ("jobs", "reset_main"), "status": ("status", "main"),
    "server": ("server", "main"), "demo": ("demo", "main"), "check": ("check", "main"),
    "dashboard": ("dashboard", "main"),
}


def _handler(command: str) -> Callable[[argparse.Namespace], int]:
    # Imported on demand: `lockworker submit` need not import the demo's machinery.
    module, name = HANDLERS[command]
    handler: Callable[[argparse.Namespace], int] = getattr(
        importlib.import_module(f"lockworker.cli.{module}"), name
    )
    return handler


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``lockworker`` console script; returns the exit code."""
    try:
        return _main(argv)
    except BrokenPipeError:
        # The reader is gone: say nothing, and point stdout at /dev/null so the flush
        # at exit has nowhere to fail ("Exception ignored ... BrokenPipeError").
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
        return EXIT_BROKEN_PIPE


def _main(argv: Sequence[str] | None) -> int:
    args = parse(argv)
    prog = f"lockworker {args.command}"
    logs.configure(args.log_format, args.log_level)
    try:
        # `run`: a stop signal from here on ends the start-up cleanly (exit 0), until
        # the daemon's own handlers take over (lockworker.cli.stopping).
        with stopping.guarded(args.command == "run") as startup:
            args.startup = startup
            if args.redis is not None:
                check_url(args.redis, "--redis")  # every command, before anything starts
            code = _handler(args.command)(args)
            sys.stdout.flush()  # here, where a closed pipe is caught, rather than at exit
            return code
    except stopping.StoppedWhileStarting as stop:
        return stopping.stopped_while_starting(stop, args)
    except CliError as exc:
        print(f"{prog}: {exc}", file=sys.stderr)
        return exc.code
    except (LockworkerError, redis.RedisError) as exc:
        print(f"{prog}: {type(exc).__name__}: {exc}", file=sys.stderr)
        return EXIT_FAILURE
    except KeyboardInterrupt:
        print(f"{prog}: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
