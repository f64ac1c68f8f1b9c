"""The attempt history, step by step, on both protocols (the ``protocol`` fixture runs
each test on ScriptProtocol and TxnProtocol): one record per grant, closed by the
settle that applies, as lost by the next grant, never written by a stale holder,
bounded, kept for the state's retention, and never written into another's key."""

from __future__ import annotations

from dataclasses import replace

import pytest
import redis
from helpers import RETENTION, grant, held, wait_for, who

from lockworker.errors import ForeignValueError
from lockworker.model.codec import decode_state
from lockworker.model.history import (
    ERROR_CHARS,
    HISTORY_CAP,
    AttemptRecord,
    ErrorText,
    RawRecord,
    error_text,
    record_tail,
)
from lockworker.model.keys import JobKeys
from lockworker.model.state import Grant, JobStatus, Reset, Settle, Snapshot
from lockworker.protocol import LockProtocol, ScriptProtocol
from lockworker.protocol.txn import TxnProtocol

Shape = tuple[int, str, str | None, str | None, str | None]
"""A record as the tests compare it: attempt, owner, ending, error type, error."""


def history(protocol: LockProtocol, keys: JobKeys) -> tuple[AttemptRecord, ...]:
    return protocol.inspect(keys, history=True).history


def shape(records: tuple[AttemptRecord, ...]) -> list[Shape]:
    return [(r.attempt, r.owner, r.ending, r.error_type, r.error) for r in records]


def expire_lease(client: redis.Redis, keys: JobKeys) -> None:
    """End the lease now, as if its holder had died (the server's expiry, not a DEL
    from lockworker: PEXPIRE to 1 ms, then wait until it is gone)."""
    client.pexpire(keys.lock, 1)
    wait_for(lambda: client.exists(keys.lock) == 0)


def server_ms(client: redis.Redis) -> int:
    seconds, micros = client.time()
    return int(seconds) * 1000 + int(micros) // 1000


def boom() -> ErrorText:
    try:
        raise ValueError("invoice total is negative")
    except ValueError as exc:
        return error_text(exc)


def test_each_attempt_leaves_one_record_that_says_how_it_ended(
    protocol: LockProtocol, keys: JobKeys
) -> None:
    g1 = grant(protocol, keys, "a")
    (running,) = history(protocol, keys)
    assert (running.attempt, running.token, running.owner, running.run) == (
        1, g1.token, "a", who("a").run
    )
    assert (running.ending, running.ended_ms) == (None, None)
    assert protocol.fail(keys, held(g1, "a"), 3, RETENTION, error=boom()) is Settle.RELEASED
    g2 = grant(protocol, keys, "b")
    assert protocol.complete(keys, held(g2, "b"), RETENTION) is Settle.DONE
    failed, done = history(protocol, keys)
    assert shape((failed, done)) == [
        (1, "a", "failed", "ValueError", "invoice total is negative"),
        (2, "b", "done", None, None),
    ]
    assert failed.traceback is not None and "boom" in failed.traceback
    assert done.token == g2.token and done.run == who("b").run
    assert failed.started_ms <= failed.ended_ms <= done.started_ms <= done.ended_ms


def test_a_last_failure_is_gave_up_and_a_release_is_released_or_stopped(
    protocol: LockProtocol, keys: JobKeys
) -> None:
    g = grant(protocol, keys, "a", max_attempts=2)
    assert protocol.release(keys, held(g, "a"), RETENTION, stopped=True) is Settle.RELEASED
    g = grant(protocol, keys, "a", max_attempts=2)
    assert protocol.release(keys, held(g, "a"), RETENTION) is Settle.RELEASED
    g = grant(protocol, keys, "a", max_attempts=2)
    assert protocol.fail(keys, held(g, "a"), 2, RETENTION) is Settle.RELEASED
    g = grant(protocol, keys, "a", max_attempts=2)
    assert protocol.fail(keys, held(g, "a"), 2, RETENTION, error=boom()) is Settle.GAVE_UP
    assert [(r.attempt, r.ending) for r in history(protocol, keys)] == [
        (1, "stopped"), (1, "released"), (1, "failed"), (2, "gave_up")
    ]


