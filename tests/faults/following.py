"""Fault scenarios of fan-out backups that follow their namespace's progress (issue 42).

A backup reading a fan-out stream settles the deliveries its namespace's progress shows
done without a look (:mod:`lockworker.serving.follow`). These scenarios aim at what
that must not break:

- ``fanout_backup_partitioned``: the backups' link to the server (through a
  :class:`~faults.proxy.Proxy`) black-holed or closed while the primary hands jobs
  over (its failures, published on the handover channel the backups cannot hear) or,
  every third round, is SIGKILLed holding a job whose lease then runs out: once the
  link is back the backups catch up from the progress and lose nothing;
- ``fanout_passed_over``: a primary serving several jobs at once holds one of them
  long, so its progress waits behind it while the later ones are done: the backups
  must not settle it by the progress, must take it over at its lease's end when its
  holder is SIGKILLed, and must run none the progress covers;
- ``fanout_mixed_release``: processes of release 0.3.0 (built from its release commit,
  :mod:`faults.release`) beside this release's on one fan-out stream, primaries and
  backups of both, holders of both SIGKILLed.

Besides the checker's promises (:func:`faults.history.check`), each checks
:func:`~faults.history.followed_early`: no delivery settled by the progress before its
job was done.
"""

from __future__ import annotations

import contextlib
import itertools
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import lockworker
from lockworker.daemons.sources import stream_keys
from lockworker.protocol.decode import text
from lockworker.protocol.streams import entry_order
from lockworker.runtime.reindex import index_all

from .harness import Child, Env, Fleet, environment, kind_of, wait_for
from .history import History, Violation, handovers
from .proxy import Proxy
from .scenarios import Result, finish, full_check, late_writes, other_side, seeded, sides

FOLLOWING = {"fanout": True, "own_process": True, "backup_delay": 0.2,
             "retry_delay": [0.0, 0.05, 0.1]}
"""Workers serving one stream fan-out through lockworker's own ``process`` (backups
follow the progress), failures handed over at once, then due 0.05 s and 0.1 s later."""


class Stream:
    """The scenario's fan-out stream: submissions, and what the server keeps of it."""

    def __init__(self, env: Env) -> None:
        self.env = env
        self.client = env.client()
        self.name = f"{env.namespace}-jobs"
        self.keys = stream_keys(self.name)
        self.entries: dict[str, str] = {}
        """Job id -> its entry id, in submission order."""

    def submit(self, jobs: list[str]) -> None:
        for job_id in jobs:
            self.entries[job_id] = lockworker.submit(self.client, self.name, job_id)

    def progress(self) -> tuple[int, int] | None:
        found = self.client.hget(self.keys.extra("progress"), self.env.namespace)
        return None if found is None else entry_order(text(found))

    def position(self, owner: str) -> tuple[int, int] | None:
        found = self.client.hget(self.keys.extra("positions"), owner)
        return None if found is None else entry_order(text(found))

    def resolved(self, jobs: list[str] | None = None) -> bool:
        finals = self.env.finals(list(self.entries) if jobs is None else jobs)
        return all(f.status in ("done", "gave_up") for f in finals.values())

    def read_past(self, owners: list[str]) -> bool:
        """Every job resolved, and each reader's saved position at the last entry: it
        resolved every delivery (done, done elsewhere, followed, given up), in order."""
        last = entry_order(list(self.entries.values())[-1])
        if not self.resolved():
            return False
        return all((p := self.position(o)) is not None and p >= last for o in owners)


def settled(env: Env, stream: Stream, owners: list[str], timeout: float) -> None:
    """Wait until every job is resolved and every reader in ``owners`` read past the
    last entry, then ask every child to stop."""
    wait_for(lambda: stream.read_past(owners), timeout,
             f"every job resolved and {owners} past the last entry", interval=0.05)
    env.fleet.stop()


def verdict(env: Env, history: History, jobs: list[str], max_attempts: int,
            problems: list[Violation]) -> list[Violation]:
    """Every promise, nothing pending, and no delivery followed before its job's DONE."""
    return problems + full_check(env, history, jobs, max_attempts)


def ended_in(history: History, run: str, result: str, since: float, until: float) -> int:
    return sum(1 for s in history.sections if s.run == run and s.result == result
               and s.end is not None and since <= s.end <= until)


