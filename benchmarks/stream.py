"""A stream of jobs: lockworker's ``serve()`` beside plain Redis Streams consumer groups.

A backlog of jobs is submitted to a stream (the entries ``lockworker.submit`` writes);
then OS processes serve it. Each job's handler makes one round trip that records who
ran it (:mod:`benchmarks.stream_kit`). The contenders, on the same server and backlog:

- ``serve()`` fan-out: a primary and two backups (``role="backup"``,
  ``backup_delay=0.5``), each reading every entry with its own ``StreamSource``, at
  concurrency 1, 4, 16 and 64, and the asyncio twin (``lockworker.aio``) at 1, 16
  and 64;
- ``serve()`` through a shared group (``StreamSource(..., group=...)``): 1, 2 and 3
  processes at concurrency 16, and 3 at concurrency 1, each entry delivered to one of
  them;
- threads only: one process reads a consumer group as below and runs each handler in
  a pool of 16 threads, with no protocol at all: the ceiling of serving in threads;
  tasks only: the same with each handler an asyncio task (64 at once) on a
  ``redis.asyncio`` client: the ceiling of serving in tasks;
- plain redis-py on a consumer group: only the primary reads (XREADGROUP COUNT 100,
  XACK per batch) while two backups XAUTOCLAIM entries idle longer than the lease; and
  all three processes read;
- the floor of any protocol that keeps a lease and a state key per job, in plain
  redis-py (fan-out: a primary and two backups; and 3 processes sharing a group): the
  ceiling of the targets for a protocol that keeps per-job keys at all.

Rounds interleave the contenders in a rotating order; jobs/s is the median over the
rounds. Then a SIGKILL run of each family: the primary (or one member) is killed once
a quarter of the jobs has run.
"""

from __future__ import annotations

import math
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field

import redis

from benchmarks import stream_cluster, stream_memory
from benchmarks.common import median
from benchmarks.stream_children import FLOOR, Setup, floor_prefix
from benchmarks.stream_kit import Costs, Outcome, backlog, entries_key, unlink_matching
from benchmarks.stream_runner import group_support, harness_client, run_fleet

LEASE = 10.0
"""Seconds: the lease of the jobs/s rows (no process fails there)."""
GROUP = "bench"
CONCURRENCY = (1, 4, 16, 64)
AIO_CONCURRENCY = (1, 16, 64)
FANOUT = ("primary", "backup", "backup")
SHARED = 16
"""The concurrency of the asyncio, shared-group and threads-only rows."""
ALONE_CONCURRENCY = (1, 16)
"""The concurrencies of the primary-alone rows: what the backups add is read against
the fan-out row of the same concurrency."""
GROUP_KINDS = frozenset({"cg", "pool", "aiopool"})
"""Kinds that read through a plain consumer group the run makes."""


@dataclass(frozen=True)
class Contender:
    name: str
    kind: str
    """``serve``, ``aio`` or ``cg`` (:mod:`benchmarks.stream_children`)."""
    roles: tuple[str, ...]
    concurrency: int = SHARED
    group: bool = False
    """``serve``/``aio``: through a shared group (``group=``); ``cg`` always is."""

    @property
    def serving(self) -> int:
        """Processes that serve jobs while all live (backups stand by)."""
        return sum(1 for role in self.roles if role != "backup")


def _processes(n: int) -> str:
    return f"{n} process{'es' if n > 1 else ''}"


CONTENDERS = (
    *(Contender(f"serve(), primary + 2 backups, concurrency {c}", "serve", FANOUT, c)
      for c in CONCURRENCY),
    *(Contender(f"aio serve(), primary + 2 backups, concurrency {c}", "aio", FANOUT, c)
      for c in AIO_CONCURRENCY),
    *(Contender(f"serve(), primary alone, concurrency {c}", "serve", ("primary",), c)
      for c in ALONE_CONCURRENCY),
    *(Contender(f"serve(group=), {_processes(n)}, concurrency {SHARED}", "serve",
                ("member",) * n, group=True) for n in (1, 2, 3)),
    Contender("serve(group=), 3 processes, concurrency 1", "serve", ("member",) * 3, 1,
              group=True),
    Contender(f"aio serve(group=), 3 processes, concurrency {SHARED}", "aio",
              ("member",) * 3, group=True),
    Contender(f"threads only: the group's reads, the handler in {SHARED} threads, no lock",
              "pool", ("primary",)),
    Contender(f"tasks only: the group's reads, the handler in {AIO_CONCURRENCY[-1]} asyncio "
              "tasks, no lock", "aiopool", ("primary",), AIO_CONCURRENCY[-1]),
    Contender("floor: a lease and a state key per job, plain redis-py, primary + 2 backups",
              FLOOR, FANOUT, 1),
    Contender("floor: a lease and a state key per job, plain redis-py, 3 processes share "
              "a group", FLOOR, ("member",) * 3, 1, group=True),
    Contender("consumer group, primary reads, 2 backups XAUTOCLAIM", "cg", FANOUT, 1),
    Contender("consumer group, all 3 read", "cg", ("member",) * 3, 1),
)