def test_a_lease_that_ran_out_is_lost_and_its_stale_settle_writes_nothing(
    protocol: LockProtocol, keys: JobKeys, redis_client: redis.Redis
) -> None:
    g1 = grant(protocol, keys, "a")
    expire_lease(redis_client, keys)
    (seen,) = history(protocol, keys)  # nobody found it lost yet: lost, end unknown
    assert (seen.ending, seen.ended_ms) == ("lost", None)
    g2 = grant(protocol, keys, "b")
    # The stale holder's settles are refused, and write no record.
    assert protocol.fail(keys, held(g1, "a"), 3, RETENTION, error=boom()) is Settle.NOT_HOLDER
    assert protocol.complete(keys, held(g1, "a"), RETENTION) is Settle.NOT_HOLDER
    assert protocol.release(keys, held(g1, "a"), RETENTION) is Settle.NOT_HOLDER
    lost, running = history(protocol, keys)
    assert shape((lost, running)) == [(1, "a", "lost", None, None), (2, "b", None, None, None)]
    assert lost.ended_ms is not None and lost.started_ms <= lost.ended_ms <= running.started_ms
    assert running.token == g2.token


def test_the_acquire_that_gives_up_after_the_last_lease_ran_out_closes_it_lost(
    protocol: LockProtocol, keys: JobKeys, redis_client: redis.Redis
) -> None:
    grant(protocol, keys, "a", max_attempts=1)
    expire_lease(redis_client, keys)
    seen = protocol.acquire(keys, who("b"), 5000, 1, RETENTION)
    assert isinstance(seen, Snapshot) and seen.status is JobStatus.GAVE_UP
    (lost,) = history(protocol, keys)
    assert (lost.owner, lost.ending) == ("a", "lost") and lost.ended_ms is not None


def test_a_retried_grant_or_settle_adds_no_record(protocol: LockProtocol, keys: JobKeys) -> None:
    g = grant(protocol, keys, "a")
    again = protocol.acquire(keys, who("a"), 5000, 3, RETENTION)
    assert isinstance(again, Grant) and again.reentered
    assert protocol.complete(keys, held(g, "a"), RETENTION) is Settle.DONE
    assert protocol.complete(keys, held(g, "a"), RETENTION) is Settle.DONE  # lost reply
    assert shape(history(protocol, keys)) == [(1, "a", "done", None, None)]


def test_the_history_keeps_the_last_records_only(protocol: LockProtocol, keys: JobKeys) -> None:
    tokens = []
    for _ in range(HISTORY_CAP + 5):
        g = grant(protocol, keys, "a")
        tokens.append(g.token)
        assert protocol.release(keys, held(g, "a"), RETENTION) is Settle.RELEASED
    records = history(protocol, keys)
    assert [r.token for r in records] == tokens[-HISTORY_CAP:]


def test_the_history_is_kept_as_long_as_the_state_and_through_a_reset(
    protocol: LockProtocol, keys: JobKeys, redis_client: redis.Redis
) -> None:
    g = grant(protocol, keys, "a", max_attempts=1)
    assert protocol.fail(keys, held(g, "a"), 1, RETENTION, error=boom()) is Settle.GAVE_UP
    assert RETENTION - 5000 < redis_client.pttl(keys.history) <= RETENTION
    assert protocol.reset(keys, RETENTION, expect="done") is Reset.CHANGED
    redis_client.pexpire(keys.history, 10_000)
    assert protocol.reset(keys, RETENTION, expect="gave_up") is Reset.RESET
    assert RETENTION - 5000 < redis_client.pttl(keys.history) <= RETENTION
    g = grant(protocol, keys, "b")
    assert protocol.complete(keys, held(g, "b"), RETENTION) is Settle.DONE
    assert [(r.attempt, r.ending) for r in history(protocol, keys)] == [
        (1, "gave_up"), (1, "done")
    ]


def test_reset_with_an_expected_state_refuses_a_held_job_as_a_single_reset_does(
    protocol: LockProtocol, keys: JobKeys
) -> None:
    grant(protocol, keys, "a")
    assert protocol.reset(keys, RETENTION, expect="gave_up") is Reset.CHANGED
    assert protocol.reset(keys, RETENTION, expect="held") is Reset.HELD
    assert protocol.reset(keys, RETENTION, expect="held", force=True) is Reset.RESET


def test_an_error_is_kept_bounded(protocol: LockProtocol, keys: JobKeys) -> None:
    g = grant(protocol, keys, "a", max_attempts=1)
    huge = error_text(RuntimeError("x" * 10_000 + "|\n{}\u00e9"))
    assert protocol.fail(keys, held(g, "a"), 1, RETENTION, error=huge) is Settle.GAVE_UP
    (record,) = history(protocol, keys)
    assert record.error_type == "RuntimeError"
    assert record.error is not None and len(record.error) == ERROR_CHARS


