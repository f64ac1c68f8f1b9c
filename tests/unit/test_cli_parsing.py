"""The lockworker command line without Redis: parsing, option types, helpers."""

from __future__ import annotations

import argparse
import io

import pytest

from lockworker.cli import logs
from lockworker.cli.common import CliError, redis_url, safe_url
from lockworker.cli.jobs import describe, parse_payload
from lockworker.cli.main import build_parser, non_negative_float, positive_float, positive_int
from lockworker.cli.run import socket_timeout
from lockworker.cli.status import Row, duration, natural, table
from lockworker.cli.target import load
from lockworker.leader import Leader
from lockworker.state import JobStatus, Snapshot
from lockworker.worker import Worker


def parse(*argv: str) -> argparse.Namespace:
    return build_parser().parse_args(list(argv))


def test_run_defaults() -> None:
    args = parse("run", "app:Mailer", "--namespace", "mail")
    assert args.command == "run"
    assert args.target == "app:Mailer"
    assert args.namespace == "mail"
    assert (args.role, args.owner, args.lock_timeout, args.backup_delay) == (
        "primary", None, 10.0, 0.5
    )
    # Worker-only options stay None so a Leader can tell they were not given.
    assert (args.max_attempts, args.concurrency, args.stream) == (None, None, None)
    assert args.grace == 10.0
    assert (args.log_format, args.log_level, args.redis) == ("auto", "info", None)


def test_run_every_option_and_name_alias() -> None:
    args = parse(
        "run", "app:Sched", "--name", "sched", "--role", "backup", "--owner", "host-b",
        "--lock-timeout", "2.5", "--backup-delay", "0", "--max-attempts", "5",
        "--concurrency", "8", "--stream", "jobs", "--grace", "3", "--redis", "redis://x:1/0",
        "--log-format", "json", "--log-level", "debug", "--app-dir", "/srv/app",
    )
    assert args.namespace == "sched"
    assert (args.role, args.owner, args.lock_timeout, args.backup_delay) == (
        "backup", "host-b", 2.5, 0.0
    )
    assert (args.max_attempts, args.concurrency, args.stream, args.grace) == (5, 8, "jobs", 3.0)
    assert (args.redis, args.log_format, args.log_level, args.app_dir) == (
        "redis://x:1/0", "json", "debug", "/srv/app"
    )