def _one(kind: str, roles: tuple[str, ...], **fields: object) -> str:
    """The name of the one contender of ``kind`` with ``roles`` (and ``fields``): rows
    are found by what they are, not by their place in :data:`CONTENDERS`."""
    (found,) = [
        c.name for c in CONTENDERS
        if c.kind == kind and c.roles == roles
        and all(getattr(c, name) == value for name, value in fields.items())
    ]
    return found


PRIMARY_ONLY = _one("cg", FANOUT)
ALL_READ = _one("cg", ("member",) * 3)
FANOUT_16 = _one("serve", FANOUT, concurrency=16)
GROUP_3 = _one("serve", ("member",) * 3, group=True, concurrency=SHARED)
GROUP_3_ONE = _one("serve", ("member",) * 3, group=True, concurrency=1)
ALONE_1 = _one("serve", ("primary",), concurrency=1)
"""Each member serving in its serving thread (:mod:`lockworker.daemons.inline`)."""
AIO_GROUP_3 = _one("aio", ("member",) * 3, group=True)
FLOOR_FANOUT = _one(FLOOR, FANOUT)
FLOOR_GROUP = _one(FLOOR, ("member",) * 3)
THREADS_ONLY = _one("pool", ("primary",))
TASKS_ONLY = _one("aiopool", ("primary",))
KILLED = (PRIMARY_ONLY, ALL_READ, FANOUT_16, GROUP_3)


def merge(costs: list[Costs]) -> Costs:
    total = Costs(sum(c.jobs for c in costs))
    handled = 0.0
    for c in costs:
        total.round_trips += c.round_trips
        total.sent.update(c.sent)
        total.server.update(c.server)
        total.client_cpu += c.client_cpu
        total.busiest_cpu += c.busiest_cpu
        total.busiest_switches += c.busiest_switches
        total.server_cpu += c.server_cpu
        handled += c.handler_seconds * c.jobs
    total.handler_seconds = handled / total.jobs if total.jobs else float("nan")
    return total


@dataclass
class Row:
    contender: Contender
    outcomes: list[Outcome] = field(default_factory=list)
    costs: list[Costs] = field(default_factory=list)
    windows: list[float] = field(default_factory=list)
    error: str = ""
    """Why the row has no figures (``not available: ...``, or what went wrong)."""

    @property
    def rate(self) -> float:
        return median([o.rate for o in self.outcomes if o.rate == o.rate])

    @property
    def rates(self) -> list[float]:
        return [o.rate for o in self.outcomes]

    @property
    def exactly_once(self) -> bool:
        return bool(self.outcomes) and all(o.exactly_once for o in self.outcomes)

    @property
    def cost(self) -> Costs:
        return merge(self.costs)

    @property
    def busy_cores(self) -> float:
        """Cores the processes and the server kept busy on average."""
        spent = sum(c.client_cpu + c.server_cpu for c in self.costs)
        window = sum(self.windows)
        return spent / window if window else float("nan")

    @property
    def busiest_core(self) -> float:
        """The share of one core its busiest serving process kept busy, on average."""
        window = sum(self.windows)
        return sum(c.busiest_cpu for c in self.costs) / window if window else float("nan")

    @property
    def handler_bound(self) -> float:
        """jobs/s if only the handler's round trip limited the serving processes."""
        seconds = self.cost.handler_seconds
        c = self.contender
        if math.isnan(seconds) or not seconds:
            return float("nan")
        return c.serving * c.concurrency / seconds


@dataclass
class StreamSection:
    jobs: int
    rounds: int
    kill_lease: float
    cap: float
    cores: int
    rows: list[Row] = field(default_factory=list)
    kills: list[Row] = field(default_factory=list)
    cluster: stream_cluster.ClusterRun | None = None
    memory: stream_memory.MemoryRun | None = None

    def row(self, name: str) -> Row | None:
        return next((r for r in self.rows if r.contender.name == name), None)


def setups(contender: Contender, port: int, namespace: str, lease: float) -> list[Setup]:
    group = GROUP if contender.group or contender.kind in GROUP_KINDS else None
    return [
        Setup(contender.kind, port, namespace, namespace, role, contender.concurrency,
              lease, group)
        for role in contender.roles
    ]