def known_job(protocol: LockProtocol, keys: JobKeys) -> None:
    """A job the server knows (a state), free: its first attempt given back."""
    g = grant(protocol, keys, "a")
    assert protocol.release(keys, held(g, "a"), RETENTION) is Settle.RELEASED


@pytest.mark.parametrize("kind", ["hash", "string"])
def test_a_history_key_of_another_type_is_never_written(
    protocol: LockProtocol, keys: JobKeys, redis_client: redis.Redis, kind: str
) -> None:
    def theirs() -> None:
        redis_client.delete(keys.history)
        if kind == "hash":
            redis_client.hset(keys.history, "theirs", "1")
        else:
            redis_client.set(keys.history, "theirs")

    def untouched() -> bool:
        if kind == "hash":
            return redis_client.hgetall(keys.history) == {"theirs": "1"}
        return redis_client.get(keys.history) == "theirs"

    known_job(protocol, keys)
    state = redis_client.get(keys.state)
    theirs()
    with pytest.raises(ForeignValueError):
        protocol.acquire(keys, who("a"), 5000, 3, RETENTION)
    with pytest.raises(ForeignValueError):
        protocol.inspect(keys, history=True)
    assert redis_client.exists(keys.lock) == 0 and redis_client.get(keys.state) == state
    assert untouched()
    # A new job's grant reads no history (its record is implied by its lease and
    # state): its settle finds the foreign value and is refused, and the lease stays
    # (the holder's lease runs out; nothing of theirs is touched).
    new = JobKeys.of(keys.namespace, keys.job_id + "-new")
    keys = new
    theirs()
    g = grant(protocol, keys, "a")
    for settle in (
        lambda: protocol.complete(keys, held(g, "a"), RETENTION),
        lambda: protocol.fail(keys, held(g, "a"), 3, RETENTION),
    ):
        with pytest.raises(ForeignValueError):
            settle()
        assert untouched()
        assert redis_client.get(keys.lock) == held(g, "a").encode()


def test_a_list_that_holds_no_records_is_not_ours(
    protocol: LockProtocol, keys: JobKeys, redis_client: redis.Redis
) -> None:
    known_job(protocol, keys)
    redis_client.delete(keys.history)
    redis_client.rpush(keys.history, "somebody else's entry")
    with pytest.raises(ForeignValueError):
        protocol.acquire(keys, who("a"), 5000, 3, RETENTION)
    assert redis_client.lrange(keys.history, 0, -1) == ["somebody else's entry"]
    new = JobKeys.of(keys.namespace, keys.job_id + "-new")
    redis_client.rpush(new.history, "somebody else's entry")
    g = grant(protocol, new, "a")
    with pytest.raises(ForeignValueError):
        protocol.complete(new, held(g, "a"), RETENTION)
    assert redis_client.lrange(new.history, 0, -1) == ["somebody else's entry"]


def test_both_protocols_write_the_same_history(
    redis_client: redis.Redis, namespace: str
) -> None:
    """The same steps on two jobs, one per protocol: the same records, field by field
    (times aside), and each protocol reads the other's."""
    results = []
    for name, protocol in (
        ("script", ScriptProtocol(redis_client)), ("txn", TxnProtocol(redis_client))
    ):
        keys = JobKeys.of(namespace, f"same-{name}")
        g = grant(protocol, keys, "a", max_attempts=3)
        protocol.fail(keys, held(g, "a"), 3, RETENTION, error=boom())
        g = grant(protocol, keys, "b", max_attempts=3)
        expire_lease(redis_client, keys)
        g = grant(protocol, keys, "c", max_attempts=3)
        protocol.release(keys, held(g, "c"), RETENTION, stopped=True)
        g = grant(protocol, keys, "a", max_attempts=3)
        protocol.complete(keys, held(g, "a"), RETENTION)
        other = TxnProtocol(redis_client) if name == "script" else ScriptProtocol(redis_client)
        assert history(other, keys) == history(protocol, keys)
        results.append([
            (r.attempt, r.owner, r.run, r.ending, r.error_type, r.error, r.ended_ms is None)
            for r in history(protocol, keys)
        ])
    assert results[0] == results[1]
    assert [r[3] for r in results[0]] == ["failed", "lost", "stopped", "done"]


