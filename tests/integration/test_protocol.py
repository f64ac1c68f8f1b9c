"""Protocol properties the step-by-step tests leave implicit: server-side command counts,
retention of resolved states, and tokens across every way an attempt ends."""

from __future__ import annotations

import dataclasses

import redis
from helpers import LEASE, RETENTION, grant, held, wait_for, who

from lockworker.model.keys import JobKeys
from lockworker.model.state import JobStatus, Reset, Settle, Snapshot
from lockworker.protocol import LockProtocol, ScriptProtocol
from lockworker.protocol.txn import TxnProtocol


def warm_up(protocol: ScriptProtocol, namespace: str) -> None:
    """Run every step once, so the server has all scripts cached (no NOSCRIPT reloads)."""
    keys = JobKeys.of(namespace, "warm-up")
    g = grant(protocol, keys, "a")
    protocol.renew(keys, held(g, "a"), LEASE, RETENTION)
    protocol.fail(keys, held(g, "a"), 3, RETENTION)
    g = grant(protocol, keys, "a")
    protocol.complete(keys, held(g, "a"), RETENTION)


def client_calls(ran: dict[str, int]) -> dict[str, int]:
    """The commands a client sent: commandstats also counts the ``redis.call``s a script
    makes, which cost no round trip."""
    sent = {"evalsha", "eval", "script|load", "multi", "exec", "watch", "unwatch"}
    return {name: n for name, n in ran.items() if name in sent}


def calls(client: redis.Redis) -> dict[str, int]:
    """Commands the server has run so far, by name (INFO commandstats). The server is
    this test session's own and tests run one at a time, so deltas are one test's."""
    stats = client.info("commandstats")
    return {name.removeprefix("cmdstat_"): int(v["calls"]) for name, v in stats.items()}


BACKGROUND = {"info", "subscribe", "unsubscribe", "psubscribe", "punsubscribe", "ping"}
"""Commands that are not the step's: the INFO calls that measure it, and what the
process's shared wake-up connection sends on its own schedule (a channel left by an
earlier test is unsubscribed when its linger ends)."""


def server_commands(client: redis.Redis, before: dict[str, int]) -> dict[str, int]:
    """Commands run since ``before``, leaving out the ones in :data:`BACKGROUND`."""
    after = calls(client)
    delta = {name: n - before.get(name, 0) for name, n in after.items()}
    return {name: n for name, n in delta.items() if n and name not in BACKGROUND}


def test_the_script_job_cycle_runs_exactly_two_commands_on_the_server(
    redis_client: redis.Redis, keys: JobKeys
) -> None:
    protocol = ScriptProtocol(redis_client)
    warm_up(protocol, keys.namespace)
    before = calls(redis_client)
    g = grant(protocol, keys, "a")
    assert protocol.complete(keys, held(g, "a"), RETENTION) is Settle.DONE
    assert client_calls(server_commands(redis_client, before)) == {"evalsha": 2}


def test_the_script_job_cycle_runs_fourteen_commands_in_its_scripts(
    redis_client: redis.Redis, keys: JobKeys
) -> None:
    """Where the server's work in a clean cycle goes: the cost of every job of a busy
    stream. The grant of a new job reads its state and writes its lease (only where no
    key is) and state, and no history: its attempt's record is implied by them. The DONE
    settle reads its lease and learns from one read of the history that there is none,
    then folds the attempt into the state. Nothing here may creep up unnoticed."""
    protocol = ScriptProtocol(redis_client)
    warm_up(protocol, keys.namespace)
    before = calls(redis_client)
    g = grant(protocol, keys, "a")
    assert protocol.complete(keys, held(g, "a"), RETENTION) is Settle.DONE
    ran = server_commands(redis_client, before)
    assert ran == {
        "evalsha": 2,
        # the grant: the state, the server's clock (the first token), the lease and
        # the state written
        "get": 2, "time": 2, "set": 3,
        # the settle: its lease (the second GET), the history's last two values (none),
        # the lease deleted, the wake
        "lrange": 1, "del": 1, "publish": 1,
        # the namespace's index: the job held at the grant, its entry gone at the DONE
        "zadd": 1, "zrem": 1,
    }, ran
    assert sum(ran.values()) == 14
    assert redis_client.exists(keys.history) == 0


def test_a_look_reads_only_what_can_change_its_answer(
    redis_client: redis.Redis, keys: JobKeys
) -> None:
    """A look (the INSPECT script: a backup's held-back jobs, a contest's look) at a
    resolved job reads its state alone; at a held one the state, the lease and its time
    left; the server's clock only for a free job with a state (a due time). Each sees
    what the full read (the transaction behind ``Worker.inspect``) sees."""
    protocol = ScriptProtocol(redis_client)
    warm_up(protocol, keys.namespace)
    protocol.inspect(JobKeys.of(keys.namespace, "warm-up"))  # the script cached

    def look(keys: JobKeys, expected: dict[str, int]) -> Snapshot:
        before = calls(redis_client)
        seen = protocol.inspect(keys)
        assert server_commands(redis_client, before) == {"evalsha": 1, **expected}
        full = protocol.inspect(keys, history=True)
        # Read a moment apart: a due time and a lease's end a moment nearer.
        for field in ("due_ms", "pttl_ms"):
            mine, theirs = getattr(seen, field), getattr(full, field)
            assert (mine is None) == (theirs is None), field
            assert mine is None or 0 <= mine - theirs < 1000, field
        near = dataclasses.replace(full, history=(), due_ms=seen.due_ms, pttl_ms=seen.pttl_ms)
        assert near == seen
        return seen

    assert look(keys, {"get": 2}).token == 0  # nobody ever took it
    g = grant(protocol, keys, "a")
    assert look(keys, {"get": 2, "pttl": 1}).holder is not None
    assert protocol.fail(keys, held(g, "a"), 3, RETENTION, delay_ms=60_000) is Settle.RELEASED
    assert look(keys, {"get": 2, "time": 1}).due_ms is not None  # due in a minute
    done = JobKeys.of(keys.namespace, "done")
    g = grant(protocol, done, "a")
    assert protocol.complete(done, held(g, "a"), RETENTION) is Settle.DONE
    assert look(done, {"get": 1}).status is JobStatus.DONE


