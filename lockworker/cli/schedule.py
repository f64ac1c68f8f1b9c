"""``lockworker run``'s retry-schedule options: ``--retry-delay`` and ``--give-up-on``.

``--retry-delay`` takes what ``retry_delay`` takes, spelt on a command line:

- ``SECONDS``: the same delay after every failure (``--retry-delay 5``);
- ``A,B,C,...``: the delay after the first, second, third ... failure, the last one
  repeated (``--retry-delay 1,2,4,8``: RQ's ``Retry(interval=[...])``);
- ``exp:INITIAL:MAX``: INITIAL seconds after the first failure, doubling after each
  failure up to MAX (``--retry-delay exp:1:60``: tenacity's ``wait_exponential``).

Without it a job keeps ``retry_delay``'s default (the first failure handed over at once,
then 2, 4, 8 ... 60 s). ``--give-up-on MODULE:EXCEPTION`` (repeatable; a bare name is a
builtin, ``--give-up-on KeyError``) gives a job up at once when its hook raises that.
Each bad value is one line and exit 2.
"""

from __future__ import annotations

import argparse
import builtins
from dataclasses import dataclass
from typing import Any

import tenacity

from lockworker import config
from lockworker.cli.common import CliError
from lockworker.cli.target import resolve
from lockworker.errors import InvalidConfig

FORMS = "SECONDS, A,B,C (one per failure, the last repeated) or exp:INITIAL:MAX"


@dataclass(frozen=True)
class Steps:
    """The delay after each failure, the last one repeated."""

    delays: tuple[float, ...]

    def __call__(self, attempt: int) -> float:
        return self.delays[min(attempt, len(self.delays)) - 1]


def _number(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"--retry-delay must be {FORMS}, got {text!r}"
        ) from None


def retry_delay(text: str) -> Any:
    """``--retry-delay``: a value ``retry_delay`` takes, checked by its validator."""
    value: Any
    if text.startswith("exp:"):
        parts = text.split(":")
        if len(parts) != 3:
            raise argparse.ArgumentTypeError(f"--retry-delay must be {FORMS}, got {text!r}")
        initial, most = _number(parts[1]), _number(parts[2])
        for number in (initial, most):
            try:
                config.seconds(number, "--retry-delay exp:INITIAL:MAX", positive=True)
            except InvalidConfig as exc:
                raise argparse.ArgumentTypeError(str(exc)) from None
        value = tenacity.wait_exponential(multiplier=initial, max=most)
    elif "," in text:
        value = Steps(tuple(_number(part) for part in text.split(",")))
        for delay in value.delays:
            try:
                config.seconds(delay, "each --retry-delay", positive=False)
            except InvalidConfig as exc:
                raise argparse.ArgumentTypeError(str(exc)) from None
    else:
        value = _number(text)
    try:
        config.retry_delay(value, "--retry-delay")
    except InvalidConfig as exc:
        raise argparse.ArgumentTypeError(str(exc).partition(" (or a tenacity")[0]) from None
    return value


def add_options(run: argparse.ArgumentParser) -> None:
    run.add_argument(
        "--retry-delay", type=retry_delay, metavar="SCHEDULE",
        help=f"Worker only: when a failed job's next attempt may start, in any process: "
        f"{FORMS} (default: the first failure handed over at once, then 2, 4, 8 ... 60 s)",
    )
    run.add_argument(
        "--give-up-on", action="append", metavar="MODULE:EXCEPTION",
        help="Worker only, repeatable: give a job up at once when its hook raises this "
        "(a bare name is a builtin, e.g. KeyError; default: none)",
    )


def give_up_on(specs: list[str] | None, app_dir: str) -> tuple[type[BaseException], ...]:
    """The exception classes ``--give-up-on`` names (imported as the target is)."""
    found: list[type[BaseException]] = []
    for spec in specs or ():
        obj = getattr(builtins, spec, None) if ":" not in spec else resolve(spec, app_dir)
        if not (isinstance(obj, type) and issubclass(obj, BaseException)):
            raise CliError(f"--give-up-on must name an exception class, got {spec!r}")
        found.append(obj)
    return tuple(found)
