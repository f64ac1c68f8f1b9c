"""The protocol's decisions, fast, on fakeredis with frozen time (freezegun).

The real-server tests (tests/integration/test_job_protocol.py) prove the Redis
behaviour; these pin the state machine and lease expiry without waiting for it.
"""

from __future__ import annotations

import fakeredis
import pytest
from freezegun import freeze_time
from helpers import who

from lockworker.model.keys import JobKeys
from lockworker.model.state import Grant, JobStatus, Settle, Snapshot
from lockworker.protocol import LockProtocol, ScriptProtocol
from lockworker.protocol.txn import TxnProtocol

KEYS = JobKeys.of("unit", "job")


@pytest.fixture(params=["script", "txn"])
def protocol(request: pytest.FixtureRequest) -> LockProtocol:
    client = fakeredis.FakeRedis(decode_responses=True)
    return ScriptProtocol(client) if request.param == "script" else TxnProtocol(client)


def test_lease_expiry_counts_the_attempt_and_death_on_the_last_one_gives_up(
    protocol: LockProtocol,
) -> None:
    with freeze_time("2026-11-22 12:00:00") as frozen:
        first = protocol.acquire(KEYS, who("a"), 1000, 2, 60_000)
        assert isinstance(first, Grant) and first.attempt == 1
        frozen.tick(0.5)
        locked = protocol.acquire(KEYS, who("b"), 1000, 2, 60_000)
        assert isinstance(locked, Snapshot) and locked.holder == "a"
        frozen.tick(0.6)  # a's lease is over: it died
        second = protocol.acquire(KEYS, who("b"), 1000, 2, 60_000)
        assert isinstance(second, Grant) and (second.attempt, second.token) == (2, first.token + 1)
        frozen.tick(1.1)  # b died on the last attempt
        gave_up = protocol.acquire(KEYS, who("c"), 1000, 2, 60_000)
        assert isinstance(gave_up, Snapshot) and gave_up.status is JobStatus.GAVE_UP


def test_done_expires_after_retention(protocol: LockProtocol) -> None:
    with freeze_time("2026-11-22 12:00:00") as frozen:
        g = protocol.acquire(KEYS, who("a"), 1000, 3, 10_000)
        assert isinstance(g, Grant)
        assert protocol.complete(KEYS, who("a").value(g.token, g.attempt), 10_000) is Settle.DONE
        frozen.tick(9)
        assert protocol.inspect(KEYS).status is JobStatus.DONE
        frozen.tick(2)
        assert protocol.inspect(KEYS) == Snapshot(JobStatus.PENDING, 0, 0, "")