def caught_up_from_progress(
    history: History, run: str | None, cut: dict[str, Any], entries: dict[str, str],
) -> bool:
    """Whether backup ``run``, once its link was back, caught up on the batch submitted
    while it was cut off from its namespace's progress: its stream source skipped to a
    progress past the batch's first entry (reading none of what it passed), or it
    settled a job of the batch by the progress, without a look."""
    first = entry_order(entries[cut["jobs"][0]])
    return any(
        n["run"] == run and n["t"] > cut["healed"] and (
            (n.get("what") == "skipped" and entry_order(n["progress"]) >= first)
            or (n.get("what") == "followed" and n["key"] in cut["jobs"]))
        for n in history.notes
    )


def backup_partitioned(
    workdir: Path, *, rounds: int = 3, batch: int = 10, lock_timeout: float = 0.5,
    max_attempts: int = 10, cut: tuple[float, float] = (0.8, 1.2), kill_every: int = 3,
    seed: int | None = None,
) -> Result:
    """Two backups (sync, asyncio) reach the server through a proxy, the primary
    directly. Each round cuts the backups off (black-holed, then closed, in turn),
    submits ``batch`` jobs they cannot read, and waits for the primary to fail one (the
    third fails its first attempt; the handover is published on a channel the backups
    no longer hear) and for its progress past the batch; but every ``kill_every``-th
    round it is SIGKILLed instead, holding a job whose lease runs out before the link
    returns, and comes back (same owner, other side) once that job is taken over.
    Once the link is back the backups catch up: every job ends DONE or GAVE_UP,
    the killed job with a larger token, and every backup's saved position reaches the
    last entry (it resolved every delivery, settled by the progress or looked at)."""
    rng, seed = seeded(seed)
    started = time.monotonic()
    ids: list[str] = []
    cuts: list[dict[str, Any]] = []
    took_over = 0
    failing = [f"r{r}-j02" for r in range(rounds)]
    with environment(workdir, lock_timeout=lock_timeout, max_attempts=max_attempts,
                     steps=(2, 4), step=0.03, fail_rate=0.2, fail_first=failing,
                     socket_timeout=0.25, until_stopped=True, concurrency=2,
                     **FOLLOWING) as env, \
            Proxy(env.server.port) as proxy:
        fleet = env.fleet
        stream = Stream(env)
        primary = fleet.spawn("worker", name="primary", owner="primary", jobs=[],
                              role="primary")
        backups = [fleet.spawn(kind_of("worker", n == 1), name=f"backup{n}",
                               owner=f"backup{n}", jobs=[], role="backup", urls=[proxy.url])
                   for n in range(2)]
        for child in (primary, *backups):
            fleet.wait_ready(child)
        # Warm up: every reader registered and past a first batch, the backups behind a
        # primary they know serves, before the first cut.
        ids += [f"warm-j{i}" for i in range(4)]
        stream.submit(ids)
        wait_for(lambda: stream.read_past(["primary", "backup0", "backup1"]), 30.0,
                 "every reader past the first batch", 0.05)
        spawned_at = 0.0
        for r in range(rounds):
            wait_for(lambda since=spawned_at: primary_seen(fleet, backups, True, since), 20.0,
                     "both backups see the primary serving", 0.05)
            last = r % kill_every == kill_every - 1  # a round that kills the primary
            mode = "blackhole" if r % 2 == 0 else "close"
            dropped, closed, refused = proxy.dropped, proxy.cut, proxy.refused
            proxy.set_mode(mode)
            cut_at = time.monotonic()
            # Submitted once the backups are cut off: they read these entries only once
            # the link is back, after the primary did (or, killed, did not do) them.
            fresh = [f"r{r}-j{i:02d}" for i in range(batch)]
            ids += fresh
            stream.submit(fresh)
            run = fleet.state(primary).run
            assert run is not None
            # A failure of the primary while the backups are cut off (the batch's third
            # job fails its first attempt): a handover they cannot hear
            # (failed_in_cut=0 in the figure if none came within 5 s).
            with contextlib.suppress(TimeoutError):
                wait_for(lambda run=run, cut_at=cut_at: ended_in(
                    fleet.history(), run, "failed", cut_at, time.monotonic()),
                    5.0, "a failure", 0.02)
            killed: dict[str, Any] | None = None
            until = cut_at + rng.uniform(*cut)
            if last:
                try:
                    _, killed = fleet.wait_holder(lambda p=primary: [p], timeout=5.0)
                except TimeoutError:
                    killed = None
                if killed is not None:
                    fleet.kill(primary)
                    until = max(until, time.monotonic() + lock_timeout * 1.5)
            else:  # the primary does the batch alone, its progress past it (5 s at most)
                tail = entry_order(stream.entries[fresh[-1]])
                with contextlib.suppress(TimeoutError):
                    wait_for(lambda tail=tail: (p := stream.progress()) is not None
                             and p >= tail, 5.0, "the progress past the batch", 0.05)
            time.sleep(max(0.0, until - time.monotonic()))
            healed_at = time.monotonic()
            proxy.pass_through()
            history = fleet.history()
            cuts.append({
                "mode": mode, "at": cut_at, "healed": healed_at, "killed": killed,
                "jobs": fresh, "failed": ended_in(history, run, "failed", cut_at, healed_at),
                "dropped": proxy.dropped - dropped,
                "closed": proxy.cut - closed + proxy.refused - refused,
            })
            if killed is not None:
                key = killed["key"]
                wait_for(lambda key=key: stream.resolved([key]), 30.0,
                         f"{key} taken over", 0.05)
                spawned_at = time.monotonic()
                primary = fleet.respawn(primary, mode=other_side(primary.mode))
                fleet.wait_ready(primary)
            else:  # the backups read the batch, and follow the progress past it
                wait_for(lambda fresh=fresh: stream.read_past(["backup0", "backup1"]),
                         30.0, "the backups past the batch", 0.05)
        settled(env, stream, ["primary", "backup0", "backup1"], 60.0)
        problems = finish(env)
        history = fleet.history()
        violations = verdict(env, history, ids, max_attempts, problems)
        final = env.finals(ids)
        backup_runs = {fleet.state(c).run for c in backups}
        for c in cuts:
            k = c["killed"]
            if k is None:
                continue
            after = [s for s in history.sections if s.key == k["key"]
                     and s.token > k["token"] and s.run in backup_runs]
            if final[k["key"]].token > k["token"] and after:
                took_over += 1
        mixed = sides(env, history)
    caught_up = sum(1 for c in cuts if c["killed"] is None for run in backup_runs
                    if caught_up_from_progress(history, run, c, stream.entries))
    return Result(
        "fanout_backup_partitioned", rounds, len(cuts), handovers(history), violations,
        time.monotonic() - started,
        {"seed": seed, "cut_s": round(sum(c["healed"] - c["at"] for c in cuts), 2),
         "blackholed": sum(c["mode"] == "blackhole" for c in cuts),
         "closed": sum(c["mode"] == "close" for c in cuts),
         "dropped": sum(c["dropped"] for c in cuts),
         "conns_cut": sum(c["closed"] for c in cuts),
         "cut_proven": sum(1 for c in cuts if c["dropped" if c["mode"] == "blackhole"
                                                 else "closed"] > 0),
         "failed_in_cut": sum(c["failed"] for c in cuts),
         "killed_in_cut": sum(c["killed"] is not None for c in cuts),
         "took_over": took_over, "caught_up": caught_up,
         **mixed, **late_writes(history)},
    )