@pytest.mark.parametrize(
    "argv",
    [
        ["run", "app:X"],  # no namespace
        ["run", "app:X", "--namespace", "n", "--role", "leader"],
        ["run", "app:X", "--namespace", "n", "--lock-timeout", "0"],
        ["run", "app:X", "--namespace", "n", "--lock-timeout", "nan"],
        ["run", "app:X", "--namespace", "n", "--backup-delay", "-1"],
        ["run", "app:X", "--namespace", "n", "--concurrency", "0"],
        ["run", "app:X", "--namespace", "n", "--max-attempts", "1.5"],
        ["run", "app:X", "--namespace", "n", "--log-format", "xml"],
        ["submit", "stream"],
        ["reset", "job"],  # no namespace
        ["demo", "--jobs", "0"],
        [],
    ],
)
def test_bad_command_lines_exit_2_with_one_line(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exc:
        parse(*argv)
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("lockworker")


def test_other_subcommands() -> None:
    args = parse("submit", "jobs", "j-1", '{"a": 1}')
    assert (args.stream, args.job_id, args.payload) == ("jobs", "j-1", '{"a": 1}')
    assert parse("submit", "jobs", "j-1").payload is None
    args = parse("status", "--json", "--namespace", "mail")
    assert (args.json, args.namespace, args.retention) == (True, "mail", 86400.0)
    args = parse("reset", "j-1", "--namespace", "mail", "-y", "--force")
    assert (args.job_id, args.namespace, args.yes, args.force) == ("j-1", "mail", True, True)
    args = parse("demo", "--jobs", "12", "--duration", "3")
    assert (args.jobs, args.duration, args.redis) == (12, 3.0, None)


def test_option_types() -> None:
    assert positive_float("1.5") == 1.5
    assert non_negative_float("0") == 0.0
    assert positive_int("3") == 3
    for fn, bad in ((positive_float, "0"), (positive_float, "inf"), (non_negative_float, "-0.1"),
                    (positive_int, "0"), (positive_int, "x")):
        with pytest.raises(argparse.ArgumentTypeError):
            fn(bad)


def test_redis_url_from_option_then_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LOCKWORKER_REDIS_URL", "redis://env:1/0")
    assert redis_url("redis://opt:2/0") == "redis://opt:2/0"
    assert redis_url(None) == "redis://env:1/0"
    monkeypatch.delenv("LOCKWORKER_REDIS_URL")
    assert redis_url(None) == "redis://127.0.0.1:6379/0"


def test_safe_url_hides_passwords() -> None:
    assert safe_url("redis://:secret@h:6379/0") == "redis://:***@h:6379/0"
    assert safe_url("redis://me:secret@h/0") == "redis://me:***@h/0"
    assert safe_url("redis://h:6379/0") == "redis://h:6379/0"


def test_load_target() -> None:
    assert load("lockworker.worker:Worker") is Worker
    assert load("lockworker:Leader") is Leader
    for target, message in (
        ("lockworker", "expected MODULE:CLASS"),
        ("lockworker:", "expected MODULE:CLASS"),
        ("a:b:c", "expected MODULE:CLASS"),
        ("no_such_module_q:X", "cannot import module"),
        ("lockworker:Nope", "has no attribute"),
        ("lockworker:Job", "not a subclass"),
        ("lockworker:submit", "a function, not a subclass"),
    ):
        with pytest.raises(CliError, match=message):
            load(target)


def test_payload_json() -> None:
    assert parse_payload(None) is None
    assert parse_payload('{"a": [1, 2]}') == {"a": [1, 2]}
    with pytest.raises(CliError, match="not valid JSON"):
        parse_payload("{a}")


def test_log_format_follows_the_terminal() -> None:
    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    assert logs.resolve_format("auto", io.StringIO()) == "json"
    assert logs.resolve_format("auto", Tty()) == "console"
    assert logs.resolve_format("json", Tty()) == "json"
    assert logs.resolve_format("console", io.StringIO()) == "console"


def test_socket_timeout_stays_between_the_stream_read_and_the_lease() -> None:
    assert socket_timeout(10.0) == 5.0
    assert socket_timeout(4.0) == 2.0
    assert socket_timeout(0.5) == 0.75  # above the stream's 0.25 s blocking read
    assert socket_timeout(60.0) == 5.0


def test_status_helpers() -> None:
    assert sorted(["job-10", "job-2", "job-1"], key=natural) == ["job-1", "job-2", "job-10"]
    assert [duration(s) for s in (None, 0.25, 12.34, 245, 3 * 3600 + 420, 3 * 86400)] == [
        "-", "250ms", "12.3s", "4m05s", "3h07m", "3d00h"
    ]
    assert table([]) == "no jobs or leaders found"
    text = table([Row("job", "mail", "j1", "held", "host-a", 2, 7, 1.5, 30.0)])
    header, row = text.splitlines()
    assert header.split()[:3] == ["KIND", "NAMESPACE", "ID"]
    assert row.split() == ["job", "mail", "j1", "held", "host-a", "2", "7", "1.5s", "30.0s"]


def test_reset_question_describes_the_job() -> None:
    assert describe("j", Snapshot(JobStatus.GAVE_UP, 3, 3, "host-a")) == (
        "job 'j' is gave_up (attempt 3 by host-a)"
    )
    assert "held by host-b" in describe(
        "j", Snapshot(JobStatus.PENDING, 1, 1, "host-b", holder="host-b", pttl_ms=500)
    )
    assert describe("j", Snapshot(JobStatus.PENDING, 0, 0, "")) == (
        "job 'j' is pending with no attempt made"
    )