def test_a_clean_first_attempt_is_folded_into_the_done_state(
    protocol: LockProtocol, keys: JobKeys, redis_client: redis.Redis
) -> None:
    """A new job done at its first attempt keeps one key: its state says who ran the
    attempt, its token, when it started (the token's milliseconds) and how long it took;
    the history reads the same record it would have kept."""
    g = grant(protocol, keys, "a")
    (running,) = history(protocol, keys)
    assert running.started_ms == g.token // 1000
    before = server_ms(redis_client)
    assert protocol.complete(keys, held(g, "a"), RETENTION) is Settle.DONE
    after = server_ms(redis_client)
    assert redis_client.exists(keys.history) == 0
    state = decode_state(redis_client.get(keys.state))
    assert state is not None and state.took_ms is not None
    assert (state.status, state.attempt, state.token, state.run, state.owner) == (
        JobStatus.DONE, 1, g.token, who("a").run, "a"
    )
    (done,) = history(protocol, keys)
    assert (done.attempt, done.token, done.owner, done.run, done.ending) == (
        1, g.token, "a", who("a").run, "done"
    )
    assert done.started_ms == running.started_ms and before <= done.ended_ms <= after
    assert (done.error_type, done.error, done.traceback) == (None, None, None)
    assert protocol.inspect(keys) == Snapshot(JobStatus.DONE, 1, g.token, "a", run=who("a").run)


def test_a_history_with_more_to_tell_is_kept_as_a_list(
    protocol: LockProtocol, keys: JobKeys, redis_client: redis.Redis
) -> None:
    g = grant(protocol, keys, "a")
    protocol.fail(keys, held(g, "a"), 3, RETENTION, error=boom())
    g = grant(protocol, keys, "b")
    assert protocol.complete(keys, held(g, "b"), RETENTION) is Settle.DONE
    assert redis_client.llen(keys.history) == 2
    state = decode_state(redis_client.get(keys.state))
    assert state is not None and state.took_ms is None
    assert [r.ending for r in history(protocol, keys)] == ["failed", "done"]


def test_a_reset_writes_a_folded_attempt_back_to_the_history(
    protocol: LockProtocol, keys: JobKeys, redis_client: redis.Redis
) -> None:
    g = grant(protocol, keys, "o\"w\\n\ner\x00/é")
    protocol.complete(keys, held(g, "o\"w\\n\ner\x00/é"), RETENTION)
    (folded,) = history(protocol, keys)
    assert protocol.reset(keys, RETENTION, expect="done") is Reset.RESET
    assert history(protocol, keys) == (folded,)
    assert RETENTION - 5000 < redis_client.pttl(keys.history) <= RETENTION
    g = grant(protocol, keys, "b")
    assert g.token == folded.token + 1
    assert protocol.complete(keys, held(g, "b"), RETENTION) is Settle.DONE
    assert [(r.owner, r.ending) for r in history(protocol, keys)] == [
        ("o\"w\\n\ner\x00/é", "done"), ("b", "done")
    ]


def test_a_retried_completion_finds_its_folded_state_applied(
    protocol: LockProtocol, keys: JobKeys, redis_client: redis.Redis
) -> None:
    g = grant(protocol, keys, "a")
    assert protocol.complete(keys, held(g, "a"), RETENTION) is Settle.DONE
    folded = redis_client.get(keys.state)
    assert protocol.complete(keys, held(g, "a"), RETENTION) is Settle.DONE  # lost reply
    assert protocol.fail(keys, held(g, "a"), 3, RETENTION) is Settle.NOT_HOLDER
    assert redis_client.get(keys.state) == folded and redis_client.exists(keys.history) == 0


