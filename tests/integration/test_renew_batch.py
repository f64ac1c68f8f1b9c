"""A worker's heartbeat renews the leases it holds in one round trip, not one each;
each lease is still renewed or lost by its own answer."""

from __future__ import annotations

import threading
from typing import Any

import pytest
import redis

import lockworker
from lockworker.model.state import Renewal
from lockworker.protocol import batch as protocol_batch
from lockworker.protocol.script import RENEW_SCRIPT
from lockworker.runtime.lease import Heartbeat, Lease
from lockworker.testing.clock import FakeClock


def test_six_long_jobs_are_renewed_together_and_all_end_done(
    redis_client: redis.Redis, namespace: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Leases of 0.9 s (renewed every 0.3 s) held 1.5 s by six jobs at once: the
    renewals go in shared round trips, and no lease is lost."""
    release = threading.Event()
    started = threading.Semaphore(0)

    def hold(job: lockworker.Job) -> None:
        started.release()
        release.wait(10)

    renewal_trips: list[int] = []
    real_send = protocol_batch.send

    def counted(client: redis.Redis, steps: Any) -> list[Any]:
        if steps and all(step.script is RENEW_SCRIPT for step in steps):
            renewal_trips.append(len(steps))
        return real_send(client, steps)

    monkeypatch.setattr(protocol_batch, "send", counted)
    lost: list[str] = []
    worker = lockworker.Worker(
        redis_client, namespace=namespace, lock_timeout=0.9, on_acquired=hold,
        on_lost=lambda job: lost.append(job.id), handle_signals=False,
    )
    serving = threading.Thread(
        target=worker.serve, args=([(f"j{i}", None) for i in range(6)],),
        kwargs={"concurrency": 6},
    )
    serving.start()
    for _ in range(6):
        assert started.acquire(timeout=10)
    threading.Timer(1.5, release.set).start()
    serving.join(20)
    worker.close()
    assert not lost
    assert all(worker.inspect(f"j{i}").status.value == "done" for i in range(6))
    assert renewal_trips and max(renewal_trips) >= 4  # shared, not one round trip each
    assert sum(renewal_trips) >= 6


def test_each_lease_of_a_batch_is_renewed_or_lost_by_its_own_answer() -> None:
    clock = FakeClock()
    answers: list[list[Any]] = [[Renewal.RENEWED, Renewal.NOT_HOLDER, ConnectionError("x")]]
    heartbeat = Heartbeat(clock, 1.0, send_many=lambda steps, deadline: answers.pop(0))
    lost: list[str] = []
    leases = []
    for name in ("kept", "taken", "failed"):
        lease = Lease.granted(
            lambda deadline: True, 3.0, clock.monotonic(),
            on_lost=lambda _lease, reason, name=name: lost.append(name),  # type: ignore[misc]
        )
        lease.step = name
        lease.answer = lambda renewal: renewal is Renewal.RENEWED
        leases.append(lease)
    clock.advance(1.0)
    heartbeat.beat_many(leases)
    assert lost == ["taken", "failed"]
    assert leases[0].next_renewal == pytest.approx(clock.monotonic() + 1.0)
    assert not leases[0].lost


def test_a_batch_that_cannot_be_sent_loses_every_lease_in_it() -> None:
    clock = FakeClock()

    def broken(steps: Any, deadline: float) -> list[Any]:
        raise lockworker.RedisUnavailable("down")

    heartbeat = Heartbeat(clock, 1.0, send_many=broken)
    lost: list[int] = []
    leases = []
    for i in range(3):
        lease = Lease.granted(
            lambda deadline: True, 3.0, clock.monotonic(),
            on_lost=lambda _lease, reason, i=i: lost.append(i),  # type: ignore[misc]
        )
        lease.step, lease.answer = i, bool
        leases.append(lease)
    heartbeat.beat_many(leases)
    assert sorted(lost) == [0, 1, 2]
