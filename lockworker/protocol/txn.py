"""The lock protocol as WATCH/MULTI/EXEC transactions (the original design).

Same steps, results and guarantees as :class:`lockworker.protocol.ScriptProtocol`, built
from optimistic transactions: WATCH the job's keys, read them, decide, then MULTI/EXEC
the writes; if another client touched a watched key in between, EXEC fails and the step
starts again. Three round trips per step instead of one, so it is not the default; it is
kept for servers or proxies that forbid scripts, and as the reference the benchmarks
compare against (docs/benchmarks.md).
"""

from __future__ import annotations

import contextlib
from dataclasses import replace
from typing import Any

import redis
from redis.client import Pipeline
from redis.exceptions import ClusterDownError, MovedError, RedisClusterException, TryAgainError

from lockworker.errors import Contended, ForeignValueError
from lockworker.model.codec import Holder, LockValue, StateValue, decode_lock, decode_state
from lockworker.model.history import (
    AttemptEnd,
    ErrorText,
    RawRecord,
    folds,
    implied_start,
    parse_record,
    record_tail,
)
from lockworker.model.index import Kind, score
from lockworker.model.keys import JobKeys, Space, escape
from lockworker.model.presence import handover_channel
from lockworker.model.state import Ending, Grant, JobStatus, Renewal, Reset, Settle, Snapshot
from lockworker.protocol.decode import (
    failure_due_ms,
    hands_over,
    server_ms,
    settle_ending,
    settle_plan,
    settle_result,
    snapshot_from,
    text,
    wake_message,
    written_by,
)
from lockworker.protocol.interface import SettleSteps
from lockworker.protocol.txnparts import (
    INDEXED,
    close_lost,
    implied,
    index,
    keep,
    last_record,
    read_strings,
    server_now_us,
    text_or_none,
)

FOLDABLE_TOKEN = 10**18
"""A DONE state's folded attempt goes back to the history on a reset only below this
token (its milliseconds have at most 15 digits, exact as a number in the scripts)."""

MAX_TRIES = 16
"""WATCH races one step may lose before it raises :class:`Contended`; the caller's retry
policy then retries within its deadline (the end of a lease, for a renewal)."""


