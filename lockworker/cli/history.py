"""Why a job failed, and what is dead: ``lockworker status --job ID`` (a table of its
attempts), ``status --state STATE`` (the jobs in one state with their last error) and
``reset --state STATE --namespace NS`` (reset and re-drive every one of them, after
asking: :mod:`lockworker.daemons.redrive`)."""

from __future__ import annotations

import argparse
import sys
from dataclasses import asdict
from typing import Any, TextIO

from lockworker.cli.cells import aligned, duration, printable
from lockworker.cli.common import EXIT_FAILURE, EXIT_OK, CliError, connect, redis_url
from lockworker.config import JOB_STATES
from lockworker.daemons.redrive import reset_job
from lockworker.errors import InvalidConfig
from lockworker.model.history import (
    AttemptEnd,
    AttemptRecord,
    decode_record,
    parse_record,
)
from lockworker.model.keys import JobKeys
from lockworker.model.redrive import Redrive
from lockworker.model.state import Reset
from lockworker.protocol import ScriptProtocol

LAST_ERROR_CHARS = 60
"""A table's LAST ERROR cell is cut to this many characters (JSON has it whole)."""


def add_status_options(status: argparse.ArgumentParser) -> None:
    status.add_argument(
        "--job", metavar="ID",
        help="this job only, with a table of its attempts (default: every job)",
    )
    status.add_argument(
        "--state", choices=JOB_STATES,
        help="only the jobs in this state, with their last error, leaving out leaders "
        "and workers (default: every job, leader and worker)",
    )


def add_reset_options(reset: argparse.ArgumentParser) -> None:
    reset.add_argument("job_id", metavar="JOB_ID", nargs="?", default=None)
    reset.add_argument(
        "--state", choices=JOB_STATES,
        help="instead of one JOB_ID: every job of --namespace in this state, listed, "
        "then asked (default: JOB_ID only)",
    )


def last_error(raw_records: Any, live_token: int | None) -> str | None:
    """The last error of a job from its history's last records (newest last; the live
    lease's token tells the running one): the newest ended attempt's ``Type:
    message``, ``lease lost`` if its lease ran out, or None if it ended otherwise (or
    there is none)."""
    if not isinstance(raw_records, list):
        return None
    for raw in reversed(raw_records):
        found = parse_record(raw)
        if found is None or (found.ending is None and found.token == live_token):
            continue  # not a record, or the attempt running now: no JSON to read
        record = decode_record(raw, live_token)
        if record is None or record.ending is None:
            continue
        if record.error_type is not None:
            return f"{record.error_type}: {record.error or ''}".rstrip()
        return "lease lost" if record.ending == AttemptEnd.LOST.value else None
    return None


def cut(text: str, limit: int = LAST_ERROR_CHARS) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "\u2026"


def record_json(record: AttemptRecord) -> dict[str, Any]:
    return asdict(record)


def history_table(records: tuple[AttemptRecord, ...]) -> str:
    """A job's attempts, oldest first, one line each (the error on the next lines)."""
    if not records:
        return "no attempts recorded"
    header = ("ATTEMPT", "TOKEN", "OWNER", "STARTED", "TOOK", "ENDING", "ERROR")
    first = records[0].started_ms
    cells = [header] + [
        (
            str(r.attempt), str(r.token), printable(r.owner),
            f"+{duration((r.started_ms - first) / 1000.0)}",
            "-" if r.ended_ms is None else duration((r.ended_ms - r.started_ms) / 1000.0),
            r.ending or "running",
            "-" if r.error_type is None else printable(cut(f"{r.error_type}: {r.error}", 80)),
        )
        for r in records
    ]
    return aligned(cells)


def confirm(question: str, stdin: TextIO, stdout: TextIO) -> bool:
    """Ask on the terminal; anything but y/yes is a no."""
    stdout.write(f"{question} [y/N] ")
    stdout.flush()
    answer = stdin.readline()
    return answer.strip().lower() in ("y", "yes")


def reset_state_main(args: argparse.Namespace, rows: list[Any]) -> int:
    """Reset every job of ``rows`` (the jobs of the namespace in ``args.state``), after
    asking; each only if it is still in that state, held ones only with --force."""
    state = args.state
    if state == "held" and not args.force:
        raise CliError(
            f"{len(rows)} job(s) in namespace {args.namespace!r} are held by live "
            "processes; wait for them, or pass --force to reset them under their holders",
            EXIT_FAILURE,
        )
    if not rows:
        print(f"no {state} jobs in namespace {args.namespace!r}; nothing to reset")
        return EXIT_OK
    for row in rows:
        print(f"  {row.id}" + (f"  ({row.last_error})" if row.last_error else ""))
    question = f"{len(rows)} {state} job(s) in namespace {args.namespace!r}. Reset them?"
    if not args.yes and not confirm(question, sys.stdin, sys.stdout):
        print("not reset")
        return EXIT_FAILURE
    client = connect(redis_url(args.redis))
    results: dict[str, Redrive] = {}
    try:
        protocol = ScriptProtocol(client)
        for row in rows:
            try:
                keys = JobKeys.of(args.namespace, row.id)
            except InvalidConfig:
                continue
            results[row.id] = reset_job(
                client, protocol, keys, round(args.retention * 1000), force=args.force,
                expect=state,
            )
    finally:
        client.close()
    print_resets(args.namespace, list(results.values()))
    return EXIT_OK if all(r.reset for r in results.values()) else EXIT_FAILURE


def print_resets(namespace: str, results: list[Redrive]) -> None:
    """How many are pending again and how many were added to their stream again; each
    one that nothing will run, with the command that submits it; each one not reset."""
    done = [r for r in results if r.reset]
    redriven = sum(1 for r in done if r.redriven)
    print(
        f"{len(done)} job(s) in namespace {namespace!r} are pending again"
        + (f"; {redriven} added to their stream again" if redriven else "")
    )
    stranded = [r for r in done if r.stranded]
    if stranded:
        print(
            f"  {len(stranded)} will not run until submitted again (their payload was "
            "not kept: only a stream job that gave up keeps it):"
        )
        for result in stranded:
            print(f"    {result.resubmit()}")
    for result in results:
        if not result.reset:
            why = "held by a live process" if result.result is Reset.HELD else "changed meanwhile"
            print(f"  not reset: {result.job_id!r} ({why})")
