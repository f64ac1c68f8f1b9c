"""``lockworker run --every/--cron/--tz/--catch-up/--overlap``: the schedules reach the
worker's source, alone or beside ``--stream``, with the policies given; a bad value is
one line (a CliError); a Leader refuses them."""

from __future__ import annotations

import argparse

import fakeredis
import pytest

from lockworker import Cron, Every, ScheduleSource, StreamSource
from lockworker.cli import periodic
from lockworker.cli.common import CliError
from lockworker.cli.main import parse as parse_command_line


def parse(*extra: str) -> argparse.Namespace:
    return parse_command_line(["run", "app:Job", "--namespace", "n", *extra])


def source(*extra: str) -> object:
    return periodic.source(fakeredis.FakeRedis(), parse(*extra), "owner")


def test_without_schedules_the_worker_serves_its_stream() -> None:
    found = source()
    assert isinstance(found, StreamSource) and found.stream == "n"


def test_schedules_alone_or_beside_a_stream() -> None:
    alone = source("--every", "sync=300", "--cron", "digest=0 6 * * 1-5", "--tz", "Europe/Berlin")
    assert isinstance(alone, ScheduleSource) and alone.beside is None
    sync, digest = alone.schedules
    assert isinstance(sync, Every) and (sync.name, sync.seconds) == ("sync", 300)
    assert isinstance(digest, Cron) and digest.expression == "0 6 * * 1-5"
    assert digest.tz.key == "Europe/Berlin"
    beside = source("--every", "sync=60", "--stream", "jobs")
    assert isinstance(beside, ScheduleSource)
    assert isinstance(beside.beside, StreamSource) and beside.beside.stream == "jobs"


def test_catch_up_and_overlap_reach_every_schedule_and_default_to_the_librarys() -> None:
    plain = source("--every", "sync=60")
    assert isinstance(plain, ScheduleSource)
    assert [(s.catch_up, s.overlap) for s in plain.schedules] == [("latest", "skip")]
    given = source("--every", "sync=60", "--cron", "d=0 6 * * *", "--catch-up", "all",
                   "--overlap", "wait")
    assert isinstance(given, ScheduleSource)
    assert [(s.catch_up, s.overlap) for s in given.schedules] == [("all", "wait")] * 2


@pytest.mark.parametrize("extra", [["--catch-up", "maybe"], ["--overlap", "queue"]])
def test_an_unknown_policy_is_refused_by_the_parser(extra: list[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        parse("--every", "a=5", *extra)
    assert exc.value.code == 2


@pytest.mark.parametrize(
    ("extra", "match"),
    [
        (["--every", "sync"], "--every must be NAME=SECONDS"),
        (["--every", "sync=0"], "seconds must be"),
        (["--every", "sync=1.5"], "whole number"),
        (["--every", "=5"], "--every must be NAME=SECONDS"),
        (["--cron", "d=* * *"], "five-field cron expression"),
        (["--cron", "d=0 6 * * *", "--tz", "Nowhere/Else"], "IANA time zone"),
        (["--tz", "UTC", "--every", "a=5"], "--tz: only with --cron"),
        (["--every", "a=5", "--cron", "a=* * * * *"], "distinct"),
        (["--every", "a=5", "--group", "g"], "--group"),
        (["--catch-up", "all"], "--catch-up: only with --every or --cron"),
        (["--overlap", "allow"], "--overlap: only with --every or --cron"),
    ],
)
def test_a_bad_schedule_option_is_one_line(extra: list[str], match: str) -> None:
    with pytest.raises(CliError, match=match) as exc:
        source(*extra)
    assert "\n" not in str(exc.value)
