"""``lockworker status``: what :mod:`lockworker.cli.status` reads, printed as tables
(or one JSON document): the counts, the newest jobs of each listed state, their
attempts (``--job``), the live workers, the streams, the schedules, what the server
holds, the outcomes per minute (:mod:`lockworker.cli.throughput`), and a line for each
namespace whose older jobs are not indexed yet (:mod:`lockworker.cli.reindex`)."""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict
from typing import Any

from lockworker.cli import footprint, indexed, readers, schedules, summary, throughput
from lockworker.cli.cells import printable
from lockworker.cli.common import EXIT_OK, connect, redis_url
from lockworker.cli.history import history_table, record_json
from lockworker.cli.kept import kept
from lockworker.cli.reindex import unindexed_note
from lockworker.cli.status import collect, histories, jobs_only, selected, table, ticks_told
from lockworker.cli.workers import worker_rows, workers_table


def main(args: argparse.Namespace) -> int:
    """``lockworker status``: read everything, then print it (or one JSON document)."""
    client = connect(redis_url(args.redis))
    found: dict[tuple[str, str], Any] = {}
    by_namespace: dict[str, Any] | None = None
    streams: list[readers.StreamRow] = []
    timed: list[schedules.ScheduleRow] = []
    held = None
    found_rates: dict[str, Any] = {}
    notes: list[str] = []
    limit = None if args.all or args.json else args.limit
    in_state = 0  # --state's jobs in the index: the table's rows are only the newest
    since_ms = int(kept(args).retention * 1000)
    try:
        if jobs_only(args):
            workers, rows = [], selected(client, args)
            if args.job is not None:
                found = histories(client, rows)
            elif limit is not None:
                spaces = indexed.namespaces(client, args.namespace)
                in_state = indexed.in_state(client, spaces, args.state, since_ms)
        else:
            workers = worker_rows(client, args.namespace)
            rows = collect(client, args.namespace, kept(args), limit)
            by_namespace = indexed.counts(
                client, indexed.namespaces(client, args.namespace), since_ms, kept(args).done
            )
            streams = readers.stream_rows(client, args.namespace)
            timed = ticks_told(
                client, schedules.schedule_rows(client, args.namespace), kept(args)
            )
            held = footprint.read(client, args.namespace)
            found_rates = throughput.read(client, args.namespace)
            notes = unindexed_note(client, None if args.namespace is None
                                   else [args.namespace])
    finally:
        client.close()
    if args.json:
        jobs = [asdict(r) for r in rows if r.kind == "job"]
        for job in jobs:
            if (job["namespace"], job["id"]) in found:
                job["history"] = [record_json(h) for h in found[job["namespace"], job["id"]]]
        json.dump(
            {
                "workers": [asdict(w) for w in workers],
                "streams": [asdict(s) for s in streams],
                "schedules": [asdict(s) for s in timed],
                "leaders": [asdict(r) for r in rows if r.kind == "leader"],
                "jobs": jobs,
                "counts": summary.counts(rows, by_namespace),
                **({} if held is None else {"memory": footprint.as_json(held)}),
                **({"rates": throughput.as_json(found_rates)} if not jobs_only(args) else {}),
            },
            sys.stdout, indent=2,
        )
        sys.stdout.write("\n")
        return EXIT_OK
    if args.job is None and rows:  # one job needs no counting
        print("\n".join(summary.counts_lines(rows, by_namespace)) + "\n")
    shown, left_out = summary.cut(rows, None if args.all else args.limit)
    left_out = max(left_out, summary.listed_total(rows, by_namespace) - len(shown),
                   in_state - len(shown))
    print(table(shown, errors=jobs_only(args)))
    if left_out:
        print(summary.more_line(left_out))
    for (namespace, job_id), records in found.items():
        print(f"\nattempts of {printable(job_id)!s} in namespace {printable(namespace)}:")
        print(history_table(records))
    if workers:
        print("\n" + workers_table(workers))
    if streams:
        print("\n" + readers.table(streams))
    if timed:
        print("\n" + schedules.table(timed))
    if held is not None:
        print("\n" + "\n".join(footprint.lines(held)))
    shown_rates = throughput.lines(found_rates)
    if shown_rates:
        print("\n" + "\n".join(shown_rates))
    if notes:
        print("\n" + "\n".join(notes))
    return EXIT_OK