def primary_seen(fleet: Fleet, backups: list[Child], serving: bool, since: float) -> bool:
    """Whether every backup's reading of its namespace showed, after ``since``, a primary
    serving (or, with ``serving`` False, none any more): the ``primary`` notes."""
    notes = [n for n in fleet.history().notes if n.get("what") == "primary" and n["t"] > since]
    runs = {fleet.state(c).run for c in backups}
    return all(any(n["run"] == run and n["serving"] == serving for n in notes) for run in runs)


def passed_over(
    workdir: Path, *, rounds: int = 3, batch: int = 8, long_for: float = 1.5,
    lock_timeout: float = 1.0, max_attempts: int = 8, kill_every: int = 3,
    seed: int | None = None,
) -> Result:
    """A primary (asyncio; back sync after a kill) serving four jobs at once takes each
    round's long job (its first attempt lasts ``long_for``, past the lease, which the
    primary renews meanwhile), while its other slots do the later jobs: the progress
    waits behind the long job (read on the server: before its entry, with later jobs
    DONE). Two backups (asyncio, sync) follow the progress; each round starts once
    both see the primary serving. In every ``kill_every``-th round the primary is
    SIGKILLed holding the long job: a
    backup must take it over at its lease's end, with a larger token (and the primary
    comes back on the other side once both backups saw it gone); in the others the
    primary finishes it, and no backup may run it meanwhile. (In a round right after
    such a comeback a backup may take the long job first, as the rules let it: the new
    primary's serving has not moved yet, ``by_primary`` shows it.) Every job is
    resolved once; no delivery is settled by the progress before its job's DONE
    (:func:`~faults.history.followed_early`)."""
    rng, seed = seeded(seed)
    started = time.monotonic()
    ids: list[str] = []
    longs = [f"r{r}-long" for r in range(rounds)]
    waited = later_done = by_primary = killed_rounds = took_over = finished = lost = 0
    takeover_s: list[float] = []
    violations: list[Violation] = []
    killed: list[tuple[dict[str, Any], float]] = []
    with environment(workdir, lock_timeout=lock_timeout, max_attempts=max_attempts,
                     steps=(1, 3), step=0.03, fail_rate=0.1, long_jobs=longs,
                     long_for=long_for, until_stopped=True, concurrency=4,
                     **FOLLOWING) as env:
        fleet = env.fleet
        stream = Stream(env)
        primary = fleet.spawn("aworker", name="primary", owner="primary", jobs=[],
                              role="primary")
        backups = [fleet.spawn(kind_of("worker", n == 0), name=f"backup{n}",
                               owner=f"backup{n}", jobs=[], role="backup")
                   for n in range(2)]
        spawned_at = 0.0
        for child in (primary, *backups):
            fleet.wait_ready(child)
        for r, long in enumerate(longs):
            wait_for(lambda since=spawned_at: primary_seen(fleet, backups, True, since), 20.0,
                     "both backups see the primary serving", 0.05)
            fresh = [f"r{r}-j00", long, *(f"r{r}-j{i:02d}" for i in range(1, batch))]
            ids += fresh
            stream.submit(fresh)
            later = fresh[2:]

            def holder(long: str = long) -> tuple[Child, dict[str, Any]] | None:
                found = [(c, s) for c, s in fleet.holders() if s["key"] == long]
                return found[0] if found else None
            child, section = wait_for(holder, 15.0, f"{long} held")
            by_primary += child is primary
            entry = entry_order(stream.entries[long])

            def behind(long: str = long, later: list[str] = later,
                       entry: tuple[int, int] = entry) -> int:
                """Later jobs DONE while the progress is still before the long job's
                entry (0 while fewer than 3: go on waiting)."""
                progress = stream.progress()
                if progress is not None and progress >= entry and not stream.resolved([long]):
                    violations.append(Violation(
                        "progress_passed", long, f"the progress {progress} passed its entry "
                        f"{entry} while it was held"))
                    return -1
                done = sum(f.status == "done" for f in env.finals(later).values())
                return done if done >= 3 and holder() is not None else 0
            with contextlib.suppress(TimeoutError):
                seen = wait_for(behind, long_for, f"later jobs done behind {long}", 0.05)
                if seen > 0:
                    waited += 1
                    later_done += seen
            kill = r % kill_every == kill_every - 1
            if kill and child is primary and holder() is not None:
                time.sleep(rng.uniform(0, 0.1))
                fleet.kill(child)
                killed_at = time.monotonic()
                killed.append((section, killed_at))
                killed_rounds += 1
                wait_for(lambda long=long: stream.resolved([long]), 30.0,
                         f"{long} taken over", 0.05)
                wait_for(lambda at=killed_at: primary_seen(fleet, backups, False, at), 30.0,
                         "both backups see the primary gone", 0.05)
                spawned_at = time.monotonic()
                primary = fleet.respawn(child, mode=other_side(child.mode))
                fleet.wait_ready(primary)
            else:
                wait_for(lambda long=long: stream.resolved([long]), long_for + 30.0,
                         f"{long} done", 0.05)
        settled(env, stream, ["primary", "backup0", "backup1"], 60.0)
        problems = finish(env)
        history = fleet.history()
        violations += verdict(env, history, ids, max_attempts, problems)
        final = env.finals(ids)
        for section, at in killed:
            key = section["key"]
            after = sorted((s for s in history.sections
                            if s.key == key and s.token > section["token"]),
                           key=lambda s: s.start)
            if final[key].status == "done" and after:
                took_over += 1
                takeover_s.append(after[0].start - at)
        for r, long in enumerate(longs):
            if r % kill_every == kill_every - 1:
                continue
            first = min((s for s in history.sections if s.key == long), key=lambda s: s.start)
            if first.result == "returned" and first.token == final[long].token:
                finished += 1  # its holder finished it, nobody else ran it
            elif first.result == "lost":
                lost += 1  # its holder (a loaded machine) noticed it lost the lease
        mixed = sides(env, history)
    return Result(
        "fanout_passed_over", rounds, killed_rounds, handovers(history), violations,
        time.monotonic() - started,
        {"seed": seed, "by_primary": by_primary, "waited": waited, "later_done": later_done,
         "killed": killed_rounds, "took_over": took_over,
         "takeover_s": round(max(takeover_s), 3) if takeover_s else None,
         "finished_alone": finished, "lost_lease": lost, **mixed},
    )


