"""The views find namespaces, streams, schedules and leaders in the registry, not by
walking the keyspace; and walk it, as before, while nothing of a kind is registered."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest
import redis
import redis.asyncio as aredis
from helpers import wait_for

import lockworker
from lockworker import Every, Leader, ScheduleSource, StreamSource, aio
from lockworker.cli import readers, registered, status
from lockworker.cli.main import main
from lockworker.cli.schedules import schedule_rows
from lockworker.cli.web.view import Collector
from lockworker.cli.workers import worker_rows
from lockworker.model import registry as names
from lockworker.model.codec import StateValue
from lockworker.model.keys import JobKeys, Space
from lockworker.model.state import JobStatus
from lockworker.protocol import registry
from lockworker.protocol.schedules import schedule_key
from lockworker.runtime import registering
from lockworker.testing import RedisServer


@pytest.fixture(scope="module")
def redis_server(own_server: RedisServer) -> RedisServer:
    """This module's own server (conftest ``own_server``): its tests read every
    registered namespace, which on the session's server grows with the suite."""
    return own_server


class Walked(AssertionError):
    pass


def walk(*_args: Any, **kwargs: Any) -> Any:
    """What the views walked the keyspace with (SCAN by pattern), failing. The
    dashboard's bounded sample of what the server holds (``footprint``: plain ``SCAN``
    calls within a time budget) is not a walk and is left alone."""
    raise Walked(f"SCAN over the keyspace: {kwargs.get('match')!r}")


def lead_once(leader: Leader) -> None:
    thread = threading.Thread(target=leader.run, daemon=True)
    thread.start()
    thread.join(10)
    assert not thread.is_alive()


def test_what_was_served_once_is_listed_without_a_walk_of_the_keyspace(
    redis_client: redis.Redis, namespace: str, monkeypatch: pytest.MonkeyPatch,
) -> None:
    stream, leader_name = f"{namespace}-orders", f"{namespace}-lead"
    worker = lockworker.Worker(redis_client, namespace=namespace, on_acquired=lambda j: None,
                               handle_signals=False, lock_timeout=2.0)
    reader = StreamSource(redis_client, stream, owner="host-a")
    schedule = ScheduleSource(redis_client, [Every("beat", 3600)])
    schedule.attach(worker)
    stopped = threading.Event()
    stopped.set()
    assert list(schedule.deliveries(stopped)) == []  # begins being served, stops at once
    leader = Leader(redis_client, name=leader_name, handle_signals=False, lock_timeout=2.0,
                    on_acquired=lambda term: leader.stop())
    lead_once(leader)
    failing = lockworker.Worker(redis_client, namespace=namespace, on_acquired=fail,
                                max_attempts=1, handle_signals=False, lock_timeout=2.0)
    assert failing.process("broken") is lockworker.Outcome.GAVE_UP
    assert worker.process("fine") is lockworker.Outcome.DONE
    failing.close()

    serving = threading.Thread(target=worker.serve, args=(reader,), daemon=True)
    serving.start()  # registers the stream, the worker's presence and its namespace
    try:
        wait_for(lambda: any(w.namespace == namespace for w in worker_rows(redis_client, None)))
        wait_for(lambda: stream in registry.names(redis_client, names.STREAM))
        with monkeypatch.context() as patch:
            patch.setattr(redis.Redis, "scan_iter", walk)
            assert leader_name in [r.id for r in status.leader_rows(redis_client)]
            assert stream in [r.stream for r in readers.stream_rows(redis_client)]
            assert ("beat", "every 3600 s") in [
                (r.name, r.spec) for r in schedule_rows(redis_client, namespace)
            ]
            assert namespace in [w.namespace for w in worker_rows(redis_client, None)]
            view = Collector(redis_client).read()
            assert view.error is None
            assert leader_name in [r.id for r in view.leaders]
            assert namespace in [w.namespace for w in view.workers]
            assert (namespace, "beat") in [(s.namespace, s.name) for s in view.schedules]
            # The jobs from the index: the given-up one listed; the done one is not
            # (finished jobs are counted from the workers' outcomes per minute).
            mine = [(r.id, r.state) for r in view.jobs if r.namespace == namespace]
            assert mine == [("broken", "gave_up")]
            assert view.counts[namespace]["gave_up"] == 1
            assert isinstance(view.counts[namespace]["done"], int)
    finally:
        worker.stop()
        serving.join(10)
        worker.close()


