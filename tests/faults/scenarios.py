"""The fault scenarios, shared by the pytest battery and the soak (``python -m tests.faults``).

Each scenario starts its own servers and processes, injects one kind of fault at
random moments for a number of rounds, lets everything finish, and checks the whole
history (:func:`faults.history.check`) plus what happened to the processes themselves
(``crashed``: an exception escaped the library; ``thread_died``, ``task_died``: a
library thread or asyncio task died of one; ``stuck``: a process never finished).
Sizes are arguments: the battery runs them small, the soak large. Every scenario
returns a :class:`Result` with its figures.

The fleets are mixed: in each role (workers, lock holders, leaders) sync processes and
their asyncio twins (:mod:`lockworker.aio`) alternate on the same jobs, locks and
leadership, faults are aimed at both sides in turn, and one history holds them all.
``aio`` counts the sections held by asyncio processes and ``cross`` the handovers
between a process of one side and one of the other on the same key.
"""

from __future__ import annotations

import itertools
import os
import random
import signal
import subprocess
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import redis

import lockworker
from lockworker.daemons.sources import stream_keys
from lockworker.model.keys import JobKeys, parse_state_key
from lockworker.protocol.decode import text
from lockworker.protocol.schedules import schedule_key
from lockworker.protocol.streams import entry_order

from .child import CRASH_EXIT
from .harness import DURABLE, WORKERS, Child, Env, environment, is_async, kind_of, restart, wait_for
from .history import (
    JOB,
    History,
    Section,
    Violation,
    Window,
    check,
    followed_early,
    handovers,
)
from .proxy import Proxy


@dataclass
class Result:
    scenario: str
    rounds: int
    faults: int
    handovers: int
    violations: list[Violation]
    seconds: float
    extra: dict[str, Any] = field(default_factory=dict)

    def figure(self) -> str:
        extra = "".join(f" {k}={v}" for k, v in self.extra.items())
        return (
            f"faults: {self.scenario} rounds={self.rounds} handovers={self.handovers} "
            f"faults={self.faults}{extra} violations={len(self.violations)} "
            f"({self.seconds:.1f} s)"
        )

    def report(self, limit: int = 15) -> str:
        lines = [self.figure(), *(f"  {v}" for v in self.violations[:limit])]
        if len(self.violations) > limit:
            lines.append(f"  ... and {len(self.violations) - limit} more")
        return "\n".join(lines)


def job_ids(n: int) -> list[str]:
    return [f"j{i:03d}" for i in range(n)]


def seeded(seed: int | None) -> tuple[random.Random, int]:
    """A random generator for the fault moments, and its seed (shown in the figure)."""
    if seed is None:
        seed = random.SystemRandom().randrange(2**32)
    return random.Random(seed), seed


def finish(env: Env, timeout: float = 60.0, allowed: Sequence[int] = ()) -> list[Violation]:
    """Let every child finish; what went wrong with the processes themselves.

    Workers exit once every job is resolved for them; the others are stopped after
    them. A child still alive after ``timeout`` is killed and reported as ``stuck``
    (the checker then also reports its jobs as pending); a child that died of an
    exception is reported as ``crashed``. Once all have stopped, the namespace's index
    must agree with the job states (``index_disagrees``, :mod:`faults.index`).
    """
    fleet = env.fleet
    deadline = time.monotonic() + timeout
    out: list[Violation] = []
    for modes in (WORKERS, ()):  # workers first: the others run on meanwhile
        if not modes:
            fleet.stop()
        live = fleet.live(*modes)
        try:
            fleet.wait_exit(live, max(1.0, deadline - time.monotonic()))
        except TimeoutError:
            for child in live:
                if child.alive():
                    fleet.kill(child)
                    out.append(Violation(
                        "stuck", child.name,
                        f"{child.mode} process {child.pid} had not finished after {timeout} s",
                    ))
    return out + fleet.failures(allowed) + env.index_check()


def late_writes(history: History) -> dict[str, int]:
    """Late writes made on purpose by holders that found their section lost."""
    late = [n for n in history.notes if n.get("what") == "late_write"]
    return {
        "late_refused": sum(1 for n in late if not n["accepted"]),
        "late_accepted": sum(1 for n in late if n["accepted"]),
    }


def sides(env: Env, history: History) -> dict[str, int]:
    """How mixed the history is: ``aio``, the sections held by asyncio processes, and
    ``cross``, the sections that follow on the same key a section of a process of the
    other side (a handover between sync and asyncio); and ``batches``, the round trips
    that carried more than one protocol step (noted by serving workers); ``widest``, the
    most jobs one worker process was delivered, and ``delivered``, the deliveries of all
    of them (in fan-out every live worker is delivered every job; through a consumer
    group each job goes to one member, again only after a handover or a claim); ``met``,
    the jobs for which calls of one process (sharing a Worker) ended differently: one
    did it, another found it done; ``followed``, the deliveries backups settled by
    their namespace's progress without a look; ``states`` and ``entries``, the job states and index
    entries the index check compared once the scenario settled (:mod:`faults.index`)."""
    side = {run: is_async(mode) for run, mode in env.fleet.modes().items()}
    by_key: dict[tuple[str, str], list[Section]] = defaultdict(list)
    for s in history.sections:
        by_key[(s.kind, s.key)].append(s)
    cross = 0
    for sections in by_key.values():
        ordered = sorted(sections, key=lambda s: s.start)
        cross += sum(
            1 for a, b in itertools.pairwise(ordered)
            if a.run != b.run and side.get(a.run) != side.get(b.run)
        )
    batches = sum(1 for n in history.notes if n.get("what") == "batch" and n["steps"] > 1)
    seen: dict[str, set[str]] = defaultdict(set)
    ended: dict[tuple[str, str], set[str]] = defaultdict(set)
    for o in history.outcomes:
        if o.kind == JOB:
            seen[o.run].add(o.key)
            ended[(o.run, o.key)].add(o.outcome)
    return {"aio": sum(1 for s in history.sections if side.get(s.run)), "cross": cross,
            "batches": batches, "widest": max(map(len, seen.values()), default=0),
            "delivered": sum(map(len, seen.values())),
            "met": sum(1 for outcomes in ended.values() if len(outcomes) > 1),
            "followed": sum(1 for n in history.notes if n.get("what") == "followed"),
            "skipped_ahead": sum(1 for n in history.notes if n.get("what") == "skipped"),
            "states": env.indexed.states, "entries": env.indexed.entries}


