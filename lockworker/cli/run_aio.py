"""``lockworker run`` of a ``lockworker.aio`` Worker or Leader, under ``asyncio.run``.

The same options, start-up checks, events, metrics and stopping as a sync class
(described in :mod:`lockworker.cli.run`; what both share is
:mod:`lockworker.cli.run_common`). What differs is the I/O:

- The daemon gets a ``redis.asyncio`` client of the URL, and the start-up PING is that
  client's, in the loop the daemon then runs in (an asyncio client is bound to its
  loop).
- The server's checks (``--require-safe-server``, the ``server.check`` events) run on a
  sync client of the same URL (with a PING of its own); a Worker serves the stream
  through a ``StreamSource`` on it: ``aio.Worker.serve`` reads it in a worker thread, so
  the event loop never waits on a blocking XREAD.
- The signal handlers are installed in the loop's thread (the main thread); the first
  signal calls ``daemon.stop()`` from a courier thread, which is safe for both asyncio
  classes (it wakes the loop), and the grace timer and a second signal end the process
  with ``os._exit`` whatever the loop is doing.

``--durability replicated`` is refused before anything connects, one line and exit 2:
``lockworker.aio`` speaks the script protocol with local durability only (checked by
the library's own rule). Every URL form works: a cluster URL gives a
``redis.asyncio.RedisCluster``, a Sentinel URL the master through ``redis.asyncio``'s
Sentinel client.
"""

from __future__ import annotations

import argparse
import asyncio
from types import ModuleType
from typing import Any

import redis
import redis.asyncio

from lockworker.aio.worker import check_local_script
from lockworker.cli import topology_urls
from lockworker.cli.common import (
    EXIT_OK,
    UNREACHABLE,
    CliError,
    connect,
    no_answer,
    safe_url,
    timeouts,
)
from lockworker.cli.run_common import (
    build,
    require_safe,
    session,
    socket_timeout,
    stream_source,
)
from lockworker.cli.target import describe_kind, is_leader
from lockworker.clock import SystemClock
from lockworker.errors import InvalidConfig
from lockworker.model.state import ProtocolKind
from lockworker.runtime import events, pools, servercheck


def main(cls: Any, args: argparse.Namespace, url: str, metrics: ModuleType | None) -> int:
    """Run ``cls`` (an asyncio class, loaded and checked by the caller) until stopped."""
    check(cls, args)
    startup = getattr(args, "startup", None)
    try:
        asyncio.run(_run(cls, args, url, metrics))
    except asyncio.CancelledError as cancelled:
        if startup is None:
            raise
        raise startup.stopped(cancelled) from None
    except CliError:
        # A start-up that met an error after a stop was asked for (a call that did not
        # honour the cancel, then timed out) ends as the stop: the operator asked for it.
        if startup is None or not startup.signals or startup.running:
            raise
        raise startup.stopped(asyncio.CancelledError()) from None
    return EXIT_OK


def check(cls: Any, args: argparse.Namespace) -> None:
    """Refuse, before anything connects, the options an asyncio class cannot run with."""
    try:
        check_local_script(
            ProtocolKind.SCRIPT, args.durability, "Leader" if is_leader(cls) else "Worker"
        )
    except InvalidConfig as exc:
        raise CliError(f"--durability: {exc}; {args.target} is a {describe_kind(cls)}") from exc


async def connect_async(
    url: str, *, socket_timeout: float, options: dict[str, Any] | None = None
) -> Any:
    """A ``redis.asyncio`` client of ``url`` that answered PING, or :class:`CliError`
    saying why not (the same lines as :func:`lockworker.cli.common.connect`)."""
    extra = {**timeouts(socket_timeout), **(options or {})}
    try:
        if topology_urls.is_topology(url):
            client = topology_urls.async_client(
                topology_urls.parse(url), decode_responses=True, **extra
            )
        else:
            client = redis.asyncio.Redis.from_url(url, decode_responses=True, **extra)
    except ValueError as exc:
        raise CliError(f"invalid Redis URL {safe_url(url)!r}: {exc}") from exc
    try:
        await client.ping()
    except UNREACHABLE as exc:
        await topology_urls.aclose(client)
        raise no_answer(url, exc) from exc
    return client


async def _run(
    cls: Any, args: argparse.Namespace, url: str, metrics: ModuleType | None
) -> None:
    startup = getattr(args, "startup", None)
    task = asyncio.current_task()
    if startup is None or task is None:
        await _start(cls, args, url, metrics)
        return
    with startup.cancelling(task):  # a stop signal while starting cancels this task
        await _start(cls, args, url, metrics)


async def _start(
    cls: Any, args: argparse.Namespace, url: str, metrics: ModuleType | None
) -> None:
    timeout = socket_timeout(args.lock_timeout)
    client = await connect_async(
        url, socket_timeout=timeout, options=pools.client_options(
            args.concurrency or 4, redis.asyncio.ConnectionPool
        ),
    )
    # A sync client of the same URL: a Worker's stream, and the server's checks (the
    # asyncio classes leave those to the command).
    sync_client: redis.Redis | None = None
    try:
        sync_client = await asyncio.to_thread(connect, url, socket_timeout=timeout)
        await asyncio.to_thread(require_safe, sync_client, args)
        daemon = build(cls, client, args)
        source = None if is_leader(cls) else stream_source(sync_client, args, daemon.owner)
        log = events.logger(events.CLI, None, owner=daemon.owner)
        with session(daemon, args, url, metrics) as started:
            stop_watch = await asyncio.to_thread(
                servercheck.watching, sync_client, log, SystemClock()
            )
            try:
                started()
                await _serve(daemon, args, source)
            finally:
                stop_watch()
    finally:
        if sync_client is not None:
            sync_client.close()
        await topology_urls.aclose(client)


async def _serve(daemon: Any, args: argparse.Namespace, source: Any) -> None:
    if source is None:
        await daemon.run()  # closes the leader itself
        return
    try:
        await daemon.serve(source, concurrency=args.concurrency or 4)
    finally:
        await daemon.close()