def fail(_job: lockworker.Job) -> None:
    raise RuntimeError("nope")


def test_each_kind_registers_once_whatever_its_serving(
    redis_server: RedisServer, redis_client: redis.Redis, namespace: str
) -> None:
    """A sync and an asyncio leader each add their name at their first campaign."""
    sync_name, async_name = f"{namespace}-sync", f"{namespace}-async"
    leader = Leader(redis_client, name=sync_name, handle_signals=False, lock_timeout=2.0,
                    on_acquired=lambda term: leader.stop())
    lead_once(leader)

    async def lead_async() -> None:
        client = aredis.Redis(host="127.0.0.1", port=redis_server.port)
        made: list[aio.Leader] = []

        async def lead(term: aio.AsyncTerm) -> None:
            made[0].stop()

        made.append(aio.Leader(client, name=async_name, on_acquired=lead,
                               handle_signals=False, lock_timeout=2.0))
        await asyncio.wait_for(made[0].run(), 10)
        await client.aclose()

    asyncio.run(lead_async())
    leaders = registry.names(redis_client, names.LEADER)
    assert {sync_name, async_name} <= set(leaders)
    assert len(leaders) == len(set(leaders))


def test_while_no_registry_exists_the_views_walk_the_keyspace_and_index_registers_all(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Things served by 0.3.0 (no registry): every kind found by SCAN, as before; once
    anything registers, every kind is read from the registry alone (a fresh server's
    views never walk), and ``lockworker index`` registers what the walk finds."""
    with RedisServer() as server:
        client = server.client(decode_responses=True)
        old = StateValue(JobStatus.GAVE_UP, 1, 1, "0123456789abcdef", "host-a")
        client.set(JobKeys.of("old-ns", "job-1").state, old.encode(), px=3_600_000)
        client.hset(schedule_key("old-ns", "nightly"), mapping={"last": 60})
        client.set(JobKeys("leaders", "old-leader", Space.LEADER).state,
                   StateValue(JobStatus.PENDING, 3, 3, "0123456789abcdef", "host-a").encode())
        assert client.smembers(names.REGISTRY) == set()
        assert [r.id for r in status.leader_rows(client)] == ["old-leader"]
        assert registered.schedules(client) == [("old-ns", "nightly")]
        view = Collector(client).read()
        assert [(r.namespace, r.id, r.state) for r in view.jobs] == [
            ("old-ns", "job-1", "gave_up")
        ]
        assert view.counts["old-ns"]["gave_up"] == 1
        assert [r.id for r in view.leaders] == ["old-leader"]

        registry.register(client, names.leader("new-leader"), names.namespace("new-ns"))
        assert [r.id for r in status.leader_rows(client)] == ["new-leader"]
        assert [r.id for r in Collector(client).read().jobs] == []  # new-ns has none yet
        assert registered.schedules(client) == []  # not served since: not registered

        assert main(["index", "--redis", server.url]) == 0
        assert "registered 2 streams, schedules and leaders found" in capsys.readouterr().out
        assert sorted(r.id for r in status.leader_rows(client)) == ["new-leader", "old-leader"]
        assert registered.schedules(client) == [("old-ns", "nightly")]
        assert [(r.namespace, r.id, r.state) for r in Collector(client).read().jobs] == [
            ("old-ns", "job-1", "gave_up")
        ]
        client.close()


def test_a_registration_that_fails_is_tried_again_at_the_next_start(
    redis_client: redis.Redis, namespace: str, monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls: list[int] = []
    real = registry.register

    def flaky(client: Any, *found: names.Registered) -> None:
        calls.append(len(found))
        if len(calls) == 1:
            raise redis.ConnectionError("down")
        real(client, *found)

    monkeypatch.setattr(registry, "register", flaky)
    once = registering.stream(redis_client, f"{namespace}-s")
    once()  # suppressed
    assert not once.done
    once()
    once()
    assert once.done and calls == [1, 1]
    assert f"{namespace}-s" in registry.names(redis_client, names.STREAM)
