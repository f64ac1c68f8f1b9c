"""The lock protocol's atomic steps on a real server, for both implementations."""

from __future__ import annotations

from typing import Any

import pytest
import redis
from helpers import LEASE, RETENTION, grant, held, wait_for, who
from redis.crc import key_slot

from lockworker.errors import ForeignValueError
from lockworker.model.keys import JobKeys
from lockworker.model.state import Grant, JobStatus, Renewal, Reset, Settle, Snapshot
from lockworker.protocol import LockProtocol, ScriptProtocol


def test_attempts_count_up_and_tokens_grow(protocol: LockProtocol, keys: JobKeys) -> None:
    tokens = []
    for expected_attempt in (1, 2, 3):
        g = grant(protocol, keys, f"owner-{expected_attempt}")
        assert g.attempt == expected_attempt
        tokens.append(g.token)
        assert protocol.fail(keys, held(g, f"owner-{expected_attempt}"), 5, RETENTION) is (
            Settle.RELEASED
        )
    assert tokens == sorted(set(tokens))


def test_a_second_owner_sees_the_holder_and_its_remaining_lease(
    protocol: LockProtocol, keys: JobKeys
) -> None:
    grant(protocol, keys, "a")
    seen = protocol.acquire(keys, who("b"), LEASE, 3, RETENTION)
    assert isinstance(seen, Snapshot)
    assert seen.holder == "a" and seen.attempt == 1 and seen.status is JobStatus.PENDING
    assert seen.pttl_ms is not None and 0 < seen.pttl_ms <= LEASE


def test_acquire_retried_after_a_lost_reply_is_recognised(
    protocol: LockProtocol, keys: JobKeys
) -> None:
    first = grant(protocol, keys, "a")
    again = grant(protocol, keys, "a")
    assert (again.attempt, again.token, again.reentered) == (first.attempt, first.token, True)


def test_complete_marks_done_once_and_is_idempotent(
    protocol: LockProtocol, keys: JobKeys, redis_client: redis.Redis
) -> None:
    g = grant(protocol, keys, "a")
    assert protocol.complete(keys, held(g, "a"), RETENTION) is Settle.DONE
    assert protocol.complete(keys, held(g, "a"), RETENTION) is Settle.DONE  # lost reply
    seen = protocol.acquire(keys, who("b"), LEASE, 3, RETENTION)
    assert isinstance(seen, Snapshot) and seen.status is JobStatus.DONE and seen.owner == "a"
    # DONE is kept for the retention period, the lease is gone
    assert 0 < redis_client.pttl(keys.state) <= RETENTION
    assert redis_client.exists(keys.lock) == 0


def test_a_stale_holder_cannot_complete_fail_release_or_renew(
    protocol: LockProtocol, keys: JobKeys
) -> None:
    g1 = grant(protocol, keys, "a", lease_ms=100)
    wait_for(lambda: not protocol.client.exists(keys.lock), timeout=5)  # type: ignore[attr-defined]
    g2 = grant(protocol, keys, "b")
    stale = held(g1, "a")
    assert protocol.renew(keys, stale, LEASE, RETENTION) is Renewal.NOT_HOLDER
    assert protocol.complete(keys, stale, RETENTION) is Settle.NOT_HOLDER
    assert protocol.fail(keys, stale, 3, RETENTION) is Settle.NOT_HOLDER
    assert protocol.release(keys, stale, RETENTION) is Settle.NOT_HOLDER
    assert protocol.renew(keys, held(g2, "b"), LEASE, RETENTION) is Renewal.RENEWED


