"""``lockworker index`` on a real server: jobs written before the index existed (their
entries deleted after the steps, as a release without the index leaves them) are
indexed in the kind their state says, a DONE job is not, the namespace is marked
indexed, and a second run writes the same entries."""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

import pytest
import redis
from helpers import RETENTION, grant, held

import lockworker
from lockworker.cli.main import main
from lockworker.cli.reindex import index_all, unindexed_note
from lockworker.model import registry as names
from lockworker.model.codec import StateValue
from lockworker.model.index import Kind
from lockworker.model.keys import JobKeys
from lockworker.model.state import JobStatus
from lockworker.protocol import ScriptProtocol, registry
from lockworker.protocol import index as reading
from lockworker.protocol.reindex import index_jobs
from lockworker.runtime import events
from lockworker.runtime import reindex as runtime_reindex
from lockworker.runtime.presence import INDEXED, NOT_INDEXED
from lockworker.testing import RedisServer

LATER_MS = 600_000
AGO_MS = 30_000


def kinds(client: redis.Redis, namespace: str) -> dict[str, Kind]:
    """Every job of the index with its kind, from the lists of every kind."""
    return {e.job_id: kind for kind in Kind for e in reading.listed(client, namespace, kind)}


def forget_index(client: redis.Redis, namespace: str) -> None:
    """Delete the namespace's index and its marks: the jobs are as an older release
    left them."""
    found = client.keys(f"lw:index:{namespace}:*")
    if found:
        client.delete(*found)
    client.srem(names.REGISTRY, names.namespace(namespace).member())
    client.hdel(names.INDEXED, namespace)


def every_state(client: redis.Redis, namespace: str) -> dict[str, Kind | None]:
    """One job in each state, written by the steps; the kind each must be indexed as."""
    protocol = ScriptProtocol(client)

    def keys(job: str) -> JobKeys:
        return JobKeys.of(namespace, job)

    grant(protocol, keys("held"), "a")
    g = grant(protocol, keys("backoff"), "a")
    protocol.fail(keys("backoff"), held(g, "a"), 3, RETENTION, delay_ms=LATER_MS)
    g = grant(protocol, keys("pending"), "a")
    protocol.release(keys("pending"), held(g, "a"), RETENTION)
    g = grant(protocol, keys("gave-up"), "a", max_attempts=1)
    protocol.fail(keys("gave-up"), held(g, "a"), 1, RETENTION)
    g = grant(protocol, keys("done"), "a")
    protocol.complete(keys("done"), held(g, "a"), RETENTION)
    # A state written directly with the codec, as release 0.3.0 writes it, 30 s ago
    # (its time to live is the retention less 30 s): no step of this release wrote an
    # entry for it.
    client.set(keys("reset").state, StateValue(JobStatus.PENDING, 0, 123, "", "").encode(),
               px=RETENTION - AGO_MS)
    return {"held": Kind.HELD, "backoff": Kind.BACKOFF, "pending": Kind.PENDING,
            "gave-up": Kind.GAVE_UP, "done": None, "reset": Kind.PENDING}


def run_index(url: str, namespace: str, capsys: pytest.CaptureFixture[str]) -> list[str]:
    retention = str(RETENTION / 1000)
    assert main(["index", "--namespace", namespace, "--retention", retention,
                 "--redis", url]) == 0
    return capsys.readouterr().out.splitlines()