def on_side(env: Env, asynchronous: bool) -> Callable[[], list[Child]]:
    """The live children of one side (for :meth:`~faults.harness.Fleet.wait_holder`)."""
    return lambda: [c for c in env.fleet.live() if is_async(c.mode) == asynchronous]


def other_side(mode: str) -> str:
    """The twin of a child kind on the other side (``worker`` <-> ``aworker``)."""
    return kind_of(mode, not is_async(mode))


@dataclass(frozen=True)
class Mix:
    """A fleet of workers, lock holders and leaders, and their sections."""

    workers: int = 3
    lockers: int = 2
    leaders: int = 2
    locks: tuple[str, ...] = ("A", "B")
    steps: tuple[int, int] = (2, 5)
    step: float = 0.03
    fail_rate: float = 0.15
    gap: float = 0.01
    concurrency: int = 1
    """Above 1, workers serve their jobs that many at once (their steps share round
    trips: the batched protocol) instead of processing them one by one."""
    backups: bool = False
    """Every other worker is a backup (serving, it holds deliveries back while a primary
    serves)."""
    group: bool = False
    """Workers serve the jobs from a stream through one consumer group
    (``StreamSource(group=)``): each entry goes to one member."""
    fanout: bool = False
    """Workers serve the jobs from a stream, each reading every entry (a fan-out
    ``StreamSource``): backups follow the namespace's progress."""
    backup_delay: float = 0.05
    own_process: bool = False
    """Workers serve through lockworker's own ``process`` (no override records their
    outcomes: their ``job.done`` events do), so ``serve`` takes its lane: at
    concurrency 1, claims of the entries read ahead in one round trip and hooks in the
    serving thread."""
    group_batch: int | None = None
    """Entries a group member reads ahead (``StreamSource(batch=)``; None: its default)."""
    shared: int = 1
    """Above 1, each worker process runs that many threads (tasks, asyncio) sharing its
    one Worker, each processing every job: one holder per id inside a process too."""
    retry_delays: tuple[float, ...] | None = (0.0, 0.05, 0.1)
    """Seconds before a failed job is due again, by failed attempt (the last repeated):
    the default schedule's shape (handed over at once, then later and later), short. With
    the default (None: 2, 4, 8 s after the second, third, fourth failure) a run would
    last as long as its slowest job's schedule, not its faults."""

    def settings(self) -> dict[str, Any]:
        out = {"steps": self.steps, "step": self.step, "fail_rate": self.fail_rate,
               "gap": self.gap, "concurrency": self.concurrency,
               "backup_delay": self.backup_delay,
               "own_process": self.own_process, "shared": self.shared}
        if self.retry_delays is not None:
            out["retry_delay"] = list(self.retry_delays)
        if self.fanout:
            out["fanout"] = True
        return {**out, "group": "g", "group_batch": self.group_batch} if self.group else out

    def spawn(
        self, env: Env, jobs: list[str], scale: float = 1.0, *, both: bool = True,
        first_async: bool = False, **config: Any,
    ) -> None:
        """Start the fleet: ``scale`` of each role, at least one where there are any
        (with ``both``, at least one per side). Within a role, sync processes and
        asyncio ones alternate, sync first (asyncio first with ``first_async``)."""
        if self.group or self.fanout:  # the jobs wait in the stream before any reader
            with env.servers[0].client() as client:
                for job_id in jobs:
                    lockworker.submit(client, f"{env.namespace}-jobs", job_id)

        def kinds(mode: str, n: int) -> list[str]:
            count = max(2 if both else 1, round(n * scale)) if n else 0
            return [kind_of(mode, (i + first_async) % 2 == 1) for i in range(count)]
        for i, mode in enumerate(kinds("worker", self.workers)):
            role = "backup" if self.backups and i % 2 == 1 else "primary"
            env.fleet.spawn(mode, jobs=jobs, role=role, **config)
        for mode in kinds("lock", self.lockers):
            env.fleet.spawn(mode, names=list(self.locks), **config)
        for mode in kinds("leader", self.leaders):
            env.fleet.spawn(mode, names=["L"], **config)


def full_check(env: Env, history: History, jobs: list[str], max_attempts: int) -> list[Violation]:
    """Every promise: exclusion, tokens, DONE once, nothing lost, attempt limit, and no
    delivery settled by its namespace's progress before its job was done."""
    final = env.finals(jobs)
    return check(
        history, effects=env.store.effects(), final=final, pending_ok=False,
        max_attempts=max_attempts,
    ) + followed_early(history, final)


def kill_holders(
    env: Env, mix: Mix, ids: list[str], rng: random.Random, *, rounds: int,
    lock_timeout: float, max_attempts: int,
) -> tuple[History, list[Violation]]:
    """Spawn the fleet, SIGKILL a holder at a random point of its lease ``rounds`` times
    (a sync one and an asyncio one in turn, each replaced by a process of its kind with
    a fresh owner), let everything finish, and check the whole history."""
    mix.spawn(env, ids)
    fleet = env.fleet
    for n in range(rounds):
        child, _section = fleet.wait_holder(on_side(env, n % 2 == 1))
        time.sleep(rng.uniform(0, lock_timeout / 2))
        fleet.kill(child)
        fleet.respawn(child)
    problems = finish(env)
    history = fleet.history()
    return history, problems + full_check(env, history, ids, max_attempts)


