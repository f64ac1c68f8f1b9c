"""``lockworker``: argument parsing and dispatch; the process's exit code.

Subcommands live in their own modules (:mod:`~lockworker.cli.run`,
:mod:`~lockworker.cli.jobs`, :mod:`~lockworker.cli.status`,
:mod:`~lockworker.cli.demo`). Every error a user can fix ends as one line on stderr,
``lockworker <command>: <what is wrong>``, and a non-zero exit code (2 for a command
line that cannot work, 1 for a failure at run time); never a traceback.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from typing import NoReturn, TypeVar

import redis

from lockworker import __version__, config
from lockworker.cli import logs
from lockworker.cli.common import ENV_URL, EXIT_FAILURE, EXIT_USAGE, CliError
from lockworker.errors import InvalidConfig, LockworkerError

T = TypeVar("T")

EXIT_INTERRUPTED = 130


class Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line (and a hint), not usage text plus a line."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"{self.prog}: {message} (see {self.prog} --help)\n")


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


def non_negative_float(text: str) -> float:
    """A number of seconds >= 0."""
    return _seconds(text, allow_zero=True)


def positive_int(text: str) -> int:
    """An int >= 1."""
    return _checked(text, int, lambda v: config.count(v, "the value"), "an integer")


def _common() -> Parser:
    """Options every subcommand takes (so they may follow the subcommand's name)."""
    common = Parser(add_help=False)
    common.add_argument(
        "--redis", metavar="URL",
        help=f"Redis URL (default: ${ENV_URL}, else redis://127.0.0.1:6379/0)",
    )
    common.add_argument(
        "--log-format", choices=logs.FORMATS, default="auto",
        help="json lines, or console lines (default: console on a terminal, else json)",
    )
    common.add_argument("--log-level", choices=logs.LEVELS, default="info")
    return common


def _add_run(sub: argparse._SubParsersAction[Parser], common: Parser) -> None:
    run = sub.add_parser(
        "run", parents=[common], help="run a Worker (serving a stream) or a Leader",
        description="Run MODULE:CLASS, a lockworker.Worker subclass (serving a stream of "
        "jobs) or a lockworker.Leader subclass, until SIGTERM/SIGINT.",
    )
    run.add_argument("target", metavar="MODULE:CLASS")
    run.add_argument(
        "--namespace", "--name", dest="namespace", required=True,
        help="Worker: the jobs' namespace; Leader: the leader's name",
    )
    run.add_argument("--role", choices=("primary", "backup"), default="primary")
    run.add_argument(
        "--owner", help="this process's id; keep it stable per deployed process so a "
        "restart resumes its stream position (default: host:pid:random)",
    )
    run.add_argument("--lock-timeout", type=positive_float, default=10.0, metavar="SECONDS")
    run.add_argument(
        "--backup-delay", type=non_negative_float, default=0.5, metavar="SECONDS",
        help="how long a backup lets a free job or leadership lie before competing",
    )
    run.add_argument("--max-attempts", type=positive_int, metavar="N", help="Worker only (3)")
    run.add_argument("--concurrency", type=positive_int, metavar="N", help="Worker only (4)")
    run.add_argument("--stream", help="Worker only: the stream to serve (default: namespace)")
    run.add_argument(
        "--grace", type=non_negative_float, default=10.0, metavar="SECONDS",
        help="after SIGTERM, time to finish or hand over the work in hand before exiting "
        "anyway (keep supervisord's stopwaitsecs above it)",
    )
    run.add_argument(
        "--app-dir", default=".", metavar="DIR",
        help="directory put first on sys.path to import MODULE from (default: .)",
    )


def build_parser() -> Parser:
    """The whole command line (also used by the parsing unit tests)."""
    common = _common()
    parser = Parser(prog="lockworker", description="Failover workers and leaders on Redis.")
    parser.add_argument("--version", action="version", version=f"lockworker {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND",
                                parser_class=Parser)
    _add_run(sub, common)

    submit = sub.add_parser("submit", parents=[common], help="add a job to a stream")
    submit.add_argument("stream")
    submit.add_argument("job_id", metavar="JOB_ID")
    submit.add_argument("payload", metavar="PAYLOAD_JSON", nargs="?", default=None)

    status = sub.add_parser("status", parents=[common], help="jobs and leaders as a table")
    status.add_argument("--namespace", help="only this namespace (default: all)")
    status.add_argument("--json", action="store_true", help="one JSON document, for scripts")
    status.add_argument(
        "--retention", type=positive_float, default=86400.0, metavar="SECONDS",
        help="the workers' retention, to tell a job's age from its key's time to live",
    )

    reset = sub.add_parser("reset", parents=[common], help="make a job pending again")
    reset.add_argument("job_id", metavar="JOB_ID")
    reset.add_argument("--namespace", required=True)
    reset.add_argument("--yes", "-y", action="store_true", help="do not ask")
    reset.add_argument("--force", action="store_true", help="reset even while it is held")
    reset.add_argument("--retention", type=positive_float, default=86400.0, metavar="SECONDS")

    demo = sub.add_parser("demo", parents=[common], help="primary + two backups, one killed")
    demo.add_argument("--jobs", type=positive_int, default=30, metavar="N")
    demo.add_argument(
        "--duration", type=positive_float, default=6.0, metavar="SECONDS",
        help="seconds over which the jobs are submitted",
    )
    demo.add_argument("--lock-timeout", type=positive_float, default=1.0, metavar="SECONDS")
    demo.add_argument(
        "--backup-delay", type=non_negative_float, default=0.3, metavar="SECONDS"
    )
    demo.add_argument("--seed", type=int, default=None, help="job durations' random seed")
    return parser


def _handler(command: str) -> Callable[[argparse.Namespace], int]:
    # Imported on demand: `lockworker submit` need not import the demo's machinery.
    if command == "run":
        from lockworker.cli.run import main as run_main  # noqa: PLC0415

        return run_main
    if command in ("submit", "reset"):
        from lockworker.cli import jobs  # noqa: PLC0415

        return jobs.submit_main if command == "submit" else jobs.reset_main
    if command == "status":
        from lockworker.cli.status import main as status_main  # noqa: PLC0415

        return status_main
    from lockworker.cli.demo import main as demo_main  # noqa: PLC0415

    return demo_main


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``lockworker`` console script; returns the exit code."""
    args = build_parser().parse_args(argv)
    prog = f"lockworker {args.command}"
    logs.configure(args.log_format, args.log_level)
    try:
        return _handler(args.command)(args)
    except CliError as exc:
        print(f"{prog}: {exc}", file=sys.stderr)
        return exc.code
    except (LockworkerError, redis.RedisError) as exc:
        print(f"{prog}: {type(exc).__name__}: {exc}", file=sys.stderr)
        return EXIT_FAILURE
    except KeyboardInterrupt:
        print(f"{prog}: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
