"""A backup's held-back jobs nobody took yet, while a primary works through a backlog
(lockworker.serving.held.Held): pure decisions, no server.

A job nobody ever took is left to the serving while it moves toward it: held back again
(and looked at again ``backup_delay`` later) until a look sees a job delivered after it
taken (the serving passed it over: its free clock starts then) or sees no job resolved
for ``backup_delay`` (the serving does not move: it has lain free since it came, or since
the last job seen resolved).
"""

from __future__ import annotations

from lockworker.daemons.sources import Delivery
from lockworker.model.keys import JobKeys
from lockworker.model.state import JobStatus, Snapshot
from lockworker.serving.held import AHEAD, Held, Sighting

NEVER = Snapshot(JobStatus.PENDING, 0, 0, "")
"""Free, and nobody ever took it (no token)."""
TAKEN = Snapshot(JobStatus.PENDING, 1, 5, "primary", holder="primary", pttl_ms=30_000)
DONE = Snapshot(JobStatus.DONE, 1, 5, "primary")


def backlog(held: Held, n: int, at: float) -> list[Delivery]:
    jobs = [Delivery(f"job-{i}", None) for i in range(n)]
    for job in jobs:
        held.hold(at, job)
    return jobs


def look(held: Held, now: float, seen: dict[str, Snapshot]) -> list[tuple[str, Sighting]]:
    """One look at ``now`` at the deliveries due then, each seeing ``seen[job id]``
    (every one due must be in it, and nothing else); those handed over, by job id."""
    due = held.take(now, everything=False)
    assert sorted(d.job_id for d in due) == sorted(seen)
    looked = [(d, JobKeys.of("ns", d.job_id)) for d in due]
    handed, _ = held.after_look(looked, [seen[d.job_id] for d in due], now, True)
    out = [(d.job_id, sighting) for d, sighting in handed if sighting is not None]
    return sorted(out, key=lambda pair: pair[0])


def test_a_job_the_moving_serving_has_not_reached_is_held_until_it_is_passed_over() -> None:
    held = Held(0.5)
    backlog(held, 6, 10.0)
    # The primary finished job 0 and holds jobs 1 and 2; 3, 4 and 5 are ahead of it.
    seen = {"job-0": DONE, "job-1": TAKEN, "job-2": TAKEN}
    assert look(held, 10.5, {**seen, "job-3": NEVER, "job-4": NEVER, "job-5": NEVER}) == [
        ("job-0", Sighting(DONE))
    ]
    assert len(held) == 5
    # Job 1 done (the serving moves); job 4 taken while job 3 lies free: job 3 was
    # passed over, and its clock starts now; job 5 is still ahead.
    seen = {"job-1": DONE, "job-2": TAKEN, "job-3": NEVER, "job-4": TAKEN, "job-5": NEVER}
    assert look(held, 11.0, seen) == [("job-1", Sighting(DONE))]
    seen = {"job-2": DONE, "job-3": NEVER, "job-4": DONE, "job-5": NEVER}
    assert look(held, 11.5, seen) == [
        ("job-2", Sighting(DONE)), ("job-3", Sighting(NEVER, (11.0, 0))),
        ("job-4", Sighting(DONE)),
    ]
    # Then nothing more is resolved: job 5 is looked at again just when the serving
    # has stood still for backup_delay, and handed over, free since it last moved.
    assert look(held, 11.95, {}) == []
    assert look(held, 12.0, {"job-5": NEVER}) == [("job-5", Sighting(NEVER, (11.5, 0)))]
    assert len(held) == 0


def test_a_job_nobody_took_is_handed_over_once_nothing_was_resolved_for_backup_delay() -> None:
    # No job ever seen resolved (an idle or stuck primary): free since it came.
    held = Held(0.5)
    backlog(held, 2, 10.0)
    assert look(held, 10.5, {"job-0": TAKEN, "job-1": NEVER}) == [
        ("job-1", Sighting(NEVER, (10.0, 0)))
    ]
    # The serving moved at 10.5, then nothing is resolved: free since that last move.
    held = Held(0.5)
    backlog(held, 3, 10.0)
    assert look(held, 10.5, {"job-0": DONE, "job-1": NEVER, "job-2": NEVER}) == [
        ("job-0", Sighting(DONE))
    ]
    assert look(held, 10.9, {}) == []
    assert look(held, 11.0, {"job-1": NEVER, "job-2": NEVER}) == [
        ("job-1", Sighting(NEVER, (10.5, 0))), ("job-2", Sighting(NEVER, (10.5, 0)))
    ]


