"""Contended: several OS processes loop on one lock, each critical section GET + SET.

Each process loops ``acquire -> n = GET counter; SET counter n + 1 -> release`` for the
same window (all start at one instant of the system-wide monotonic clock). The value
``n`` a section read is its place in the global order of sections, so the sections can
be put in order afterwards without any shared clock: a **handover** is a section whose
process differs from the previous section's (the lock really changed hands), and the
counter's final value must equal the number of sections, every ``n`` read exactly
once (mutual exclusion: a lost update shows as a duplicate ``n``).

A semaphore lets ``limit`` holders in at once, so there the section is
``INCR inside; INCR sections; DECR inside`` and the check is that ``inside`` never
exceeded ``limit``.

An asyncio contender runs its section in tasks (:mod:`benchmarks.aio_contended`):
4 tasks in one process, or 4 processes (some of them sync, for a mixed kind); a task's
sections count as a holder's of their own.

The processes are started once (``spawn``) and reused by every contender.
"""

from __future__ import annotations

import contextlib
import itertools
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess
from typing import Any

import redis

import lockworker
from benchmarks import aio_contended
from benchmarks.common import installed, processes, quiet_logging, server_cpu

LEASE = 5.0
"""Seconds: the lease every contender asks for (as in the peers' baselines)."""

START_DELAY = 0.05
"""Seconds between the last process's ``ready`` and the common start."""

REPLY_TIMEOUT = 60.0

Enter = Callable[[], Any]
Exit = Callable[[Any], None]


@dataclass(frozen=True)
class Kind:
    name: str
    waits_by: str
    processes: int = 4
    needs: str | None = None
    masters: int = 1
    semaphore: bool = False
    asyncio: int = 0
    """How many of the processes run asyncio tasks (the first ones)."""
    tasks: int = 1
    """Tasks per asyncio process, each a holder of its own."""
    sync_as: str | None = None
    """The contender the sync processes of a mixed kind run."""

    @property
    def holders(self) -> str:
        """The processes column: how many, and which run asyncio tasks."""
        if self.tasks > 1:
            return f"{self.processes} x {self.tasks} tasks"
        if 0 < self.asyncio < self.processes:
            return f"{self.processes} ({self.asyncio} asyncio)"
        return str(self.processes)


LOCK_KINDS = (
    Kind(
        "lockworker Lock (reused)",
        "FIFO queue: the release grants the first waiter, which BLPOPs its own list",
    ),
    Kind("lockworker Lock (new object per use)", "the same, a new Lock (and close) per use"),
    Kind(
        "lockworker aio.Lock (4 tasks, 1 process)",
        "the same queue, awaited; each task BLPOPs on a connection of its own",
        processes=1, asyncio=1, tasks=4,
    ),
    Kind("lockworker aio.Lock (4 processes)", "the same queue, awaited", asyncio=4),
    Kind(
        "lockworker Lock + aio.Lock (2 + 2 processes)",
        "one queue for sync and asyncio holders", asyncio=2,
        sync_as="lockworker Lock (reused)",
    ),
    Kind("python-redis-lock", "BLPOP on a signal list", needs="redis_lock"),
    Kind("redis-py Lock", "polls, sleep 0.1 s (default)"),
    Kind(
        f"{aio_contended.REDIS_PY} (4 tasks, 1 process)", "polls, asyncio.sleep 0.1 s",
        processes=1, asyncio=1, tasks=4,
    ),
)
SEMAPHORE = Kind(
    "lockworker Semaphore(limit=2)", "FIFO tickets, pub/sub wake-up", processes=6,
    semaphore=True,
)
REDLOCK_KINDS = (
    Kind("lockworker Redlock (3 masters)",
         "woken by the release on any master; random pause <= 0.2 s as fallback", masters=3),
    Kind(
        "pottery Redlock (3 masters)", "random sleep U(0, 0.2 s)", needs="pottery", masters=3
    ),
)


def kinds() -> list[Kind]:
    """The contenders this installation can run, in the page's order."""
    chosen = [
        kind for kind in (*LOCK_KINDS, SEMAPHORE, *REDLOCK_KINDS) if installed(kind.needs)
    ]
    return chosen


# -- child processes ------------------------------------------------------------------