def test_a_failure_reported_twice_is_applied_once_and_recognised(
    protocol: LockProtocol, keys: JobKeys
) -> None:
    """A retry after a lost reply finds its own failure applied, last attempt or not."""
    g = grant(protocol, keys, "a", max_attempts=2)
    assert protocol.fail(keys, held(g, "a"), 2, RETENTION) is Settle.RELEASED
    assert protocol.fail(keys, held(g, "a"), 2, RETENTION) is Settle.RELEASED  # lost reply
    last = grant(protocol, keys, "b", max_attempts=2)
    assert protocol.fail(keys, held(last, "b"), 2, RETENTION) is Settle.GAVE_UP
    assert protocol.fail(keys, held(last, "b"), 2, RETENTION) is Settle.GAVE_UP
    seen = protocol.inspect(keys)
    assert (seen.status, seen.attempt, seen.owner) == (JobStatus.GAVE_UP, 2, "b")


def expire(protocol: LockProtocol, keys: JobKeys) -> None:
    wait_for(lambda: not protocol.client.exists(keys.lock), timeout=5)  # type: ignore[attr-defined]


def test_a_stale_failure_report_is_refused_when_the_state_reads_as_it_would_write(
    protocol: LockProtocol, keys: JobKeys, redis_client: redis.Redis
) -> None:
    """The lease ran out and nobody took the job since: the state still reads as the
    grant wrote it, the very value a failure of that attempt would write. The late
    report is a stale holder's, refused, and leaves the job as it was."""
    g = grant(protocol, keys, "a", lease_ms=100)
    expire(protocol, keys)
    before = redis_client.get(keys.state)
    assert protocol.fail(keys, held(g, "a"), 3, RETENTION) is Settle.NOT_HOLDER
    assert redis_client.get(keys.state) == before
    again = grant(protocol, keys, "b")
    assert (again.attempt, again.token) == (2, g.token + 1)


def test_a_stale_failure_of_the_last_attempt_is_refused_after_another_gave_up(
    protocol: LockProtocol, keys: JobKeys
) -> None:
    """The last attempt's lease ran out; another process's acquire gave the job up in
    the dead holder's name, writing what that holder's failure would write. The holder
    reporting its failure late is told it is stale, not that it gave up."""
    g = grant(protocol, keys, "a", max_attempts=1, lease_ms=100)
    expire(protocol, keys)
    seen = protocol.acquire(keys, who("b"), LEASE, 1, RETENTION)
    assert isinstance(seen, Snapshot) and seen.status is JobStatus.GAVE_UP
    assert protocol.fail(keys, held(g, "a"), 1, RETENTION) is Settle.NOT_HOLDER
    assert protocol.inspect(keys).status is JobStatus.GAVE_UP


def test_an_expired_lease_counts_as_an_attempt_not_as_completion(
    protocol: LockProtocol, keys: JobKeys
) -> None:
    grant(protocol, keys, "a", lease_ms=100)
    wait_for(lambda: isinstance(protocol.acquire(keys, who("b"), LEASE, 3, RETENTION), Grant),
             timeout=5)
    seen = protocol.inspect(keys)
    assert seen.status is JobStatus.PENDING and seen.attempt == 2 and seen.holder == "b"


def test_failing_the_last_attempt_gives_up(protocol: LockProtocol, keys: JobKeys) -> None:
    g = grant(protocol, keys, "a", max_attempts=1)
    assert protocol.fail(keys, held(g, "a"), 1, RETENTION) is Settle.GAVE_UP
    seen = protocol.acquire(keys, who("b"), LEASE, 1, RETENTION)
    assert isinstance(seen, Snapshot) and seen.status is JobStatus.GAVE_UP


def test_a_dead_last_attempt_gives_up_at_the_next_acquire(
    protocol: LockProtocol, keys: JobKeys
) -> None:
    grant(protocol, keys, "a", max_attempts=1, lease_ms=100)
    seen = wait_for(
        lambda: (r := protocol.acquire(keys, who("b"), LEASE, 1, RETENTION)) and isinstance(
            r, Snapshot) and r.status is JobStatus.GAVE_UP and r,
        timeout=5,
    )
    assert seen.attempt == 1


