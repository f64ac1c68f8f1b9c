"""The lock protocol as WATCH/MULTI/EXEC transactions (the original design).

Same steps, results and guarantees as :class:`lockworker.protocol.ScriptProtocol`, built
from optimistic transactions: WATCH the job's keys, read them, decide, then MULTI/EXEC
the writes; if another client touched a watched key in between, EXEC fails and the step
starts again. Three round trips per step instead of one, so it is not the default; it is
kept for servers or proxies that forbid scripts, and as the reference the benchmarks
compare against (docs/benchmarks.md).
"""

from __future__ import annotations

from typing import Any

import redis
from redis.client import Pipeline

from lockworker.codec import LockValue, StateValue
from lockworker.errors import ForeignValueError
from lockworker.keys import JobKeys
from lockworker.protocol import (
    SettleSteps,
    settle_plan,
    settle_result,
    snapshot_from,
    text,
)
from lockworker.state import Grant, JobStatus, Settle, Snapshot


class TxnProtocol(SettleSteps):
    """The protocol as WATCH/MULTI/EXEC transactions."""

    def __init__(self, client: redis.Redis) -> None:
        self.client = client

    def _watched(self, keys: JobKeys, step: Any) -> Any:
        """Run ``step(pipe)`` under WATCH of the job's keys until EXEC goes through."""
        with self.client.pipeline(transaction=True) as pipe:
            while True:
                try:
                    pipe.watch(keys.lock, keys.state)  # type: ignore[no-untyped-call]
                    return step(pipe)
                except redis.WatchError:
                    continue
                except redis.ResponseError as exc:
                    if "WRONGTYPE" in str(exc):
                        raise ForeignValueError(
                            f"{keys.lock} or {keys.state}", "a value of another type"
                        ) from exc
                    raise

    def acquire(
        self, keys: JobKeys, owner: str, lease_ms: int, max_attempts: int, retention_ms: int
    ) -> Grant | Snapshot:
        def step(pipe: Pipeline) -> Grant | Snapshot:
            raw_state, raw_lock = read_strings(pipe, keys, keys.state, keys.lock)
            if raw_lock is not None:
                pttl = int(pipe.pttl(keys.lock))
                seen = snapshot_from(keys, raw_state, raw_lock, max(0, pttl))
                if seen.status is JobStatus.PENDING and seen.holder == owner:
                    return Grant(seen.attempt, seen.token, reentered=True)
                return seen
            seen = snapshot_from(keys, raw_state, None, None)
            if seen.resolved:
                return seen
            if seen.attempt >= max_attempts:
                gave_up = StateValue(JobStatus.GAVE_UP, seen.attempt, seen.token, seen.owner)
                pipe.multi()
                pipe.set(keys.state, gave_up.encode(), px=retention_ms)
                pipe.publish(keys.wake, "gave_up")
                pipe.execute()
                return Snapshot(JobStatus.GAVE_UP, seen.attempt, seen.token, seen.owner)
            attempt, token = seen.attempt + 1, seen.token + 1
            pipe.multi()
            pipe.set(keys.lock, LockValue(token, attempt, owner).encode(), px=lease_ms)
            pipe.set(
                keys.state,
                StateValue(JobStatus.PENDING, attempt, token, owner).encode(),
                px=retention_ms,
            )
            pipe.execute()
            return Grant(attempt, token)

        result: Grant | Snapshot = self._watched(keys, step)
        return result

    def renew(self, keys: JobKeys, held: LockValue, lease_ms: int, retention_ms: int) -> bool:
        def step(pipe: Pipeline) -> bool:
            if text_or_none(pipe.get(keys.lock)) != held.encode():
                return False
            pipe.multi()
            pipe.pexpire(keys.lock, lease_ms)
            pipe.pexpire(keys.state, retention_ms)
            pipe.execute()
            return True

        renewed: bool = self._watched(keys, step)
        return renewed

    def _settle_step(
        self, keys: JobKeys, held: LockValue, kind: str, retention_ms: int, max_attempts: int = 0
    ) -> Settle:
        new_state, message = settle_plan(held, kind, max_attempts)

        def step(pipe: Pipeline) -> Settle:
            raw_lock, raw_state = read_strings(pipe, keys, keys.lock, keys.state)
            if text_or_none(raw_lock) != held.encode():
                already = text_or_none(raw_state) == new_state.encode()
                return settle_result(already, new_state)
            pipe.multi()
            pipe.delete(keys.lock)
            pipe.set(keys.state, new_state.encode(), px=retention_ms)
            pipe.publish(keys.wake, message)
            pipe.execute()
            return settle_result(True, new_state)

        settled: Settle = self._watched(keys, step)
        return settled

    def reset(self, keys: JobKeys, retention_ms: int, *, force: bool = False) -> bool:
        def step(pipe: Pipeline) -> bool:
            raw_state, raw_lock = read_strings(pipe, keys, keys.state, keys.lock)
            seen = snapshot_from(keys, raw_state, raw_lock, None)
            if seen.holder is not None and not force:
                return False
            pipe.multi()
            pipe.delete(keys.lock)
            pipe.set(
                keys.state, StateValue(JobStatus.PENDING, 0, seen.token, "").encode(),
                px=retention_ms,
            )
            pipe.publish(keys.wake, "reset")
            pipe.execute()
            return True

        done: bool = self._watched(keys, step)
        return done


def read_strings(pipe: Pipeline, keys: JobKeys, *names: str) -> list[Any]:
    """MGET ``names``; raise ForeignValueError if a missing value is a key of another type.

    MGET answers nil for a key that holds a list or a hash, which would let the
    transaction overwrite somebody else's data; one EXISTS, only when a value is
    missing, tells an absent key from a foreign one.
    """
    values: list[Any] = pipe.mget(*names)
    missing = [name for name, value in zip(names, values, strict=True) if value is None]
    if missing and int(pipe.exists(*missing)) > 0:
        raise ForeignValueError(f"{keys.lock} or {keys.state}", "a value of another type")
    return values


def text_or_none(raw: Any) -> str | None:
    return None if raw is None else text(raw)
