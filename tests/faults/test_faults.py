"""The fault battery: real processes against real servers the tests start, faults
injected at random moments, and the whole history checked (see scenarios.py).

Each test prints its figure (visible with ``-s``) and asserts that no violation was
found; the figure and the violations are the assertion message. The history files of
a failed test stay in its ``tmp_path``. The fleets mix sync processes and their asyncio
twins; a test of a mixed fleet also asserts that the history it judged was mixed:
sections held by asyncio processes, and handovers between the two sides.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from . import scenarios
from .scenarios import Result

pytestmark = pytest.mark.faults


def verdict(result: Result, workdir: Path) -> None:
    print(result.figure())
    assert not result.violations, f"{result.report()}\nhistories: {workdir}"


def mixed(result: Result) -> None:
    """Sync and asyncio processes both held sections, and handed them to each other."""
    assert result.extra["aio"] >= 1, result.figure()
    assert result.extra["cross"] >= 1, result.figure()


def test_sigkill_of_holders_at_random_points(tmp_path: Path) -> None:
    result = scenarios.sigkill(tmp_path)
    verdict(result, tmp_path)
    mixed(result)


def test_sigstop_past_the_lease_then_sigcont(tmp_path: Path) -> None:
    result = scenarios.sigstop(tmp_path)
    verdict(result, tmp_path)
    # The pauses hit holders inside their sections, and they noticed (not vacuous),
    # asyncio ones too.
    assert result.extra["noticed"] >= 1, result.figure()
    assert result.extra["noticed_aio"] >= 1, result.figure()
    mixed(result)


def test_restarts_with_the_same_owner_at_random_phases_of_the_lease(tmp_path: Path) -> None:
    result = scenarios.same_owner_restart(tmp_path)
    verdict(result, tmp_path)
    assert result.faults >= 1, result.figure()
    mixed(result)


def test_a_hook_crashing_its_process_runs_at_most_max_attempts_times(tmp_path: Path) -> None:
    result = scenarios.same_owner_crash(tmp_path, max_attempts=3)
    verdict(result, tmp_path)
    assert result.extra["final"] == "gave_up", result.figure()
    mixed(result)  # attempts by sync and asyncio processes count alike


def test_leader_terms_with_restarts_under_the_same_owner(tmp_path: Path) -> None:
    result = scenarios.leader_same_owner(tmp_path)
    verdict(result, tmp_path)
    mixed(result)


def test_proxy_black_hole_close_and_delay_phases(tmp_path: Path) -> None:
    result = scenarios.proxy_phases(tmp_path)
    verdict(result, tmp_path)
    mixed(result)


def test_server_restarts_with_appendfsync_always_lose_nothing(tmp_path: Path) -> None:
    result = scenarios.server_restart(tmp_path, durable=True)
    verdict(result, tmp_path)
    mixed(result)


def test_server_restarts_without_persistence_keep_tokens_growing(tmp_path: Path) -> None:
    result = scenarios.server_restart(tmp_path, durable=False)
    verdict(result, tmp_path)
    mixed(result)


def test_wall_clock_jumps_do_not_matter(tmp_path: Path) -> None:
    result = scenarios.clock_jumps(tmp_path)
    verdict(result, tmp_path)
    assert result.extra["jumps"] >= 1, result.figure()
    mixed(result)


def test_redlock_with_masters_killed_and_restarted(tmp_path: Path) -> None:
    result = scenarios.redlock(tmp_path, masters=3, durable=True)
    verdict(result, tmp_path)
    assert result.extra["holds"] >= 1, result.figure()
    mixed(result)


def test_processes_starting_while_the_server_is_unreachable(tmp_path: Path) -> None:
    result = scenarios.startup_outage(tmp_path)
    verdict(result, tmp_path)
    mixed(result)


def test_batched_serving_under_sigkill(tmp_path: Path) -> None:
    """Workers serving six jobs at once (steps sharing round trips, renewals together),
    half of them backups holding deliveries back: holders SIGKILLed mid-batch."""
    result = scenarios.SCENARIOS["batch_sigkill"](tmp_path)
    verdict(result, tmp_path)
    assert result.extra["batches"] >= 1, result.figure()  # the batches were exercised
    mixed(result)


def test_batched_serving_under_sigstop_past_the_lease(tmp_path: Path) -> None:
    """Holders of a claimed batch SIGSTOPped past their lease, then continued: their
    jobs are taken over, and what the paused processes send on waking is refused."""
    result = scenarios.SCENARIOS["batch_sigstop"](tmp_path)
    verdict(result, tmp_path)
    assert result.extra["batches"] >= 1, result.figure()
    mixed(result)


def test_batched_serving_across_server_restarts_with_appendfsync_always(
    tmp_path: Path,
) -> None:
    """The server restarted (its data kept) under the batched fleet: nothing lost,
    tokens only grow."""
    result = scenarios.SCENARIOS["batch_server_restart"](tmp_path)
    verdict(result, tmp_path)
    assert result.extra["batches"] >= 1, result.figure()


def test_batched_serving_behind_a_proxy_that_drops_and_delays(tmp_path: Path) -> None:
    """A flush lost to a dropped connection, a batch whose leases are partly lost."""
    result = scenarios.SCENARIOS["batch_proxy"](tmp_path)
    verdict(result, tmp_path)
    assert result.extra["batches"] >= 1, result.figure()


def test_a_consumer_group_under_sigkill(tmp_path: Path) -> None:
    """Workers share the jobs of a stream through one consumer group (each entry to one
    member), serving six at once, half of them backups: members SIGKILLed mid-batch,
    their entries claimed by the others."""
    result = scenarios.SCENARIOS["group_sigkill"](tmp_path)
    verdict(result, tmp_path)
    assert result.extra["batches"] >= 1, result.figure()
    # Each job went to one member (again only after a handover or a claim); served
    # fan-out, every live worker would have been delivered all 36 (over 200 here).
    assert 0 < result.extra["delivered"] < 2 * 36, result.figure()
    mixed(result)


def test_a_consumer_group_under_sigstop_past_the_lease(tmp_path: Path) -> None:
    """Members of one consumer group SIGSTOPped past their lease mid-batch: the others
    claim their entries and take their jobs over; a continued member's late steps are
    refused."""
    result = scenarios.SCENARIOS["group_sigstop"](tmp_path)
    verdict(result, tmp_path)
    assert result.extra["batches"] >= 1, result.figure()
    # Each job went to one member (again only after a claim): served fan-out, the four
    # workers would each have been delivered all 30 (120 deliveries or more).
    assert 0 < result.extra["delivered"] < 3 * 30, result.figure()
    mixed(result)


def assert_followed(result: Result) -> None:
    """The scenario is not vacuous: readers went by their namespace's progress, settling
    a delivery it covered without a look (``followed``) or reading on past it (a
    trailing backup reads no entry the progress covers: ``skipped_ahead``)."""
    assert result.extra["followed"] + result.extra["skipped_ahead"] >= 1, result.figure()


def test_fanout_backups_following_the_progress_under_sigkill(tmp_path: Path) -> None:
    """Workers reading one stream fan-out, half of them backups that settle what their
    namespace's progress shows done without a look: holders SIGKILLed mid-batch, between
    two saves of their positions; every job is still done, none twice."""
    result = scenarios.SCENARIOS["fanout_sigkill"](tmp_path)
    verdict(result, tmp_path)
    assert_followed(result)
    mixed(result)


def test_fanout_backups_following_the_progress_under_sigstop_past_the_lease(
    tmp_path: Path,
) -> None:
    """The same fleet, holders SIGSTOPped past their lease mid-batch: the progress
    waits behind their jobs, which the others take over; late steps are refused."""
    result = scenarios.SCENARIOS["fanout_sigstop"](tmp_path)
    verdict(result, tmp_path)
    assert_followed(result)
    mixed(result)


def test_serving_in_the_serving_thread_under_sigkill(tmp_path: Path) -> None:
    """Members of one consumer group serving one job at a time in the serving thread,
    each claiming the entries it read ahead in one round trip: members SIGKILLed with
    granted jobs waiting for their turn; those jobs are taken over at their lease's
    end, every job done once."""
    result = scenarios.SCENARIOS["inline_sigkill"](tmp_path)
    verdict(result, tmp_path)
    assert result.extra["batches"] >= 1, result.figure()
    mixed(result)


def test_serving_in_the_serving_thread_under_sigstop_past_the_lease(tmp_path: Path) -> None:
    """The same members SIGSTOPped past their lease with a claimed batch: the others
    take its jobs over; a continued member runs no hook on a lease it no longer
    trusts, and its late steps are refused."""
    result = scenarios.SCENARIOS["inline_sigstop"](tmp_path)
    verdict(result, tmp_path)
    assert result.extra["batches"] >= 1, result.figure()
    mixed(result)


def test_threads_and_tasks_sharing_one_worker_under_sigkill(tmp_path: Path) -> None:
    """Each worker process's one Worker shared by three threads (three tasks, asyncio),
    each processing every job, holders SIGKILLed: calls of one process meet on one id,
    and still no two run it at once, no token is used twice, one run reports DONE."""
    result = scenarios.SCENARIOS["shared_sigkill"](tmp_path)
    verdict(result, tmp_path)
    assert result.extra["met"] >= 1, result.figure()  # calls of one process met on an id
    mixed(result)


def test_a_fanout_reader_back_after_the_window_runs_nothing_again(tmp_path: Path) -> None:
    """A fan-out backup SIGKILLed, every job's records deleted once the primary read
    past the last entry (the DONE window over), the backup back with the same owner:
    it reads on past everything, and no job runs again."""
    result = scenarios.SCENARIOS["fanout_progress_restart"](tmp_path)
    verdict(result, tmp_path)
    assert result.extra["deleted"] >= 16, result.figure()  # the records were gone
    assert result.extra["aio"] >= 1, result.figure()  # the asyncio primary did the jobs


def test_a_group_member_back_after_the_window_gets_no_acknowledged_entry(
    tmp_path: Path,
) -> None:
    """The same with members of one consumer group: acknowledged entries are never
    delivered again, whatever their jobs' records say."""
    result = scenarios.SCENARIOS["group_progress_restart"](tmp_path)
    verdict(result, tmp_path)
    assert result.extra["deleted"] >= 16, result.figure()