def test_the_source_waits_while_ahead_of_the_serving_by_the_limit() -> None:
    held = Held(0.5)
    backlog(held, AHEAD + 1, 10.0)
    assert not held.full()
    seen = {f"job-{i}": NEVER for i in range(1, AHEAD + 1)}
    assert look(held, 10.5, {"job-0": DONE, **seen}) == [("job-0", Sighting(DONE))]
    assert held.full()  # AHEAD jobs the serving has not reached: read no further
    looked = [(Delivery("job-1", None), JobKeys.of("ns", "job-1"))]
    held.after_look(looked, [DONE], 10.6, True)
    assert not held.full()


def test_a_handover_hands_over_the_job_handed_over_not_the_jobs_not_reached() -> None:
    """A handover message (a failure due again at once, a release) has the backup look
    at everything at once: the job given back (it has a token) goes to its contest at
    once; a job the moving primary has not reached stays held back."""
    held = Held(0.5)
    backlog(held, 3, 10.0)
    assert look(held, 10.5, {"job-0": DONE, "job-1": TAKEN, "job-2": NEVER}) == [
        ("job-0", Sighting(DONE))
    ]
    given_back = Snapshot(JobStatus.PENDING, 1, 5, "primary")
    due = held.take(10.6, everything=True)
    seen = {"job-1": given_back, "job-2": NEVER}
    handed, _ = held.after_look(
        [(d, JobKeys.of("ns", d.job_id)) for d in due], [seen[d.job_id] for d in due],
        10.6, True, hold_free=False,
    )
    assert handed == [(due[[d.job_id for d in due].index("job-1")],
                       Sighting(given_back, (10.6, 5)))]
    assert len(held) == 1


def test_only_the_progress_of_the_runs_deferred_to_counts_as_the_serving_moving() -> None:
    """A crashed primary's registration still runs for a while: the backups meanwhile
    take over its jobs, and one backup's progress must not read as the primary moving
    to another (nor its own to itself). Only ``movers``' runs count."""
    primary, other = "1" * 16, "2" * 16
    done_by = {run: Snapshot(JobStatus.DONE, 1, 5, "x", run=run) for run in (primary, other)}
    taken_by = {
        run: Snapshot(JobStatus.PENDING, 1, 5, "x", holder="x", pttl_ms=30_000, run=run)
        for run in (primary, other)
    }

    def first_look(movers: frozenset[str]) -> list[tuple[str, Sighting]]:
        held = Held(0.5)
        backlog(held, 3, 10.0)
        due = held.take(10.5, everything=False)
        seen = {"job-0": done_by[other], "job-1": taken_by[other], "job-2": NEVER}
        looked = [(d, JobKeys.of("ns", d.job_id)) for d in due]
        handed, _ = held.after_look(
            looked, [seen[d.job_id] for d in due], 10.5, True, movers=movers
        )
        return sorted((d.job_id, s) for d, s in handed if s is not None)

    # The other run's DONE and take count when it is deferred to: job 2 was not passed
    # over, and the serving moves, so job 2 stays held back.
    assert first_look(frozenset({other})) == [("job-0", Sighting(done_by[other]))]
    # Not deferred to: nothing moved, job 2 has lain free since it came (10.0).
    assert first_look(frozenset({primary})) == [
        ("job-0", Sighting(done_by[other])), ("job-2", Sighting(NEVER, (10.0, 0)))
    ]


def test_once_a_job_waited_out_the_delay_on_a_still_serving_new_jobs_are_not_left_to_it() -> None:
    """A crashed primary's registration runs on for up to a lease. Once a look found a
    job nobody took lying free for ``backup_delay`` while the serving did not move, the
    serving stalls: a job delivered later is looked at at once, and counts as free since
    the serving last moved (its contest competes at once), not one ``backup_delay`` per
    job read ahead. A look that sees the serving move again ends the stall."""
    held = Held(0.5)
    backlog(held, 2, 10.0)
    assert look(held, 10.5, {"job-0": DONE, "job-1": TAKEN}) == [("job-0", Sighting(DONE))]
    assert not held.stalled()
    held.hold(10.6, Delivery("job-2", None))
    # Nothing moved since 10.5: job 2 has waited out the delay since it came.
    assert look(held, 11.1, {"job-1": TAKEN, "job-2": NEVER}) == [
        ("job-2", Sighting(NEVER, (10.6, 0)))
    ]
    assert held.stalled()
    # A job delivered now is due at once, and free since the last move (10.5).
    held.hold(11.2, Delivery("job-3", None))
    assert look(held, 11.2, {"job-3": NEVER}) == [("job-3", Sighting(NEVER, (10.5, 0)))]
    # The serving moves again (job 1 done): the stall ends, a new job waits again.
    assert look(held, 11.6, {"job-1": DONE}) == [("job-1", Sighting(DONE))]
    assert not held.stalled()
    held.hold(11.7, Delivery("job-4", None))
    assert held.take(12.1, everything=False) == []  # its first look after the delay
    assert [d.job_id for d in held.take(12.21, everything=False)] == ["job-4"]
