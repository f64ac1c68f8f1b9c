"""``lockworker status`` lists schedules from their hashes: the latest tick and what
became of it, the next one, the counts (and ``--json``), against a real server."""

from __future__ import annotations

import json
import threading
from collections.abc import Mapping
from typing import Any

import pytest
import redis
from helpers import wait_for

from lockworker import Every, ScheduleSource, Worker
from lockworker.cli.main import main
from lockworker.cli.schedules import UNKNOWN, schedule_rows
from lockworker.daemons.schedules import server_now
from lockworker.model import registry as names
from lockworker.protocol import registry, text
from lockworker.protocol.schedules import decode_progress, schedule_key
from lockworker.runtime import events
from lockworker.testing import RedisServer


def hash_of(client: redis.Redis, namespace: str, name: str) -> dict[str, str]:
    raw = client.hgetall(schedule_key(namespace, name))
    return {text(k): text(v) for k, v in raw.items()}


def test_status_lists_a_served_schedule_with_its_ticks_and_counts(
    redis_server: RedisServer, redis_client: redis.Redis, namespace: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    now = int(server_now(redis_client))
    # As if nobody had served it for five ticks: catch_up="all" runs them, counted.
    redis_client.hset(
        schedule_key(namespace, "beat"), mapping={"last": now - 5, "resolved": now - 5}
    )
    worker = Worker(
        redis_client, namespace=namespace, on_acquired=lambda job: None,
        handle_signals=False, lock_timeout=2.0,
    )
    source = ScheduleSource(redis_client, [Every("beat", 1, catch_up="all")])
    thread = threading.Thread(target=worker.serve, args=(source,), daemon=True)
    thread.start()
    try:
        wait_for(lambda: int(hash_of(redis_client, namespace, "beat").get("ran", 0)) >= 6, 15)
    finally:
        worker.stop()
        thread.join(10)
        worker.close()
    found = hash_of(redis_client, namespace, "beat")
    seen = decode_progress(found)
    url = ["--namespace", namespace, "--redis", redis_server.url]
    assert main(["status", "--json", *url]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert main(["status", *url]) == 0
    out = capsys.readouterr().out

    (row,) = doc["schedules"]
    assert row["name"] == "beat" and row["namespace"] == namespace
    assert row["definition"] == {"every": 1} and row["spec"] == "every 1 s"
    assert (row["ran"], row["skipped"], row["caught_up"]) == (seen.ran, 0, seen.caught_up)
    assert seen.caught_up >= 4
    assert seen.last is not None
    assert row["last_tick"] == f"{source.schedules[0].tick_id(seen.last).partition('@')[2]}"
    expected = "ran (done)" if seen.last == seen.last_ran else "running"
    assert row["outcome"] == expected
    assert row["next_due"] == source.schedules[0].tick_id(seen.last + 1).partition("@")[2]
    line = next(line for line in out.splitlines() if line.startswith("beat "))
    assert "every 1 s" in line and expected in line and row["next_due"] in line
    assert line.split()[-4:] == [str(seen.ran), "0", str(seen.caught_up), str(seen.dropped)]


def test_a_hash_without_a_definition_shows_what_it_knows_and_says_so(
    redis_server: RedisServer, redis_client: redis.Redis, namespace: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    tick = 1_800_000_000
    redis_client.hset(
        schedule_key(namespace, "old"),
        mapping={"last": tick, "resolved": tick - 60, "last_ran": tick - 60, "ran": 3,
                 "skipped": 2, f"s:{tick}": 1},
    )
    registry.register(redis_client, names.schedule(namespace, "old"))  # as listed
    (row,) = schedule_rows(redis_client, namespace)
    assert (row.spec, row.next_due, row.outcome) == (None, None, "skipped")
    assert (row.ran, row.skipped, row.caught_up) == (3, 2, 0)
    assert row.last_tick == "2027-01-15T08:00:00Z"
    assert main(["status", "--namespace", namespace, "--redis", redis_server.url]) == 0
    out = capsys.readouterr().out
    line = next(line for line in out.splitlines() if line.startswith("old "))
    assert UNKNOWN in line and "2027-01-15T08:00:00Z" in line and "skipped" in line
    assert "no process of this release has recorded a definition" in out


def test_schedules_of_other_namespaces_are_left_out(
    redis_client: redis.Redis, namespace: str
) -> None:
    redis_client.hset(schedule_key(namespace, "mine"), mapping={"last": 60})
    redis_client.hset(schedule_key(namespace + "-other", "theirs"), mapping={"last": 60})
    theirs = names.schedule(namespace + "-other", "theirs")
    registry.register(redis_client, names.schedule(namespace, "mine"), theirs)
    try:
        assert [r.name for r in schedule_rows(redis_client, namespace)] == ["mine"]
        listed = {(r.namespace, r.name) for r in schedule_rows(redis_client)}
        assert {(namespace, "mine"), (namespace + "-other", "theirs")} <= listed
    finally:
        redis_client.delete(schedule_key(namespace + "-other", "theirs"))
        redis_client.srem(names.REGISTRY, theirs.member())


def test_a_tick_that_waited_reports_its_start_when_its_wait_ends(
    redis_client: redis.Redis, namespace: str
) -> None:
    """overlap="wait": the process that decided a tick should wait reports its admission
    (and its lateness, the wait included) once the tick runs."""
    seen: list[dict[str, Any]] = []

    def observe(logger: str, event: str, fields: Mapping[str, Any]) -> None:
        if event == "schedule.admitted" and fields.get("namespace") == namespace:
            seen.append(dict(fields))

    release = threading.Event()  # set once seen: the run in hand need not hold on

    def hold(job: object) -> None:
        release.wait(1.6)  # past the next tick: it waits for this one

    events.add_observer(observe)
    worker = Worker(redis_client, namespace=namespace, on_acquired=hold,
                    handle_signals=False, lock_timeout=2.0)
    source = ScheduleSource(redis_client, [Every("w", 1, overlap="wait")])
    thread = threading.Thread(
        target=worker.serve, args=(source,), kwargs={"concurrency": 2}, daemon=True
    )
    thread.start()
    try:
        wait_for(lambda: any(f.get("waited") for f in list(seen)), 15)
    finally:
        release.set()
        worker.stop()
        thread.join(10)
        worker.close()
        events.remove_observer(observe)
    waited = next(f for f in seen if f.get("waited"))
    assert waited["decided"] is True and waited["late_ms"] >= 500
