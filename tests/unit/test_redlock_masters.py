"""Redlock's fan-out to its masters: bounded waits, failures named, stuck calls contained.

The masters here are plain functions of the master's index, so a "black hole" is a
call blocked on an event the test controls; no server is needed.
"""

from __future__ import annotations

import subprocess
import sys
import threading
from collections.abc import Iterator

import fakeredis
import pytest
import redis

from lockworker import QuorumNotReached, RedisUnavailable
from lockworker.primitives.masters import Masters

BUDGET = 5.0
"""Generous: a decided step returns long before it; only an undecided one waits it out."""


def clients(n: int) -> list[redis.Redis]:
    return [fakeredis.FakeRedis(server=fakeredis.FakeServer()) for _ in range(n)]


@pytest.fixture
def hole() -> Iterator[threading.Event]:
    """Set it to let the blocked calls return (done at the end of every test)."""
    opened = threading.Event()
    yield opened
    opened.set()


def test_a_silent_master_fails_the_step_without_holding_up_the_majority(
    hole: threading.Event,
) -> None:
    masters = Masters(clients(3), quorum=2)
    asked: list[int] = []

    def fn(i: int) -> str:
        asked.append(i)
        if i == 2:
            hole.wait()
        return f"yes {i}"

    first = masters.call(fn, BUDGET)
    assert first.replies == ["yes 0", "yes 1", None]
    assert list(first.failures) == [2]
    assert first.failures[2].startswith("no reply within")

    # The stuck call still runs: the master is not sent another one meanwhile.
    second = masters.call(fn, BUDGET)
    assert second.failures[2].startswith("no reply yet to 1 earlier request")
    assert sorted(asked) == [0, 0, 1, 1, 2]
    assert masters.named(second.failures) == {masters.names[2]: second.failures[2]}

    hole.set()  # the call returns; the master is asked again from then on
    for _ in range(1000):
        third = masters.call(fn, BUDGET)
        if not third.failures:
            break
        hole.wait(0.01)  # pacing of the retries, not a timed assertion
    assert third.replies == ["yes 0", "yes 1", "yes 2"]


def test_connection_errors_are_failures_and_other_errors_are_raised() -> None:
    masters = Masters(clients(3), quorum=2)

    def refused(i: int) -> int:
        if i == 0:
            raise redis.ConnectionError("Connection refused")
        return i

    outcome = masters.call(refused, BUDGET)
    assert outcome.replies == [None, 1, 2]
    assert outcome.failures == {0: "ConnectionError: Connection refused"}

    def broken(i: int) -> int:
        if i == 1:
            raise ValueError("a bug, not an outage")
        return i

    with pytest.raises(ValueError, match="a bug"):
        masters.call(broken, BUDGET)


def test_an_undecided_step_waits_out_its_budget_then_names_the_silent(
    hole: threading.Event,
) -> None:
    masters = Masters(clients(3), quorum=2)

    def fn(i: int) -> int:
        if i:
            hole.wait()
        return i

    outcome = masters.call(fn, 0.2)
    assert outcome.replies == [0, None, None]
    assert sorted(outcome.failures) == [1, 2]
    error = masters.no_quorum("redlock 'x'", outcome.failures)
    assert isinstance(error, QuorumNotReached) and isinstance(error, RedisUnavailable)
    assert "only 1 of 3 masters reachable, 2 needed" in str(error)
    assert masters.names[1] in str(error) and masters.names[2] in str(error)


def test_only_the_masters_asked_are_called_and_no_budget_asks_none() -> None:
    masters = Masters(clients(3), quorum=2)
    asked: list[int] = []
    outcome = masters.call(lambda i: asked.append(i) or i, BUDGET, only={0, 2})
    assert sorted(asked) == [0, 2] and outcome.replies == [0, None, 2]
    assert not outcome.failures
    late = masters.call(asked.append, 0.0)
    assert sorted(late.failures) == [0, 1, 2] and sorted(asked) == [0, 2]


def test_masters_are_named_by_address_and_told_apart_when_repeated() -> None:
    a = redis.Redis(host="10.0.0.1", port=7000)
    b = redis.Redis(host="10.0.0.2", port=7000, db=3)
    assert Masters([a, b], quorum=2).names == ["10.0.0.1:7000", "10.0.0.2:7000/3"]
    assert Masters([a, a], quorum=2).names == [
        "clients[0]=10.0.0.1:7000", "clients[1]=10.0.0.1:7000"
    ]


def test_a_call_that_never_returns_does_not_keep_the_process_alive() -> None:
    program = (
        "import threading, fakeredis\n"
        "from lockworker.primitives.masters import Masters\n"
        "never = threading.Event()\n"
        "m = Masters([fakeredis.FakeRedis(server=fakeredis.FakeServer())], quorum=1)\n"
        "print(m.call(lambda i: never.wait(), 0.05).failures)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", program], capture_output=True, text=True, timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "no reply within" in done.stdout