def sigkill(
    workdir: Path, *, rounds: int = 8, jobs: int = 24, mix: Mix = Mix(),
    lock_timeout: float = 0.5, max_attempts: int = 6, seed: int | None = None,
) -> Result:
    """SIGKILL holders (workers, lock holders, leaders; sync and asyncio in turn) at
    random points of their sections; each is replaced by a process of its kind with a
    fresh owner."""
    rng, seed = seeded(seed)
    started = time.monotonic()
    ids = job_ids(jobs)
    with environment(workdir, lock_timeout=lock_timeout, max_attempts=max_attempts,
                     **mix.settings()) as env:
        history, violations = kill_holders(
            env, mix, ids, rng, rounds=rounds, lock_timeout=lock_timeout,
            max_attempts=max_attempts,
        )
        mixed = sides(env, history)
    return Result("sigkill", rounds, rounds, handovers(history), violations,
                  time.monotonic() - started, {"seed": seed, **mixed, **late_writes(history)})


def sigstop(
    workdir: Path, *, rounds: int = 4, jobs: int = 16, mix: Mix = Mix(steps=(5, 10), step=0.04),
    lock_timeout: float = 0.5, max_attempts: int = 8, seed: int | None = None,
) -> Result:
    """SIGSTOP a holder past its lease (a sync one and an asyncio one in turn), then
    SIGCONT it: it must know it lost the section (no belief after the pause) and the
    store must refuse its late writes."""
    rng, seed = seeded(seed)
    started = time.monotonic()
    ids = job_ids(jobs)
    paused: list[tuple[Child, dict[str, Any], float, float]] = []
    with environment(workdir, lock_timeout=lock_timeout, max_attempts=max_attempts,
                     **mix.settings()) as env:
        mix.spawn(env, ids)
        fleet = env.fleet
        for n in range(rounds):
            child, section = fleet.wait_holder(on_side(env, n % 2 == 1))
            time.sleep(rng.uniform(0, 0.03))
            os.kill(child.pid, signal.SIGSTOP)
            stopped_at = time.monotonic()
            try:
                time.sleep(lock_timeout * rng.uniform(1.3, 2.0))
            finally:
                os.kill(child.pid, signal.SIGCONT)
            paused.append((child, section, stopped_at, time.monotonic()))
        problems = finish(env)
        history = fleet.history()
        violations = problems + full_check(env, history, ids, max_attempts)
        mixed = sides(env, history)
    by_sid = {(s.run, s.sid): s for s in history.sections}
    hit = noticed = noticed_aio = 0
    for child, event, stopped_at, resumed_at in paused:
        s = by_sid[(event["run"], event["sid"])]
        if s.end is not None and s.end <= stopped_at:
            continue  # it had finished just before the pause
        hit += 1
        if s.result in ("lost", "fenced"):
            noticed += 1
            noticed_aio += is_async(child.mode)
        if s.last_believed is not None and s.last_believed > resumed_at:
            violations.append(Violation(
                "unnoticed", s.key,
                f"{child.name} (run {s.run}, token {s.token}) was paused "
                f"{resumed_at - stopped_at:.2f} s, longer than its lease, and still believed "
                f"it held the section {s.last_believed - resumed_at:.3f} s after resuming",
            ))
    return Result("sigstop", rounds, rounds, handovers(history), violations,
                  time.monotonic() - started,
                  {"seed": seed, "hit": hit, "noticed": noticed, "noticed_aio": noticed_aio,
                   **mixed, **late_writes(history)})


def same_owner_restart(
    workdir: Path, *, rounds: int = 4, jobs: int = 8, lock_timeout: float = 1.0,
    max_attempts: int = 8, seed: int | None = None,
) -> Result:
    """Kill the worker with the stable owner ``host-a`` at a random phase of its lease
    and restart it at once, with the same owner, on the job it held.

    The lease is long enough (1 s against a restart of about 0.4 s) for the restarted
    process to find its dead predecessor's lease still alive on the server: it must
    wait it out and take the next attempt with a larger token, not re-enter it.
    ``host-a`` starts sync and comes back on the other side each time (a sync process
    finds its asyncio predecessor's lease, and the other way round); the other worker
    is an asyncio one."""
    rng, seed = seeded(seed)
    started = time.monotonic()
    ids = job_ids(jobs)
    with environment(workdir, lock_timeout=lock_timeout, max_attempts=max_attempts,
                     steps=(4, 8), step=0.15) as env:
        fleet = env.fleet
        fleet.spawn("worker", name="host-a", owner="host-a", jobs=ids)
        fleet.spawn("aworker", name="other", jobs=ids)
        faults = 0
        for _ in range(rounds):
            try:
                child, section = fleet.wait_holder(
                    lambda: [c for c in fleet.live() if c.name == "host-a"], timeout=5.0
                )
            except TimeoutError:
                break  # the other worker did what was left
            time.sleep(rng.uniform(0, lock_timeout / 2))
            fleet.kill(child)
            fleet.respawn(child, mode=other_side(child.mode), first=[section["key"]])
            faults += 1
        problems = finish(env)
        history = fleet.history()
        violations = problems + full_check(env, history, ids, max_attempts)
        mixed = sides(env, history)
    return Result("same_owner_restart", rounds, faults, handovers(history), violations,
                  time.monotonic() - started, {"seed": seed, **mixed})


def same_owner_crash(
    workdir: Path, *, max_attempts: int = 3, lock_timeout: float = 1.0, cap: int = 9,
) -> Result:
    """The hook crashes its own process (``os._exit``) on every attempt; the process is
    restarted each time with the same owner, on the other side (sync, asyncio, sync...).
    The job must run at most ``max_attempts`` times, then be given up."""
    started = time.monotonic()
    job = "crashy"
    with environment(workdir, lock_timeout=lock_timeout, max_attempts=max_attempts,
                     crash_rate=1.0, steps=(1, 3), step=0.05) as env:
        fleet = env.fleet
        child = fleet.spawn("worker", name="host-a", owner="host-a", jobs=[job])
        crashes = 0
        while True:
            try:
                code = child.proc.wait(30)
            except subprocess.TimeoutExpired:
                break  # reported as stuck below
            if code != CRASH_EXIT:
                break
            crashes += 1
            if crashes >= cap:
                break
            child = fleet.respawn(child, mode=other_side(child.mode))
        problems = finish(env, timeout=5.0, allowed=(CRASH_EXIT,))
        history = fleet.history()
        final = env.finals([job])
        violations = problems + check(
            history, effects=env.store.effects(), final=final, max_attempts=max_attempts,
        )
        mixed = sides(env, history)
    return Result("same_owner_crash", crashes + 1, crashes, handovers(history), violations,
                  time.monotonic() - started,
                  {"hook_runs": len(history.sections), "final": final[job].status, **mixed})


