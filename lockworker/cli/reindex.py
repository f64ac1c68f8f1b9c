"""``lockworker index``: index the jobs written before the namespace's index existed.

Jobs written by release 0.3.0, or by this release before the upgrade, have no entry
in their namespace's index (:mod:`lockworker.model.index`), so the views do not list
them. The command SCANs the job state keys (every master of a cluster), adds every
namespace it finds to the registry (:mod:`lockworker.model.registry`; without
``--namespace``, the streams, schedules and leaders it finds too), writes each
job's entry with :data:`lockworker.protocol.reindex.INDEX` (one atomic step per job,
many per round trip), and marks each namespace indexed (``lw:registry:indexed``, the
server's clock) once the whole scan of it succeeded: a scan that fails half way marks
nothing, and running the command again finishes the work (each job's entry is written
again, the same). Safe while workers of this release serve (the module docstring of
:mod:`lockworker.protocol.reindex` says why); run it once the last process of 0.3.0
has stopped.

:func:`unindexed_note` gives the lines ``lockworker status`` prints for a namespace
not marked yet.
"""

from __future__ import annotations

import argparse
import shlex
from collections.abc import Callable, Iterable
from typing import Any

from lockworker.cli import registered
from lockworker.cli.common import EXIT_OK, CliError, connect, redis_url
from lockworker.cli.kept import RETENTION_HELP
from lockworker.errors import InvalidConfig
from lockworker.model import registry as names
from lockworker.model.keys import check_name
from lockworker.protocol import registry
from lockworker.runtime.reindex import index_all
from lockworker.serving.settings import DAY

FOREIGN_SHOWN = 20
"""Foreign values named one by one; the rest are counted."""


def command(namespace: str) -> str:
    """The command that indexes ``namespace``."""
    return f"lockworker index --namespace {shlex.quote(namespace)}"


def unindexed_note(client: Any, namespaces: Iterable[str] | None = None) -> list[str]:
    """Lines for ``lockworker status``: each of ``namespaces`` (None: every registered
    one) not marked indexed, whose jobs written before the index are not listed."""
    wanted = registry.names(client, names.NAMESPACE) if namespaces is None else namespaces
    marked = registry.indexed(client)
    return [
        f"namespace {name}: jobs written before the index are not listed until "
        f"`{command(name)}` runs (once, after upgrading)"
        for name in sorted(set(wanted)) if name not in marked
    ]


def register_others(client: Any) -> int:
    """Register every stream, schedule and leader a walk of the keyspace finds (served
    by 0.3.0, or before the registry existed): the views list them from then on; how
    many were found."""
    found = [
        *(names.stream(s) for s in registered.scanned_streams(client)),
        *(names.schedule(ns, n) for ns, n in registered.scanned_schedules(client)),
        *(names.leader(n) for n in registered.scanned_leaders(client)),
    ]
    if found:
        registry.register(client, *found)
    return len(found)


def main(args: argparse.Namespace) -> int:
    namespace = args.namespace
    if namespace is not None:
        try:
            check_name(namespace, "--namespace")
        except InvalidConfig as exc:
            raise CliError(str(exc)) from exc
    client = connect(redis_url(args.redis))
    try:
        tallies = index_all(
            client, namespace, round(args.retention * 1000),
            lambda line: print(line, flush=True),
        )
        others = register_others(client) if namespace is None else 0
    finally:
        client.close()
    if others:
        print(f"registered {others} streams, schedules and leaders found")
    if not tallies:
        print("no jobs found" + (f" in namespace {namespace}" if namespace else ""))
    for name, tally in sorted(tallies.items()):
        print(tally.line(name))
        for line in tally.foreign[:FOREIGN_SHOWN]:
            print(f"  left alone: {line}")
        if len(tally.foreign) > FOREIGN_SHOWN:
            print(f"  left alone: {len(tally.foreign) - FOREIGN_SHOWN} more foreign values")
        print(f"namespace {name}: marked indexed")
    return EXIT_OK


def add_parser(
    sub: argparse._SubParsersAction,  # type: ignore[type-arg]
    common: argparse.ArgumentParser, seconds: Callable[[str], float],
) -> None:
    """The ``index`` subcommand (``seconds``: the command line's validator)."""
    index = sub.add_parser(
        "index", parents=[common], help="index the jobs written before the index (once, "
        "after upgrading)",
        description="Write the index entry of every job written before the namespace's "
        "index existed (by release 0.3.0, or before the upgrade), from its state, and "
        "mark the namespace indexed. Run it once, after the last 0.3.0 process stopped; "
        "safe while workers serve, and safe to run again.",
    )
    index.add_argument("--namespace", help="only this namespace (default: all)")
    index.add_argument(
        "--retention", type=seconds, default=DAY, metavar="SECONDS",
        help="the workers' --retention, to tell when a pending or given-up job's state "
        "was written " + RETENTION_HELP,
    )
