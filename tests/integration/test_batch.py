"""Group commit of protocol steps (lockworker.protocol.batch, lockworker.runtime.batcher).

A batch is a pipeline of the very per-job steps: every step in it must give what it
gives alone, whatever the other steps are, and steps sent at once by many threads must
share round trips without any waiting longer than one round trip beyond its own.
"""

from __future__ import annotations

import threading
import uuid
from typing import Any

import pytest
import redis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lockworker.errors import ForeignValueError
from lockworker.model.keys import JobKeys
from lockworker.model.state import Ending, Grant, Settle, Snapshot
from lockworker.protocol import ScriptProtocol
from lockworker.protocol import batch as protocol_batch
from lockworker.protocol.script import acquire_step, inspect_step, settle_step
from lockworker.runtime.batcher import Batcher, batcher_for
from tests.helpers import held, wait_for, who

LEASE_MS, MAX, RETENTION_MS = 10_000, 3, 60_000

SETUPS = ("new", "done", "held", "foreign", "spent", "wrongtype")
ENDINGS = (Ending.COMPLETE, Ending.FAIL, Ending.RELEASE)


def prepare(client: redis.Redis, keys: JobKeys, setup: str) -> None:
    """Put the job in the state ``setup`` names, through the protocol itself."""
    plain = ScriptProtocol(client)
    if setup == "done":
        g = plain.acquire(keys, who("w"), LEASE_MS, MAX, RETENTION_MS)
        assert isinstance(g, Grant)
        plain.complete(keys, held(g, "w"), RETENTION_MS)
    elif setup == "held":
        plain.acquire(keys, who("other"), LEASE_MS, MAX, RETENTION_MS)
    elif setup == "foreign":
        client.set(keys.state, "not a lockworker value")
    elif setup == "spent":
        for _ in range(MAX):
            g = plain.acquire(keys, who("w"), LEASE_MS, MAX, RETENTION_MS)
            assert isinstance(g, Grant)
            plain.fail(keys, held(g, "w"), MAX, RETENTION_MS)
    elif setup == "wrongtype":
        client.rpush(keys.lock, "x")
        client.set(keys.state, "")
        client.delete(keys.state)


def shape(result: Any) -> tuple[Any, ...]:
    """What a step's result says, without the tokens (the server's clock starts them)."""
    if isinstance(result, Grant):
        return ("grant", result.attempt, result.reentered)
    if isinstance(result, Snapshot):
        return ("snapshot", result.status, result.attempt, result.holder)
    return ("error", type(result).__name__)


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    setups=st.lists(st.sampled_from(SETUPS), min_size=1, max_size=12),
    endings=st.lists(st.sampled_from(ENDINGS), min_size=12, max_size=12),
)
def test_every_step_of_a_batch_gives_what_it_gives_alone(
    redis_client: redis.Redis, namespace: str, setups: list[str], endings: list[Ending]
) -> None:
    """The same jobs, prepared alike in two namespaces: one acquire per job sent in one
    batch, and the same acquires sent one by one, give the same results; so do the
    settles (complete, fail or release) of what was granted, and a look at every job
    after them, one batch against one step at a time."""
    run = uuid.uuid4().hex[:8]
    a_keys = [JobKeys.of(f"{namespace}-{run}-a", f"j{i}") for i in range(len(setups))]
    b_keys = [JobKeys.of(f"{namespace}-{run}-b", f"j{i}") for i in range(len(setups))]
    for setup, a, b in zip(setups, a_keys, b_keys, strict=True):
        prepare(redis_client, a, setup)
        prepare(redis_client, b, setup)

    def both(steps_of: Any) -> tuple[list[Any], list[Any]]:
        together = protocol_batch.send(redis_client, [steps_of(k, i) for i, k in enumerate(a_keys)])
        one_by_one = [Batcher(redis_client)(steps_of(k, i)) for i, k in enumerate(b_keys)]
        assert [shape(r) for r in together] == [shape(r) for r in one_by_one]
        return together, one_by_one

    grants, grants_b = both(lambda k, i: acquire_step(k, who("me"), LEASE_MS, MAX, RETENTION_MS))
    for setup, result in zip(setups, grants, strict=True):
        if setup in ("foreign", "wrongtype"):
            assert isinstance(result, ForeignValueError)
    granted = [i for i, g in enumerate(grants) if isinstance(g, Grant)]
    settled = protocol_batch.send(redis_client, [
        settle_step(a_keys[i], held(grants[i], "me"), endings[i], RETENTION_MS, MAX)
        for i in granted
    ])
    settled_b = [
        Batcher(redis_client)(
            settle_step(b_keys[i], held(grants_b[i], "me"), endings[i], RETENTION_MS, MAX)
        )
        for i in granted
    ]
    assert settled == settled_b
    looks = [shape(r) for r in protocol_batch.send(redis_client, [inspect_step(k) for k in a_keys])]
    assert looks == [shape(Batcher(redis_client)(inspect_step(k))) for k in b_keys]