def test_release_refunds_the_attempt_but_not_the_token(
    protocol: LockProtocol, keys: JobKeys
) -> None:
    g = grant(protocol, keys, "a")
    assert protocol.release(keys, held(g, "a"), RETENTION) is Settle.RELEASED
    again = grant(protocol, keys, "b")
    assert again.attempt == g.attempt and again.token > g.token


def test_reset_keeps_tokens_growing_and_refuses_a_held_job(
    protocol: LockProtocol, keys: JobKeys
) -> None:
    g = grant(protocol, keys, "a", max_attempts=1)
    assert protocol.reset(keys, RETENTION) is Reset.HELD
    protocol.fail(keys, held(g, "a"), 1, RETENTION)
    assert protocol.reset(keys, RETENTION) is Reset.RESET
    after = grant(protocol, keys, "b", max_attempts=1)
    assert after.attempt == 1 and after.token > g.token


@pytest.mark.parametrize("which", ["lock", "state"])
def test_foreign_values_raise_and_are_never_overwritten(
    protocol: LockProtocol, keys: JobKeys, redis_client: redis.Redis, which: str
) -> None:
    key = keys.lock if which == "lock" else keys.state
    redis_client.set(key, "somebody else's value")
    with pytest.raises(ForeignValueError) as info:
        protocol.acquire(keys, who("a"), LEASE, 3, RETENTION)
    assert key in str(info.value)
    assert redis_client.get(key) == "somebody else's value"


def test_a_key_of_another_type_is_foreign(
    protocol: LockProtocol, keys: JobKeys, redis_client: redis.Redis
) -> None:
    redis_client.rpush(keys.state, "x")
    with pytest.raises(ForeignValueError):
        protocol.acquire(keys, who("a"), LEASE, 3, RETENTION)
    assert redis_client.lrange(keys.state, 0, -1) == ["x"]


def test_all_keys_of_a_job_share_one_cluster_slot() -> None:
    for job_id in ("job", "a}b", "{x}", "2026-11-22"):
        k = JobKeys.of("name{space", job_id)
        assert len({key_slot(k.lock.encode()), key_slot(k.state.encode()),
                    key_slot(k.wake.encode())}) == 1


def commands(client: redis.Redis) -> int:
    stats = client.info("commandstats")
    return sum(int(v["calls"]) for v in stats.values())


def test_the_uncontended_job_cycle_is_two_round_trips_with_scripts(
    redis_client: redis.Redis, keys: JobKeys
) -> None:
    """Counts the commands the client writes (an EVALSHA is one round trip). The
    warm-up runs the whole cycle, so that both of its scripts are in the server's
    cache whatever ran before (a script's first call also sends it: EVALSHA, then EVAL)."""
    protocol = ScriptProtocol(redis_client)
    warm = JobKeys.of(keys.namespace, "warm-up")
    assert protocol.complete(warm, held(grant(protocol, warm, "a"), "a"), RETENTION) is (
        Settle.DONE
    )
    sent: list[bytes] = []
    pool = redis_client.connection_pool
    try:
        conn = pool.get_connection()
    except TypeError:  # redis-py before 5.3 asks for a command's name (unused)
        conn = pool.get_connection("EVALSHA")
    original = conn.send_packed_command

    def counting(command: Any, *args: object, **kwargs: object) -> None:
        packed = command if isinstance(command, bytes) else b"".join(command)
        sent.append(packed.split(b"\r\n")[2])  # *<n>, $<len>, then the command's name
        original(command, *args, **kwargs)

    conn.send_packed_command = counting  # type: ignore[method-assign]
    pool.release(conn)
    try:
        g = grant(protocol, keys, "a")
        assert protocol.complete(keys, held(g, "a"), RETENTION) is Settle.DONE
    finally:
        conn.send_packed_command = original  # type: ignore[method-assign]
    assert sent == [b"EVALSHA", b"EVALSHA"]
