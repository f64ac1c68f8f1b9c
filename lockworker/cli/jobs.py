"""``lockworker submit`` and ``lockworker reset``: one job at a time, by hand."""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from typing import Any

from lockworker.cli.common import (
    EXIT_FAILURE,
    EXIT_OK,
    CliError,
    connect,
    redis_url,
    safe_url,
)
from lockworker.cli.delay import due_text
from lockworker.cli.history import confirm, reset_state_main
from lockworker.cli.status import selected
from lockworker.daemons.redrive import reset_job
from lockworker.daemons.submit import Submitted, submit_job
from lockworker.errors import ForeignValueError, InvalidConfig
from lockworker.model.keys import JobKeys
from lockworker.model.state import JobStatus, Reset, Snapshot
from lockworker.protocol import ScriptProtocol
from lockworker.serving.settings import DONE_RETENTION


def parse_payload(text: str | None) -> Any:
    """The job's payload from its JSON text (absent: None)."""
    if text is None:
        return None
    try:
        return json.loads(text)
    except ValueError as exc:
        raise CliError(f"PAYLOAD_JSON is not valid JSON ({exc}): {text!r}") from None


def submit_main(args: argparse.Namespace) -> int:
    """Add the job to the stream (or, with ``--in``/``--at``, to the jobs waiting off
    it until due); say what was added where, and how to follow it (with ``--quiet``,
    only the entry id, or ``delayed:<id>``, for scripts)."""
    payload = parse_payload(args.payload)
    url = redis_url(args.redis)
    client = connect(url)
    try:
        done = submit_job(
            client, args.stream, args.job_id, payload,
            delay=getattr(args, "delay", None), at=getattr(args, "at", None),
        )
    except InvalidConfig as exc:
        raise CliError(str(exc)) from exc
    finally:
        client.close()
    if args.quiet:
        print(done.id)
    else:
        print(submitted(args.stream, args.job_id, payload, done, safe_url(url)))
    return EXIT_OK


PAYLOAD_CHARS = 60
"""A payload longer than this (as JSON) is shown cut, with its size."""


def submitted(stream: str, job_id: str, payload: Any, done: Submitted, where: str) -> str:
    """Two lines: the job, its stream, server and entry id (or when it is due, and that
    it waits off the stream), its payload; then the command that shows it once a worker
    has taken it (a job no worker looked at yet has no state: ``status`` lists it from
    then on)."""
    text = json.dumps(payload, separators=(",", ":"), ensure_ascii=False)
    shown = text if len(text) <= PAYLOAD_CHARS else (
        f"{text[:PAYLOAD_CHARS]}... ({len(text.encode())} bytes)"
    )
    if done.entry is not None:
        what = f"submitted job {job_id!r} to stream {stream!r} on {where}: entry {done.entry}"
        if done.due_ms is not None:
            what += f" (due {due_text(done.due_ms)}, already past)"
    else:
        assert done.due_ms is not None
        what = (
            f"submitted job {job_id!r} to stream {stream!r} on {where}, due "
            f"{due_text(done.due_ms)} by the server's clock: it waits off the stream "
            f"({done.id}) until a reader of the stream adds it then"
        )
    return (
        f"{what}, payload {shown}\n"
        f"follow it: lockworker status --job {shlex.quote(job_id)} (listed once a worker "
        "of the stream has taken it)"
    )


def describe(job_id: str, seen: Snapshot) -> str:
    """One line about a job, as the confirmation question shows it."""
    if seen.holder is not None:
        return f"job {job_id!r} is held by {seen.holder} (attempt {seen.attempt})"
    if seen.status is JobStatus.PENDING and seen.attempt == 0 and not seen.owner:
        return f"job {job_id!r} is pending with no attempt made"
    by = f" by {seen.owner}" if seen.owner else ""
    return f"job {job_id!r} is {seen.status.value} (attempt {seen.attempt}{by})"


def reset_main(args: argparse.Namespace) -> int:
    """Make a resolved (or, with --force, held) job pending again, after asking, and
    re-drive it (:mod:`lockworker.daemons.redrive`); with --state, every job of the
    namespace in that state."""
    if (args.job_id is None) == (args.state is None):
        raise CliError("give one JOB_ID, or --state STATE for every job in that state")
    if not args.yes and not sys.stdin.isatty():
        raise CliError("refusing to reset without a terminal to ask on: pass --yes")
    if args.state is not None:
        return reset_in_state(args)
    try:
        keys = JobKeys.of(args.namespace, args.job_id)
    except InvalidConfig as exc:
        raise CliError(str(exc)) from exc
    client = connect(redis_url(args.redis))
    try:
        protocol = ScriptProtocol(client)
        try:
            seen = protocol.inspect(keys)
        except ForeignValueError as exc:
            if not args.force:
                raise CliError(f"{exc}; pass --force to replace it", EXIT_FAILURE) from exc
            seen = None
        if seen is not None and seen.attempt == 0 and seen.token == 0 and seen.holder is None:
            raise CliError(
                f"no job {args.job_id!r} in namespace {args.namespace!r}; nothing to reset",
                EXIT_FAILURE,
            )
        if seen is not None and seen.holder is not None and not args.force:
            raise CliError(
                f"{describe(args.job_id, seen)}; wait for it, or pass --force to reset "
                "it under a live holder (its completion will then be refused)", EXIT_FAILURE,
            )
        what = describe(args.job_id, seen) if seen is not None else f"job {args.job_id!r}"
        question = f"{what} in namespace {args.namespace!r}. Reset it?"
        if not args.yes and not confirm(question, sys.stdin, sys.stdout):
            print("not reset")
            return EXIT_FAILURE
        done = reset_job(
            client, protocol, keys, round(args.retention * 1000), force=args.force
        )
    finally:
        client.close()
    if done.result is Reset.ABSENT:
        raise CliError(
            f"no job {args.job_id!r} in namespace {args.namespace!r}; nothing to reset",
            EXIT_FAILURE,
        )
    if done.result is Reset.HELD:
        raise CliError(f"job {args.job_id!r} was taken meanwhile; not reset", EXIT_FAILURE)
    print(done.describe(args.namespace))
    return EXIT_OK


def reset_in_state(args: argparse.Namespace) -> int:
    """``reset --state``: list the namespace's jobs in that state, then reset them."""
    try:
        JobKeys.of(args.namespace, "-")
    except InvalidConfig as exc:
        raise CliError(str(exc)) from exc
    client = connect(redis_url(args.redis))
    try:
        wanted = argparse.Namespace(
            namespace=args.namespace, job=None, state=args.state, retention=args.retention,
            done_retention=DONE_RETENTION, all=True, limit=None,
        )
        rows = selected(client, wanted)
    finally:
        client.close()
    return reset_state_main(args, rows)