def leader_same_owner(
    workdir: Path, *, rounds: int = 3, lock_timeout: float = 1.2, seed: int | None = None,
) -> Result:
    """Kill the leader with the stable owner ``host-a`` at a random phase of its term
    and restart it at once with the same owner, on the other side each time: it must not
    be elected again into its dead predecessor's term (the lease outlives the restart),
    but wait it out. The other leader is an asyncio one."""
    rng, seed = seeded(seed)
    started = time.monotonic()
    with environment(workdir, lock_timeout=lock_timeout, names=["L"], steps=(4, 8),
                     step=0.2) as env:
        fleet = env.fleet
        fleet.spawn("leader", name="host-a", owner="host-a")
        fleet.spawn("aleader", name="other")
        faults = 0
        for _ in range(rounds):
            child, _section = fleet.wait_holder(
                lambda: [c for c in fleet.live() if c.name == "host-a"], timeout=15.0
            )
            time.sleep(rng.uniform(0, lock_timeout / 2))
            fleet.kill(child)
            fleet.respawn(child, mode=other_side(child.mode))
            faults += 1
        problems = finish(env)
        history = fleet.history()
        violations = problems + check(history, effects=env.store.effects())
        mixed = sides(env, history)
    return Result("leader_same_owner", rounds, faults, handovers(history), violations,
                  time.monotonic() - started, {"seed": seed, **mixed})


PROXY_FAULTS = ("blackhole", "close", "delay")


def proxy_phases(
    workdir: Path, *, rounds: int = 7, jobs: int = 20, mix: Mix = Mix(fail_rate=0.1),
    lock_timeout: float = 0.8, max_attempts: int = 10, seed: int | None = None,
) -> Result:
    """Black-hole, close and delay phases of a TCP proxy between half of the processes
    and the server, while the other half reach it directly and take over. Behind the
    proxy are both sides of every role; the direct half alternates asyncio first."""
    rng, seed = seeded(seed)
    started = time.monotonic()
    ids = job_ids(jobs)
    counts = dict.fromkeys((*PROXY_FAULTS, "pass"), 0)
    plan = list(PROXY_FAULTS)  # every fault at least once, then at random
    rng.shuffle(plan)
    plan += [rng.choice([*PROXY_FAULTS, "pass"]) for _ in range(max(0, rounds - len(plan)))]
    with environment(workdir, lock_timeout=lock_timeout, max_attempts=max_attempts,
                     socket_timeout=0.25, **mix.settings()) as env, \
            Proxy(env.server.port) as proxy:
        mix.spawn(env, ids, scale=0.5, urls=[proxy.url])
        mix.spawn(env, ids, scale=0.5, both=False, first_async=True)
        for mode in plan:
            proxy.set_mode(mode, rng.uniform(20, 300))
            counts[mode] += 1
            time.sleep(rng.uniform(0.3, 1.5) * lock_timeout)
        proxy.pass_through()
        problems = finish(env)
        history = env.fleet.history()
        violations = problems + full_check(env, history, ids, max_attempts)
        mixed = sides(env, history)
    faults = len(plan) - counts.pop("pass")
    return Result("proxy", len(plan), faults, handovers(history), violations,
                  time.monotonic() - started,
                  {"seed": seed, **counts, **mixed, **late_writes(history)})


def startup_outage(
    workdir: Path, *, rounds: int = 1, outage: float = 1.0, jobs: int = 4,
    lock_timeout: float = 0.5, max_attempts: int = 3,
) -> Result:
    """Processes that start while the server is unreachable (every connection closed at
    once), a sync and an asyncio one per role, must retry within their budget and carry
    on when it comes back, or fail with the documented ``RedisUnavailable``; never with
    another exception."""
    started = time.monotonic()
    ids = job_ids(jobs)
    mix = Mix(workers=1, lockers=1, leaders=1, fail_rate=0.0)
    with environment(workdir, lock_timeout=lock_timeout, max_attempts=max_attempts,
                     socket_timeout=0.25, **mix.settings()) as env, \
            Proxy(env.server.port) as proxy:
        fleet = env.fleet
        for _ in range(rounds):
            proxy.close_all()
            before = len(fleet.children)
            mix.spawn(env, ids, urls=[proxy.url])
            for child in fleet.children[before:]:
                fleet.wait_ready(child)
            time.sleep(outage)
            proxy.pass_through()
            fresh = fleet.children[before:]

            def started_now(fresh: list[Child] = fresh) -> list[Child]:
                return [c for c in fresh if c.alive()]

            fleet.wait_holder(started_now, timeout=10.0)
        problems = finish(env)
        history = fleet.history()
        violations = problems + full_check(env, history, ids, max_attempts)
        mixed = sides(env, history)
    return Result("startup_outage", rounds, rounds, handovers(history), violations,
                  time.monotonic() - started, mixed)


