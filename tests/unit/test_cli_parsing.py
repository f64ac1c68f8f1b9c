"""The lockworker command line without Redis: parsing, option types, helpers."""

from __future__ import annotations

import argparse
import io
import re

import pytest

from lockworker.cli import logs
from lockworker.cli.cells import duration, natural
from lockworker.cli.common import CliError, check_url, redis_url, safe_url
from lockworker.cli.jobs import describe, parse_payload
from lockworker.cli.main import (
    HelpFormatter,
    build_parser,
    non_negative_float,
    positive_float,
    positive_int,
)
from lockworker.cli.main import parse as parse_command_line
from lockworker.cli.run import socket_timeout
from lockworker.cli.status import Row, table
from lockworker.cli.target import load
from lockworker.daemons.leader import Leader
from lockworker.daemons.worker import Worker
from lockworker.model.state import JobStatus, Snapshot


def parse(*argv: str) -> argparse.Namespace:
    return parse_command_line(list(argv))


def subcommands() -> dict[str, argparse.ArgumentParser]:
    parser = build_parser()
    return next(
        a.choices for a in parser._actions if isinstance(a, argparse._SubParsersAction)
    )


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
    assert (args.retention, args.done_retention) == (None, None)
    assert args.grace == 10.0
    assert (args.log_format, args.log_level, args.redis) == ("auto", "info", None)


def test_run_every_option_and_name_alias() -> None:
    args = parse(
        "run", "app:Sched", "--name", "sched", "--role", "backup", "--owner", "host-b",
        "--lock-timeout", "2.5", "--backup-delay", "0", "--max-attempts", "5",
        "--concurrency", "8", "--stream", "jobs", "--grace", "3", "--redis", "redis://x:1/0",
        "--log-format", "json", "--log-level", "debug", "--app-dir", "/srv/app",
        "--retention", "604800", "--done-retention", "600",
    )
    assert args.namespace == "sched"
    assert (args.retention, args.done_retention) == (604800.0, 600.0)
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
        ["run", "app:X", "--namespace", "n", "--lock-timeout", "0.001"],  # below MIN_LEASE
        ["demo", "--lock-timeout", "0.05"],
        ["run", "app:X", "--namespace", "n", "--backup-delay", "-1"],
        ["run", "app:X", "--namespace", "n", "--concurrency", "0"],
        ["run", "app:X", "--namespace", "n", "--max-attempts", "1.5"],
        ["run", "app:X", "--namespace", "n", "--log-format", "xml"],
        ["submit", "stream"],
        ["reset", "job"],  # no namespace
        ["demo", "--jobs", "0"],
        ["server", "--port", "0"],
        ["server", "--port", "65536"],
        ["server", "--redis", "redis://127.0.0.1:6379/0"],  # it serves, it does not connect
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
    args = parse("server")
    assert (args.port, args.host, args.dir) == (6379, "127.0.0.1", None)
    args = parse("server", "--port", "7000", "--host", "::1", "--dir", "d")
    assert (args.port, args.host, args.dir) == (7000, "::1", "d")


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
    assert safe_url("redis://h/0?password=secret&db=1") == "redis://h/0?password=***&db=1"
    # URLs that cannot be parsed are masked all the same
    assert safe_url("redis://:secret@127.0.0.1:notaport/0") == (
        "redis://:***@127.0.0.1:notaport/0"
    )
    assert safe_url("redis://:secret@[::1/0") == "redis://:***@[::1/0"
    assert safe_url("redis://u:top/se@cret@h/0") == "redis://u:***@h/0"