def test_each_script_step_is_one_command(redis_client: redis.Redis, keys: JobKeys) -> None:
    protocol = ScriptProtocol(redis_client)
    warm_up(protocol, keys.namespace)
    g = grant(protocol, keys, "a")
    for step in (
        lambda: protocol.renew(keys, held(g, "a"), LEASE, RETENTION),
        lambda: protocol.acquire(keys, who("b"), LEASE, 3, RETENTION),
        lambda: protocol.fail(keys, held(g, "a"), 3, RETENTION),
    ):
        before = calls(redis_client)
        step()
        assert client_calls(server_commands(redis_client, before)) == {"evalsha": 1}


def test_the_transaction_cycle_is_bounded(redis_client: redis.Redis, keys: JobKeys) -> None:
    """TxnProtocol is the reference design, not the hot path; its cost must not creep."""
    protocol = TxnProtocol(redis_client)
    before = calls(redis_client)
    g = grant(protocol, keys, "a")
    assert protocol.complete(keys, held(g, "a"), RETENTION) is Settle.DONE
    ran = server_commands(redis_client, before)
    assert ran.get("watch") == 2 and ran.get("exec") == 2 and ran.get("multi") == 2
    # One TIME per step: the first token of a job id the server does not know (and
    # its grant's time), and the settle's time for the attempt's history record; the
    # grant of a new job reads no history (its record is implied), the settle reads
    # its last record and its length.
    assert ran.get("time") == 2 and ran.get("lindex") == 1 and ran.get("llen") == 1
    assert ran.get("zadd") == 1 and ran.get("zrem") == 1  # the index, in the EXECs
    assert "rpush" not in ran and redis_client.exists(keys.history) == 0
    assert sum(ran.values()) <= 22, ran


def test_gave_up_is_kept_for_retention_and_the_lease_is_gone(
    protocol: LockProtocol, keys: JobKeys, redis_client: redis.Redis
) -> None:
    g = grant(protocol, keys, "a", max_attempts=1)
    assert protocol.fail(keys, held(g, "a"), 1, RETENTION) is Settle.GAVE_UP
    assert RETENTION - 5000 < redis_client.pttl(keys.state) <= RETENTION
    assert redis_client.exists(keys.lock) == 0


def test_done_keeps_its_retention_not_the_lease(
    protocol: LockProtocol, keys: JobKeys, redis_client: redis.Redis
) -> None:
    g = grant(protocol, keys, "a", lease_ms=LEASE)
    assert protocol.complete(keys, held(g, "a"), RETENTION) is Settle.DONE
    assert redis_client.pttl(keys.state) > LEASE  # retention, far beyond the lease


def test_a_held_state_outlives_its_lease(
    protocol: LockProtocol, keys: JobKeys, redis_client: redis.Redis
) -> None:
    """The count must survive a dead holder: the state key is never tied to the lease."""
    grant(protocol, keys, "a", lease_ms=100)
    wait_for(lambda: redis_client.exists(keys.lock) == 0, timeout=5)
    seen = protocol.inspect(keys)
    assert seen.holder is None and seen.status is JobStatus.PENDING
    assert redis_client.exists(keys.state) == 1
    assert grant(protocol, keys, "b").attempt == 2


def test_tokens_grow_across_release_fail_expiry_and_reset(
    protocol: LockProtocol, keys: JobKeys, redis_client: redis.Redis
) -> None:
    tokens = []
    g = grant(protocol, keys, "a", max_attempts=2)
    tokens.append(g.token)
    assert protocol.release(keys, held(g, "a"), RETENTION) is Settle.RELEASED
    g = grant(protocol, keys, "b", max_attempts=2)
    tokens.append(g.token)
    assert protocol.fail(keys, held(g, "b"), 2, RETENTION) is Settle.RELEASED
    g = grant(protocol, keys, "c", max_attempts=2, lease_ms=100)
    tokens.append(g.token)
    wait_for(lambda: redis_client.exists(keys.lock) == 0, timeout=5)
    seen = protocol.acquire(keys, who("d"), LEASE, 2, RETENTION)
    assert isinstance(seen, Snapshot) and seen.status is JobStatus.GAVE_UP
    assert protocol.reset(keys, RETENTION) is Reset.RESET
    tokens.append(grant(protocol, keys, "e", max_attempts=2).token)
    assert tokens == sorted(set(tokens)), tokens