def server_restart(
    workdir: Path, *, durable: bool, rounds: int = 5, jobs: int = 20, mix: Mix = Mix(),
    lock_timeout: float = 0.5, max_attempts: int = 10, seed: int | None = None,
) -> Result:
    """SIGKILL lockworker's server at random moments and start it again on its port.

    Durable (``appendonly yes``, ``appendfsync always``): every promise must hold.

    Volatile (no persistence), what cannot be promised, since the server forgets every
    lease, attempt count and DONE: exclusion right after the restart (a holder trusts
    its lease until its own clock says otherwise, while the server already grants the
    job again), DONE exactly once and attempt limits (a job done before the restart is
    pending again and runs again), and nothing lost (the state itself is lost). What is
    promised: tokens for a key never go backwards across the restart, so the fenced
    store refuses the stale holders' writes; and no process fails other than by the
    documented ``RedisUnavailable``.
    """
    rng, seed = seeded(seed)
    started = time.monotonic()
    ids = job_ids(jobs)
    with environment(workdir, server_args=DURABLE if durable else (),
                     lock_timeout=lock_timeout, max_attempts=max_attempts,
                     **mix.settings()) as env:
        mix.spawn(env, ids)
        for _ in range(rounds):
            env.fleet.wait_holder()
            time.sleep(rng.uniform(0, lock_timeout))
            restart(env.server)
        problems = finish(env)
        history = env.fleet.history()
        if durable:
            violations = problems + full_check(env, history, ids, max_attempts)
        else:
            violations = problems + check(
                history, effects=env.store.effects(), exclusive=False, once=False
            )
        refused = env.store.refused()
        mixed = sides(env, history)
    name = "server_restart_durable" if durable else "server_restart_volatile"
    return Result(name, rounds, rounds, handovers(history), violations,
                  time.monotonic() - started, {"seed": seed, **mixed, "store_refused": refused})


def clock_jumps(
    workdir: Path, *, rounds: int = 6, jobs: int = 20, mix: Mix = Mix(lockers=1),
    lock_timeout: float = 0.5, max_attempts: int = 8, seed: int | None = None,
) -> Result:
    """Every process's wall clock jumps by hours, both ways, again and again, while
    holders (sync and asyncio in turn) are SIGKILLed: leases are judged by monotonic
    time only."""
    rng, seed = seeded(seed)
    started = time.monotonic()
    ids = job_ids(jobs)
    with environment(workdir, lock_timeout=lock_timeout, max_attempts=max_attempts,
                     clock_jumps=True, **mix.settings()) as env:
        history, violations = kill_holders(
            env, mix, ids, rng, rounds=rounds, lock_timeout=lock_timeout,
            max_attempts=max_attempts,
        )
        mixed = sides(env, history)
    jumps = sum(1 for n in history.notes if n.get("what") == "clock_jump")
    return Result("clock_jumps", rounds, rounds + jumps, handovers(history), violations,
                  time.monotonic() - started,
                  {"seed": seed, "kills": rounds, "jumps": jumps, **mixed})


def redlock(
    workdir: Path, *, masters: int = 3, durable: bool = True, rounds: int = 8,
    contenders: int = 3, ttl: float = 0.5, seed: int | None = None,
) -> Result:
    """Redlock over ``masters`` servers, masters SIGKILLed and restarted while processes
    contend. Durable masters come back at once with their keys; volatile ones stay down
    for the lock's ttl first (docs/primitives.md). No two holders that believed they
    held it may overlap; tokens must grow as long as the masters keep their data."""
    rng, seed = seeded(seed)
    started = time.monotonic()
    with environment(workdir, masters=masters, server_args=DURABLE if durable else (),
                     lock_timeout=ttl, names=["R"], steps=(2, 6), step=0.03) as env:
        for n in range(contenders):  # sync and asyncio in turn, renewing or not
            env.fleet.spawn(kind_of("redlock", n % 2 == 1), auto_renew=n % 3 != 0)
        for _ in range(rounds):
            time.sleep(rng.uniform(0.1, 0.5))
            server = rng.choice(env.servers)
            restart(server, rng.uniform(0, 0.2) if durable else ttl + 0.2)
        problems = finish(env)
        history = env.fleet.history()
        violations = problems + check(history, effects=env.store.effects(), tokens=durable)
        mixed = sides(env, history)
    kind = "durable" if durable else "volatile"
    no_quorum = sum(1 for n in history.notes if n.get("what") == "no_quorum")
    return Result(f"redlock{masters}_{kind}", rounds, rounds, handovers(history), violations,
                  time.monotonic() - started,
                  {"seed": seed, "holds": len(history.sections), "no_quorum": no_quorum,
                   **mixed})


def deleted_job_keys(env: Env) -> int:
    """Delete every job key of the scenario's namespace (states, leases, histories):
    what the server does once DONE records expire. Returns how many were deleted."""
    client = env.client()
    keys = list(client.scan_iter(match=f"lw:job:{env.namespace}:*", count=500))
    for key in keys:
        parsed = parse_state_key(text(key))
        if parsed is not None:
            env.forgotten.add(parsed)
    if keys:
        client.delete(*keys)
    return len(keys)


def ran_after(
    history: History, effects: Sequence[Any], since: float, allowed: Sequence[str] = (),
) -> list[Violation]:
    """Jobs (but ``allowed``) that ran again after ``since``, when their records were
    deleted: sections started after it, and the store's commits from them."""
    out: list[Violation] = []
    late = {(s.run, s.sid): s for s in history.sections
            if s.kind == JOB and s.key not in allowed and s.start > since}
    for s in late.values():
        out.append(Violation(
            "double_done", s.key,
            f"run {s.run} ({s.owner}, token {s.token}) started it {s.start - since:.3f} s "
            "after its records were deleted: a reader past the window ran it again",
        ))
    for e in effects:
        if (e.run, e.sid) in late and e.op == "commit":
            out.append(Violation(
                "double_done", e.key, f"the store accepted a second commit (token {e.token})"
            ))
    return out


