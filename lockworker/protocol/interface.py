"""The lock protocol: each step one atomic operation on the Redis server.

Steps (all take the client's view of one job's :class:`~lockworker.model.keys.JobKeys`):

=========  ==========================================================  =====================
step       what it does atomically                                      result
=========  ==========================================================  =====================
acquire    if pending and free: attempt+1, token+1, lease for owner     Grant | Snapshot
renew      extend the lease if the caller still holds this attempt      Renewal
complete   holder only: drop the lease, state DONE, wake waiters        Settle.DONE|NOT_HOLDER
fail       holder only: drop the lease (GAVE_UP if it was the last)     RELEASED|GAVE_UP|...
release    holder only: drop the lease and refund the attempt           RELEASED|NOT_HOLDER
inspect    read state, lease and its remaining time                     Snapshot
reset      make a known job pending again (token counter kept)          Reset
=========  ==========================================================  =====================

Rules of this module: no threads, no sleeping, no hooks, no logging, no retries. It
says what Redis did; the worker decides what to do about it. Every step is safe to
retry after a lost reply: acquire recognises its own lease (``Grant.reentered``: the
same *run*, not merely the same owner label), and settle steps recognise a state they
already wrote. A step that finds the job's state gone where a lease of the caller's
should be says so (``Renewal.STATE_LOST``, ``Settle.STATE_LOST``): the server lost
its data.

Two implementations share this interface: :class:`ScriptProtocol` (Lua, one round trip
per step; the default) and :class:`lockworker.protocol.txn.TxnProtocol` (WATCH/MULTI/EXEC, three
round trips per step).
"""

from __future__ import annotations

from typing import Any, Protocol

import redis

from lockworker.model.codec import Holder, LockValue
from lockworker.model.history import ErrorText
from lockworker.model.keys import JobKeys
from lockworker.model.state import Ending, Grant, Renewal, Reset, Settle, Snapshot
from lockworker.protocol.decode import (
    foreign_on_wrongtype,
    server_ms,
    snapshot_from,
    with_history,
)


class LockProtocol(Protocol):
    """The atomic steps of the job lock (see the module docstring)."""

    def acquire(
        self, keys: JobKeys, who: Holder, lease_ms: int, max_attempts: int, retention_ms: int
    ) -> Grant | Snapshot: ...

    def renew(
        self, keys: JobKeys, held: LockValue, lease_ms: int, retention_ms: int
    ) -> Renewal: ...

    def complete(self, keys: JobKeys, held: LockValue, retention_ms: int) -> Settle: ...

    def fail(
        self, keys: JobKeys, held: LockValue, max_attempts: int, retention_ms: int,
        *, delay_ms: int = 0, give_up: bool = False, error: ErrorText | None = None,
    ) -> Settle: ...

    def release(
        self, keys: JobKeys, held: LockValue, retention_ms: int, *, stopped: bool = False
    ) -> Settle: ...

    def inspect(self, keys: JobKeys, *, history: bool = False) -> Snapshot: ...

    def reset(
        self, keys: JobKeys, retention_ms: int, *, force: bool = False,
        expect: str | None = None,
    ) -> Reset: ...


class SettleSteps:
    """complete, fail, release and inspect, shared by both implementations.

    Each implementation supplies ``client`` and ``_settle_step(keys, held, kind,
    retention_ms, max_attempts)``, the one atomic step behind the three endings.
    """

    client: redis.Redis

    def _settle_step(
        self, keys: JobKeys, held: LockValue, kind: Ending, retention_ms: int,
        max_attempts: int = 0, *, delay_ms: int = 0, give_up: bool = False,
        error: ErrorText | None = None, stopped: bool = False,
    ) -> Settle:
        raise NotImplementedError

    def complete(self, keys: JobKeys, held: LockValue, retention_ms: int) -> Settle:
        return self._settle_step(keys, held, Ending.COMPLETE, retention_ms)

    def fail(
        self, keys: JobKeys, held: LockValue, max_attempts: int, retention_ms: int,
        *, delay_ms: int = 0, give_up: bool = False, error: ErrorText | None = None,
    ) -> Settle:
        """Fail the attempt; the job's next attempt is due ``delay_ms`` from now by the
        server's clock (recorded in the same step), or GAVE_UP with ``give_up``. The
        attempt's history record keeps ``error``."""
        return self._settle_step(
            keys, held, Ending.FAIL, retention_ms, max_attempts, delay_ms=delay_ms,
            give_up=give_up, error=error,
        )

    def release(
        self, keys: JobKeys, held: LockValue, retention_ms: int, *, stopped: bool = False
    ) -> Settle:
        """Give the attempt back (refunded); its record says ``stopped`` if the worker
        stops, else ``released``."""
        return self._settle_step(keys, held, Ending.RELEASE, retention_ms, stopped=stopped)

    def inspect(self, keys: JobKeys, *, history: bool = False) -> Snapshot:
        return inspect(self.client, keys, history=history)


def inspect(client: redis.Redis, keys: JobKeys, *, history: bool = False) -> Snapshot:
    """Read a job's state, lease and lease time left (and the server's clock, for a
    due time) in one atomic round trip; with ``history``, its attempts too."""
    node = node_of(client, keys)
    pipe = client.pipeline(transaction=True)
    pipe.get(keys.state)
    pipe.get(keys.lock)
    pipe.pttl(keys.lock)
    if history:
        pipe.lrange(keys.history, 0, -1)
    if node is None:
        pipe.time()
    try:
        raw_state, raw_lock, pttl, *rest = pipe.execute()
    except redis.ResponseError as exc:
        raise foreign_on_wrongtype(keys, exc) from exc
    records = rest.pop(0) if history else None
    if node is not None:  # a cluster's transaction takes no keyless command: ask the node
        rest = [client.execute_command("TIME", target_nodes=node)]  # type: ignore[no-untyped-call]
    now = server_ms(rest[0])
    seen = snapshot_from(keys, raw_state, raw_lock, int(pttl) if int(pttl) >= 0 else None, now)
    return seen if records is None else with_history(seen, records, raw_lock, raw_state, now)


def node_of(client: Any, keys: JobKeys) -> Any:
    """The cluster node that serves ``keys``' slot, or None for a client of one server
    (a cluster client's transaction refuses a keyless command such as TIME)."""
    if getattr(client, "nodes_manager", None) is None:
        return None
    return client.get_node_from_key(keys.state)
