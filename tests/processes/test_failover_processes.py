"""The failover worker's promises, with real OS processes and real signals.

Each test starts worker processes (tests/processes/failover_proc.py) against the suite's
own server; they record every hook in a Redis list with their monotonic time, which is
system-wide on Linux, so times from different processes compare directly.
"""

from __future__ import annotations

import os
import signal
import time

import pytest
from cluster import Cluster
from helpers import wait_for

pytestmark = pytest.mark.processes


def test_racing_processes_run_each_attempt_exactly_once(cluster: Cluster) -> None:
    owners = [f"p{n}" for n in range(4)]
    for owner in owners:
        cluster.start(owner, "slow", wait_ready=False)
    outcomes = {owner: cluster.outcome(owner) for owner in owners}
    acquired = cluster.find(event="acquired")
    assert len(acquired) == 1, acquired
    winner = acquired[0]["owner"]
    assert outcomes[winner] == "done"
    assert sorted(v for k, v in outcomes.items() if k != winner) == ["done_elsewhere"] * 3


def test_sigkill_of_the_holder_gives_attempt_two_with_a_larger_token_in_a_backup(
    cluster: Cluster,
) -> None:
    holder = cluster.start("holder", "hold", lock_timeout=1.0)
    first = wait_for(lambda: cluster.find(owner="holder", event="acquired"))[0]
    cluster.start("backup", "ok", lock_timeout=1.0)
    wait_for(lambda: cluster.find(owner="backup", event="locked"))
    pttl_ms = cluster.client.pttl(f"lw:job:{cluster.namespace}:{{job}}:lock")
    killed_at = time.monotonic()
    holder.send_signal(signal.SIGKILL)
    holder.wait(10)
    assert cluster.outcome("backup") == "done"
    second = cluster.find(owner="backup", event="acquired")[0]
    assert second["attempt"] == 2
    assert second["token"] > first["token"]
    # Taken over when the lease ran out (not before: the lease was live), plus a margin.
    assert second["t"] - killed_at < pttl_ms / 1000 + 0.5


def test_holder_paused_past_its_lease_loses_the_job_and_its_completion_is_refused(
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
    # Resumed, the holder notices it lost the lease, its completion is refused, and it
    # ends up seeing the backup's DONE.
    assert cluster.outcome("holder") == "done_elsewhere"
    assert cluster.find(owner="holder", event="lost")
    backup_run = cluster.find(owner="backup", event="acquired")[0]
    assert backup_run["attempt"] == 2
    state = cluster.client.get(f"lw:job:{cluster.namespace}:{{job}}:state")
    assert state is not None and state.startswith("lw2|done|2|") and state.endswith("|backup")


def test_an_exception_hands_the_job_over_at_once(cluster: Cluster) -> None:
    lock_timeout = 5.0
    cluster.start("failer", "fail_on_go", lock_timeout=lock_timeout)
    wait_for(lambda: cluster.find(owner="failer", event="acquired"))
    cluster.start("backup", "ok", lock_timeout=lock_timeout)
    wait_for(lambda: cluster.find(owner="backup", event="locked"))
    cluster.client.set(f"{cluster.namespace}:go", 1)
    assert cluster.outcome("backup") == "done"
    failed_at = cluster.find(owner="failer", event="failing")[0]["t"]
    taken = cluster.find(owner="backup", event="acquired")[0]
    assert taken["attempt"] == 2
    # far below the 5 s lease: the failure woke the backup, which did not wait for expiry
    assert taken["t"] - failed_at < lock_timeout / 2


def test_max_attempts_ends_in_gave_up_for_everyone(cluster: Cluster) -> None:
    for owner in ("a", "b", "c"):
        cluster.start(owner, "fail", max_attempts=3, wait_ready=False)
    outcomes = {owner: cluster.outcome(owner) for owner in ("a", "b", "c")}
    assert set(outcomes.values()) == {"gave_up"}
    attempts = sorted(e["attempt"] for e in cluster.find(event="acquired"))
    assert attempts == [1, 2, 3]
    assert {e["owner"] for e in cluster.find(event="gave_up")} == {"a", "b", "c"}


def test_done_is_seen_by_latecomers(cluster: Cluster) -> None:
    cluster.start("first", "ok")
    assert cluster.outcome("first") == "done"
    cluster.start("late", "ok")
    assert cluster.outcome("late") == "done_elsewhere"
    assert not cluster.find(owner="late", event="acquired")


def test_sigterm_stops_a_waiting_process(cluster: Cluster) -> None:
    cluster.start("holder", "hold", lock_timeout=2.0)
    wait_for(lambda: cluster.find(owner="holder", event="acquired"))
    waiter = cluster.start("waiter", "ok", lock_timeout=2.0)
    wait_for(lambda: cluster.find(owner="waiter", event="locked"))
    waiter.send_signal(signal.SIGTERM)
    assert cluster.outcome("waiter") == "stopped"
    assert waiter.wait(10) == 0