@pytest.mark.parametrize(
    ("url", "reason"),
    [
        ("redis://:secret@127.0.0.1:notaport/0", "Port could not be cast"),
        ("redis://:secret@[::1/0", "Invalid IPv6 URL"),
        ("redis://:secret@h:99999/0", "Port out of range"),
        ("redis://:top/secret@h:6379/0", "the password must be percent-encoded"),
        ("redis://:top@secret@h:port/0", "Port could not be cast to integer value as 'port'"),
        ("http://:secret@h/0", "must specify one of the following schemes"),
        ("redis://:secret@h/zero", "the database must be a number, got 'zero'"),
        ("redis://:secret@h/0?db=x", "Invalid value for .db."),
        ("redis://:secret@h/0?frobnicate=1", "unknown option 'frobnicate'"),
        ("redis://h/0?password=secret&socket_timeout=x", "Invalid value for .socket_timeout."),
    ],
)
def test_a_bad_url_is_a_usage_error_naming_it_without_its_password(url: str, reason: str) -> None:
    with pytest.raises(CliError) as caught:
        check_url(url, "--redis")
    message = str(caught.value)
    assert caught.value.code == 2
    assert message.startswith(f"--redis: invalid Redis URL {safe_url(url)!r}: ")
    assert re.search(reason, message)  # redis-py's own words: `db` before 6, 'db' since
    assert "secret" not in message
    assert "top" not in message


def test_good_urls_pass_the_check() -> None:
    for url in ("redis://127.0.0.1:6379/0", "redis://h", "redis://:pw@h:1/3",
                "rediss://h/0?ssl_cert_reqs=none", "unix:///tmp/redis.sock?db=2",
                "redis://h/0?socket_timeout=2.5"):
        assert check_url(url) == url


def test_a_bad_url_from_the_environment_names_the_variable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("LOCKWORKER_REDIS_URL", "redis://:secret@h:port/0")
    with pytest.raises(CliError, match=r"^\$LOCKWORKER_REDIS_URL: invalid Redis URL"):
        redis_url(None)


def test_every_option_with_a_default_shows_it_in_help() -> None:
    parsers: dict[str, argparse.ArgumentParser] = {"lockworker": build_parser(), **subcommands()}
    flags = (argparse._HelpAction, argparse._VersionAction, argparse._StoreTrueAction)
    formatter = HelpFormatter("lockworker")
    for name, parser in parsers.items():
        for action in parser._actions:
            if not action.option_strings or action.required or isinstance(action, flags):
                continue
            shown = formatter._get_help_string(action) or ""
            assert "default" in shown, (name, action.option_strings, shown)
    run_help = " ".join(subcommands()["run"].format_help().split())
    for expected in ("the lease: bounds the takeover after a crash (default: 10.0)",
                     "before competing (default: 0.5)", "(default: primary)",
                     "stopwaitsecs above it (default: 10.0)", "(default: info)"):
        assert expected in run_help
    status_help = " ".join(subcommands()["status"].format_help().split())
    assert "(default: 86400, one day)" in status_help


def test_every_subcommand_has_a_description() -> None:
    for name, parser in subcommands().items():
        assert parser.description, name


def test_an_unknown_argument_after_a_subcommand_is_reported_by_that_subcommand(
    capsys: pytest.CaptureFixture[str],
) -> None:
    for argv, prog in (
        (["run", "app:X", "--namespace", "n", "--bogus"], "lockworker run"),
        (["status", "extra"], "lockworker status"),
        (["demo", "--jobs", "3", "--nope=1"], "lockworker demo"),
    ):
        with pytest.raises(SystemExit) as exc:
            parse(*argv)
        assert exc.value.code == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1
        assert err[0].startswith(f"{prog}: unrecognized arguments: {argv[-1]}")


def test_a_bad_value_of_a_global_option_before_the_command_is_reported_as_such(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit) as exc:
        parse("--log-level", "nope", "status")
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1
    assert err[0].startswith("lockworker: argument --log-level: invalid choice: 'nope'")


def test_global_options_work_before_and_after_the_command() -> None:
    args = parse("--log-level", "debug", "--redis", "redis://a:1/0", "status")
    assert (args.log_level, args.redis, args.log_format) == ("debug", "redis://a:1/0", "auto")
    args = parse("status", "--log-level", "warning", "--log-format", "json")
    assert (args.log_level, args.log_format, args.redis) == ("warning", "json", None)
    assert parse("--log-level", "debug", "status", "--log-level", "error").log_level == "error"
    assert parse("--redis", "redis://a:1/0", "demo").redis == "redis://a:1/0"
    assert parse("demo", "--redis", "redis://b:1/0").redis == "redis://b:1/0"


def test_load_target() -> None:
    assert load("lockworker.daemons.worker:Worker") is Worker
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
