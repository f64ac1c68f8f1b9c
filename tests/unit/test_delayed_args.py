"""Delayed jobs without a server: ``delay=``/``at=`` checked by the one validator before
any Redis call, the member's encoding, and ``lockworker submit --in/--at`` parsed."""

from __future__ import annotations

import math
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
import redis

import lockworker
from lockworker import InvalidConfig, config
from lockworker.cli.delay import due_text, parse_at, parse_in
from lockworker.cli.main import parse as parse_command_line
from lockworker.protocol.delayed import member

UNREACHABLE = redis.Redis(port=1, socket_connect_timeout=0.1)
"""A client whose first command would fail to connect: a check must come first."""


def parse(*argv: str) -> Any:
    return parse_command_line(list(argv))


@pytest.mark.parametrize(
    ("kwargs", "said"),
    [
        ({"delay": -1}, "delay must be a finite number of seconds >= 0, got -1"),
        ({"delay": math.nan}, "delay must be .*, got nan"),
        ({"delay": math.inf}, "delay must be .*, got inf"),
        ({"delay": "30s"}, "delay must be .*, got '30s'"),
        ({"delay": True}, "delay must be .*, got True"),
        ({"delay": 2e9}, "delay must be at most 1000000000 seconds"),
        ({"at": datetime(2030, 1, 1)}, "at must be an aware datetime.*2030"),
        ({"at": "2030-01-01T00:00:00Z"}, "at must be an aware datetime.*'2030"),
        ({"at": 1_900_000_000}, "at must be an aware datetime.*1900000000"),
        ({"delay": 5, "at": datetime(2030, 1, 1, tzinfo=timezone.utc)},
         "give delay or at, not both, got delay=5 and at=datetime"),
    ],
)
def test_submit_refuses_a_bad_delay_or_at_before_any_redis_call_naming_the_value(
    kwargs: dict[str, Any], said: str
) -> None:
    with pytest.raises(InvalidConfig, match=said):
        lockworker.submit(UNREACHABLE, "jobs", "j", **kwargs)


def test_due_rounds_up_to_the_millisecond_so_a_job_is_never_early() -> None:
    assert config.due(None, None) is None
    assert config.due(0, None) == (0, False)
    assert config.due(0.0001, None) == (1, False)
    assert config.due(1.5, None) == (1500, False)
    assert config.due(30, None) == (30_000, False)
    at = datetime(2026, 11, 30, 6, 0, 0, 1, tzinfo=timezone.utc)  # 1 microsecond past
    assert config.due(None, at) == (round(at.timestamp() - 1e-6) * 1000 + 1, True)
    plus2 = datetime(2026, 11, 30, 8, 0, tzinfo=timezone(timedelta(hours=2)))
    assert config.due(None, plus2) == (round(plus2.timestamp()) * 1000, True)
    assert config.due(None, datetime(1960, 1, 1, tzinfo=timezone.utc)) == (0, True)


def test_a_member_is_unique_per_submission_and_holds_the_job_id_by_its_length() -> None:
    (a, first), (b, second) = member("jöb:1", '{"x":1}'), member("jöb:1", '{"x":1}')
    assert a != b and first != second
    assert len(a) == 16 and int(a, 16) >= 0
    assert first == f"{a}:6:jöb:1" + '{"x":1}'  # 6 bytes in UTF-8


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("90", 90.0), ("30s", 30.0), ("5m", 300.0), ("1.5h", 5400.0), ("2d", 172800.0),
     ("0", 0.0), (" 10 S ", 10.0), (".5", 0.5)],
)
def test_in_reads_seconds_and_units(text: str, seconds: float) -> None:
    assert parse_in(text) == seconds
    assert parse("submit", "jobs", "j", "--in", text).delay == seconds


@pytest.mark.parametrize(
    ("text", "moment"),
    [
        ("2026-11-30T06:00:00Z", datetime(2026, 11, 30, 6, tzinfo=timezone.utc)),
        ("2026-11-30T08:00:00+02:00",
         datetime(2026, 11, 30, 8, tzinfo=timezone(timedelta(hours=2)))),
        ("2026-11-30T06:00:00.250z",
         datetime(2026, 11, 30, 6, 0, 0, 250_000, tzinfo=timezone.utc)),
    ],
)
def test_at_reads_iso_8601_with_its_offset(text: str, moment: datetime) -> None:
    assert parse_at(text) == moment
    args = parse("submit", "jobs", "j", "{}", "--at", text)
    assert (args.at, args.delay, args.payload) == (moment, None, "{}")


def test_submit_without_in_or_at_is_due_now() -> None:
    args = parse("submit", "jobs", "j")
    assert (args.delay, args.at) == (None, None)


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["--in", "soon"], "expected a delay like 90, 30s, 5m, 1.5h or 2d, got 'soon'"),
        (["--in=-5s"], "expected a delay like"),
        (["--in", "5w"], "expected a delay like"),
        (["--in", "40000d"], "delay must be at most 1000000000 seconds"),
        (["--at", "2026-11-30T06:00:00"], "without one could mean any zone"),
        (["--at", "tomorrow"], "expected an ISO 8601 time like 2026-11-30T06:00:00Z"),
        (["--in", "5s", "--at", "2026-11-30T06:00:00Z"], "not allowed with argument"),
    ],
)
def test_a_bad_in_or_at_exits_2_with_one_line_naming_it(
    argv: list[str], said: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exc:
        parse("submit", "jobs", "j", *argv)
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("lockworker submit: ") and said in err[0]


def test_a_due_time_is_shown_in_utc_to_the_millisecond() -> None:
    moment = datetime(2026, 11, 30, 6, 0, 0, 250_000, tzinfo=timezone.utc)
    assert due_text(round(moment.timestamp() * 1000)) == "2026-11-30 06:00:00.250 UTC"