def test_a_duplicate_inside_the_done_window_never_runs_one_after_it_does(
    tmp_path: Path,
) -> None:
    """A job submitted again inside ``done_retention`` ends DONE_ELSEWHERE with no
    section; once its DONE record expired it runs again, with a larger token."""
    result = scenarios.SCENARIOS["done_window"](tmp_path)
    verdict(result, tmp_path)
    mixed(result)


def test_schedule_ticks_under_sigkill_of_their_holders(tmp_path: Path) -> None:
    """Workers serving ``Every("tick", 1)``, holders SIGKILLed mid-tick: every tick ran
    once, none before it was due on the server's clock, killed ticks taken over. Seven
    ticks (the scenario's default is nine): the three kills, then ticks beyond them."""
    result = scenarios.SCENARIOS["schedule_sigkill"](tmp_path, ticks=7)
    verdict(result, tmp_path)
    assert result.extra["ticks"] >= 6, result.figure()
    assert result.extra["took_over"] >= 1, result.figure()
    mixed(result)


def test_a_fanout_backup_cut_off_across_a_handover_catches_up_and_loses_nothing(
    tmp_path: Path,
) -> None:
    """Backups (sync, asyncio) behind a proxy black-holed or closed while the primary
    fails jobs (handovers they cannot hear) and, last, is SIGKILLed holding one whose
    lease runs out meanwhile: once the link is back they catch up from the progress;
    every job done or given up, none pending, none twice, tokens growing."""
    result = scenarios.SCENARIOS["fanout_backup_partitioned"](tmp_path)
    verdict(result, tmp_path)
    extra = result.extra
    # Every cut really cut the backups off: bytes black-holed, connections closed.
    assert extra["cut_proven"] == result.faults == 3, result.figure()
    assert extra["blackholed"] >= 1 and extra["closed"] >= 1, result.figure()
    # Handovers were published while they were cut off, and the killed primary's job
    # was taken over by a backup once the link was back.
    assert extra["failed_in_cut"] >= 1, result.figure()
    assert extra["killed_in_cut"] == 1 and extra["took_over"] == 1, result.figure()
    # Each backup caught up on each batch the primary did while it was cut off: it
    # skipped to the progress, or settled the batch's jobs by it, without a look.
    assert extra["caught_up"] == 2 * (result.rounds - 1), result.figure()


