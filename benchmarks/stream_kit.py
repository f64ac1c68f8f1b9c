"""Shared pieces of the stream section: counting clients, the backlog, the analysis.

Every serving process of the section (lockworker's and the plain consumer groups')
counts, on its own client, the requests it waits on (round trips: socket writes, one
per command or pipeline) and the commands it sends, by name; the run's server counts
every command it executes (``INFO commandstats``), those run inside Lua scripts too.
The difference, per command name, is what ran inside scripts.

Each job's handler makes one round trip: an RPUSH of ``"<job id> <monotonic time>
<owner>"`` to the run's log. Every process reads ``time.monotonic()``, one system-wide
clock on Linux, so the log orders the runs of all processes, and tells who ran each
job and how often.
"""

from __future__ import annotations

import itertools
import math
import threading
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, ClassVar

import redis
import redis.asyncio

try:
    import hiredis
except ImportError:  # pragma: no cover - the bench extra installs it
    hiredis = None
import redis.asyncio.connection
from redis.connection import Connection

from lockworker.daemons.sources import stream_keys

CONTAINERS = frozenset(
    {"xinfo", "xgroup", "client", "config", "memory", "script", "cluster", "command",
     "object", "pubsub", "function", "acl"}
)
"""Commands whose first argument is a subcommand (``INFO commandstats`` says
``xinfo|consumers``)."""


def command_name(args: Any) -> str:
    """The ``INFO commandstats`` name of one packed command's arguments."""
    head = args[0]
    words = (head.decode() if isinstance(head, bytes) else str(head)).lower().split()
    if len(words) == 1 and words[0] in CONTAINERS and len(args) > 1:
        sub = args[1]
        words.append((sub.decode() if isinstance(sub, bytes) else str(sub)).lower())
    return "|".join(words[:2]) if words[0] in CONTAINERS else words[0]


class Tally:
    """One process's round trips and commands sent (by name), shared by its clients."""

    lock = threading.Lock()
    round_trips = 0
    commands: ClassVar[Counter[str]] = Counter()

    @classmethod
    def trip(cls) -> None:
        with cls.lock:
            cls.round_trips += 1

    @classmethod
    def sent(cls, names: list[str]) -> None:
        with cls.lock:
            cls.commands.update(names)

    @classmethod
    def reset(cls) -> None:
        with cls.lock:
            cls.round_trips = 0
            cls.commands = Counter()

    @classmethod
    def snapshot(cls) -> tuple[int, dict[str, int]]:
        with cls.lock:
            return cls.round_trips, dict(cls.commands)


class TallyConnection(Connection):
    """A redis-py connection that reports its round trips and commands to :class:`Tally`.

    A single command goes out through ``send_command``, a pipeline's through
    ``pack_commands`` (neither calls the other's counting path).
    """

    def send_command(self, *args: Any, **kwargs: Any) -> None:
        Tally.sent([command_name(args)])
        super().send_command(*args, **kwargs)  # type: ignore[no-untyped-call]

    def pack_commands(self, commands: Any) -> Any:
        commands = list(commands)
        Tally.sent([command_name(args) for args in commands])
        return super().pack_commands(commands)  # type: ignore[no-untyped-call]

    def send_packed_command(self, command: Any, check_health: bool = True) -> None:
        Tally.trip()
        super().send_packed_command(command, check_health)  # type: ignore[no-untyped-call]


class AioTallyConnection(redis.asyncio.connection.Connection):
    """The asyncio twin of :class:`TallyConnection` (here both a single command and a
    pipeline's are packed by ``pack_command``; lockworker's batches come packed
    already, one buffer per write: their commands are read back from it)."""

    def pack_command(self, *args: Any) -> Any:
        Tally.sent([command_name(args)])
        return super().pack_command(*args)

    async def send_packed_command(self, command: Any, check_health: bool = True) -> None:
        Tally.trip()
        if isinstance(command, bytes):
            Tally.sent(packed_names(command))
        await super().send_packed_command(command, check_health)


def packed_names(packed: bytes) -> list[str]:
    """The name of each command in a buffer of packed commands (RESP arrays of bulk
    strings). Read by hiredis when installed (the ``bench`` extra): counting must not
    cost the measured process more than the packing it replaced."""
    if hiredis is not None:
        reader = hiredis.Reader()
        reader.feed(packed)
        names = []
        while (args := reader.gets()) is not False:
            names.append(command_name(args))
        return names
    return _scanned_names(packed)


def _scanned_names(packed: bytes) -> list[str]:
    """:func:`packed_names` without hiredis: the first two arguments of each command
    read, the rest skipped."""
    names = []
    at = 0
    while at < len(packed):
        end = packed.index(b"\r\n", at)
        count = int(packed[at + 1:end])
        at = end + 2
        args = []
        for n in range(count):
            end = packed.index(b"\r\n", at)
            size = int(packed[at + 1:end])
            if n < 2:
                args.append(packed[end + 2:end + 2 + size])
            at = end + 2 + size + 2
        names.append(command_name(args))
    return names


def log_key(stream: str) -> str:
    """The run's log of job runs (in the stream's hash slot: the same master)."""
    return f"bench:{{{stream}}}:log"


def entries_key(stream: str) -> str:
    """The Redis stream that ``lockworker.submit`` writes for ``stream``."""
    return stream_keys(stream).extra("entries")