def _locker(name: str, clients: list[redis.Redis], key: str) -> tuple[Enter, Exit]:
    """How one process enters and leaves the critical section of contender ``name``."""
    client = clients[0]
    if name == "lockworker Lock (new object per use)":

        def enter_new() -> Any:
            lock = lockworker.Lock(client, key, ttl=LEASE)
            lock.acquire()
            return lock

        def exit_new(lock: Any) -> None:
            lock.release()
            lock.close()

        return enter_new, exit_new
    lock: Any
    if name == "lockworker Lock (reused)":
        lock = lockworker.Lock(client, key, ttl=LEASE)
    elif name == "python-redis-lock":
        import redis_lock

        lock = redis_lock.Lock(client, key, expire=round(LEASE))
    elif name == "redis-py Lock":
        lock = client.lock(key, timeout=LEASE, thread_local=False)
    elif name == SEMAPHORE.name:
        lock = lockworker.Semaphore(client, key, 2, ttl=LEASE)
    elif name == "lockworker Redlock (3 masters)":
        lock = lockworker.Redlock(clients, key, ttl=LEASE, timeout=REPLY_TIMEOUT)
    elif name == "pottery Redlock (3 masters)":
        from pottery import Redlock

        lock = Redlock(key=key, masters=set(clients), auto_release_time=LEASE)
    else:
        raise ValueError(f"unknown contender {name!r}")

    def enter() -> Any:
        if not lock.acquire():
            raise RuntimeError(f"{name}: acquire gave up")
        return lock

    def leave(held: Any) -> None:
        held.release()

    return enter, leave


def _loop(
    name: str, clients: list[redis.Redis], key: str, seconds: float, pipe: Connection
) -> tuple[list[int], int, int]:
    """Run sections until the window closes: (the n each read, peak inside, errors)."""
    enter, leave = _locker(name, clients, key)
    client = clients[0]
    client.ping()
    pipe.send(("ready",))
    start_at = float(pipe.recv())
    counter, inside = f"bench:{key}:counter", f"bench:{key}:inside"
    semaphore = name == SEMAPHORE.name
    seen: list[int] = []
    peak = errors = 0
    time.sleep(max(0.0, start_at - time.monotonic()))
    end = start_at + seconds
    while time.monotonic() < end:
        held = enter()
        if semaphore:
            peak = max(peak, int(client.incr(inside)))
            seen.append(int(client.incr(counter)) - 1)
            client.decr(inside)
        else:
            n = int(client.get(counter) or 0)
            client.set(counter, n + 1)
            seen.append(n)
        try:
            leave(held)
        except lockworker.LockworkerError:
            errors += 1
    return seen, peak, errors


def child_main(ports: list[int], pipe: Connection) -> None:
    """A long-lived process: runs ``(name, key, seconds, tasks)`` commands until
    ``None`` (``tasks`` > 0: that many asyncio tasks).

    For each it builds its lock, answers ``ready``, and starts at the instant (of the
    monotonic clock) the parent sends back; it replies with one list of the values read
    per holder (itself, or each of its tasks).
    """
    quiet_logging(to_devnull=True)
    clients = [
        redis.Redis(host="127.0.0.1", port=port, socket_timeout=REPLY_TIMEOUT) for port in ports
    ]
    while True:
        message = pipe.recv()
        if message is None:
            break
        name, key, seconds, tasks = message
        masters = clients if "3 masters" in name else clients[:1]
        try:
            if tasks:
                reply = aio_contended.loop(
                    name, pipe, port=ports[0], key=key, seconds=seconds, tasks=tasks,
                    timeout=REPLY_TIMEOUT,
                )
            else:
                seen, peak, errors = _loop(name, masters, key, seconds, pipe)
                reply = ([seen], peak, errors)
            pipe.send(("ok", *reply))
        except Exception as exc:  # reported to the parent, which fails the run
            pipe.send(("error", f"{type(exc).__name__}: {exc}"))
    for client in clients:
        client.close()


class Pool:
    """``size`` long-lived processes, each running ``target(ports, pipe)``."""

    def __init__(
        self, ports: list[int], size: int, target: Callable[..., None] | None = None
    ) -> None:
        ctx = processes()
        self.pipes: list[Connection] = []
        self.procs: list[BaseProcess] = []
        for _ in range(size):
            ours, theirs = ctx.Pipe()
            proc = ctx.Process(target=target or child_main, args=(ports, theirs), daemon=True)
            proc.start()
            theirs.close()
            self.pipes.append(ours)
            self.procs.append(proc)

    def close(self) -> None:
        for pipe in self.pipes:
            with contextlib.suppress(OSError):
                pipe.send(None)
        for proc in self.procs:
            proc.join(timeout=10)
            if proc.is_alive():
                proc.kill()
                proc.join()