def progress_restart(
    workdir: Path, *, group: bool, jobs: int = 16, lock_timeout: float = 0.5,
    max_attempts: int = 6, seed: int | None = None,
) -> Result:
    """A reader that comes back after its entries' records expired runs none of them
    again (issue 40). A primary and a backup (stable owners; fan-out: an asyncio
    primary, a sync backup that comes back asyncio; group: the other way round)
    serve a stream of jobs, fan-out or as members of one consumer group; the backup is
    SIGKILLed once registered; once the primary has resolved every entry, every job
    key of the namespace is deleted (the DONE records expired) and the backup comes
    back with the same owner, on the other side. A job submitted afterwards (the
    sentinel) shows both read on past it; none of the first jobs may run again."""
    _rng, seed = seeded(seed)
    started = time.monotonic()
    name = "group_progress_restart" if group else "fanout_progress_restart"
    ids = job_ids(jobs)
    sentinel = "sentinel"
    source: dict[str, Any] = {"group": "g"} if group else {"fanout": True}
    with environment(workdir, lock_timeout=lock_timeout, max_attempts=max_attempts,
                     steps=(1, 3), step=0.02, fail_rate=0.1, backup_delay=0.05,
                     retry_delay=[0.0, 0.05, 0.1], until_stopped=True, **source) as env:
        fleet = env.fleet
        client = env.client()
        keys = stream_keys(f"{env.namespace}-jobs")
        entries = keys.extra("entries")
        last = ""
        for job_id in ids:
            last = lockworker.submit(client, f"{env.namespace}-jobs", job_id)
        # The primary does the jobs: asyncio where the fan-out reader comes back sync,
        # sync where the group member comes back asyncio, so each side is proven.
        first_async = not group
        fleet.spawn(kind_of("worker", first_async), name="primary", owner="primary",
                    jobs=ids, role="primary")
        backup = fleet.spawn(kind_of("worker", not first_async), name="backup",
                             owner="backup", jobs=ids, role="backup")

        def member(owner: str) -> dict[str, Any] | None:
            try:
                found = client.xinfo_consumers(entries, "g")
            except redis.ResponseError:
                return None  # no group yet
            return next((c for c in found if text(c["name"]) == owner), None)

        def registered() -> bool:
            if group:
                return member("backup") is not None
            return client.zscore(keys.extra("readers"), "backup") is not None

        def resolved(jobs: list[str]) -> bool:
            return all(f.status in ("done", "gave_up") for f in env.finals(jobs).values())

        def read_past(owner: str, entry: str, jobs: list[str]) -> bool:
            if not resolved(jobs):
                return False
            if group:
                info = next(g for g in client.xinfo_groups(entries) if text(g["name"]) == "g")
                return int(info["pending"]) == 0 and entry_order(
                    text(info["last-delivered-id"])) >= entry_order(entry)
            position = client.hget(keys.extra("positions"), owner)
            return position is not None and entry_order(text(position)) >= entry_order(entry)

        wait_for(registered, 20.0, "the backup registered")
        fleet.kill(backup)
        wait_for(lambda: read_past("primary", last, ids), 30.0, "the primary past the last entry")
        before = env.finals(ids)
        deleted_at = time.monotonic()
        deleted = deleted_job_keys(env)
        backup = fleet.respawn(backup, mode=other_side(backup.mode))
        fleet.wait_ready(backup)
        ready_at = time.monotonic()
        wait_for(registered, 20.0, "the backup registered again")
        tail = lockworker.submit(client, f"{env.namespace}-jobs", sentinel)
        wait_for(lambda: read_past("backup", tail, [sentinel]), 20.0,
                 "the backup past the sentinel")
        if group:  # the member read on after it came back (its own entries, then new ones)
            def interacted() -> bool:
                found = member("backup")
                return found is not None and (
                    time.monotonic() - int(found["idle"]) / 1000 > ready_at
                )
            wait_for(interacted, 20.0, "the backup reading after it came back")
        fleet.stop()
        problems = finish(env)
        history = fleet.history()
        effects = env.store.effects()
        final = {**before, **env.finals([sentinel])}
        violations = problems + check(
            history, effects=effects, final=final, pending_ok=False, max_attempts=max_attempts,
        ) + ran_after(history, effects, deleted_at, allowed=[sentinel])
        mixed = sides(env, history)
    return Result(name, 1, 1, handovers(history), violations, time.monotonic() - started,
                  {"seed": seed, "deleted": deleted, **mixed})


def done_window(
    workdir: Path, *, retention: float = 3.0, lock_timeout: float = 0.5, max_attempts: int = 3,
) -> Result:
    """A duplicate submitted inside the DONE window never runs; one after it runs
    again with a larger token. ``X`` is done by a sync process, submitted again inside
    the window (``done_retention``) by an asyncio one (it must end DONE_ELSEWHERE with
    no section), and once the DONE record expired (a condition on the server) by an
    asyncio one again: a new section, a larger token. The checker is told explicitly that the
    job's window ended then (:class:`~faults.history.Window`); nothing else may run
    twice."""
    assert retention > lock_timeout
    started = time.monotonic()
    job = "X"
    with environment(workdir, lock_timeout=lock_timeout, max_attempts=max_attempts,
                     steps=(2, 4), step=0.03, done_retention=retention) as env:
        fleet = env.fleet
        client = env.client()
        state = JobKeys.of(env.namespace, job).state
        runs = []
        for name, mode in (("first", "worker"), ("inside", "aworker")):
            child = fleet.spawn(mode, name=name, jobs=[job])
            fleet.wait_exit([child], 30.0)
            runs.append(fleet.state(child).run)
        done = env.finals([job])[job]
        wait_for(lambda: not client.exists(state), retention + 10.0, "the DONE record to expire")
        expired = time.monotonic()
        after = fleet.spawn("aworker", name="after", jobs=[job])
        fleet.wait_exit([after], 30.0)
        runs.append(fleet.state(after).run)
        problems = finish(env)
        history = fleet.history()
        violations = problems + check(
            history, effects=env.store.effects(), final=env.finals([job]), pending_ok=False,
            max_attempts=max_attempts, windows={job: Window(expired, done)},
        )
        ended = {o.run: o.outcome for o in history.outcomes}
        sections = {run: [s for s in history.sections if s.run == run] for run in runs}
        if done.status != "done" or ended.get(runs[0]) != "done":
            violations.append(Violation("lost", job, f"the first run ended {done.status}"))
        if ended.get(runs[1]) != "done_elsewhere" or sections[runs[1]]:
            violations.append(Violation(
                "double_done", job,
                f"the duplicate inside the window ended {ended.get(runs[1])} with "
                f"{len(sections[runs[1]])} section(s), not DONE_ELSEWHERE with none",
            ))
        again = [s for s in sections[runs[2]] if s.result == "returned"]
        if ended.get(runs[2]) != "done" or not again or again[0].token <= done.token:
            violations.append(Violation(
                "lost", job,
                f"after the window it ended {ended.get(runs[2])} with tokens "
                f"{[s.token for s in sections[runs[2]]]}, not a new run above {done.token}",
            ))
        mixed = sides(env, history)
    return Result("done_window", 1, 0, handovers(history), violations,
                  time.monotonic() - started, {"first_token": done.token, **mixed})


