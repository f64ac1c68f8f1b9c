"""More failover promises with real processes: mutual exclusion across every attempt of
a contended job, and a SIGTERM'd holder handing its job over without spending an attempt.

Uses the worker process and the ``Cluster`` driver in cluster.py.
"""

from __future__ import annotations

import itertools
import signal

import pytest
from cluster import Cluster
from helpers import wait_for

pytestmark = pytest.mark.processes




def test_four_processes_run_every_attempt_once_and_never_overlap(cluster: Cluster) -> None:
    owners = [f"p{n}" for n in range(4)]
    for owner in owners:
        cluster.start(owner, "slow_fail", max_attempts=4, wait_ready=False)
    outcomes = {owner: cluster.outcome(owner, timeout=30) for owner in owners}
    assert set(outcomes.values()) == {"gave_up"}
    acquired = sorted(cluster.find(event="acquired"), key=lambda e: e["attempt"])
    assert [e["attempt"] for e in acquired] == [1, 2, 3, 4]
    tokens = [e["token"] for e in acquired]
    assert tokens == sorted(set(tokens))
    ending = {e["attempt"]: e for e in cluster.find(event="ending")}
    for earlier, later in itertools.pairwise(acquired):
        # each attempt starts only after the previous holder finished its work
        assert ending[earlier["attempt"]]["owner"] == earlier["owner"]
        assert later["t"] >= ending[earlier["attempt"]]["t"]


def test_sigterm_to_the_holder_hands_over_at_once_without_spending_an_attempt(
    cluster: Cluster,
) -> None:
    lock_timeout = 5.0
    holder = cluster.start("holder", "hold_check", lock_timeout=lock_timeout)
    first = wait_for(lambda: cluster.find(owner="holder", event="acquired"))[0]
    cluster.start("backup", "ok", lock_timeout=lock_timeout)
    wait_for(lambda: cluster.find(owner="backup", event="locked"))
    holder.send_signal(signal.SIGTERM)
    assert cluster.outcome("holder") == "stopped"
    assert holder.wait(10) == 0
    assert cluster.outcome("backup") == "done"
    taken = cluster.find(owner="backup", event="acquired")[0]
    assert taken["attempt"] == 1  # the stopped attempt was given back
    assert taken["token"] > first["token"]
    stopped_at = cluster.find(owner="holder", event="outcome")[0]["t"]
    assert taken["t"] - stopped_at < 2.5  # woken, not after the 5 s lease
    assert not cluster.find(owner="holder", event="lost")
