"""A failed attempt's due time, recorded by the fail step, on a real server, for both
implementations: the job is refused to everybody until it is due, a look says when,
a retried fail finds itself applied, and a GiveUp ends the job at once."""

from __future__ import annotations

import redis
from helpers import LEASE, RETENTION, grant, held, wait_for, who

from lockworker.model.codec import decode_state
from lockworker.model.keys import JobKeys
from lockworker.model.state import Grant, JobStatus, Settle, Snapshot
from lockworker.protocol import LockProtocol

DELAY_MS = 600


def _server_ms(client: redis.Redis) -> int:
    seconds, micros = client.time()
    return int(seconds) * 1000 + int(micros) // 1000


def test_a_failure_with_a_delay_records_its_due_time_and_nobody_gets_it_before(
    protocol: LockProtocol, keys: JobKeys, redis_client: redis.Redis
) -> None:
    g = grant(protocol, keys, "a")
    before = _server_ms(redis_client)
    assert protocol.fail(keys, held(g, "a"), 5, RETENTION, delay_ms=DELAY_MS) is Settle.RELEASED
    after = _server_ms(redis_client)
    state = decode_state(redis_client.get(keys.state))
    assert state is not None and state.due_ms is not None and state.run == ""
    assert before + DELAY_MS <= state.due_ms <= after + DELAY_MS
    for owner in ("a", "b"):  # the one that failed and any other alike
        seen = protocol.acquire(keys, who(owner), LEASE, 5, RETENTION)
        assert isinstance(seen, Snapshot) and seen.status is JobStatus.PENDING
        assert seen.holder is None and seen.due_ms is not None
        assert 0 < seen.due_ms <= DELAY_MS
    looked = protocol.inspect(keys)
    assert looked.due_ms is not None and 0 < looked.due_ms <= DELAY_MS
    # Once due, the next attempt is granted to whoever asks first.
    def granted() -> Grant | None:
        answer = protocol.acquire(keys, who("b"), LEASE, 5, RETENTION)
        return answer if isinstance(answer, Grant) else None

    taken = wait_for(granted, timeout=10)
    assert _server_ms(redis_client) >= state.due_ms
    assert (taken.attempt, taken.token) == (2, g.token + 1)
    assert protocol.inspect(keys).due_ms is None


def test_a_retried_fail_finds_its_due_time_written_and_a_stale_one_is_refused(
    protocol: LockProtocol, keys: JobKeys, redis_client: redis.Redis
) -> None:
    g = grant(protocol, keys, "a")
    assert protocol.fail(keys, held(g, "a"), 5, RETENTION, delay_ms=DELAY_MS) is Settle.RELEASED
    written = redis_client.get(keys.state)
    # The reply was lost: the retry is told it applied, and writes nothing new.
    assert protocol.fail(keys, held(g, "a"), 5, RETENTION, delay_ms=DELAY_MS) is Settle.RELEASED
    assert redis_client.get(keys.state) == written
    # Another holder's attempt is another value: refused.
    assert protocol.fail(keys, held(g, "b"), 5, RETENTION, delay_ms=DELAY_MS) is (
        Settle.NOT_HOLDER
    )


def test_a_failure_without_a_delay_is_due_at_once_and_writes_what_0_2_0_wrote(
    protocol: LockProtocol, keys: JobKeys, redis_client: redis.Redis
) -> None:
    g = grant(protocol, keys, "a")
    assert protocol.fail(keys, held(g, "a"), 5, RETENTION) is Settle.RELEASED
    assert redis_client.get(keys.state) == f"lw2|pending|1|{g.token}||a"
    assert isinstance(protocol.acquire(keys, who("b"), LEASE, 5, RETENTION), Grant)


def test_give_up_ends_the_job_at_once_whatever_attempts_are_left(
    protocol: LockProtocol, keys: JobKeys
) -> None:
    g = grant(protocol, keys, "a", max_attempts=5)
    assert protocol.fail(keys, held(g, "a"), 5, RETENTION, delay_ms=DELAY_MS, give_up=True) is (
        Settle.GAVE_UP
    )
    seen = protocol.acquire(keys, who("b"), LEASE, 5, RETENTION)
    assert isinstance(seen, Snapshot) and seen.status is JobStatus.GAVE_UP and seen.attempt == 1
    assert seen.due_ms is None


def test_the_last_attempt_gives_up_even_with_a_delay(
    protocol: LockProtocol, keys: JobKeys
) -> None:
    g = grant(protocol, keys, "a", max_attempts=1)
    assert protocol.fail(keys, held(g, "a"), 1, RETENTION, delay_ms=DELAY_MS) is Settle.GAVE_UP
