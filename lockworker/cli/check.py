"""``lockworker check``: the server settings and permissions lockworker's guarantees
depend on, one line per check (the checks are :mod:`lockworker.runtime.servercheck`'s).

Every master of a cluster is checked (each line names its master); a Sentinel URL's
master is. Exit 0 when nothing failed (warnings and unknowns included), 1 on a failure.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable

from lockworker.cli.common import EXIT_FAILURE, EXIT_OK, connect, redis_url
from lockworker.model.keys import JobKeys
from lockworker.model.servercheck import Finding, Status, worst
from lockworker.runtime import servercheck

MARKS = {Status.OK: "ok", Status.WARNING: "warning", Status.FAILURE: "FAILURE",
         Status.UNKNOWN: "unknown"}


def line(finding: Finding) -> str:
    """``ok       eviction     127.0.0.1:6379  maxmemory-policy=noeviction: meaning (fix: ...)``."""
    fix = f" Fix: {finding.fix}." if finding.fix and finding.status is not Status.OK else ""
    where = f" [{finding.server}]" if finding.server else ""
    return (f"{MARKS[finding.status]:<8} {finding.check:<12}{where} {finding.value}: "
            f"{finding.meaning}.{fix}")


def run_checks(args: argparse.Namespace) -> list[Finding]:
    client = connect(redis_url(args.redis))
    try:
        keys = JobKeys.of(args.namespace, "-")
        return servercheck.check_all(
            client, keys, replicas=args.replicas, clock_interval=args.clock_interval
        )
    finally:
        client.close()


def main(args: argparse.Namespace) -> int:
    findings = run_checks(args)
    verdict = worst(findings)
    if args.json:
        print(json.dumps({"status": verdict.value,
                          "checks": [f.as_dict() for f in findings]}, indent=2))
    else:
        for finding in findings:
            print(line(finding))
    return EXIT_FAILURE if verdict is Status.FAILURE else EXIT_OK


def add_parser(
    sub: argparse._SubParsersAction,  # type: ignore[type-arg]
    common: argparse.ArgumentParser,
    seconds: Callable[[str], float], count: Callable[[str], int],
) -> None:
    """The ``check`` subcommand (``seconds``, ``count``: the command line's validators)."""
    check = sub.add_parser(
        "check", parents=[common], help="check the server's settings and permissions",
        description="Check the settings of the Redis server (every master of a cluster) "
        "that lockworker's guarantees depend on: eviction policy, persistence, version "
        "and scripting, evicted keys, clock rate, replicas, and what the connected user "
        "may do. One line per check: ok, warning, unknown or FAILURE, what it means and "
        f"how to fix it. Exit {EXIT_FAILURE} on a failure.",
    )
    check.add_argument("--json", action="store_true", help="one JSON document, for scripts")
    check.add_argument(
        "--namespace", default="lockworker-check",
        help="the namespace whose keys and channels the permission check uses",
    )
    check.add_argument(
        "--replicas", type=count, default=None, metavar="N",
        help="replicas that durability='replicated' waits for: a failure if fewer are "
        "connected (default: only report them)",
    )
    check.add_argument(
        "--clock-interval", type=seconds, default=1.0, metavar="SECONDS",
        help="how long the clock rate is measured",
    )


def add_run_option(run: argparse.ArgumentParser) -> None:
    run.add_argument(
        "--require-safe-server", action="store_true",
        help="refuse to start (exit 2) if a check of the server's eviction and "
        "persistence settings fails, as `lockworker check` reports it",
    )
