"""What every subcommand shares: the error type that becomes one line, and connecting.

A failure the user can fix (a bad argument, an unimportable class, Redis not
reachable) is raised as :class:`CliError` and printed by ``main`` as one line on
stderr, never as a traceback, with the exit code it carries.
"""

from __future__ import annotations

import os
import urllib.parse

import redis

ENV_URL = "LOCKWORKER_REDIS_URL"
DEFAULT_URL = "redis://127.0.0.1:6379/0"

EXIT_OK = 0
EXIT_FAILURE = 1
"""Something went wrong at run time (Redis unreachable, a job left undone)."""
EXIT_USAGE = 2
"""The command line cannot work as given (the code argparse uses too)."""


class CliError(Exception):
    """A failure reported as one line on stderr and an exit code."""

    def __init__(self, message: str, code: int = EXIT_USAGE) -> None:
        super().__init__(message)
        self.code = code


def redis_url(given: str | None) -> str:
    """``--redis``, else ``$LOCKWORKER_REDIS_URL``, else the local default."""
    return given or os.environ.get(ENV_URL) or DEFAULT_URL


def safe_url(url: str) -> str:
    """``url`` with any password replaced, for messages and logs."""
    parts = urllib.parse.urlsplit(url)
    if parts.password is None:
        return url
    host = parts.hostname or ""
    if parts.port is not None:
        host = f"{host}:{parts.port}"
    user = f"{parts.username}:***@" if parts.username else ":***@"
    return urllib.parse.urlunsplit(parts._replace(netloc=user + host))


def connect(url: str, *, socket_timeout: float = 5.0) -> redis.Redis:
    """A client of ``url`` that answered PING, or :class:`CliError` saying why not.

    Checked before anything starts, so a wrong URL or a down server is one clear line
    at start-up rather than a retry loop that gives up later.
    """
    try:
        client = redis.Redis.from_url(
            url, socket_timeout=socket_timeout, socket_connect_timeout=min(socket_timeout, 3.0),
            decode_responses=True,
        )
    except ValueError as exc:
        raise CliError(f"invalid Redis URL {safe_url(url)!r}: {exc}") from exc
    try:
        client.ping()
    except redis.AuthenticationError as exc:
        client.close()
        raise CliError(f"Redis at {safe_url(url)} refused the credentials: {exc}", 1) from exc
    except (redis.ConnectionError, redis.TimeoutError, OSError) as exc:
        client.close()
        raise CliError(f"cannot reach Redis at {safe_url(url)}: {exc}", EXIT_FAILURE) from exc
    except redis.RedisError as exc:
        client.close()
        raise CliError(f"Redis at {safe_url(url)} did not answer PING: {exc}", 1) from exc
    return client
