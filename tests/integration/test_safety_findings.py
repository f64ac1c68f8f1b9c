"""Each safety finding, reproduced on the real server: restarts with a stable owner,
key collisions, products sharing keys, loose decoding, token size, reused tokens,
state lost by the server, and unbounded WATCH retries.

Each test fails on a protocol that trusts an owner label, maps names to keys
ambiguously, parses values loosely or counts tokens from 1.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pytest
import redis
from helpers import in_thread, wait_for

import lockworker
from lockworker.daemons.leader import leader_keys
from lockworker.errors import Contended, ForeignValueError, JobNotFound, RedisUnavailable
from lockworker.model.codec import Holder, decode_state, new_run
from lockworker.model.keys import JobKeys, Space
from lockworker.model.state import Grant, Outcome, Renewal, Snapshot
from lockworker.protocol import LockProtocol, ScriptProtocol
from lockworker.protocol.txn import TxnProtocol
from lockworker.runtime import retry
from lockworker.runtime.retry import RetryPolicy
from lockworker.testing import FakeClock, capture_events

Make = Callable[..., lockworker.Worker]
RETENTION_MS = 60_000


def plant_lease(protocol: LockProtocol, keys: JobKeys, owner: str, lease_ms: int) -> Grant:
    """A lease written by a run of ``owner`` that has since died (a SIGKILLed daemon)."""
    grant = protocol.acquire(keys, Holder(owner, new_run()), lease_ms, 3, RETENTION_MS)
    assert isinstance(grant, Grant)
    return grant


@pytest.fixture(params=["script", "txn"])
def proto_name(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def test_a_restarted_worker_with_the_same_owner_waits_out_its_predecessors_lease(
    make: Make, redis_client: redis.Redis, namespace: str, proto_name: str
) -> None:
    keys = JobKeys.of(namespace, "job")
    protocol = ScriptProtocol(redis_client) if proto_name == "script" else TxnProtocol(redis_client)
    dead = plant_lease(protocol, keys, "host-a", lease_ms=600)
    ran: list[tuple[int, int, int | None]] = []

    def hook(job: lockworker.Job) -> None:
        ttl = redis_client.pttl(keys.lock)
        ran.append((job.attempt, job.token, ttl))

    restarted = make(hook, owner="host-a", lock_timeout=2.0, protocol=proto_name)
    assert restarted.process("job") is Outcome.DONE
    assert len(ran) == 1
    attempt, token, _ttl = ran[0]
    assert (attempt, token) == (dead.attempt + 1, dead.token + 1)


def test_the_same_run_still_re_enters_after_a_lost_reply(
    redis_client: redis.Redis, namespace: str
) -> None:
    keys = JobKeys.of(namespace, "job")
    protocol = ScriptProtocol(redis_client)
    who = Holder("host-a", new_run())
    first = protocol.acquire(keys, who, 5000, 3, RETENTION_MS)
    again = protocol.acquire(keys, who, 5000, 3, RETENTION_MS)
    assert isinstance(first, Grant) and isinstance(again, Grant)
    assert again.reentered and (again.token, again.attempt) == (first.token, first.attempt)
    other_run = protocol.acquire(keys, Holder("host-a", new_run()), 5000, 3, RETENTION_MS)
    assert isinstance(other_run, Snapshot) and other_run.holder == "host-a"


def test_a_restarted_owner_reports_its_predecessors_completion_as_done_elsewhere(
    make: Make, redis_client: redis.Redis, namespace: str
) -> None:
    keys = JobKeys.of(namespace, "job")
    protocol = ScriptProtocol(redis_client)
    who = Holder("host-a", new_run())
    grant = protocol.acquire(keys, who, 5000, 3, RETENTION_MS)
    assert isinstance(grant, Grant)
    protocol.complete(keys, who.value(grant.token, grant.attempt), RETENTION_MS)
    ran: list[int] = []
    restarted = make(lambda job: ran.append(job.token), owner="host-a")
    assert restarted.process("job") is Outcome.DONE_ELSEWHERE
    assert ran == []


def test_a_restarted_leader_with_the_same_owner_gets_a_new_term(
    redis_client: redis.Redis
) -> None:
    keys = leader_keys("sched-restart")
    dead = plant_lease(ScriptProtocol(redis_client), keys, "host-a", lease_ms=600)
    terms: list[int] = []

    def lead(term: lockworker.Term) -> None:
        terms.append(term.token)
        leader.stop()

    leader = lockworker.Leader(
        redis_client, name="sched-restart", owner="host-a", lock_timeout=2.0,
        handle_signals=False, on_acquired=lead,
    )
    thread, box = in_thread(leader.run)
    thread.join(10)
    assert not thread.is_alive() and "error" not in box
    assert terms == [dead.token + 1]


def test_names_that_spell_the_same_text_do_not_collide(
    make: Make, redis_client: redis.Redis, namespace: str
) -> None:
    first = lockworker.Worker(
        redis_client, namespace=f"{namespace}:{{x", on_acquired=lambda job: None,
        handle_signals=False,
    )
    second = lockworker.Worker(
        redis_client, namespace=namespace, on_acquired=lambda job: None, handle_signals=False
    )
    try:
        assert first.process("y") is Outcome.DONE
        assert second.process("x:{y") is Outcome.DONE
    finally:
        first.close()
        second.close()


@pytest.mark.parametrize("shared", ["locks", "once", "leaders", "semaphores"])
def test_a_worker_namespace_never_reaches_another_products_keys(
    redis_client: redis.Redis, shared: str
) -> None:
    worker = lockworker.Worker(
        redis_client, namespace=shared, on_acquired=lambda job: None, handle_signals=False
    )
    try:
        assert worker.process("report") is Outcome.DONE
    finally:
        worker.close()
    lock = lockworker.Lock(redis_client, "report")
    assert lock.acquire(timeout=2)
    lock.release()
    assert lockworker.compute_once(redis_client, "report", lambda: 42, ttl=5) == 42


@pytest.mark.parametrize(
    "value",
    ["lw2|bogus|1|1|ab|x", "lw1|bogus|1|1|x", "lw2|pending|01|1|ab|x", "lw2|done|1|1e+15|ab|x"],
)
def test_a_corrupt_state_is_foreign_on_both_protocols_naming_the_key(
    make: Make, redis_client: redis.Redis, namespace: str, proto_name: str, value: str
) -> None:
    keys = JobKeys.of(namespace, "job")
    redis_client.set(keys.state, value)
    worker = make(lambda job: None, protocol=proto_name)
    with pytest.raises(ForeignValueError) as caught:
        worker.process("job")
    assert caught.value.key == keys.state
    with pytest.raises(ForeignValueError):
        worker.reset("job")
    assert redis_client.get(keys.state) == value  # left alone unless forced
    assert worker.reset("job", force=True)
    assert worker.process("job") is Outcome.DONE


def test_serve_skips_a_corrupt_job_visibly_and_serves_the_others(
    make: Make, redis_client: redis.Redis, namespace: str
) -> None:
    redis_client.set(JobKeys.of(namespace, "bad").state, "lw2|bogus|1|1|ab|x")
    ran: list[str] = []
    worker = make(lambda job: ran.append(job.id))
    with capture_events() as events:
        worker.serve([("a", None), ("bad", None), ("b", None)], concurrency=1)
    assert ran == ["a", "b"]
    skipped = [e for e in events if e["event"] == "serve.job_error"]
    assert [(e["job_id"], e["skipped"]) for e in skipped] == [("bad", True)]


def test_tokens_past_two_to_the_fifty_three_stay_exact(
    make: Make, redis_client: redis.Redis, namespace: str, proto_name: str
) -> None:
    keys = JobKeys.of(namespace, "job")
    big = 10**15
    redis_client.set(keys.state, f"lw2|pending|0|{big}||")
    tokens: list[int] = []
    worker = make(lambda job: tokens.append(job.token), protocol=proto_name)
    assert worker.process("job") is Outcome.DONE
    assert tokens == [big + 1]
    state = decode_state(redis_client.get(keys.state))
    assert state is not None and state.token == big + 1


def test_tokens_do_not_restart_after_the_done_window(
    make: Make, redis_client: redis.Redis, namespace: str, proto_name: str
) -> None:
    keys = JobKeys.of(namespace, "job")
    tokens: list[int] = []
    worker = make(
        lambda job: tokens.append(job.token), protocol=proto_name, lock_timeout=0.3,
        done_retention=0.5,
    )
    assert worker.process("job") is Outcome.DONE
    wait_for(lambda: not redis_client.exists(keys.state), timeout=5)
    assert worker.process("job") is Outcome.DONE
    assert len(tokens) == 2 and tokens[1] > tokens[0]


def test_a_holder_learns_that_the_server_lost_its_state(
    make: Make, redis_client: redis.Redis, namespace: str, proto_name: str
) -> None:
    keys = JobKeys.of(namespace, "job")
    tokens: list[int] = []
    flushed = threading.Event()

    def hook(job: lockworker.Job) -> None:
        tokens.append(job.token)
        if len(tokens) == 1:
            redis_client.flushdb()  # a restart without persistence, as the holder sees it
            flushed.set()
            wait_for(lambda: job.lost, timeout=5)
            raise RuntimeError("lost the lease")

    worker = make(hook, protocol=proto_name, lock_timeout=0.6, max_attempts=3)
    with capture_events() as events:
        assert worker.process("job") is Outcome.DONE
    assert flushed.is_set()
    names = [e["event"] for e in events]
    assert "server.state_lost" in names
    assert len(tokens) == 2 and tokens[1] > tokens[0]
    assert redis_client.exists(keys.state)


@pytest.mark.parametrize("last", [False, True], ids=["attempt-left", "last-attempt"])
def test_a_failure_reported_after_the_lease_ran_out_is_lost_not_failed(
    make: Make, redis_client: redis.Redis, namespace: str, proto_name: str, last: bool
) -> None:
    """The hook raises after its lease ran out on the server (deleted here, as expiry
    does, while the heartbeat is far from its next renewal). Nobody took the attempt
    over, so the state reads exactly as the failure would write it (or, for the last
    attempt, another process gave the job up in the holder's name). The worker is told
    it is stale: it logs the lease lost and calls on_lost, never a released failure."""
    keys = JobKeys.of(namespace, "job")
    attempts: list[int] = []
    lost: list[int] = []
    protocol = ScriptProtocol(redis_client) if proto_name == "script" else TxnProtocol(redis_client)

    def hook(job: lockworker.Job) -> None:
        attempts.append(job.attempt)
        if len(attempts) == 1:
            redis_client.delete(keys.lock)  # the lease ran out: a pause, a lost renewal
            if last:  # another process finds the dead last attempt and gives up
                seen = protocol.acquire(keys, Holder("other", new_run()), 1000, 1, RETENTION_MS)
                assert isinstance(seen, Snapshot) and seen.status.value == "gave_up"
            raise RuntimeError("failed after its lease ran out")

    worker = make(hook, protocol=proto_name, lock_timeout=30.0, max_attempts=1 if last else 3,
                  retry_delay=0.01, on_lost=lambda job: lost.append(job.attempt))
    with capture_events() as events:
        outcome = worker.process("job")
    assert outcome is (Outcome.GAVE_UP if last else Outcome.DONE)
    assert attempts == ([1] if last else [1, 2])
    assert lost == [1]
    mine = [(e["event"], e.get("reason")) for e in events if e.get("attempt") == 1]
    assert [reason for event, reason in mine if event == "lease.lost"] == [
        "the server refused the step ending the lease: lost on the server"
    ]
    assert ("job.released", "failed") not in mine


def test_reset_of_an_unknown_job_writes_nothing(
    make: Make, redis_client: redis.Redis, namespace: str, proto_name: str
) -> None:
    worker = make(lambda job: None, protocol=proto_name)
    with pytest.raises(JobNotFound, match="nosuchjob"):
        worker.reset("nosuchjob")
    assert not redis_client.exists(JobKeys.of(namespace, "nosuchjob").state)


def test_watch_races_are_bounded_and_retried_only_until_the_deadline(
    redis_client: redis.Redis, namespace: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    keys = JobKeys.of(namespace, "job")
    protocol = TxnProtocol(redis_client)
    who = Holder("a", new_run())
    grant = protocol.acquire(keys, who, 5000, 3, RETENTION_MS)
    assert isinstance(grant, Grant)

    def always_raced(self: Any, *args: Any, **kwargs: Any) -> Any:
        raise redis.WatchError("another client wrote a watched key")

    monkeypatch.setattr(redis.client.Pipeline, "execute", always_raced)
    held = who.value(grant.token, grant.attempt)
    with pytest.raises(Contended, match="WATCH"):
        protocol.renew(keys, held, 5000, RETENTION_MS)
    clock = FakeClock()
    deadline = clock.monotonic() + 0.5
    with pytest.raises(RedisUnavailable):
        retry.call(
            lambda: protocol.renew(keys, held, 5000, RETENTION_MS), clock=clock,
            policy=RetryPolicy(budget=10.0), what="renew lease", deadline=deadline,
        )
    assert clock.monotonic() <= deadline + RetryPolicy().maximum + RetryPolicy().initial


def test_renewal_reports_state_lost_from_both_protocols(
    redis_client: redis.Redis, namespace: str, proto_name: str
) -> None:
    keys = JobKeys.of(namespace, "job", Space.JOB)
    protocol = ScriptProtocol(redis_client) if proto_name == "script" else TxnProtocol(redis_client)
    who = Holder("a", new_run())
    grant = protocol.acquire(keys, who, 5000, 3, RETENTION_MS)
    assert isinstance(grant, Grant)
    redis_client.delete(keys.lock, keys.state)
    assert protocol.renew(keys, who.value(grant.token, grant.attempt), 5000, RETENTION_MS) is (
        Renewal.STATE_LOST
    )