class TxnProtocol(SettleSteps):
    """The protocol as WATCH/MULTI/EXEC transactions."""

    def __init__(self, client: redis.Redis) -> None:
        self.client = client

    def _server(self, keys: JobKeys) -> redis.Redis:
        """The server that holds the job's keys: the client itself, or for a cluster
        client its client of the node serving the keys' slot (one slot: they share the
        job id's hash tag). A cluster pipeline refuses MGET, TIME and PUBLISH; the
        node's own pipeline runs every step exactly as on a single server."""
        node_of = getattr(self.client, "get_node_from_key", None)
        if node_of is None:
            return self.client
        server: redis.Redis = self.client.get_redis_connection(  # type: ignore[attr-defined]
            node_of(keys.lock)
        )
        return server

    def _reroute(self) -> None:
        """After a failover or a slot move: a cluster client re-reads the slot map."""
        nodes = getattr(self.client, "nodes_manager", None)
        if nodes is not None:
            with contextlib.suppress(redis.RedisError, RedisClusterException):
                nodes.initialize()

    def _watched(self, keys: JobKeys, step: Any) -> Any:
        """Run ``step(pipe)`` under WATCH of the job's keys until EXEC goes through."""
        for _ in range(MAX_TRIES):
            with self._server(keys).pipeline(transaction=True) as pipe:
                try:
                    pipe.watch(  # type: ignore[no-untyped-call]
                        keys.lock, keys.state, keys.history
                    )
                    return step(pipe)
                except redis.WatchError:
                    continue
                except MovedError:  # the slot has another master now: route anew
                    self._reroute()
                    continue
                except (redis.ConnectionError, redis.TimeoutError):
                    self._reroute()  # the caller's retry policy tries again, routed anew
                    raise
                except (ClusterDownError, TryAgainError):
                    # A cluster in the middle of a failover: the caller's retry policy
                    # tries again (runtime.retry.FAILING_OVER), routed anew.
                    self._reroute()
                    raise
                except redis.ResponseError as exc:
                    if "WRONGTYPE" in str(exc):
                        raise ForeignValueError(
                            f"{keys.lock}, {keys.state} or {keys.history}",
                            "a value of another type",
                        ) from exc
                    raise
        raise Contended(
            f"{MAX_TRIES} tries on {keys.lock} lost their WATCH race to other clients "
            "(or found its slot moved)"
        )

    def acquire(
        self, keys: JobKeys, who: Holder, lease_ms: int, max_attempts: int, retention_ms: int
    ) -> Grant | Snapshot:
        def step(pipe: Pipeline) -> Grant | Snapshot:
            raw_state, raw_lock = read_strings(pipe, keys, keys.state, keys.lock)
            if raw_lock is not None:
                pttl = int(pipe.pttl(keys.lock))
                seen = snapshot_from(keys, raw_state, raw_lock, max(0, pttl))
                mine = (seen.holder, seen.run) == (who.owner, who.run)
                if seen.status is JobStatus.PENDING and mine:
                    return Grant(seen.attempt, seen.token, reentered=True)
                return seen
            if raw_state is None:
                # A job the server does not know: the server's clock, read once, is its
                # first token and its grant's time; its lease and state imply its
                # attempt's record (lockworker.model.history.implied_start).
                token = server_now_us(pipe)
                pipe.multi()
                pipe.set(keys.lock, who.value(token, 1).encode(), px=lease_ms)
                pipe.set(
                    keys.state,
                    StateValue(JobStatus.PENDING, 1, token, who.run, who.owner).encode(),
                    px=retention_ms,
                )
                index(pipe, keys, Kind.HELD, token // 1000, retention_ms)
                pipe.execute()
                return Grant(1, token)
            state = decode_state(raw_state)
            seen = snapshot_from(keys, raw_state, None, None)
            if seen.resolved:
                return seen
            last = last_record(pipe, keys)
            now = server_ms(pipe.time())
            lost = implied(state, last, now)
            if seen.attempt >= max_attempts:
                gave_up = StateValue(
                    JobStatus.GAVE_UP, seen.attempt, seen.token, seen.run, seen.owner,
                    None if state is None else state.due_ms,
                )
                pipe.multi()
                pipe.set(keys.state, gave_up.encode(), px=retention_ms)
                if lost is not None:
                    pipe.rpush(keys.history, replace(lost, ended_ms=now, ending="lost").encode())
                    keep(pipe, keys, retention_ms)
                elif last is not None and last.ending is None:
                    close_lost(pipe, keys, last, now)
                    keep(pipe, keys, retention_ms)
                index(pipe, keys, Kind.GAVE_UP, now, retention_ms)
                pipe.publish(keys.wake, "gave_up")
                pipe.execute()
                return Snapshot(
                    JobStatus.GAVE_UP, seen.attempt, seen.token, seen.owner, run=seen.run
                )
            due = snapshot_from(keys, raw_state, None, None, now)
            if due.due_ms is not None:
                return due
            attempt, token = seen.attempt + 1, seen.token + 1
            pipe.multi()
            pipe.set(keys.lock, who.value(token, attempt).encode(), px=lease_ms)
            pipe.set(
                keys.state,
                StateValue(JobStatus.PENDING, attempt, token, who.run, who.owner).encode(),
                px=retention_ms,
            )
            if lost is not None:
                pipe.rpush(keys.history, replace(lost, ended_ms=now, ending="lost").encode())
            else:
                close_lost(pipe, keys, last, now)
            pipe.rpush(keys.history, RawRecord(
                attempt, token, who.run, now, None, None, record_tail(who.owner)
            ).encode())
            keep(pipe, keys, retention_ms)
            index(pipe, keys, Kind.HELD, now, retention_ms)
            pipe.execute()
            return Grant(attempt, token)

        result: Grant | Snapshot = self._watched(keys, step)
        return result

    def renew(
        self, keys: JobKeys, held: LockValue, lease_ms: int, retention_ms: int
    ) -> Renewal:
        def step(pipe: Pipeline) -> Renewal:
            raw_lock, raw_state = read_strings(pipe, keys, keys.lock, keys.state)
            if text_or_none(raw_lock) != held.encode():
                return Renewal.NOT_HOLDER if raw_state is not None else Renewal.STATE_LOST
            ours = text(pipe.type(keys.history)) == "list"
            now = server_ms(pipe.time()) if keys.index != keys.lock else 0
            pipe.multi()
            pipe.pexpire(keys.lock, lease_ms)
            pipe.pexpire(keys.state, retention_ms)
            if ours:
                pipe.pexpire(keys.history, retention_ms)
            if now:
                pipe.zadd(keys.index, {escape(keys.job_id): score(Kind.HELD, now)}, xx=True)
            pipe.execute()
            return Renewal.RENEWED

        renewed: Renewal = self._watched(keys, step)
        return renewed

    def _settle_step(
        self, keys: JobKeys, held: LockValue, kind: Ending, retention_ms: int,
        max_attempts: int = 0, *, delay_ms: int = 0, give_up: bool = False,
        error: ErrorText | None = None, stopped: bool = False,
    ) -> Settle:
        new_state, message = settle_plan(held, kind, max_attempts, give_up=give_up)
        delay = failure_due_ms(new_state, delay_ms)
        ending = settle_ending(kind, new_state, stopped=stopped).value
        tail = record_tail(held.owner, error if kind is Ending.FAIL else None)

        def step(pipe: Pipeline) -> Settle:
            raw_lock, raw_state = read_strings(pipe, keys, keys.lock, keys.state)
            if text_or_none(raw_lock) != held.encode():
                if raw_state is None:
                    return Settle.STATE_LOST
                already = written_by(raw_state, new_state, delay)
                return settle_result(2 if already else 0, new_state)
            last = last_record(pipe, keys)
            records = int(pipe.llen(keys.history))
            now = server_ms(pipe.time())
            written = new_state
            if delay:
                written = replace(new_state, due_ms=now + delay)
            fold = folds(last, records, token=held.token, ending=ending, tail=tail, now_ms=now)
            ours = last is not None and last.token == held.token
            # the record a new job's grant did not write (implied_start): folded, or written
            start = None if ours else implied_start(held.attempt, held.token, now)
            fold_implied = not fold and start is not None and records == 0 and (
                ending == AttemptEnd.DONE.value
            )
            if fold and last is not None:
                written = replace(new_state, took_ms=now - last.started_ms)
            elif fold_implied and start is not None:
                written = replace(new_state, took_ms=now - start)
            mine = ours and last is not None and last.ending is None
            started = start if start is not None else now
            record = RawRecord(
                held.attempt, held.token, held.run, last.started_ms if mine and last else started,
                now, ending, tail,
            ).encode()
            pipe.multi()
            pipe.delete(keys.lock)
            pipe.set(keys.state, written.encode(), px=retention_ms)
            if fold:
                pipe.delete(keys.history)
            elif fold_implied:
                pass  # no record was written, and none is
            elif mine:
                pipe.lset(keys.history, -1, record)
                keep(pipe, keys, retention_ms)
            else:
                pipe.rpush(keys.history, record)
                keep(pipe, keys, retention_ms)
            if delay:
                index(pipe, keys, Kind.BACKOFF, now + delay, retention_ms)
            else:
                index(pipe, keys, INDEXED.get(new_state.status), now, retention_ms)
            pipe.publish(keys.wake, wake_message(message, delay))
            if keys.space is Space.JOB and hands_over(kind, message, delay):
                pipe.publish(handover_channel(keys.namespace), wake_message(message, delay))
            pipe.execute()
            return settle_result(1, new_state)

        settled: Settle = self._watched(keys, step)
        return settled

    def reset(
        self, keys: JobKeys, retention_ms: int, *, force: bool = False,
        expect: str | None = None,
    ) -> Reset:
        def step(pipe: Pipeline) -> Reset:
            raw_state, raw_lock = read_strings(pipe, keys, keys.state, keys.lock)
            if raw_state is None and raw_lock is None:
                return Reset.ABSENT
            lock = None if raw_lock is None else decode_lock(raw_lock)
            state = None if raw_state is None else decode_state(raw_state)
            if not force:
                if raw_lock is not None and lock is None:
                    raise ForeignValueError(keys.lock, text(raw_lock))
                if raw_state is not None and state is None:
                    raise ForeignValueError(keys.state, text(raw_state))
            if expect:
                now = state.status.value if state else (
                    "foreign" if raw_state is not None else "pending"
                )
                if raw_lock is not None and now == "pending":
                    now = "held"
                if now != expect:
                    return Reset.CHANGED
            if not force and lock is not None:
                return Reset.HELD
            if state is not None:
                token = state.token
            elif lock is not None:
                token = lock.token
            else:
                token = server_now_us(pipe)
            kind = text(pipe.type(keys.history))
            reset_at = server_ms(pipe.time())
            # A DONE state that held the job's one attempt writes it back to the history
            # (as the script does: not for a token past a Lua number's exact range), and
            # so does a first attempt whose grant wrote no record (open: read as lost).
            back = None
            if state is not None and kind == "none" and state.token < FOLDABLE_TOKEN:
                times = state.folded()
                if times is not None:
                    back = RawRecord(
                        state.attempt, state.token, state.run, *times,
                        AttemptEnd.DONE.value, record_tail(state.owner),
                    )
            if back is None and state is not None and kind in ("none", "list"):
                raw = pipe.lindex(keys.history, -1) if kind == "list" else None
                last = None if raw is None else parse_record(raw)
                if raw is None or last is not None:
                    back = implied(state, last, reset_at)
            pipe.multi()
            pipe.delete(keys.lock)
            pipe.set(
                keys.state, StateValue(JobStatus.PENDING, 0, token, "", "").encode(),
                px=retention_ms,
            )
            if back is not None:
                pipe.rpush(keys.history, back.encode())
            if kind == "list" or back is not None:
                pipe.pexpire(keys.history, retention_ms)
            index(pipe, keys, Kind.PENDING, reset_at, retention_ms)
            pipe.publish(keys.wake, "reset")
            pipe.execute()
            return Reset.RESET

        done: Reset = self._watched(keys, step)
        return done