TICK = "%Y-%m-%dT%H:%M:%SZ"


def tick_id(nominal: float) -> str:
    return "tick@" + datetime.fromtimestamp(nominal, UTC).strftime(TICK)


def schedule_sigkill(
    workdir: Path, *, rounds: int = 3, ticks: int = 9, lock_timeout: float = 0.3,
    max_attempts: int = 6, seed: int | None = None,
) -> Result:
    """Workers serving the ticks of ``Every("tick", 1)`` (issue 41): a primary and two
    backups, sync and asyncio mixed; the holder of a tick SIGKILLed mid-section
    ``rounds`` times (each replaced on the other side, same owner). Every tick from the
    first to the last one resolved must have run exactly once (one section that
    returned; overlap, tokens and DONE once as everywhere), none before it was due on
    the server's clock (``TIME`` noted at each section's start), and each killed
    holder's tick finished by another run with a larger token. Sections are short, so
    the overlap policy skips none (a skip, or a tick the catch-up policy dropped while
    every process was down or still starting, is counted by the server and excuses a
    missing tick; both show in the figures)."""
    rng, seed = seeded(seed)
    started = time.monotonic()
    with environment(workdir, lock_timeout=lock_timeout, max_attempts=max_attempts,
                     steps=(1, 3), step=0.03, backup_delay=0.05, schedule=1,
                     until_stopped=True, retry_delay=[0.0, 0.05, 0.1], jobs=[]) as env:
        fleet = env.fleet
        fleet.spawn("worker", name="primary", owner="primary", role="primary")
        fleet.spawn("aworker", name="backup1", owner="backup1", role="backup")
        fleet.spawn("worker", name="backup2", owner="backup2", role="backup")
        killed: list[dict[str, Any]] = []
        for _ in range(rounds):
            child, section = fleet.wait_holder(timeout=15.0)
            time.sleep(rng.uniform(0, 0.02))  # inside its section (30-90 ms), mostly
            fleet.kill(child)
            killed.append(section)
            fleet.respawn(child, mode=other_side(child.mode))

        def noted() -> dict[str, dict[str, Any]]:
            return {n["key"]: n for n in fleet.history().notes if n.get("what") == "tick"}

        def enough() -> bool:
            seen = sorted(noted().values(), key=lambda n: n["nominal"])
            return len(seen) >= ticks and env.finals([seen[-1]["key"]])[
                seen[-1]["key"]].status == "done"
        wait_for(enough, ticks + 15.0, f"{ticks} ticks, the last one done", interval=0.1)
        fleet.stop()
        problems = finish(env)
        history = fleet.history()
        notes = [n for n in history.notes if n.get("what") == "tick"]
        ids = sorted({n["key"] for n in notes} | {s.key for s in history.sections})
        final = env.finals(ids)
        violations = problems + check(
            history, effects=env.store.effects(), final=final, max_attempts=max_attempts,
        )
        counts = {text(k): int(v) for k, v in env.client().hgetall(
            schedule_key(env.namespace, "tick")).items()
            if text(k) in ("skipped", "caught_up", "dropped")}
        excused = sum(counts.values())
        nominal = {n["key"]: n["nominal"] for n in notes}
        done = sorted(nominal[k] for k in nominal if final[k].status == "done")
        first, last = (done[0], done[-1]) if done else (0.0, -1.0)
        expected = [tick_id(first + i) for i in range(int(last - first) + 1)]
        final.update(env.finals([key for key in expected if key not in final]))
        missing = 0
        for key in expected:
            returned = [s for s in history.sections if s.key == key and s.result == "returned"]
            if not returned or final[key].status != "done":
                missing += 1
                if missing > excused:
                    violations.append(Violation(
                        "lost", key, f"never ran to the end ({final[key].status}), and the "
                        f"server counted {excused} skipped, caught-up or dropped ticks"))
            elif len(returned) > 1:
                violations.append(Violation(
                    "double_done", key, f"{len(returned)} sections returned: tokens "
                    f"{[s.token for s in returned]}"))
        for n in notes:
            if n["server"] < n["nominal"]:
                violations.append(Violation(
                    "early", n["key"], f"run {n['run']} started it at server time "
                    f"{n['server']:.3f}, {n['nominal'] - n['server']:.3f} s before it was due"))
        took_over = finished_first = 0
        for section in killed:
            key = section["key"]
            if key not in final or final[key].status != "done":
                continue  # reported above if it should have run
            lived = [s for s in history.sections
                     if s.key == key and s.token == section["token"]]
            if final[key].token > section["token"]:
                took_over += 1
            elif any(s.result == "returned" for s in lived):
                finished_first += 1  # the kill came after its work and its DONE
            else:
                violations.append(Violation(
                    "lost", key, f"its holder (token {section['token']}) was killed inside "
                    f"its section, yet the tick ended with that token"))
        mixed = sides(env, history)
    return Result("schedule_sigkill", rounds, rounds, handovers(history), violations,
                  time.monotonic() - started,
                  {"seed": seed, "ticks": len(expected), "took_over": took_over,
                   "finished_first": finished_first,
                   "skipped": counts.get("skipped", 0), "caught_up": counts.get("caught_up", 0),
                   "dropped": counts.get("dropped", 0),
                   **mixed})


