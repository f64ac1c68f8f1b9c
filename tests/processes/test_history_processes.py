"""The attempt history under faults, with real processes (failover_proc.py): a holder
SIGKILLed, SIGSTOPped past its lease, failing, stopped by SIGTERM. The records always
say what happened, in order, one per attempt; a stale holder's settle adds none."""

from __future__ import annotations

import itertools
import os
import signal

import pytest
from cluster import Cluster
from helpers import wait_for

import lockworker
from lockworker.model.history import AttemptRecord

pytestmark = pytest.mark.processes


def records(cluster: Cluster) -> tuple[AttemptRecord, ...]:
    with lockworker.Worker(
        cluster.client, namespace=cluster.namespace, handle_signals=False,
        on_acquired=lambda job: None,
    ) as reader:
        return reader.inspect("job").history


def endings(cluster: Cluster) -> list[tuple[int, str, str | None]]:
    return [(r.attempt, r.owner, r.ending) for r in records(cluster)]


def in_order(found: tuple[AttemptRecord, ...]) -> None:
    """Tokens grow by one per record; each ends before the next starts."""
    for before, after in itertools.pairwise(found):
        assert after.token == before.token + 1
        assert before.ended_ms is not None and before.started_ms <= before.ended_ms
        assert before.ended_ms <= after.started_ms


def test_a_sigkilled_holder_is_recorded_lost_by_the_backup_that_takes_over(
    cluster: Cluster,
) -> None:
    holder = cluster.start("holder", "hold", lock_timeout=0.6)
    wait_for(lambda: cluster.find(owner="holder", event="acquired"))
    assert endings(cluster) == [(1, "holder", None)]
    holder.send_signal(signal.SIGKILL)
    holder.wait(10)
    cluster.start("backup", "ok", lock_timeout=0.6)
    assert cluster.outcome("backup") == "done"
    found = records(cluster)
    assert endings(cluster) == [(1, "holder", "lost"), (2, "backup", "done")]
    in_order(found)


def test_a_holder_paused_past_its_lease_writes_no_record_when_it_resumes(
    cluster: Cluster,
) -> None:
    holder = cluster.start("holder", "hold", lock_timeout=0.6)
    wait_for(lambda: cluster.find(owner="holder", event="acquired"))
    os.kill(holder.pid, signal.SIGSTOP)
    try:
        cluster.start("backup", "ok", lock_timeout=0.6)
        assert cluster.outcome("backup") == "done"
    finally:
        os.kill(holder.pid, signal.SIGCONT)
    # Resumed, the stale holder tries to complete; the server refuses, and no record.
    assert cluster.outcome("holder") == "done_elsewhere"
    assert cluster.find(owner="holder", event="saw_lost")
    found = records(cluster)
    assert endings(cluster) == [(1, "holder", "lost"), (2, "backup", "done")]
    in_order(found)


def test_failing_attempts_keep_their_error_up_to_giving_up(cluster: Cluster) -> None:
    cluster.start("failer", "fail", lock_timeout=1.0, max_attempts=3)
    assert cluster.outcome("failer") == "gave_up"
    found = records(cluster)
    assert [(r.attempt, r.ending) for r in found] == [
        (1, "failed"), (2, "failed"), (3, "gave_up")
    ]
    for r in found:
        assert (r.error_type, r.error) == ("RuntimeError", "attempt failed on purpose")
        assert r.traceback is not None and "on_acquired" in r.traceback
    in_order(found)


def test_a_stopped_holder_is_recorded_stopped_and_its_attempt_taken_again(
    cluster: Cluster,
) -> None:
    holder = cluster.start("holder", "hold_check", lock_timeout=2.0)
    wait_for(lambda: cluster.find(owner="holder", event="acquired"))
    holder.send_signal(signal.SIGTERM)
    assert cluster.outcome("holder") == "stopped"
    cluster.start("backup", "ok", lock_timeout=2.0)
    assert cluster.outcome("backup") == "done"
    found = records(cluster)
    # A stop refunds the attempt: the backup takes attempt 1 again, with the next token.
    assert endings(cluster) == [(1, "holder", "stopped"), (1, "backup", "done")]
    in_order(found)
