"""Shared pieces: counting round trips and server commands, statistics, machine facts."""

from __future__ import annotations

import compileall
import logging
import multiprocessing
import os
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from multiprocessing.connection import Connection as Pipe
from multiprocessing.process import BaseProcess
from typing import Any

import redis
import structlog
from redis.connection import Connection

import lockworker
from lockworker.cli import logs
from lockworker.testing.server import RedisServer


class CountingConnection(Connection):
    """A redis-py connection that counts its socket writes: one per round trip.

    A single command, a pipeline and a MULTI/EXEC transaction each go out in one
    ``send_packed_command`` call, so the count is the number of requests the client
    waited on. The counter is shared by every connection of this class; the cycle
    benchmark runs in one thread, so it counts exactly the measured client's writes.
    """

    writes = 0

    def send_packed_command(self, command: Any, check_health: bool = True) -> None:
        CountingConnection.writes += 1
        super().send_packed_command(command, check_health)  # type: ignore[no-untyped-call]


def counting_client(server: RedisServer) -> redis.Redis:
    """A client of ``server`` whose round trips :class:`CountingConnection` counts."""
    pool = redis.ConnectionPool(
        host="127.0.0.1", port=server.port, socket_timeout=5.0,
        connection_class=CountingConnection,
    )
    return redis.Redis(connection_pool=pool)


def command_calls(client: redis.Redis) -> int:
    """Commands the server has executed so far (INFO commandstats), INFO itself excluded.

    Commands run inside Lua scripts are counted as well as the EVALSHA that ran them.
    """
    stats: dict[str, Any] = client.info("commandstats")
    return sum(
        int(entry["calls"])
        for name, entry in stats.items()
        if name.startswith("cmdstat_") and name != "cmdstat_info"
    )


def server_cpu(client: redis.Redis) -> float:
    """CPU seconds (user + system) the server process has used so far (INFO cpu)."""
    cpu: dict[str, Any] = client.info("cpu")
    return float(cpu["used_cpu_user"]) + float(cpu["used_cpu_sys"])


def quiet_logging(*, to_devnull: bool = False) -> None:
    """Drop lockworker's log events below WARNING (the library never configures logging).

    With ``to_devnull`` the remaining events are still rendered, as a deployed daemon's
    are (the ``lockworker`` CLI's JSON lines, tracebacks as plain text), but written to
    ``os.devnull`` (the handover benchmark fails on purpose). structlog's development
    renderer would draw each failure's traceback with ``rich`` where it is installed:
    milliseconds of CPU in the failing process, on the cores the handover shares.
    """
    if to_devnull:
        devnull = open(os.devnull, "w")  # noqa: SIM115 (process-long)
        logs.configure("json", "warning", stream=devnull)
        return
    structlog.configure(
        wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING),
        logger_factory=structlog.PrintLoggerFactory(),
        cache_logger_on_first_use=True,
    )


def installed(module: str | None) -> bool:
    """True if ``module`` can be imported (peers are optional: ``pip install '.[bench]'``)."""
    import importlib.util

    return module is None or importlib.util.find_spec(module) is not None


def cli(*args: str, timeout: float) -> subprocess.CompletedProcess[str]:
    """``lockworker ARGS`` in a new interpreter, as a user runs it: with lockworker's
    bytecode compiled first, as installing the package compiles it (a process started
    with PYTHONDONTWRITEBYTECODE would otherwise compile every module each time)."""
    compileall.compile_dir(os.path.dirname(lockworker.__file__), quiet=1)
    return subprocess.run(
        [sys.executable, "-m", "lockworker", *args],
        capture_output=True, text=True, timeout=timeout, check=False,
    )


def median(values: Sequence[float]) -> float:
    return float(statistics.median(values)) if values else float("nan")


def spread(values: Sequence[float]) -> tuple[float, float]:
    return (min(values), max(values)) if values else (float("nan"), float("nan"))


