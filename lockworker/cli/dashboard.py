"""``lockworker dashboard``: the web page of :mod:`lockworker.cli.web`, served by
uvicorn until Ctrl-C or SIGTERM (the ``dashboard`` extra).

It listens on 127.0.0.1 unless told otherwise, and refuses any other address without a
token. The Redis URL it shows has its password masked.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable
from typing import Any

from lockworker.cli import kept, topology_urls
from lockworker.cli.common import EXIT_OK, EXIT_USAGE, CliError, connect, redis_url, safe_url

ENV_TOKEN = "LOCKWORKER_DASHBOARD_TOKEN"
DEFAULT_PORT = 8470


def add_parser(
    sub: argparse._SubParsersAction[Any], common: argparse.ArgumentParser,
    seconds: Callable[[str], float], port: Callable[[str], int],
) -> None:
    dash = sub.add_parser(
        "dashboard", parents=[common], help="a web page of leaders, jobs and handovers",
        description="Serve one web page that shows what is happening now: leaders and "
        "their terms, jobs by state per namespace, held jobs, handovers as they happen, "
        "given-up jobs with their last error, each job's attempts. Read-only unless "
        "--allow-reset. Needs pip install 'lockworker[dashboard]'.",
    )
    dash.add_argument(
        "--host", default="127.0.0.1", metavar="HOST",
        help="the address to listen on; any other than loopback needs a token",
    )
    dash.add_argument("--port", type=port, default=DEFAULT_PORT, metavar="PORT",
                      help="the port to listen on")
    dash.add_argument(
        "--auth-token", metavar="TOKEN",
        help=f"ask every visitor for this token (default: ${ENV_TOKEN}, which keeps it "
        "out of the process list; none on loopback)",
    )
    dash.add_argument(
        "--allow-reset", action="store_true",
        help="show buttons that reset (re-drive) jobs nobody holds (default: read-only)",
    )
    dash.add_argument("--namespace", help="only this namespace's jobs (default: all, "
                      "and the leaders)")
    dash.add_argument(
        "--refresh", type=seconds, default=1.0, metavar="SECONDS",
        help="how often Redis is read and the page updated (never busier than a third "
        "of the time: reading many jobs spaces the reads out)",
    )
    kept.add_age_options(dash, seconds, ", and how long a reset state is kept")


def password_of(url: str) -> list[str]:
    """The secrets in ``url`` (a password, a Sentinel's password), to mask in messages."""
    if topology_urls.is_topology(url):
        topology = topology_urls.parse(url)
        return [p for p in (topology.password, topology.options.get("sentinel_password")) if p]
    import redis  # noqa: PLC0415 (only to read the URL the way the client will)

    kwargs = redis.connection.parse_url(url)  # type: ignore[no-untyped-call]
    return [str(kwargs["password"])] if kwargs.get("password") else []


def main(args: argparse.Namespace) -> int:
    token = args.auth_token or os.environ.get(ENV_TOKEN) or None
    try:
        import uvicorn  # noqa: PLC0415

        from lockworker.cli.web import app, guard, view  # noqa: PLC0415
    except ImportError as exc:
        raise CliError(
            f"the dashboard needs its extra: pip install 'lockworker[dashboard]' ({exc})"
        ) from exc
    if guard.needs_token(args.host, token):
        raise CliError(
            f"refusing to serve {args.host} without a token: anyone who reaches it could "
            f"read the jobs; pass --auth-token or set ${ENV_TOKEN} (or use --host 127.0.0.1)",
            EXIT_USAGE,
        )
    url = redis_url(args.redis)
    client = connect(url)
    collector = view.Collector(
        client, retention=args.retention, done_retention=args.done_retention,
        refresh=args.refresh, namespace=args.namespace,
        masked=password_of(url),
    )
    application = app.create_app(collector, url=safe_url(url), token=token,
                                 allow_reset=args.allow_reset)
    config = uvicorn.Config(application, host=args.host, port=args.port, log_config=None,
                            access_log=False, server_header=False, lifespan="on")
    server = uvicorn.Server(config)
    host = f"[{args.host}]" if ":" in args.host else args.host
    print(f"lockworker dashboard on http://{host}:{args.port}/ reading {safe_url(url)}"
          + ("" if args.allow_reset else " (read-only)"), flush=True)
    try:
        server.run()
    except KeyboardInterrupt:  # Ctrl-C: uvicorn has shut down; nothing to hand over
        pass
    except SystemExit:  # uvicorn's way to say it could not listen
        raise CliError(f"--port: cannot listen on {host}:{args.port}", EXIT_USAGE) from None
    finally:
        client.close()
    return EXIT_OK