def test_a_job_the_primary_passes_over_is_neither_followed_nor_lost(tmp_path: Path) -> None:
    """A primary holds one long job while its other slots do the later ones (the
    progress waits behind it): the backups settle none of it by the progress, take it
    over at its lease's end when the primary is SIGKILLed, and leave it alone when the
    primary finishes it."""
    result = scenarios.SCENARIOS["fanout_passed_over"](tmp_path)
    verdict(result, tmp_path)
    extra = result.extra
    # The primary held each long job, and the progress was seen waiting behind it with
    # later jobs done.
    assert extra["by_primary"] == 3, result.figure()
    assert extra["waited"] == 3 and extra["later_done"] >= 9, result.figure()
    assert extra["killed"] == 1 and extra["took_over"] == 1, result.figure()
    assert extra["takeover_s"] < 4.0, result.figure()  # at the lease's end (1 s)
    # The primary finished the others alone (or, slowed past its lease on a loaded
    # machine, noticed it lost the job, which the checker then followed).
    assert extra["finished_alone"] + extra["lost_lease"] == 2, result.figure()
    assert extra["finished_alone"] >= 1, result.figure()
    assert extra["followed"] >= 1, result.figure()
    assert extra["aio"] >= 1, result.figure()  # the asyncio primary held them


def test_release_0_3_0_and_this_one_on_one_fanout_stream(tmp_path: Path) -> None:
    """Primaries and backups of 0.3.0 (built from its release commit) and of this
    release on one fan-out stream, holders of both SIGKILLed: every job resolved once,
    tokens growing, the index right once rebuilt."""
    from .release import release_python

    python = release_python("0.3.0")
    if python is None:
        pytest.skip("release 0.3.0's commit is not in this checkout")
    result = scenarios.SCENARIOS["fanout_mixed_release"](tmp_path, python=python)
    verdict(result, tmp_path)
    extra = result.extra
    assert extra["old_runs"] >= 2 and extra["old_sections"] >= 1, result.figure()
    assert extra["new_sections"] >= 1, result.figure()
    assert extra["release_cross"] >= 1, result.figure()  # handed between the releases
    mixed(result)
