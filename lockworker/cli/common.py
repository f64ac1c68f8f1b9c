"""What every subcommand shares: the error type that becomes one line, the Redis URL
(checked before anything connects; a single server, a cluster or a Sentinel group,
:mod:`lockworker.cli.topology_urls`), and connecting.

A failure the user can fix (a bad argument, an unimportable class, Redis not
reachable) is raised as :class:`CliError` and printed by ``main`` as one line on
stderr, never as a traceback, with the exit code it carries.
"""

from __future__ import annotations

import os
import re
import urllib.parse
from typing import Any

import redis
from redis.exceptions import RedisClusterException

from lockworker.cli import topology_urls

ENV_URL = "LOCKWORKER_REDIS_URL"
DEFAULT_URL = "redis://127.0.0.1:6379/0"

EXIT_OK = 0
EXIT_FAILURE = 1
"""Something went wrong at run time (Redis unreachable, a job left undone)."""
EXIT_USAGE = 2
"""The command line cannot work as given (the code argparse uses too)."""
EXIT_INTERRUPTED = 130
"""Ctrl-C where there is nothing to hand over; for ``run``, a second SIGINT/SIGTERM."""


class CliError(Exception):
    """A failure reported as one line on stderr and an exit code."""

    def __init__(self, message: str, code: int = EXIT_USAGE) -> None:
        super().__init__(message)
        self.code = code


def redis_url(given: str | None) -> str:
    """``--redis``, else ``$LOCKWORKER_REDIS_URL``, else the local default; checked by
    :func:`check_url` (a bad one is :class:`CliError`, exit 2, naming where it came from)."""
    if given is not None:
        return check_url(given, "--redis")
    from_env = os.environ.get(ENV_URL)
    if from_env:
        return check_url(from_env, f"${ENV_URL}")
    return DEFAULT_URL


def check_url(url: str, source: str = "--redis") -> str:
    """``url`` if redis-py can build a connection from it, else :class:`CliError`.

    Everything that can be wrong with the text of a URL (the scheme, the port, an IPv6
    address, the database number, an unknown query option) is found here, before
    anything connects. The message names ``source`` and the URL with its password
    masked, and says what is wrong with the masked URL, so no part of the password can
    show in it.
    """
    problem = _problem(url)
    if problem is None:
        return url
    masked = safe_url(url)
    if masked != url:
        problem = _problem(masked) or (
            "the password must be percent-encoded (it holds '/', '?', '#' or '@')"
        )
    raise CliError(f"{source}: invalid Redis URL {masked!r}: {problem}")


def _problem(url: str) -> str | None:
    """What is wrong with ``url`` for redis-py, or None."""
    if topology_urls.is_topology(url):
        try:
            topology_urls.parse(url)
        except ValueError as exc:
            return str(exc)
        return None
    try:
        parts = urllib.parse.urlsplit(url)
        parts.port  # noqa: B018 (reading it checks it: ValueError if not a port number)
        pool = redis.ConnectionPool.from_url(url)  # parses, refuses a bad scheme or value
        path = urllib.parse.unquote(parts.path).strip("/")
        query = urllib.parse.parse_qs(parts.query)
        if parts.scheme != "unix" and path and "db" not in query and not path.isdigit():
            return f"the database must be a number, got {path!r}"
        pool.make_connection()  # connects nothing; refuses options it does not know
        pool.disconnect()
    except TypeError as exc:
        unknown = re.search(r"unexpected keyword argument '([^']*)'", str(exc))
        return f"unknown option {unknown.group(1)!r}" if unknown else str(exc)
    except ValueError as exc:
        return str(exc) or "cannot be parsed"
    return None


def safe_url(url: str) -> str:
    """``url`` with any password (``user:password@``, ``?password=``,
    ``?sentinel_password=``) replaced by
    ``***``, for messages and logs; never raises, whatever the URL.

    The password is found without parsing: everything between the user name and the
    last ``@`` (a password holding ``/`` or ``@`` unencoded is masked whole too).
    """
    scheme, sep, rest = url.partition("://")
    if sep:
        userinfo, at, host = rest.rpartition("@")
        if at and ":" in userinfo:
            url = f"{scheme}://{userinfo.split(':', 1)[0]}:***@{host}"
    return re.sub(r"([?&](?:sentinel_)?password=)[^&#]*", r"\1***", url)


UNREACHABLE = (redis.RedisError, OSError, RedisClusterException)
"""What making a client or its first PING raises when Redis cannot be used: redis-py's
errors, and a cluster client's "no startup node is reachable", which is none of them."""


def timeouts(socket_timeout: float) -> dict[str, Any]:
    """A client's socket timeouts: connecting gives up sooner (at most 3 s), so an
    unreachable host is reported before a long socket timeout would pass."""
    return {"socket_timeout": socket_timeout,
            "socket_connect_timeout": min(socket_timeout, 3.0)}


def connect(
    url: str, *, socket_timeout: float = 5.0, options: dict[str, Any] | None = None
) -> redis.Redis:
    """A client of ``url`` that answered PING, or :class:`CliError` saying why not.

    Checked before anything starts, so a wrong URL or a down server is one clear line
    at start-up rather than a retry loop that gives up later. ``options``: more client
    options (a pool sized for a serving's concurrency).
    """
    extra = {**timeouts(socket_timeout), **(options or {})}
    try:
        if topology_urls.is_topology(url):
            client = topology_urls.client(
                topology_urls.parse(url), decode_responses=True, **extra
            )
        else:
            client = redis.Redis.from_url(url, decode_responses=True, **extra)
    except UNREACHABLE as exc:  # a cluster client connects at once
        raise CliError(f"cannot reach Redis at {safe_url(url)}: {exc}", EXIT_FAILURE) from exc
    except ValueError as exc:
        raise CliError(f"invalid Redis URL {safe_url(url)!r}: {exc}") from exc
    try:
        client.ping()
    except UNREACHABLE as exc:
        client.close()
        raise no_answer(url, exc) from exc
    return client


def no_answer(url: str, exc: BaseException) -> CliError:
    """The one line for a PING of ``url`` that failed with ``exc`` (sync or asyncio
    client alike: both raise redis-py's exceptions), exit 1."""
    where = safe_url(url)
    if isinstance(exc, redis.AuthenticationError):
        return CliError(f"Redis at {where} refused the credentials: {exc}", EXIT_FAILURE)
    if isinstance(exc, (redis.ConnectionError, redis.TimeoutError, OSError, RedisClusterException)):
        return CliError(f"cannot reach Redis at {where}: {exc}", EXIT_FAILURE)
    return CliError(f"Redis at {where} did not answer PING: {exc}", EXIT_FAILURE)
