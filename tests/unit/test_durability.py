"""``durability`` is checked before any Redis call, naming what is wrong."""

from __future__ import annotations

from typing import Any

import fakeredis
import pytest

import lockworker
from lockworker.protocol.replicated import ReplicatedScriptProtocol


def worker(**kwargs: Any) -> lockworker.Worker:
    return lockworker.Worker(
        fakeredis.FakeRedis(), namespace="n", on_acquired=lambda job: None, **kwargs
    )


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"durability": "quorum"}, "durability must be 'local' or 'replicated'"),
        ({"durability": "replicated", "protocol": "txn"}, "needs protocol='script'"),
        ({"durability": "replicated", "replicas": 0}, "replicas"),
        ({"durability": "replicated", "replica_timeout": 0}, "replica_timeout"),
    ],
)
def test_bad_durability_settings_are_refused(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(lockworker.InvalidConfig, match=message):
        worker(**kwargs)


def test_replicated_durability_waits_for_the_replicas_asked_for() -> None:
    protocol = worker(durability="replicated", replicas=2, replica_timeout=0.25).protocol
    assert isinstance(protocol, ReplicatedScriptProtocol)
    assert (protocol.replicas, protocol.timeout_ms) == (2, 250)
    assert type(worker().protocol).__name__ == "ScriptProtocol"


def test_a_leader_takes_the_same_durability_settings_as_a_worker() -> None:
    leader = lockworker.Leader(
        fakeredis.FakeRedis(), name="n", on_acquired=lambda term: None,
        durability="replicated", replicas=2, replica_timeout=0.25,
    )
    assert isinstance(leader.protocol, ReplicatedScriptProtocol)
    assert (leader.protocol.replicas, leader.protocol.timeout_ms) == (2, 250)
    assert leader.durability is lockworker.Durability.REPLICATED
    with pytest.raises(lockworker.InvalidConfig, match="durability must be 'local' or"):
        lockworker.Leader(fakeredis.FakeRedis(), name="n", on_acquired=lambda term: None,
                          durability="quorum")


@pytest.mark.parametrize("side", ["sync", "asyncio"])
def test_a_lock_refuses_replicated_durability_saying_why_and_what_instead(side: str) -> None:
    from lockworker import aio

    make = (lambda **kw: lockworker.Lock(fakeredis.FakeRedis(), "x", **kw)) if side == "sync" \
        else (lambda **kw: aio.Lock(fakeredis.FakeAsyncRedis(), "x", **kw))
    assert make().durability == "local"
    with pytest.raises(lockworker.InvalidConfig) as refused:
        make(durability="replicated")
    message = str(refused.value)
    assert message.startswith("Lock supports durability='local' only (")
    assert message.endswith("), got durability='replicated'")
    assert "Redlock" in message and "docs/guarantees.md" in message