def run_once(port: int, contender: Contender, jobs: int, *, lease: float = LEASE,
             kill: bool = False, cap: float = 30.0) -> tuple[Outcome, Costs, float]:
    namespace = f"bench-stream-{uuid.uuid4().hex[:8]}"
    harness = harness_client(port)
    try:
        backlog(harness, namespace, jobs)
        if contender.kind in GROUP_KINDS or (contender.kind == FLOOR and contender.group):
            # the floor reads through a group the run makes when its contender says so
            harness.xgroup_create(entries_key(namespace), GROUP, id="0")
        measured = run_fleet(
            setups(contender, port, namespace, lease), [namespace], jobs, harness, [harness],
            kill=0 if kill else None, cap=cap,
        )
    finally:
        if contender.kind == FLOOR:  # gone at once, as the sections after it expect
            unlink_matching(harness, floor_prefix(namespace) + "*")
        harness.close()
    if measured.timed_out and not kill:
        raise RuntimeError(
            f"not every job ran within the time limit ({measured.outcome.distinct} of {jobs})"
        )
    return measured.outcome, measured.costs, measured.window


def run(
    port: int, client: redis.Redis, *, jobs: int, rounds: int, kill_lease: float,
    cap: float, memory_jobs: int, cluster_jobs: int, record_port: int, cores: int,
    say: Callable[[str], None] | None = None,
) -> StreamSection:
    def tell(text: str) -> None:
        if say is not None:
            say(text)

    section = StreamSection(jobs, rounds, kill_lease, cap, cores)
    missing = group_support(client, f"bench-probe-{uuid.uuid4().hex[:8]}")
    section.rows = [Row(c, error=missing if c.group else "") for c in CONTENDERS]
    live = [row for row in section.rows if not row.error]
    for index in range(rounds):
        tell(f"  stream round {index + 1}/{rounds}: {len(live)} contenders x {jobs} jobs")
        for row in live[index % len(live):] + live[: index % len(live)]:
            _measure(row, lambda c=row.contender: run_once(port, c, jobs))
    for name in KILLED:
        row = Row(next(c for c in CONTENDERS if c.name == name), error=missing if (
            "group=" in name) else "")
        section.kills.append(row)
        if not row.error:
            tell(f"  stream SIGKILL: {name}")
            _measure(row, lambda c=row.contender: run_once(
                port, c, jobs, lease=kill_lease, kill=True, cap=cap))
    tell(f"  stream memory: {memory_jobs} jobs backlogged, then served")
    section.memory = stream_memory.run(port, client, memory_jobs, record_port)
    tell(f"  stream cluster: 3 streams x {cluster_jobs} jobs, 3 masters and 1 server")
    section.cluster = stream_cluster.run(cluster_jobs, missing)
    return section


def _measure(row: Row, once: Callable[[], tuple[Outcome, Costs, float]]) -> None:
    try:
        outcome, costs, window = once()
    except Exception as exc:  # reported in the row, not lost
        row.error = f"{type(exc).__name__}: {exc}"[:300]
        return
    row.outcomes.append(outcome)
    row.costs.append(costs)
    row.windows.append(window)


def where(name: str) -> str:
    """What a command does in these runs (the page's "where it goes" column)."""
    return PURPOSES.get(name, "")


PURPOSES: dict[str, str] = {
    "rpush": "the handler's record (the job's own round trip)",
    "evalsha": ("steps as scripts: lockworker's (claim, complete, look, renew, touch), "
                "the floor's (claim, DONE, look)"),
    "eval": "a script sent whole (first use, before its SHA is cached)",
    "xread": "fan-out: a StreamSource reads entries",
    "xreadgroup": "a consumer group member reads entries",
    "xack": "acknowledge entries (a batch per request)",
    "set": "a job's lease and state: inside scripts",
    "del": "a finished job's lease: inside scripts",
    "xautoclaim": "claim entries idle longer than the lease",
    "xinfo|consumers": "a backup looks at the primary's idle time",
    "xgroup|createconsumer": "the primary joins the group (once)",
    "xgroup|create": "a group is created (once)",
    "subscribe": "wake-ups: a waiter listens on a job's channel",
    "unsubscribe": "wake-ups: a waiter stops listening",
    "psubscribe": "wake-ups: a pattern channel",
    "publish": "wake-ups: a step tells waiters",
    "ping": "a connection's health check",
    "hello": "a new connection's handshake",
    "client|setinfo": "a new connection's handshake",
    "client|maint_notifications": "a new connection's handshake",
    "client|setname": "a connection names itself",
    "script|load": "scripts loaded (once per connection pool)",
    "multi": "a look at a job (GET state, GET lease, PTTL, TIME) in one MULTI/EXEC",
    "exec": "a look at a job (GET state, GET lease, PTTL, TIME) in one MULTI/EXEC",
    "get": "a job's state and lease: the looks, and inside scripts",
    "pttl": "a lease's time left: the looks",
    "time": "the server's clock: the looks, and inside scripts",
    "config|get": "lockworker's server check (eviction, persistence)",
    "acl|whoami": "lockworker's permission check (once per worker)",
}
