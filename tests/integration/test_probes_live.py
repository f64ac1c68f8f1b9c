"""The probes of a real Worker on a real server, in this process: a stalled heartbeat
fails liveness and readiness, and a Redis outage fails readiness only."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from helpers import in_thread, wait_for
from redis.backoff import NoBackoff
from redis.retry import Retry

import lockworker
from lockworker.cli import probes as http
from lockworker.runtime.health import Probes
from lockworker.testing import RedisServer


@pytest.fixture
def own_server() -> Iterator[RedisServer]:
    """A server of this test's own: it is stopped and started again."""
    with RedisServer() as server:
        yield server


class Held:
    """A worker whose hook holds its job until released; its probes."""

    def __init__(self, server: RedisServer, namespace: str, lock_timeout: float) -> None:
        # No retries of the client's own: lockworker's policy bounds each renewal.
        self.client = server.client(socket_timeout=0.75, retry=Retry(NoBackoff(), 0))
        self.entered, self.release, self.lost = (threading.Event() for _ in range(3))
        self.worker = lockworker.Worker(
            self.client, namespace=namespace, lock_timeout=lock_timeout, handle_signals=False,
            on_acquired=self.hold, on_lost=lambda job: self.lost.set(),
        )
        self.probes: Probes = http.for_daemon(self.worker, server.url, 0.75)
        self.probes.started()

    def hold(self, job: lockworker.Job) -> None:
        self.entered.set()
        self.release.wait(30)

    def start(self) -> tuple[threading.Thread, dict[str, Any]]:
        ran = in_thread(lambda: self.worker.process("held"))
        assert self.entered.wait(10)
        return ran

    def close(self, ran: tuple[threading.Thread, dict[str, Any]]) -> None:
        self.release.set()
        ran[0].join(30)
        self.worker.stop()
        self.worker.close()
        self.client.close()


def test_a_stalled_heartbeat_fails_both_probes_until_it_runs_again(
    redis_server: RedisServer, namespace: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The heartbeat thread stops running (here: its next renewal blocks before it is
    sent, as a deadlock would) while a job holds its lease: ``/healthz`` turns 503
    within a period and the bound, and ``/readyz`` with it; once it runs again (and
    finds the lease lost meanwhile) both are 200."""
    held = Held(redis_server, namespace, lock_timeout=1.5)
    ran = held.start()
    assert held.probes.healthz().ok and held.probes.readyz().ok
    heartbeat, unstall = held.worker._heartbeat, threading.Event()
    beat = heartbeat.beat

    def stalled(lease: Any) -> None:
        unstall.wait(30)
        beat(lease)

    monkeypatch.setattr(heartbeat, "beat", stalled)
    try:
        dead = wait_for(lambda: next((v for v in [held.probes.healthz()] if not v.ok), None),
                        timeout=20)
        assert dead.reason.startswith("heartbeat stalled:"), dead
        assert held.probes.readyz().reason.startswith("heartbeat stalled:")
    finally:
        unstall.set()
    assert held.lost.wait(10)  # the lease ran out while the heartbeat stood still
    wait_for(lambda: held.probes.healthz().ok and held.probes.readyz().ok, timeout=20)
    held.close(ran)


def test_a_redis_outage_fails_readiness_but_never_liveness(
    own_server: RedisServer, namespace: str
) -> None:
    """While the server is down the renewals of a held lease fail until the lease is
    lost: that is Redis's trouble, so ``/healthz`` stays 200 throughout (a restart
    would not help) while ``/readyz`` says Redis is unreachable; both 200 once it is
    back."""
    held = Held(own_server, namespace, lock_timeout=1.0)
    ran = held.start()
    own_server.stop()
    health: list[bool] = []
    ready: list[str] = []

    def outage_seen() -> bool:
        health.append(held.probes.healthz().ok)
        verdict = held.probes.readyz()
        ready.append("" if verdict.ok else verdict.reason)
        return held.lost.is_set() and any(ready)

    wait_for(outage_seen, timeout=30, interval=0.05)
    assert all(health), health
    assert any(r.startswith("Redis unreachable: ") for r in ready), ready
    own_server.start()
    wait_for(lambda: held.probes.readyz().ok, timeout=20)
    assert held.probes.healthz().ok
    held.close(ran)


def test_the_ping_client_has_short_timeouts_and_no_retries(redis_server: RedisServer) -> None:
    client = http.ping_client(redis_server.url)
    try:
        assert client.ping()
        kwargs = client.connection_pool.connection_kwargs
        assert kwargs["socket_timeout"] == kwargs["socket_connect_timeout"] == http.PING_TIMEOUT
        assert http.client_retries(client) == 0
    finally:
        client.close()
    assert isinstance(client, redis.Redis)