Scenario = Callable[..., Result]


def _durable_restart(workdir: Path, **kw: Any) -> Result:
    return server_restart(workdir, durable=True, **kw)


def _volatile_restart(workdir: Path, **kw: Any) -> Result:
    return server_restart(workdir, durable=False, **kw)


def _redlock5(workdir: Path, **kw: Any) -> Result:
    return redlock(workdir, masters=5, **kw)


def _redlock_volatile(workdir: Path, **kw: Any) -> Result:
    return redlock(workdir, durable=False, **kw)


BATCHED = Mix(workers=4, lockers=1, leaders=1, concurrency=6, backups=True, steps=(2, 6))
"""Workers serving six jobs at once (steps in shared round trips, renewals together),
half of them backups holding deliveries back, beside a lock holder and a leader."""


def _killed(mix: Mix, name: str, jobs: int = 36) -> Scenario:
    """SIGKILL of holders (as :func:`sigkill`) in the fleet ``mix``, reported as ``name``."""
    def run(workdir: Path, **kw: Any) -> Result:
        return replace(sigkill(workdir, **{"jobs": jobs, **kw}, mix=mix), scenario=name)
    return run


def _paused(mix: Mix, name: str, jobs: int = 30) -> Scenario:
    """SIGSTOP past the lease (as :func:`sigstop`) in ``mix`` with longer sections."""
    def run(workdir: Path, **kw: Any) -> Result:
        paused = replace(mix, steps=(5, 10), step=0.04)
        return replace(sigstop(workdir, **{"jobs": jobs, **kw}, mix=paused), scenario=name)
    return run


def _batch_proxy(workdir: Path, **kw: Any) -> Result:
    result = proxy_phases(workdir, mix=BATCHED, **kw)
    return replace(result, scenario="batch_proxy")


GROUPED = replace(BATCHED, group=True)
"""The batched fleet, its workers members of one consumer group on a stream of the jobs."""

INLINE = replace(GROUPED, concurrency=1, own_process=True, group_batch=4)
"""The group's fleet serving one job at a time in the serving thread: each member
claims the entries it read ahead in one round trip and runs their hooks in turn. Each
member reads 4 entries ahead, not its default 16: with 16, the members that read
first (backups hold theirs back) could take every entry, and the sync members, the
only ones that claim read-ahead entries together, might never claim two at once
(the battery asserts they did)."""


FANOUT = replace(BATCHED, fanout=True, own_process=True, backup_delay=0.2)
"""The batched fleet reading one stream fan-out (every worker every entry) through
lockworker's own ``process``, half of them backups that follow the namespace's progress
(held back 0.2 s: most of what the primaries did is settled by the progress, no look)
and look at the rest: primaries SIGKILLed or SIGSTOPped mid-batch between two saves of
their positions."""


SHARED = Mix(shared=3)
"""The fleet, each worker process's Worker shared by three threads (tasks) that each
process every job, so calls of one process meet on one id."""


def _batch_restart(workdir: Path, **kw: Any) -> Result:
    result = server_restart(workdir, durable=True, mix=BATCHED, **kw)
    return replace(result, scenario="batch_server_restart")


def _fanout_progress(workdir: Path, **kw: Any) -> Result:
    return progress_restart(workdir, group=False, **kw)


def _group_progress(workdir: Path, **kw: Any) -> Result:
    return progress_restart(workdir, group=True, **kw)


def _following(name: str) -> Scenario:
    """A scenario of :mod:`faults.following` (fan-out backups that follow the progress),
    imported when run: it builds on this module."""
    def run(workdir: Path, **kw: Any) -> Result:
        from . import following
        if name == "fanout_mixed_release" and "python" not in kw:
            from .release import release_python
            python = release_python("0.3.0")
            if python is None:
                raise RuntimeError("release 0.3.0's commit is not in this checkout")
            kw["python"] = python
        return following.SCENARIOS[name](workdir, **kw)
    return run


SCENARIOS: dict[str, Scenario] = {
    "sigkill": sigkill,
    "sigstop": sigstop,
    "same_owner_restart": same_owner_restart,
    "same_owner_crash": same_owner_crash,
    "leader_same_owner": leader_same_owner,
    "proxy": proxy_phases,
    "startup_outage": startup_outage,
    "server_restart_durable": _durable_restart,
    "server_restart_volatile": _volatile_restart,
    "clock_jumps": clock_jumps,
    "redlock3_durable": redlock,
    "redlock5_durable": _redlock5,
    "redlock3_volatile": _redlock_volatile,
    "batch_sigkill": _killed(BATCHED, "batch_sigkill"),
    "batch_sigstop": _paused(BATCHED, "batch_sigstop"),
    "batch_proxy": _batch_proxy,
    "batch_server_restart": _batch_restart,
    "group_sigkill": _killed(GROUPED, "group_sigkill"),
    "group_sigstop": _paused(GROUPED, "group_sigstop"),
    "inline_sigkill": _killed(INLINE, "inline_sigkill"),
    "inline_sigstop": _paused(INLINE, "inline_sigstop"),
    "shared_sigkill": _killed(SHARED, "shared_sigkill"),
    "fanout_sigkill": _killed(FANOUT, "fanout_sigkill", jobs=90),
    "fanout_sigstop": _paused(FANOUT, "fanout_sigstop", jobs=60),
    "fanout_progress_restart": _fanout_progress,
    "group_progress_restart": _group_progress,
    "done_window": done_window,
    "schedule_sigkill": schedule_sigkill,
    "fanout_backup_partitioned": _following("fanout_backup_partitioned"),
    "fanout_passed_over": _following("fanout_passed_over"),
    "fanout_mixed_release": _following("fanout_mixed_release"),
}