def test_a_done_job_of_one_clean_attempt_costs_its_state_key_alone(
    redis_client: redis.Redis, namespace: str
) -> None:
    """The server memory of a DONE job is its state key alone (a few bytes longer than
    without the folded attempt), far less than the state and a one-record history
    list it replaces (the same job written unfolded, beside it)."""
    keys = JobKeys.of(namespace, "a-job")
    protocol = ScriptProtocol(redis_client)
    g = grant(protocol, keys, "worker-1")
    protocol.complete(keys, held(g, "worker-1"), RETENTION)
    (record,) = history(protocol, keys)
    state = decode_state(redis_client.get(keys.state))
    assert state is not None and state.took_ms is not None
    assert redis_client.exists(keys.history, keys.lock) == 0
    unfolded = JobKeys.of(namespace, "b-job")
    redis_client.set(unfolded.state, replace(state, took_ms=None).encode(), px=RETENTION)
    redis_client.rpush(unfolded.history, RawRecord(
        record.attempt, record.token, record.run, record.started_ms, record.ended_ms,
        record.ending, record_tail(record.owner),
    ).encode())
    redis_client.pexpire(unfolded.history, RETENTION)
    # The folded value is the plain one and the duration's 1-12 hex digits.
    value, plain_value = redis_client.get(keys.state), replace(state, took_ms=None).encode()
    assert 1 <= len(value) - len(plain_value) <= 12, (value, plain_value)
    folded = int(redis_client.memory_usage(keys.state) or 0)
    plain = int(redis_client.memory_usage(unfolded.state) or 0)
    listed = int(redis_client.memory_usage(unfolded.history) or 0)
    # In memory, the allocation's rounding and how the server built each string (a
    # script's SET or a client's) move either figure by 16-32 bytes: 144 -> 176 seen for
    # the folded one, and once the plain one 16 bytes above it.
    assert folded <= plain + 32, (folded, plain)
    assert folded < (plain + listed) * 0.6, (folded, plain, listed)


def test_a_new_jobs_first_attempt_is_read_from_its_lease_and_state_until_a_step_writes_it(
    protocol: LockProtocol, keys: JobKeys, redis_client: redis.Redis
) -> None:
    """The grant of a new job writes no record; its history reads the running attempt
    all the same (started at its token's milliseconds), ``lost`` once its lease is gone,
    and the takeover writes it to the list closed ``lost`` before its own."""
    g = grant(protocol, keys, "a")
    assert redis_client.exists(keys.history) == 0
    (running,) = history(protocol, keys)
    assert (running.attempt, running.token, running.owner, running.run) == (
        1, g.token, "a", who("a").run
    )
    assert (running.started_ms, running.ended_ms, running.ending) == (g.token // 1000, None, None)
    expire_lease(redis_client, keys)
    (lost,) = history(protocol, keys)
    assert (lost.token, lost.ended_ms, lost.ending) == (g.token, None, "lost")
    before = server_ms(redis_client)
    taken = grant(protocol, keys, "b")
    records = history(protocol, keys)
    assert [(r.attempt, r.token, r.owner, r.ending) for r in records] == [
        (1, g.token, "a", "lost"), (2, taken.token, "b", None)
    ]
    assert records[0].started_ms == g.token // 1000
    assert records[0].ended_ms is not None and before <= records[0].ended_ms
    assert redis_client.llen(keys.history) == 2


@pytest.mark.parametrize("ending", ["fail", "release"])
def test_the_settle_of_a_new_jobs_first_attempt_writes_its_record_from_its_start(
    protocol: LockProtocol, keys: JobKeys, redis_client: redis.Redis, ending: str
) -> None:
    g = grant(protocol, keys, "a")
    if ending == "fail":
        assert protocol.fail(keys, held(g, "a"), 3, RETENTION, error=boom()) is Settle.RELEASED
    else:
        assert protocol.release(keys, held(g, "a"), RETENTION) is Settle.RELEASED
    (record,) = history(protocol, keys)
    assert (record.token, record.started_ms) == (g.token, g.token // 1000)
    assert record.ending == ("failed" if ending == "fail" else "released")
    assert redis_client.llen(keys.history) == 1


def test_a_forced_reset_of_a_new_jobs_first_attempt_keeps_its_record(
    protocol: LockProtocol, keys: JobKeys, redis_client: redis.Redis
) -> None:
    """Reset to pending, the job no longer says who ran attempt 1: the reset writes the
    record to the list (open: read as lost, as a record a reset left open)."""
    g = grant(protocol, keys, "a")
    assert protocol.reset(keys, RETENTION, force=True) is Reset.RESET
    (record,) = history(protocol, keys)
    assert (record.attempt, record.token, record.owner, record.ending) == (
        1, g.token, "a", "lost"
    )
    assert record.started_ms == g.token // 1000 and redis_client.llen(keys.history) == 1
    again = grant(protocol, keys, "b")
    assert again.token == g.token + 1
    assert [(r.token, r.ending) for r in history(protocol, keys)] == [
        (g.token, "lost"), (again.token, None)
    ]
