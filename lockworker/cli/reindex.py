"""``lockworker index``: index the jobs written before the namespace's index existed.

Jobs written by release 0.3.0, or by this release before the upgrade, have no entry
in their namespace's index (:mod:`lockworker.model.index`), so the views do not list
them. The command SCANs the job state keys (every master of a cluster), adds every
namespace it finds to the registry (:mod:`lockworker.model.registry`), writes each
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
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from lockworker.cli.common import EXIT_OK, CliError, connect, redis_url
from lockworker.cli.kept import RETENTION_HELP
from lockworker.daemons.settings import DAY
from lockworker.errors import ForeignValueError, InvalidConfig
from lockworker.model import registry as names
from lockworker.model.index import Kind
from lockworker.model.keys import JobKeys, check_name
from lockworker.protocol import registry
from lockworker.protocol.decode import server_ms
from lockworker.protocol.reindex import Indexed, index_jobs, scan_jobs

BATCH = 1000
"""Jobs indexed per call of :func:`lockworker.protocol.reindex.index_jobs` (a few
round trips: it sends 256 steps at a time)."""
PROGRESS = 10_000
"""A progress line every this many jobs."""
FOREIGN_SHOWN = 20
"""Foreign values named one by one; the rest are counted."""

WORDS = {Kind.HELD: "held", Kind.BACKOFF: "backing off", Kind.PENDING: "pending",
         Kind.GAVE_UP: "given up", None: "done/forgotten"}


@dataclass
class Tally:
    """What the command wrote in one namespace."""

    kinds: Counter[Kind | None] = field(default_factory=Counter)
    foreign: list[str] = field(default_factory=list)

    @property
    def jobs(self) -> int:
        return sum(self.kinds.values())

    def line(self, namespace: str) -> str:
        counts = ", ".join(f"{word} {self.kinds[kind]}" for kind, word in WORDS.items())
        return f"indexed {self.jobs} jobs in namespace {namespace}: {counts}"


def index_all(
    client: Any, namespace: str | None, retention_ms: int,
    say: Callable[[str], None] = lambda line: None,
) -> dict[str, Tally]:
    """Index every job (of ``namespace``, or of every namespace), register the
    namespaces found, and mark them (and the registered ones in scope) indexed once
    the scan is complete; what was written, by namespace. ``say``: progress lines."""
    tallies: dict[str, Tally] = {}
    pending: list[JobKeys] = []
    done = 0

    def flush() -> None:
        nonlocal done
        for keys, result in zip(pending, index_jobs(client, pending, retention_ms),
                                strict=True):
            tally = tallies[keys.namespace]
            if isinstance(result, Indexed):
                tally.kinds[result.kind] += 1
            elif isinstance(result, ForeignValueError):
                tally.foreign.append(f"job {keys.job_id!r}: {result}")
            else:
                raise result
        before, done = done, done + len(pending)
        pending.clear()
        if done // PROGRESS > before // PROGRESS:
            say(f"... {done} jobs so far")

    for keys in scan_jobs(client, namespace):
        if keys.namespace not in tallies:
            tallies[keys.namespace] = Tally()
            registry.register(client, names.namespace(keys.namespace))
        pending.append(keys)
        if len(pending) >= BATCH:
            flush()
    flush()
    in_scope = set(registry.names(client, names.NAMESPACE))
    if namespace is not None:
        in_scope &= {namespace}
    now = server_ms(client.time())
    for name in sorted(in_scope | set(tallies)):
        registry.mark_indexed(client, name, now)
        tallies.setdefault(name, Tally())
    return tallies


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
    finally:
        client.close()
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
