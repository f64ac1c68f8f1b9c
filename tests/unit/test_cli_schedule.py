"""``lockworker run --retry-delay`` and ``--give-up-on``: each form reaches the worker as
the schedule it names, a bad value is one line and exit 2, and a Leader refuses them."""

from __future__ import annotations

import argparse
import json

import fakeredis
import pytest
import tenacity

from lockworker.cli.common import CliError
from lockworker.cli.main import parse as parse_command_line
from lockworker.cli.run_common import build
from lockworker.daemons.worker import Worker


class Job(Worker):
    def on_acquired(self, job: object) -> None:
        pass


def parse(*extra: str) -> argparse.Namespace:
    return parse_command_line(["run", "app:Job", "--namespace", "n", *extra])


def made(*extra: str) -> Worker:
    worker = build(Job, fakeredis.FakeRedis(), parse(*extra))
    assert isinstance(worker, Job)
    return worker


def test_without_options_a_worker_keeps_the_default_schedule_and_five_attempts() -> None:
    worker = made()
    assert worker.max_attempts == 5 and worker.give_up_on == ()
    assert worker.retry_schedule(1) == 0.0  # the first failure is handed over at once
    assert 2.0 <= worker.retry_schedule(2) <= 3.0


@pytest.mark.parametrize(
    ("spec", "delays"),
    [
        ("5", [5.0, 5.0, 5.0, 5.0]),
        ("1,2,4,8", [1.0, 2.0, 4.0, 8.0, 8.0]),
        ("0,30", [0.0, 30.0, 30.0]),
        ("exp:1:6", [1.0, 2.0, 4.0, 6.0, 6.0]),
        ("exp:0.5:60", [0.5, 1.0, 2.0, 4.0]),
    ],
)
def test_each_form_of_retry_delay_is_the_schedule_it_names(spec: str, delays: list[float]) -> None:
    worker = made("--retry-delay", spec)
    assert [worker.retry_schedule(n) for n in range(1, len(delays) + 1)] == delays


def test_exp_is_tenacity_s_exponential_wait() -> None:
    assert isinstance(parse("--retry-delay", "exp:1:60").retry_delay, tenacity.wait_exponential)


@pytest.mark.parametrize(
    "spec", ["x", "-1", "nan", "1,x", "1,-2", "exp:1", "exp:0:5", "exp:1:inf", "exp:a:b", ""]
)
def test_a_bad_retry_delay_is_one_line_and_exit_2(
    spec: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exc:
        parse("--retry-delay", spec)
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--retry-delay" in err[0], err


def test_give_up_on_takes_builtins_and_module_names_and_refuses_the_rest() -> None:
    worker = made("--give-up-on", "KeyError", "--give-up-on", "json:JSONDecodeError")
    assert worker.give_up_on == (KeyError, json.JSONDecodeError)
    for bad in ("NoSuchError", "json:dumps", "no_such_module_q:E"):
        with pytest.raises(CliError):
            made("--give-up-on", bad)