def test_the_command_indexes_each_job_in_its_kind_and_marks_the_namespace(
    redis_server: RedisServer, redis_client: redis.Redis, namespace: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    expected = every_state(redis_client, namespace)
    forget_index(redis_client, namespace)
    assert kinds(redis_client, namespace) == {}
    assert namespace not in registry.indexed(redis_client)

    out = run_index(redis_server.url, namespace, capsys)

    assert kinds(redis_client, namespace) == {
        job: kind for job, kind in expected.items() if kind is not None
    }
    assert (f"indexed 6 jobs in namespace {namespace}: held 1, backing off 1, pending 2, "
            f"given up 1, done/forgotten 1") in out
    assert namespace in registry.names(redis_client, names.NAMESPACE)
    assert namespace in registry.indexed(redis_client)
    [backoff] = reading.listed(redis_client, namespace, Kind.BACKOFF)
    counts = reading.count(redis_client, namespace, RETENTION)
    assert backoff.ms > counts.now_ms + LATER_MS - 60_000
    # A pending job's time is when its state was written (its age from its TTL).
    pending = {e.job_id: e.ms for e in reading.listed(redis_client, namespace, Kind.PENDING)}
    assert counts.now_ms - 5_000 < pending["pending"] <= counts.now_ms
    assert counts.now_ms - AGO_MS - 5_000 < pending["reset"] <= counts.now_ms - AGO_MS


def test_running_it_again_writes_the_same_entries(
    redis_server: RedisServer, redis_client: redis.Redis, namespace: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    every_state(redis_client, namespace)
    forget_index(redis_client, namespace)
    first = run_index(redis_server.url, namespace, capsys)
    once = kinds(redis_client, namespace)
    backoff = reading.listed(redis_client, namespace, Kind.BACKOFF)
    again = run_index(redis_server.url, namespace, capsys)
    assert kinds(redis_client, namespace) == once
    assert reading.listed(redis_client, namespace, Kind.BACKOFF) == backoff
    assert [line for line in again if line.startswith("indexed")] == [
        line for line in first if line.startswith("indexed")
    ]


def test_steps_after_the_index_move_the_entries_it_wrote(
    redis_client: redis.Redis, namespace: str
) -> None:
    """A job stepping after (or while) it is indexed ends in the kind of its last step:
    each step rewrites the entry from the state it writes."""
    every_state(redis_client, namespace)
    forget_index(redis_client, namespace)
    index_all(redis_client, namespace, RETENTION)
    protocol = ScriptProtocol(redis_client)
    keys = JobKeys.of(namespace, "reset")
    g = grant(protocol, keys, "b")
    assert kinds(redis_client, namespace)["reset"] is Kind.HELD
    protocol.complete(keys, held(g, "b"), RETENTION)
    assert "reset" not in kinds(redis_client, namespace)


def test_a_foreign_value_is_left_alone_and_reported(
    redis_client: redis.Redis, namespace: str
) -> None:
    foreign = JobKeys.of(namespace, "theirs")
    redis_client.set(foreign.state, "not ours")
    mine = JobKeys.of(namespace, "mine")
    redis_client.set(mine.state, StateValue(JobStatus.GAVE_UP, 3, 9, "", "x").encode(),
                     px=RETENTION)
    tally = index_all(redis_client, namespace, RETENTION)[namespace]
    assert redis_client.get(foreign.state) == "not ours"
    assert [line.split(":")[0] for line in tally.foreign] == ["job 'theirs'"]
    assert kinds(redis_client, namespace) == {"mine": Kind.GAVE_UP}
    assert namespace in registry.indexed(redis_client)


def test_a_hash_where_a_state_is_reported_foreign(
    redis_client: redis.Redis, namespace: str
) -> None:
    keys = JobKeys.of(namespace, "hash")
    redis_client.hset(keys.lock, "a", "b")
    redis_client.set(keys.state, StateValue(JobStatus.PENDING, 1, 9, "", "x").encode())
    [result] = index_jobs(redis_client, [keys], RETENTION)
    assert isinstance(result, Exception) and "another type" in str(result)
    assert kinds(redis_client, namespace) == {}


def test_the_note_names_a_registered_namespace_not_indexed(
    redis_client: redis.Redis, namespace: str
) -> None:
    registry.register(redis_client, names.namespace(namespace))
    [line] = unindexed_note(redis_client, [namespace])
    assert namespace in line and f"lockworker index --namespace {namespace}" in line
    assert any(namespace in line for line in unindexed_note(redis_client))
    index_all(redis_client, namespace, RETENTION)
    assert unindexed_note(redis_client, [namespace]) == []
    assert not any(namespace in line for line in unindexed_note(redis_client))


def test_a_namespace_registered_without_jobs_is_marked_by_its_run(
    redis_server: RedisServer, redis_client: redis.Redis, namespace: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    registry.register(redis_client, names.namespace(namespace))
    out = run_index(redis_server.url, namespace, capsys)
    assert f"namespace {namespace}: marked indexed" in out
    assert namespace in registry.indexed(redis_client)


def test_a_namespace_nobody_knows_is_not_marked(
    redis_server: RedisServer, redis_client: redis.Redis, namespace: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    out = run_index(redis_server.url, namespace, capsys)
    assert out == [f"no jobs found in namespace {namespace}"]
    assert namespace not in registry.indexed(redis_client)
    assert namespace not in registry.names(redis_client, names.NAMESPACE)


def observed(*wanted: str) -> tuple[list[tuple[str, dict[str, object]]], Any]:
    """A list of the events ``wanted`` as they are logged, and their observer."""
    seen: list[tuple[str, dict[str, object]]] = []

    def observe(logger: str, event: str, fields: Mapping[str, Any]) -> None:
        if event in wanted:
            seen.append((event, dict(fields)))

    return seen, observe


def wait_marked(client: redis.Redis, namespace: str) -> None:
    deadline = time.monotonic() + 10
    while namespace not in registry.indexed(client):
        assert time.monotonic() < deadline, "the namespace was never marked indexed"
        time.sleep(0.01)


@pytest.mark.parametrize("case", ["marked", "alone", "beside another"])
def test_a_worker_indexes_its_namespace_only_when_alone_in_it_and_else_says_how(
    redis_client: redis.Redis, namespace: str, case: str
) -> None:
    """Alone in a namespace not marked indexed, the first worker indexes the older
    jobs itself and marks it (no process of 0.3.0 can serve there, whose steps write
    no entries); beside another worker (which may be of 0.3.0), it says once which
    command to run, and marks nothing; in a marked namespace it does neither."""
    expected = every_state(redis_client, namespace)
    forget_index(redis_client, namespace)
    if case == "marked":
        registry.mark_indexed(redis_client, namespace, 1)
    seen, observe = observed(NOT_INDEXED, INDEXED)
    other = lockworker.Worker(redis_client, namespace=namespace, handle_signals=False,
                              on_acquired=lambda job: None)
    if case == "beside another":  # registered (a 0.3.0 one would not mark anything)
        other.process("first")
        wait_marked(redis_client, namespace)
        redis_client.hdel(names.INDEXED, namespace)
    events.add_observer(observe)
    try:
        with lockworker.Worker(redis_client, namespace=namespace, handle_signals=False,
                               on_acquired=lambda job: None) as worker:
            worker.process("a")
            worker.process("b")
            if case == "alone":
                wait_marked(redis_client, namespace)
    finally:
        other.close()
        events.remove_observer(observe)
    if case == "marked":
        assert seen == []
    elif case == "alone":
        [(event, fields)] = seen
        assert event == INDEXED and fields["namespace"] == namespace
        listed = kinds(redis_client, namespace)
        assert {job: listed.get(job) for job in expected} == expected
    else:
        [(event, fields)] = seen
        assert event == NOT_INDEXED and fields["namespace"] == namespace
        assert fields["command"] == f"lockworker index --namespace {namespace}"
        assert namespace not in registry.indexed(redis_client)


def test_a_scan_that_fails_marks_nothing(
    redis_server: RedisServer, redis_client: redis.Redis, namespace: str,
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
) -> None:
    every_state(redis_client, namespace)
    forget_index(redis_client, namespace)

    def broken(*args: object) -> list[object]:
        raise redis.ConnectionError("gone")

    monkeypatch.setattr(runtime_reindex, "index_jobs", broken)
    assert main(["index", "--namespace", namespace, "--redis", redis_server.url]) == 1
    assert "ConnectionError: gone" in capsys.readouterr().err
    assert namespace in registry.names(redis_client, names.NAMESPACE)
    assert namespace not in registry.indexed(redis_client)


@pytest.mark.parametrize("alone", [True, False])
def test_an_asyncio_worker_indexes_its_namespace_only_when_alone_in_it(
    redis_server: RedisServer, redis_client: redis.Redis, namespace: str, alone: bool
) -> None:
    import asyncio

    import redis.asyncio

    from lockworker.aio.worker import Worker as AsyncWorker

    expected = every_state(redis_client, namespace)
    forget_index(redis_client, namespace)
    seen, observe = observed(NOT_INDEXED, INDEXED)
    other = lockworker.Worker(redis_client, namespace=namespace, handle_signals=False,
                              on_acquired=lambda job: None)
    if not alone:
        other.process("first")
        wait_marked(redis_client, namespace)
        redis_client.hdel(names.INDEXED, namespace)

    async def serve() -> None:
        client = redis.asyncio.Redis(port=redis_server.port, decode_responses=True)
        try:
            async with AsyncWorker(client, namespace=namespace, handle_signals=False,
                                   on_acquired=lambda job: None) as worker:
                await worker.process("a")
                deadline = time.monotonic() + 10
                while alone and namespace not in registry.indexed(redis_client):
                    assert time.monotonic() < deadline, "never marked indexed"
                    await asyncio.sleep(0.01)
        finally:
            await client.aclose()

    events.add_observer(observe)
    try:
        asyncio.run(serve())
    finally:
        other.close()
        events.remove_observer(observe)
    [(event, fields)] = seen
    if alone:
        assert event == INDEXED
        listed = kinds(redis_client, namespace)
        assert {job: listed.get(job) for job in expected} == expected
    else:
        assert event == NOT_INDEXED
        assert fields["command"] == f"lockworker index --namespace {namespace}"
