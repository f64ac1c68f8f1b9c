"""A backup doing the primaries' work is shown so, with since when: ``lockworker status``
(its workers section, table and JSON) and the rows the dashboard shows."""

from __future__ import annotations

import json
import time

import pytest
import redis
from helpers import wait_for

import lockworker
from lockworker.cli.main import main
from lockworker.cli.workers import WorkerRow, worker_rows
from lockworker.model.presence import ACTING, presence_keys
from lockworker.testing import RedisServer


def worker(client: redis.Redis, namespace: str, owner: str, role: str) -> lockworker.Worker:
    made = lockworker.Worker(
        client, namespace=namespace, owner=owner, role=role, lock_timeout=1.0,
        handle_signals=False, on_acquired=lambda job: None,
    )
    made.process(f"register-{owner}")  # registered from its first job on
    return made


def row(client: redis.Redis, namespace: str, owner: str) -> WorkerRow | None:
    return next((w for w in worker_rows(client, namespace) if w.owner == owner), None)


def serving(client: redis.Redis, namespace: str, owner: str) -> WorkerRow | None:
    found = row(client, namespace, owner)
    return found if found is not None and found.serving_since is not None else None


def test_a_backup_serving_as_primary_is_shown_so_since_the_primary_left(
    redis_server: RedisServer, namespace: str, capsys: pytest.CaptureFixture[str],
) -> None:
    client = redis_server.client(decode_responses=True)
    primary = worker(client, namespace, "host-a", "primary")
    backup = worker(client, namespace, "host-b", "backup")
    again: lockworker.Worker | None = None
    try:
        idle = row(client, namespace, "host-b")
        assert idle is not None
        assert (idle.serving_as_primary, idle.serving_since, idle.shown_role) == (
            False, None, "backup"
        )
        before = time.time()
        primary.close()  # gone: the backup does its work from now on
        found = wait_for(lambda: serving(client, namespace, "host-b"))
        assert found.serving_as_primary
        assert found.serving_since is not None
        assert before - 1.0 <= found.serving_since <= time.time() + 1.0
        since = time.strftime("%H:%M:%S", time.localtime(found.serving_since))
        assert found.shown_role == f"backup, serving as primary since {since}"

        args = ["status", "--namespace", namespace, "--redis", redis_server.url]
        capsys.readouterr()
        assert main([*args, "--json"]) == 0
        [listed] = json.loads(capsys.readouterr().out)["workers"]
        assert (listed["owner"], listed["role"], listed["serving_as_primary"]) == (
            "host-b", "backup", True
        )
        assert listed["serving_since"] == found.serving_since
        assert main(args) == 0
        assert f"backup, serving as primary since {since}" in capsys.readouterr().out

        again = worker(client, namespace, "host-c", "primary")  # a primary serves again
        wait_for(lambda: row(client, namespace, "host-b") == _idle(client, namespace))
    finally:
        for made in (primary, backup, again):
            if made is not None:
                made.close()
    assert client.exists(presence_keys(namespace).extra(ACTING)) == 0  # left: forgotten
    client.close()


def _idle(client: redis.Redis, namespace: str) -> WorkerRow | None:
    found = row(client, namespace, "host-b")
    if found is None or found.serving_as_primary or found.serving_since is not None:
        return None
    return found


def test_a_backup_that_recorded_nothing_is_shown_serving_without_since_when(
    redis_server: RedisServer, namespace: str,
) -> None:
    """A backup of an earlier release records no start: with no primary registered, it
    is still shown serving as one."""
    client = redis_server.client(decode_responses=True)
    backup = worker(client, namespace, "host-b", "backup")
    try:
        wait_for(lambda: serving(client, namespace, "host-b"))
        client.delete(presence_keys(namespace).extra(ACTING))
        found = row(client, namespace, "host-b")
        assert found is not None
        assert (found.serving_as_primary, found.serving_since, found.shown_role) == (
            True, None, "backup, serving as primary"
        )
    finally:
        backup.close()
        client.close()
