"""``lockworker run``'s schedule options: ``--every``, ``--cron``, ``--tz``,
``--catch-up`` and ``--overlap``.

- ``--every NAME=SECONDS`` (repeatable): a tick every SECONDS, on the multiples of it
  since the epoch (``--every sync=300``);
- ``--cron 'NAME=EXPR'`` (repeatable): a five-field cron expression, in the zone
  ``--tz`` (default UTC): ``--cron 'digest=0 6 * * *' --tz Europe/Berlin``;
- ``--catch-up latest|all|none`` and ``--overlap skip|allow|wait``: the policies of
  every schedule the process serves (defaults: the library's, ``latest`` and ``skip``).
  Every process serving a schedule should be given the same ones: each decides the
  ticks it finds by its own.

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
from lockworker.model.schedule import CATCH_UP, OVERLAP, Cron, Every, Schedule


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
    run.add_argument(
        "--catch-up", choices=CATCH_UP, metavar="|".join(CATCH_UP),
        help="Worker only, with a schedule: of the ticks missed while no process served, "
        "run only the latest, all in order, or none (default: latest)",
    )
    run.add_argument(
        "--overlap", choices=OVERLAP, metavar="|".join(OVERLAP),
        help="Worker only, with a schedule: a tick falling due while the previous one "
        "still runs anywhere is skipped, runs alongside, or waits (default: skip)",
    )


def _split(spec: str, option: str, what: str) -> tuple[str, str]:
    name, sep, value = spec.partition("=")
    if not sep or not name.strip() or not value.strip():
        raise CliError(f"{option} must be NAME={what}, got {spec!r}")
    return name.strip(), value.strip()


def schedules(args: argparse.Namespace) -> list[Schedule]:
    """The schedules ``--every`` and ``--cron`` name (none: an empty list)."""
    found: list[Schedule] = []
    policies = {
        name: getattr(args, name) for name in ("catch_up", "overlap")
        if getattr(args, name, None) is not None
    }
    try:
        for spec in args.every or ():
            name, value = _split(spec, "--every", "SECONDS")
            try:
                interval: Any = int(value)
            except ValueError:
                raise CliError(
                    f"--every must be NAME=SECONDS (a whole number >= 1), got {spec!r}"
                ) from None
            found.append(Every(name, interval, **policies))
        for spec in args.cron or ():
            name, value = _split(spec, "--cron", "EXPR")
            found.append(Cron(name, value, tz=args.tz or "UTC", **policies))
        if args.tz is not None and not args.cron:
            raise CliError("--tz: only with --cron")
        for name in policies:
            if not found:
                raise CliError(f"--{name.replace('_', '-')}: only with --every or --cron")
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