def test_a_batch_after_the_script_cache_was_flushed_runs_every_step_once(
    redis_client: redis.Redis, namespace: str
) -> None:
    """NOSCRIPT means a step did nothing: the batch sends those steps again, each once
    (a second grant would be a re-entry, never a new attempt), by the script's source,
    routed as the refused command was. Not by SCRIPT LOAD, which a cluster client sends
    to every master it knows: after a failover that includes the crashed one, and the
    batch would fail until its retries ran out."""
    keys = [JobKeys.of(namespace, f"j{i}") for i in range(5)]
    redis_client.script_flush()
    redis_client.config_resetstat()
    results = protocol_batch.send(
        redis_client, [acquire_step(k, who("me"), LEASE_MS, MAX, RETENTION_MS) for k in keys]
    )
    assert all(isinstance(r, Grant) and r.attempt == 1 and not r.reentered for r in results)
    stats = redis_client.info("commandstats")
    assert "cmdstat_script|load" not in stats
    assert stats["cmdstat_eval"]["calls"] == 1  # the looped command, by its source


class CountingBatcher(Batcher):
    """A batcher that can hold its batch in flight."""

    def __init__(self, client: redis.Redis) -> None:
        super().__init__(client)
        self.gate = threading.Event()
        self.gate.set()
        self.in_flight = threading.Event()

    def _alone(self, step: Any) -> Any:
        self.in_flight.set()
        self.gate.wait(10)
        return super()._alone(step)


def test_steps_sent_while_a_batch_is_in_flight_go_out_together_in_the_next(
    redis_client: redis.Redis, namespace: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Group commit: 20 threads send while the first step is held in flight; they take
    two round trips in all, and every step gets its own job's grant."""
    batcher = CountingBatcher(redis_client)
    sizes: list[int] = []
    real_send = protocol_batch.send

    def counted(client: redis.Redis, steps: Any) -> list[Any]:
        sizes.append(len(steps))
        return real_send(client, steps)

    monkeypatch.setattr(protocol_batch, "send", counted)
    batcher.gate.clear()
    keys = [JobKeys.of(namespace, f"j{i}") for i in range(21)]
    results: dict[int, Any] = {}

    def send(i: int) -> None:
        results[i] = batcher(acquire_step(keys[i], who("me"), LEASE_MS, MAX, RETENTION_MS))

    first = threading.Thread(target=send, args=(0,))
    first.start()
    assert batcher.in_flight.wait(10)
    batcher.in_flight.clear()
    others = [threading.Thread(target=send, args=(i,)) for i in range(1, 21)]
    for t in others:
        t.start()
    wait_for(lambda: len(batcher._queue) == 20)
    batcher.gate.set()
    for t in [first, *others]:
        t.join(10)
    assert sizes == [20]  # the first went alone; the 20 queued went in one batch
    assert all(isinstance(results[i], Grant) for i in range(21))
    for i in range(21):
        assert redis_client.get(keys[i].lock) is not None


def test_a_round_trip_that_fails_fails_every_step_in_it_and_frees_the_batcher(
    redis_client: redis.Redis, namespace: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A connection error of a batch reaches every step in it (each retries by its own
    policy) and the next step is sent as usual."""
    batcher = Batcher(redis_client)
    keys = JobKeys.of(namespace, "j")
    monkeypatch.setattr(
        Batcher, "_alone", lambda self, step: (_ for _ in ()).throw(redis.ConnectionError("x"))
    )
    with pytest.raises(redis.ConnectionError):
        batcher(acquire_step(keys, who("me"), LEASE_MS, MAX, RETENTION_MS))
    monkeypatch.undo()
    assert isinstance(batcher(acquire_step(keys, who("me"), LEASE_MS, MAX, RETENTION_MS)), Grant)


def test_a_settle_in_a_batch_is_told_stale_as_alone(
    redis_client: redis.Redis, namespace: str
) -> None:
    """Fencing holds in a batch: a completion by a holder whose lease is gone is
    refused, beside one that applies."""
    plain = ScriptProtocol(redis_client)
    a, b = JobKeys.of(namespace, "a"), JobKeys.of(namespace, "b")
    ga = plain.acquire(a, who("w"), LEASE_MS, MAX, RETENTION_MS)
    gb = plain.acquire(b, who("w"), LEASE_MS, MAX, RETENTION_MS)
    assert isinstance(ga, Grant) and isinstance(gb, Grant)
    redis_client.delete(b.lock)  # b's lease ran out
    done = protocol_batch.send(redis_client, [
        settle_step(a, held(ga, "w"), Ending.COMPLETE, RETENTION_MS),
        settle_step(b, held(gb, "w"), Ending.COMPLETE, RETENTION_MS),
    ])
    assert done == [Settle.DONE, Settle.NOT_HOLDER]


def test_one_batcher_per_client() -> None:
    client = redis.Redis()
    assert batcher_for(client) is batcher_for(client)
    assert batcher_for(redis.Redis()) is not batcher_for(client)