@dataclass(frozen=True)
class Machine:
    """Facts printed with the figures, so that they can be compared with care."""

    date: str
    cores: int
    cpu: str
    python: str
    server: str
    redis_py: str
    hiredis: str
    peers: str
    matplotlib: str = ""
    lockworker: str = ""
    load: str = ""


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as cpuinfo:
            for line in cpuinfo:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _version(module: str) -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(module)
    except PackageNotFoundError:
        return "not installed"


def _lockworker_version() -> str:
    """The package version, and the source tree's commit when it is a git checkout."""
    import subprocess

    import lockworker

    try:
        commit = subprocess.run(
            ["git", "-C", os.path.dirname(lockworker.__file__), "describe", "--always",
             "--dirty"], capture_output=True, text=True, timeout=5, check=False,
        ).stdout.strip()
    except OSError:
        commit = ""
    return f"{lockworker.__version__}" + (f" ({commit})" if commit else "")


def machine(server: RedisServer) -> Machine:
    return Machine(
        date=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        cores=os.cpu_count() or 0,
        cpu=_cpu_model(),
        python=f"{platform.python_implementation()} {platform.python_version()}",
        server=server.version(),
        redis_py=redis.__version__,
        hiredis=_version("hiredis"),
        peers=(
            f"python-redis-lock {_version('python-redis-lock')}, "
            f"pottery {_version('pottery')}, rq {_version('rq')}, "
            f"celery {_version('celery')}, dramatiq {_version('dramatiq')}, "
            f"arq {_version('arq')}, saq {_version('saq')}, streaq {_version('streaq')}, "
            f"taskiq-redis {_version('taskiq-redis')}, huey {_version('huey')}"
        ),
        matplotlib=_version("matplotlib"),
        lockworker=_lockworker_version(),
        load=", ".join(f"{value:.2f}" for value in os.getloadavg()),
    )


CHILD_MODULES = [
    "lockworker", "lockworker.aio", "redis", "redis.asyncio", "benchmarks.common",
    "benchmarks.contended", "benchmarks.failover", "benchmarks.leaders", "benchmarks.masters",
    "benchmarks.scale", "benchmarks.stream_children", "benchmarks.stream_failover",
    "benchmarks.stream_memory", "benchmarks.peer_workers", "benchmarks.peer_preload",
]
"""What the benchmark's children import, loaded once by the fork server they start from."""


FAST_START = False
"""Start children from a fork server (:func:`processes`): ``--quick`` sets it."""


def processes(*, fresh: bool = False) -> Any:
    """The ``multiprocessing`` context of the benchmark's child processes.

    A full run spawns each child (a fresh interpreter importing what it needs), as every
    figure on the page was measured. ``--quick``, a check that the harness runs, sets
    :data:`FAST_START`: children are then forked from a fork server that imported
    :data:`CHILD_MODULES` once, instead of paying a third of a second of imports each
    (a run starts about a hundred); like spawned ones, they share no thread, socket or
    lock with this process. ``fresh``: always ``spawn``.
    """
    if fresh or not FAST_START:
        return multiprocessing.get_context("spawn")
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(CHILD_MODULES)
    return ctx


def spawn(
    target: Callable[..., None], args: Sequence[tuple[Any, ...]], *, fresh: bool = False
) -> tuple[list[BaseProcess], list[Pipe]]:
    """One daemon child process per ``args`` (:func:`processes`), each called as
    ``target(*args, pipe)`` with its end of a pipe; returns the processes and our ends."""
    ctx = processes(fresh=fresh)
    procs, pipes = [], []
    for one in args:
        ours, theirs = ctx.Pipe()
        proc = ctx.Process(target=target, args=(*one, theirs), daemon=True)
        proc.start()
        theirs.close()
        procs.append(proc)
        pipes.append(ours)
    return procs, pipes


def reap(procs: Sequence[BaseProcess], pipes: Sequence[Pipe], wait: float = 20.0) -> None:
    """Join the processes (killing any still alive after ``wait`` s) and close the pipes."""
    for proc in procs:
        proc.join(timeout=wait)
        if proc.is_alive():
            proc.kill()
            proc.join()
    for pipe in pipes:
        pipe.close()
