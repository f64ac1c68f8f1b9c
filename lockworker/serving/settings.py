"""The settings both Worker classes (:class:`lockworker.Worker`,
:class:`lockworker.aio.Worker`) validate and keep alike, and the lock protocol they
speak: one validator per argument, in one place, so the twins cannot drift apart.
"""

from __future__ import annotations

from typing import Any

import redis

from lockworker import config
from lockworker.clock import Clock, SystemClock
from lockworker.config import RetryDelay, default_owner, lease, positive, seconds, this_process
from lockworker.errors import InvalidConfig
from lockworker.model import policy
from lockworker.model.codec import Holder, new_run
from lockworker.model.keys import check_name
from lockworker.model.presence import Member, View
from lockworker.model.state import Durability, ProtocolKind, Role
from lockworker.protocol import LockProtocol, ScriptProtocol
from lockworker.protocol.replicated import ReplicatedScriptProtocol
from lockworker.protocol.txn import TxnProtocol
from lockworker.runtime import events, retry
from lockworker.runtime.batcher import batcher_for
from lockworker.runtime.contenders import Contenders
from lockworker.runtime.rates import Rates
from lockworker.serving.hooks import Hooks

DAY = 86400.0
HOUR = 3600.0
DONE_RETENTION = HOUR
"""How long a DONE job's record is kept by default: long enough that a duplicate of a
finished id submitted within the hour is recognised (DONE_ELSEWHERE), short enough that
a day of serving at 1,000 jobs/s keeps about 0.6 GiB of records (3.6 M records of
~170 B), not 16 GiB. Given-up jobs are kept for ``retention`` (a day)."""
RUNS_JOBS = " to process jobs (a Worker built without it may inspect and reset them)"

def make_protocol(
    client: redis.Redis, protocol: ProtocolKind | str | LockProtocol,
    durability: Durability | str = Durability.LOCAL, replicas: int = 1,
    replica_timeout: float = 0.5,
) -> LockProtocol:
    """``"script"`` (Lua, the default), ``"txn"`` (WATCH/MULTI/EXEC), or an instance;
    with ``durability="replicated"``, the script protocol whose steps count once
    ``replicas`` replicas acknowledged them (:mod:`lockworker.protocol.replicated`)."""
    if durability not in tuple(Durability):
        raise InvalidConfig(f"durability must be 'local' or 'replicated', got {durability!r}")
    if durability == Durability.REPLICATED:
        if protocol != ProtocolKind.SCRIPT:
            raise InvalidConfig(
                "durability='replicated' needs protocol='script' (WAIT follows each step "
                f"on its connection), got protocol={protocol!r}"
            )
        count = int(positive(replicas, "replicas", integer=True))
        timeout = seconds(replica_timeout, "replica_timeout")
        return ReplicatedScriptProtocol(client, count, max(1, round(timeout * 1000)))
    if protocol == ProtocolKind.SCRIPT:
        return ScriptProtocol(client, batcher_for(client))
    if protocol == ProtocolKind.TXN:
        return TxnProtocol(client)
    if isinstance(protocol, str):
        raise InvalidConfig(f"protocol must be 'script' or 'txn', got {protocol!r}")
    return protocol


class WorkerSettings:
    """A worker's settings, for :class:`Worker` and :class:`lockworker.aio.Worker`
    alike, checked by :meth:`_configure`: one validator per argument, in one place."""

    namespace: str
    role: Role
    backup_delay: float
    lock_timeout: float
    max_attempts: int
    owner: str
    run_id: str
    """This worker object's run id: leases it wrote carry it, and only it re-enters
    them, so a restarted process with the same ``owner`` never trusts its dead
    predecessor's lease."""
    retention: float
    """Seconds a given-up or pending job's state (and attempt count) is kept."""
    done_retention: float
    """Seconds a DONE job's record is kept: the window in which a duplicate of the id is
    recognised as done (after it, the id runs again, with a larger token)."""
    retry_schedule: config.RetrySchedule
    """The job's retry schedule: a failed attempt's number to seconds until the next."""
    give_up_on: tuple[type[BaseException], ...]
    timing: policy.Timing
    clock: Clock
    redis_retry: retry.RetryPolicy
    handle_signals: bool
    _who: Holder
    _hooks: Hooks
    _logger: Any
    _log: events.EventLog
    _lease_ms: int
    _retention_ms: int
    _done_retention_ms: int
    _member: Member
    _view: View
    _contenders: Contenders
    _rates: Rates

    def _configure(
        self, base: type, *, namespace: str, lock_timeout: float, max_attempts: int,
        owner: str | None, retention: float, done_retention: float, retry_delay: RetryDelay,
        give_up_on: type[BaseException] | tuple[type[BaseException], ...], clock: Clock | None,
        logger: Any, redis_retry: retry.RetryPolicy | None, handle_signals: bool,
        role: Role | str, backup_delay: float, hooks: dict[str, Any],
    ) -> None:
        w = self
        w.namespace = check_name(namespace, "namespace")
        w.role, w.backup_delay = policy.check_role(role, backup_delay)
        w.lock_timeout = lease(lock_timeout, "lock_timeout")
        w.max_attempts = int(positive(max_attempts, "max_attempts", integer=True))
        w.owner = check_name(owner, "owner") if owner is not None else default_owner()
        w.run_id = new_run()
        w._who = Holder(w.owner, w.run_id)
        w.retention = kept(retention, "retention", w.lock_timeout)
        w.done_retention = kept(done_retention, "done_retention", w.lock_timeout)
        w.retry_schedule = config.retry_delay(retry_delay)
        w.give_up_on = config.give_up_on(give_up_on)
        w._hooks = Hooks(w, base, hooks)
        w.timing = policy.Timing.of(w.lock_timeout, w.role, w.backup_delay)
        w.clock = clock or SystemClock()
        w.redis_retry = redis_retry or retry.DEFAULT
        w.handle_signals = handle_signals
        w._logger = logger
        w._log = events.logger(
            events.WORKER, logger, namespace=w.namespace, owner=w.owner, run=w.run_id
        )
        w._lease_ms = max(1, round(w.lock_timeout * 1000))
        w._retention_ms = max(1, round(w.retention * 1000))
        w._done_retention_ms = max(1, round(w.done_retention * 1000))
        host, pid = this_process()
        w._member = Member(w.role, w.owner, w.run_id, host, pid, w._lease_ms)
        w._view = View(
            w.lock_timeout, watch=w.role is Role.BACKUP, me=w._member,
            grace=w.backup_delay if w.role is Role.BACKUP else 0.0,
        )
        w._contenders = Contenders()
        w._rates = Rates()


def kept(value: object, name: str, lock_timeout: float) -> float:
    """``value``, seconds a job's record is kept, if it outlasts the lease: a record
    gone before a lease could end would let a slow waiter take a finished job again."""
    out = positive(value, name)
    if out <= lock_timeout:
        raise InvalidConfig(
            f"{name} must be longer than lock_timeout ({lock_timeout}s), got {value!r}"
        )
    return out
