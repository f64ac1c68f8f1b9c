"""``lockworker run MODULE:CLASS``: one Worker (serving a stream) or Leader, as a daemon;
a ``lockworker.aio`` class runs under ``asyncio.run`` (:mod:`lockworker.cli.run_aio`)
with the same options, checks, events and stopping.

Start-up checks everything it can before doing any work: the options (and, with
``--metrics-port``, that the ``metrics`` extra is installed), the class (its import and
its kind: a Worker or Leader, sync or asyncio), the constructor's arguments, Redis (a
PING; an asyncio class's is made by its ``redis.asyncio`` client), and the metrics port
(it listens before the first job). Each failure is one line on stderr and exit code 2
(or 1 for Redis).

Stopping: the first SIGTERM or SIGINT stops taking work. Running hooks see
``job.stopping`` / ``term.stopping``; a hook that checks it hands its job over at once
(no attempt spent), others finish. When all ended the process exits 0. If that takes
longer than ``--grace`` seconds the process exits 1 at once: the jobs still in hand are
taken over by another process when their leases run out. supervisord's
``stopwaitsecs`` must exceed ``--grace``, or supervisord SIGKILLs first. A second
SIGTERM or SIGINT logs ``run.interrupted`` and exits 130 at once, without waiting for
anything: the jobs still in hand stay pending, their leases left to run out, and
another process takes them over then (the next attempt). A signal during the start-up
itself, before the daemon's handlers are in place, ends it cleanly, exit 0
(:mod:`lockworker.cli.stopping`).
"""

from __future__ import annotations

import argparse

from lockworker.cli import run_aio
from lockworker.cli.common import EXIT_OK, CliError, connect, redis_url
from lockworker.cli.run_common import (
    WORKER_ONLY,
    build,
    metrics_extra,
    require_safe,
    session,
    socket_timeout,
    stream_source,
)
from lockworker.cli.target import is_asyncio, is_leader, load
from lockworker.daemons.leader import Leader
from lockworker.runtime import pools

__all__ = ["main", "socket_timeout"]


def main(args: argparse.Namespace) -> int:
    metrics = metrics_extra(args)
    cls = load(args.target, args.app_dir)
    if is_leader(cls):
        given = [name for name in WORKER_ONLY if getattr(args, name) is not None]
        if given:
            flags = ", ".join("--" + name.replace("_", "-") for name in given)
            raise CliError(f"{flags}: only for Worker classes; {args.target} is a Leader")
    url = redis_url(args.redis)
    if is_asyncio(cls):
        return run_aio.main(cls, args, url, metrics)
    client = connect(
        url, socket_timeout=socket_timeout(args.lock_timeout),
        options=pools.client_options(args.concurrency or 4),
    )
    try:
        require_safe(client, args)
        daemon = build(cls, client, args)
        try:
            # The stream (and group) checked before the daemon starts: one line, exit 2.
            source = None if isinstance(daemon, Leader) else stream_source(
                client, args, daemon.owner
            )
            with session(daemon, args, url, metrics) as started:
                started()
                if source is None:
                    daemon.run()
                else:
                    daemon.serve(source, concurrency=args.concurrency or 4)
        finally:
            daemon.close()
    finally:
        client.close()
    return EXIT_OK