def mixed_release(
    workdir: Path, *, python: Path, rounds: int = 4, jobs: int = 60, lock_timeout: float = 0.5,
    max_attempts: int = 10, seed: int | None = None,
) -> Result:
    """Release 0.3.0 (``python``: an interpreter whose ``lockworker`` is that release)
    and this release on one fan-out stream: a primary and a backup of each (0.3.0 sync,
    this release asyncio primary and sync backup, following the progress that 0.3.0
    neither reads nor moves), serving two jobs at once. Holders SIGKILLed ``rounds``
    times, a 0.3.0 one and a new one in turn (each back on its release, same owner).
    Every job resolved once, nothing pending, tokens growing; 0.3.0 writes no index
    entries, so the namespace is indexed (``lockworker index``) once every process has
    stopped, before the index check."""
    rng, seed = seeded(seed)
    started = time.monotonic()
    ids = [f"j{i:03d}" for i in range(jobs)]
    with environment(workdir, lock_timeout=lock_timeout, max_attempts=max_attempts,
                     steps=(2, 4), step=0.03, fail_rate=0.2, concurrency=2, jobs=ids,
                     **FOLLOWING) as env:
        fleet = env.fleet
        stream = Stream(env)
        stream.submit(ids)
        spawned = [
            fleet.spawn("worker", name="old-primary", owner="old-primary", role="primary",
                        python=python),
            fleet.spawn("aworker", name="new-primary", owner="new-primary", role="primary"),
            fleet.spawn("worker", name="old-backup", owner="old-backup", role="backup",
                        python=python),
            fleet.spawn("worker", name="new-backup", owner="new-backup", role="backup"),
        ]
        for child in spawned:
            fleet.wait_ready(child)

        def of(old: bool) -> Callable[[], list[Child]]:
            return lambda: [c for c in fleet.live() if (c.python is not None) == old]
        faults = 0
        for n in range(rounds):
            try:
                child, _ = fleet.wait_holder(of(n % 2 == 0), timeout=10.0)
            except TimeoutError:
                break  # every job resolved already
            time.sleep(rng.uniform(0, lock_timeout / 2))
            fleet.kill(child)
            fleet.respawn(child)
            faults += 1
        fleet.wait_exit(fleet.live(), 60.0)
        index_all(env.client(), env.namespace, 86_400_000)
        problems = finish(env)
        history = fleet.history()
        violations = verdict(env, history, ids, max_attempts, problems)
        # Which runs imported the old release: its ``lockworker`` lies in its venv.
        old_runs = {n["run"] for n in history.notes if n.get("what") == "release"
                    and Path(n["file"]).is_relative_to(python.parents[1])}
        old_sections = sum(1 for s in history.sections if s.run in old_runs)
        cross = sum(
            1 for key in ids for a, b in _pairs(history, key)
            if (a.run in old_runs) != (b.run in old_runs)
        )
        mixed = sides(env, history)
    return Result(
        "fanout_mixed_release", rounds, faults, handovers(history), violations,
        time.monotonic() - started,
        {"seed": seed, "old_runs": len(old_runs), "old_sections": old_sections,
         "new_sections": len(history.sections) - old_sections, "release_cross": cross,
         **mixed},
    )


def _pairs(history: History, key: str) -> list[tuple[Any, Any]]:
    ordered = sorted((s for s in history.sections if s.key == key), key=lambda s: s.start)
    return list(itertools.pairwise(ordered))


SCENARIOS: dict[str, Callable[..., Result]] = {
    "fanout_backup_partitioned": backup_partitioned,
    "fanout_passed_over": passed_over,
    "fanout_mixed_release": mixed_release,
}