# -- the measurement --------------------------------------------------------------------


@dataclass
class Contended:
    kind: Kind
    seconds: float
    seen: list[list[int]] = field(default_factory=list)
    """Per holder (a process, or a task of an asyncio process): the counter value each
    of its sections read."""
    final: int = 0
    peak_inside: int = 0
    release_errors: int = 0
    server_commands: int = 0
    """Commands the (first) server ran meanwhile (INFO commandstats; inside scripts too)."""
    server_cpu: float = 0.0
    """Seconds of CPU the (first) server used meanwhile (INFO cpu, user + system)."""

    @property
    def commands_per_section(self) -> float:
        return self.server_commands / self.sections if self.sections else 0.0

    @property
    def server_us_per_section(self) -> float:
        return self.server_cpu * 1e6 / self.sections if self.sections else 0.0

    @property
    def sections(self) -> int:
        return sum(len(values) for values in self.seen)

    @property
    def rate(self) -> float:
        return self.sections / self.seconds

    @property
    def handovers(self) -> int:
        owner: dict[int, int] = {}
        for process, values in enumerate(self.seen):
            for n in values:
                owner[n] = process
        order = [owner[n] for n in sorted(owner)]
        return sum(1 for a, b in itertools.pairwise(order) if a != b)

    @property
    def handover_rate(self) -> float:
        return self.handovers / self.seconds

    @property
    def duplicates(self) -> int:
        """Counter values read by more than one section: lost updates."""
        return self.sections - len({n for values in self.seen for n in values})

    @property
    def exclusive(self) -> bool:
        return self.final == self.sections and self.duplicates == 0

    @property
    def shares(self) -> list[int]:
        return [len(values) for values in self.seen]

    @property
    def max_deviation(self) -> float:
        """Largest distance of a process's sections from the mean, in % of the mean."""
        shares = self.shares
        mean = sum(shares) / len(shares) if shares else 0.0
        return max(abs(s - mean) for s in shares) / mean * 100 if mean else float("nan")


def run_one(pool: Pool, client: redis.Redis, kind: Kind, seconds: float) -> Contended:
    """All of ``kind.processes`` processes on one fresh lock for ``seconds``."""
    key = f"contended-{uuid.uuid4().hex[:10]}"
    pipes = pool.pipes[: kind.processes]
    for index, pipe in enumerate(pipes):
        if index < kind.asyncio:
            pipe.send((kind.name, key, seconds, kind.tasks))
        else:
            pipe.send((kind.sync_as or kind.name, key, seconds, 0))
    for pipe in pipes:
        if not pipe.poll(REPLY_TIMEOUT) or pipe.recv()[0] != "ready":
            raise RuntimeError(f"{kind.name}: a contending process did not get ready")
    client.config_resetstat()
    cpu_before = server_cpu(client)
    start_at = time.monotonic() + START_DELAY
    for pipe in pipes:
        pipe.send(start_at)
    result = Contended(kind, seconds)
    failures = []
    for pipe in pipes:
        if not pipe.poll(REPLY_TIMEOUT + seconds):
            raise RuntimeError(f"{kind.name}: no reply from a contending process")
        reply = pipe.recv()
        if reply[0] != "ok":
            failures.append(reply[1])
            continue
        _, seen, peak, errors = reply
        result.seen.extend(seen)
        result.peak_inside = max(result.peak_inside, peak)
        result.release_errors += errors
    result.server_cpu = server_cpu(client) - cpu_before
    stats = client.info("commandstats")
    result.server_commands = sum(
        int(v["calls"]) for k, v in stats.items() if not k.startswith("cmdstat_config")
    )
    if failures:
        raise RuntimeError(f"{kind.name}: {'; '.join(failures)}")
    result.final = int(client.get(f"bench:{key}:counter") or 0)
    return result


def run(ports: list[int], client: redis.Redis, seconds: float) -> list[Contended]:
    """Every contender of :func:`kinds`, one after another, on the same processes."""
    chosen = kinds()
    pool = Pool(ports, max(kind.processes for kind in chosen))
    try:
        return [run_one(pool, client, kind, seconds) for kind in chosen]
    finally:
        pool.close()
