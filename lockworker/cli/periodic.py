"""``lockworker run``'s schedule options: ``--every``, ``--cron`` and ``--tz``.

- ``--every NAME=SECONDS`` (repeatable): a tick every SECONDS, on the multiples of it
  since the epoch (``--every sync=300``);
- ``--cron 'NAME=EXPR'`` (repeatable): a five-field cron expression, in the zone
  ``--tz`` (default UTC): ``--cron 'digest=0 6 * * *' --tz Europe/Berlin``.

The worker then serves the schedules' ticks (:class:`lockworker.ScheduleSource`): alone,
or beside the stream ``--stream`` names when it is given. Without a schedule, the worker
serves its stream as before (``--stream``, else the namespace). Each bad value is one
line and exit 2.
"""

from __future__ import annotations

import argparse
from typing import Any

import redis

from lockworker.cli.common import CliError
from lockworker.daemons.schedules import ScheduleSource
from lockworker.daemons.sources import StreamSource
from lockworker.errors import InvalidConfig
from lockworker.model.schedule import Cron, Every, Schedule


def add_options(run: argparse.ArgumentParser) -> None:
    run.add_argument(
        "--every", action="append", metavar="NAME=SECONDS",
        help="Worker only, repeatable: run the hook once per tick of schedule NAME, every "
        "SECONDS (a whole number >= 1), in one process of all that serve it (default: none; "
        "with a schedule, --stream is served beside it only when given)",
    )
    run.add_argument(
        "--cron", action="append", metavar="'NAME=EXPR'",
        help="Worker only, repeatable: the same for a five-field cron expression "
        "(default: none)",
    )
    run.add_argument(
        "--tz", metavar="ZONE",
        help="Worker only: the time zone of the --cron expressions (default: UTC)",
    )


def _split(spec: str, option: str, what: str) -> tuple[str, str]:
    name, sep, value = spec.partition("=")
    if not sep or not name.strip() or not value.strip():
        raise CliError(f"{option} must be NAME={what}, got {spec!r}")
    return name.strip(), value.strip()


def schedules(args: argparse.Namespace) -> list[Schedule]:
    """The schedules ``--every`` and ``--cron`` name (none: an empty list)."""
    found: list[Schedule] = []
    try:
        for spec in args.every or ():
            name, value = _split(spec, "--every", "SECONDS")
            try:
                interval: Any = int(value)
            except ValueError:
                raise CliError(
                    f"--every must be NAME=SECONDS (a whole number >= 1), got {spec!r}"
                ) from None
            found.append(Every(name, interval))
        for spec in args.cron or ():
            name, value = _split(spec, "--cron", "EXPR")
            found.append(Cron(name, value, tz=args.tz or "UTC"))
        if args.tz is not None and not args.cron:
            raise CliError("--tz: only with --cron")
        names = [s.name for s in found]
        for name in names:
            if names.count(name) > 1:
                raise CliError(f"schedule names must be distinct, got {name!r} twice")
    except InvalidConfig as exc:
        raise CliError(str(exc)) from exc
    return found


def source(client: redis.Redis, args: argparse.Namespace, owner: str) -> Any:
    """What the worker serves: the schedules' ticks (beside ``--stream`` if given), or
    its stream (``--stream``, else the namespace) when no schedule is named."""
    ticks = schedules(args)
    stream = None
    if not ticks or args.stream is not None:
        try:
            stream = StreamSource(
                client, args.stream or args.namespace, owner=owner, group=args.group
            )
        except InvalidConfig as exc:
            raise CliError(str(exc)) from exc
    if not ticks:
        return stream
    if args.group is not None and args.stream is None:
        raise CliError("--group: with schedules, only beside a --stream")
    return ScheduleSource(client, ticks, beside=stream)