def backlog(client: Any, stream: str, jobs: int, prefix: str = "job") -> None:
    """Submit ``jobs`` jobs to ``stream`` as ``lockworker.submit`` does (same entry
    fields), pipelined in chunks: the backlog is there before any process starts."""
    key = entries_key(stream)
    for first in range(0, jobs, 1000):
        pipe = client.pipeline(transaction=False)
        for n in range(first, min(first + 1000, jobs)):
            pipe.xadd(key, {"job_id": f"{prefix}-{n}", "payload": f'{{"n": {n}}}'})
        pipe.execute()


def unlink_matching(client: redis.Redis, pattern: str) -> None:
    """Delete every key matching the glob ``pattern``, a thousand per request: a run's
    keys, gone before the sections after it measure memory or scan the keyspace."""
    batch: list[Any] = []
    for key in client.scan_iter(match=pattern, count=1000):
        batch.append(key)
        if len(batch) >= 1000:
            client.unlink(*batch)
            batch = []
    if batch:
        client.unlink(*batch)


def commandstats(clients: list[Any]) -> Counter[str]:
    """Calls per command name, summed over the servers of ``clients``."""
    total: Counter[str] = Counter()
    for client in clients:
        for name, entry in client.info("commandstats").items():
            if name.startswith("cmdstat_"):
                total[name[len("cmdstat_"):]] += int(entry["calls"])
    return total


def server_cpu(clients: list[Any]) -> float:
    total = 0.0
    for client in clients:
        cpu = client.info("cpu")
        total += float(cpu["used_cpu_user"]) + float(cpu["used_cpu_sys"])
    return total


@dataclass
class Costs:
    """What a run cost per job: requests and CPU of its processes, the server's work."""

    jobs: int
    round_trips: int = 0
    sent: Counter[str] = field(default_factory=Counter)
    """Commands the serving processes sent, by name."""
    server: Counter[str] = field(default_factory=Counter)
    """Commands the servers executed meanwhile, by name (harness and INFO excluded)."""
    client_cpu: float = 0.0
    server_cpu: float = 0.0
    busiest_cpu: float = 0.0
    """CPU seconds of the busiest serving process (its share of one core is what a
    process whose Python runs one thread at a time can give at most)."""
    busiest_switches: int = 0
    """The busiest serving process's voluntary context switches: its threads' waits
    for a reply, for one another, or for the interpreter lock, each a wake-up."""
    handler_seconds: float = 0.0
    """Mean wall time of the handler's round trip, as the processes measured it."""

    def per_job(self, value: float) -> float:
        return value / self.jobs if self.jobs else float("nan")

    @property
    def server_commands(self) -> int:
        return sum(self.server.values())

    def inside_scripts(self, name: str) -> int:
        return max(0, self.server.get(name, 0) - self.sent.get(name, 0))


@dataclass
class Record:
    job: str
    at: float
    owner: str


def read_log(client: Any, stream: str) -> list[Record]:
    rows = []
    for raw in client.lrange(log_key(stream), 0, -1):
        job, at, owner = raw.decode().split(" ", 2)
        rows.append(Record(job, float(at), owner))
    return rows


@dataclass
class Outcome:
    """What the log says about one run."""

    jobs: int
    seconds: float = float("nan")
    """From the start signal until every job had run at least once."""
    distinct: int = 0
    runs: int = 0
    twice: int = 0
    by_role: dict[str, int] = field(default_factory=dict)
    stall: float = float("nan")
    """Kill runs: the longest gap between consecutive job runs from the last run
    before the kill to the end."""
    first_after: float = float("nan")
    """Kill runs: seconds from the kill to the next job run by another process."""

    @property
    def rate(self) -> float:
        if math.isnan(self.seconds) or not self.seconds:
            return float("nan")
        return self.jobs / self.seconds

    @property
    def at_least_once(self) -> bool:
        return self.distinct == self.jobs

    @property
    def exactly_once(self) -> bool:
        return self.distinct == self.jobs == self.runs


def analyse(records: list[Record], jobs: int, start: float,
            killed_at: float | None = None, killed: str = "") -> Outcome:
    """The outcome of a run whose start signal went at ``start`` (and, for a kill run,
    whose process ``killed`` (an owner prefix) got SIGKILL at ``killed_at``)."""
    result = Outcome(jobs)
    first: dict[str, float] = {}
    counts: Counter[str] = Counter()
    for r in records:
        counts[r.job] += 1
        first[r.job] = min(first.get(r.job, r.at), r.at)
        role = r.owner.split("-", 1)[0]
        result.by_role[role] = result.by_role.get(role, 0) + 1
    result.distinct, result.runs = len(first), len(records)
    result.twice = sum(1 for n in counts.values() if n > 1)
    if first and result.distinct == jobs:
        result.seconds = max(first.values()) - start
    if killed_at is not None:
        times = sorted(r.at for r in records)
        before = [t for t in times if t <= killed_at]
        tail = ([before[-1]] if before else [killed_at]) + [t for t in times if t > killed_at]
        end = max(first.values()) if result.distinct == jobs else tail[-1]
        tail = [t for t in tail if t <= end]
        gaps = [b - a for a, b in itertools.pairwise(tail)]
        result.stall = max(gaps) if gaps else float("nan")
        others = [r.at for r in records if r.at > killed_at and not r.owner.startswith(killed)]
        result.first_after = min(others) - killed_at if others else float("nan")
    return result
