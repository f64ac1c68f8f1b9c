"""Leader election in one process (threads): terms, resigning, loss, roles, validation."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
import redis
from helpers import wait_for

import lockworker
from lockworker import InvalidConfig, Leader, Term, Worker
from lockworker.daemons.leader import leader_keys


class Recording(Leader):
    """A leader that records its hooks; leads until told to resign or stop."""

    def __init__(self, client: redis.Redis, **kwargs: Any) -> None:
        kwargs.setdefault("lock_timeout", 1.0)
        super().__init__(client, handle_signals=False, **kwargs)
        self.terms: list[Term] = []
        self.seen: list[Term] = []
        self.lost: list[Term] = []
        self.resign = threading.Event()
        self.waits: list[bool] = []

    def on_acquired(self, term: Term) -> None:
        self.terms.append(term)
        while not self.resign.is_set():
            if term.wait(0.01):
                self.waits.append(True)
                return

    def on_locked(self, term: Term) -> None:
        self.seen.append(term)

    def on_lost(self, term: Term) -> None:
        self.lost.append(term)


def start(leader: Leader) -> threading.Thread:
    thread = threading.Thread(target=leader.run, daemon=True)
    thread.start()
    return thread


def finish(leader: Leader, thread: threading.Thread) -> None:
    leader.stop()
    thread.join(timeout=10)
    assert not thread.is_alive()


def test_leads_then_stop_resigns(redis_client: redis.Redis, namespace: str) -> None:
    leader = Recording(redis_client, name=namespace, owner="solo")
    before = time.time()
    thread = start(leader)
    wait_for(lambda: leader.terms)
    term = leader.terms[0]
    assert (term.holder, term.leading, term.lost) == ("solo", True, False)
    info = wait_for(lambda: Leader.current(redis_client, namespace))
    assert (info.holder, info.token) == ("solo", term.token)
    assert 0 < info.lease_left <= 1.0
    assert info.since is not None and before - 1 <= info.since <= time.time() + 1
    finish(leader, thread)
    assert leader.waits == [True]  # term.wait returned early on stop
    assert Leader.current(redis_client, namespace) is None
    assert leader.lost == []


def test_returning_resigns_and_a_follower_takes_over_with_a_higher_token(
    redis_client: redis.Redis, namespace: str
) -> None:
    # A 10 s lease: a follower woken by the release leads within a round trip, one that
    # waited for the lease to run out would take 10 s; half of it is a bound no busy
    # machine can make a woken follower miss.
    first = Recording(redis_client, name=namespace, owner="first", lock_timeout=10.0)
    t1 = start(first)
    wait_for(lambda: first.terms)
    second = Recording(redis_client, name=namespace, owner="second", lock_timeout=10.0)
    t2 = start(second)
    wait_for(lambda: second.seen)
    assert second.seen[0].holder == "first"
    assert not second.seen[0].leading and not second.seen[0].lost
    resigned_at = time.monotonic()
    first.resign.set()
    wait_for(lambda: second.terms, timeout=8)
    assert time.monotonic() - resigned_at < 5.0
    assert second.terms[0].token > first.terms[0].token
    finish(first, t1)
    finish(second, t2)


def test_a_leader_that_cannot_renew_sees_lost_first(
    redis_client: redis.Redis, namespace: str
) -> None:
    leader = Recording(redis_client, name=namespace, owner="doomed", lock_timeout=0.6)
    thread = start(leader)
    wait_for(lambda: leader.terms)
    term = leader.terms[0]
    # Somebody else's hand takes the lease away: the next renewal is refused.
    redis_client.delete(leader_keys(namespace).lock)
    wait_for(lambda: leader.lost, timeout=5)
    assert term.lost
    # term.wait, in on_acquired's thread, returns early on the loss (on_lost runs in the
    # heartbeat's thread: the hook's thread may wake a moment later).
    wait_for(lambda: leader.waits, timeout=5)
    assert leader.waits[0] is True
    with pytest.raises(lockworker.LockLost):
        term.check()
    # Then it campaigns again and leads a new term.
    wait_for(lambda: len(leader.terms) == 2, timeout=5)
    assert leader.terms[1].token > term.token
    finish(leader, thread)


def test_a_primary_leads_although_a_backup_came_first(
    redis_client: redis.Redis, namespace: str
) -> None:
    backup = Recording(redis_client, name=namespace, owner="backup", role="backup",
                       backup_delay=0.5)
    tb = start(backup)
    primary = Recording(redis_client, name=namespace, owner="primary")
    tp = start(primary)
    wait_for(lambda: primary.terms, timeout=5)
    wait_for(lambda: backup.seen, timeout=5)
    assert backup.terms == []
    # With the primary gone, the backup leads after the lease's end plus its delay.
    finish(primary, tp)
    wait_for(lambda: backup.terms, timeout=5)
    finish(backup, tb)


def test_hooks_as_functions(redis_client: redis.Redis, namespace: str) -> None:
    tokens: list[int] = []

    def lead(term: Term) -> None:
        tokens.append(term.token)
        term.wait(10)

    leader = Leader(redis_client, name=namespace, on_acquired=lead, handle_signals=False)
    thread = start(leader)
    wait_for(lambda: tokens)
    finish(leader, thread)


@pytest.mark.parametrize(
    ("kwargs", "argument"),
    [
        ({"name": ""}, "name"),
        ({"name": "n", "lock_timeout": 0}, "lock_timeout"),
        ({"name": "n", "owner": ""}, "owner"),
        ({"name": "n", "role": "boss"}, "role"),
        ({"name": "n", "backup_delay": -1}, "backup_delay"),
        ({"name": "n", "backup_delay": True}, "backup_delay"),
    ],
)
def test_leader_validates(redis_client: redis.Redis, kwargs: dict[str, Any], argument: str) -> None:
    with pytest.raises(InvalidConfig, match=argument):
        Leader(redis_client, on_acquired=lambda term: None, **kwargs)


def test_leader_needs_on_acquired(redis_client: redis.Redis) -> None:
    with pytest.raises(InvalidConfig, match="on_acquired"):
        Leader(redis_client, name="n")
    with pytest.raises(lockworker.InvalidHook, match="on_locked"):
        Leader(redis_client, name="n", on_acquired=lambda t: None, on_locked=5)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("kwargs", "argument"),
    [
        ({"namespace": "ns", "role": "secondary"}, "role"),
        ({"namespace": "ns", "backup_delay": -0.1}, "backup_delay"),
        ({"namespace": "ns", "backup_delay": "1"}, "backup_delay"),
    ],
)
def test_worker_validates_roles(
    redis_client: redis.Redis, kwargs: dict[str, Any], argument: str
) -> None:
    with pytest.raises(InvalidConfig, match=argument):
        Worker(redis_client, on_acquired=lambda job: None, **kwargs)
