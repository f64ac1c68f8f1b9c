"""Server settings and permissions that void the guarantees, caught before work starts:
real servers started with each eviction policy, one that refuses CONFIG, and ACL users
missing a channel, a key pattern or EVALSHA."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator
from typing import Any

import pytest
import redis
import redis.asyncio
import structlog
from helpers import wait_for, who

import lockworker
from lockworker import aio
from lockworker.model.keys import JobKeys
from lockworker.model.servercheck import Status
from lockworker.model.state import Settle
from lockworker.protocol import ScriptProtocol
from lockworker.runtime import events, servercheck
from lockworker.testing.server import RedisServer

POLICIES = {
    "noeviction": Status.OK, "allkeys-lru": Status.FAILURE,
    "volatile-lru": Status.FAILURE, "volatile-ttl": Status.FAILURE,
}


def started(*args: str) -> RedisServer:
    return RedisServer(extra_args=args).start()


@pytest.fixture(scope="module")
def evicting() -> Iterator[RedisServer]:
    server = started("--maxmemory", "8mb", "--maxmemory-policy", "volatile-lru")
    yield server
    server.close()


@pytest.fixture
def structlog_unconfigured() -> Iterator[None]:
    """structlog as an application that never configured it: events go to ``logging``."""
    was_configured, saved = structlog.is_configured(), structlog.get_config()
    structlog.reset_defaults()
    yield
    if was_configured:
        structlog.configure(**saved)
    else:
        structlog.reset_defaults()


def by_check(findings: list[Any]) -> dict[str, Any]:
    return {f.check: f for f in findings}


@pytest.mark.parametrize("policy", POLICIES)
def test_verdict_per_policy(policy: str) -> None:
    server = started("--maxmemory", "8mb", "--maxmemory-policy", policy)
    try:
        client = server.client(decode_responses=True)
        found = by_check(servercheck.settings_findings(client))
        assert found["eviction"].status is POLICIES[policy]
        assert f"maxmemory-policy={policy}" in found["eviction"].value
        assert found["eviction"].server == f"127.0.0.1:{server.port}"
        assert found["persistence"].status is Status.WARNING  # the test server saves nothing
        client.close()
    finally:
        server.close()


def test_a_server_refusing_config_is_judged_through_info() -> None:
    server = started("--maxmemory", "8mb", "--maxmemory-policy", "allkeys-lru",
                     "--rename-command", "CONFIG", "")
    try:
        client = server.client(decode_responses=True)
        with pytest.raises(redis.ResponseError):
            client.config_get("maxmemory-policy")
        found = by_check(servercheck.settings_findings(client))
        assert found["eviction"].status is Status.FAILURE
        assert "allkeys-lru" in found["eviction"].value
        assert found["persistence"].value == "appendonly=no"
        client.close()
    finally:
        server.close()


def test_serve_logs_the_evicting_policy_at_start_through_logging(
    evicting: RedisServer, caplog: pytest.LogCaptureFixture, structlog_unconfigured: None
) -> None:
    client = evicting.client(decode_responses=True)
    done: list[str] = []
    worker = lockworker.Worker(client, namespace="startup", handle_signals=False,
                               on_acquired=lambda job: done.append(job.id))
    with caplog.at_level(logging.WARNING, logger="lockworker"):
        worker.serve([("a", None)])
    worker.close()
    client.close()
    checks = {
        r.check: r for r in caplog.records if getattr(r, "event", None) == events.SERVER_CHECK
    }
    assert checks["eviction"].levelno == logging.ERROR
    assert "volatile-lru" in checks["eviction"].value
    assert "run again" in checks["eviction"].consequence
    # a plain handler shows the setting and what to do, not the event name alone
    shown = checks["eviction"].getMessage()
    assert shown.startswith("server.check ") and "check=eviction" in shown
    assert "volatile-lru" in shown and 'fix="set maxmemory-policy noeviction' in shown
    assert checks["persistence"].levelno == logging.WARNING
    assert done == ["a"]


def test_a_running_daemon_checks_again(evicting: RedisServer) -> None:
    client = evicting.client(decode_responses=True)
    seen: list[str] = []

    def observer(_name: str, event: str, fields: Any) -> None:
        if event == events.SERVER_CHECK and fields["check"] == "eviction":
            seen.append(fields["status"])

    events.add_observer(observer)
    watch = servercheck.Watch(client, events.logger(events.WORKER), lockworker.SystemClock(),
                              every=0.05)
    try:
        watch.start()
        wait_for(lambda: len(seen) >= 3, timeout=10)
    finally:
        watch.stop()
        events.remove_observer(observer)
        client.close()
    assert set(seen) == {"failure"}


def test_metrics_export_the_verdicts_and_evicted_keys(
    evicting: RedisServer, metrics_registry: Any
) -> None:
    client = evicting.client(decode_responses=True)
    servercheck.log_findings(events.logger(events.WORKER),
                             servercheck.settings_findings(client))
    client.close()
    where = f"127.0.0.1:{evicting.port}"
    assert metrics_registry.get_sample_value(
        "lockworker_server_check", {"server": where, "check": "eviction"}) == 3
    assert metrics_registry.get_sample_value(
        "lockworker_server_evicted_keys", {"server": where}) == 0


# -- permissions --------------------------------------------------------------------

@pytest.fixture(scope="module")
def acl_server() -> Iterator[RedisServer]:
    server = started("--acl-pubsub-default", "resetchannels")
    admin = server.client()
    users = {
        "nochannel": ["~lw:*", "+@all"],
        "nokeys": ["~other:*", "&*", "+@all"],
        "noevalsha": ["~lw:*", "&*", "+@all", "-evalsha"],
        "allowed": ["~lw:*", "&lw:*", "+@all"],
        # docs/deployment.md's minimal line
        "documented": ["~lw:*", "&lw:*", "+@read", "+@write", "+@scripting", "+@pubsub",
                       "+@stream", "+@connection", "+ping", "+time", "+info"],
    }
    for name, rules in users.items():
        admin.execute_command("ACL", "SETUSER", name, "on", ">pw", *rules)
    admin.close()
    yield server
    server.close()


def user_client(server: RedisServer, name: str) -> redis.Redis:
    return redis.Redis(port=server.port, username=name, password="pw", decode_responses=True)


@pytest.mark.parametrize(
    ("user", "grant"),
    [("nochannel", "&lw:*"), ("nokeys", "~lw:*"), ("noevalsha", "+evalsha")],
)
def test_a_user_missing_a_permission_is_told_the_grant_before_any_handler(
    acl_server: RedisServer, user: str, grant: str
) -> None:
    client = user_client(acl_server, user)
    ran: list[str] = []
    worker = lockworker.Worker(client, namespace="acl", handle_signals=False,
                               on_acquired=lambda job: ran.append(job.id))
    finding = servercheck.permission_finding(client, JobKeys.of("acl", "-"))
    assert finding.status is Status.FAILURE
    assert grant in finding.fix.split() and f"ACL SETUSER {user}" in finding.fix
    with pytest.raises(lockworker.PermissionDenied, match=f"ACL SETUSER {user} .*{grant[1:]}"):
        worker.process("j1")
    with pytest.raises(lockworker.PermissionDenied):
        worker.serve([("j2", None)])
    assert ran == []
    admin = acl_server.client(decode_responses=True)
    assert admin.keys("lw:*{acl}*") + admin.keys("lw:*:acl:*") == []  # nothing written
    admin.close()
    worker.close()
    client.close()


@pytest.mark.parametrize("user", ["allowed", "documented"])
def test_a_user_with_the_documented_grants_passes(acl_server: RedisServer, user: str) -> None:
    client = user_client(acl_server, user)
    assert servercheck.permission_finding(client, JobKeys.of("acl", "-")).status is Status.OK
    worker = lockworker.Worker(client, namespace=f"acl-{user}", handle_signals=False,
                               on_acquired=lambda job: None)
    assert worker.process("j") is lockworker.Outcome.DONE
    worker.serve([("k", None)])
    worker.close()
    client.close()


def test_a_settle_whose_publish_is_refused_after_its_writes_is_not_a_failure(
    acl_server: RedisServer,
) -> None:
    """DONE written, then PUBLISH refused ("ACL failure in script"): the step was
    applied, so it is reported DONE, as a retry after a lost reply would find it."""
    client = user_client(acl_server, "nochannel")
    protocol = ScriptProtocol(client)
    keys = JobKeys.of("settle", "j")
    me = who("me")
    grant = protocol.acquire(keys, me, 5000, 3, 60_000)
    assert isinstance(grant, lockworker.model.state.Grant)
    held = me.value(grant.token, grant.attempt)
    assert protocol.complete(keys, held, 60_000) is Settle.DONE
    assert protocol.inspect(keys).status is lockworker.JobStatus.DONE
    client.close()


def test_a_failure_with_a_due_time_whose_publish_is_refused_is_still_applied(
    acl_server: RedisServer,
) -> None:
    """The state written carries the server's clock, so it is found by its fields."""
    client = user_client(acl_server, "nochannel")
    protocol = ScriptProtocol(client)
    keys = JobKeys.of("settle", "due")
    me = who("me")
    grant = protocol.acquire(keys, me, 5000, 3, 60_000)
    assert isinstance(grant, lockworker.model.state.Grant)
    held = me.value(grant.token, grant.attempt)
    assert protocol.fail(keys, held, 3, 60_000, delay_ms=30_000) is Settle.RELEASED
    seen = protocol.inspect(keys)
    assert seen.due_ms is not None and 0 < seen.due_ms <= 30_000
    client.close()


def test_a_server_error_in_the_log_carries_its_message() -> None:
    error = redis.ResponseError("ACL failure in script: No permissions to access a channel")
    assert "No permissions to access a channel" in events.describe(error)
    assert events.describe(ValueError("x")) == "ValueError('x')"


@pytest.mark.parametrize(
    ("user", "grant"),
    [("nochannel", "&lw:*"), ("nokeys", "~lw:*"), ("noevalsha", "+evalsha")],
)
def test_an_asyncio_worker_or_leader_is_told_the_grant_before_any_handler(
    acl_server: RedisServer, user: str, grant: str
) -> None:
    """The asyncio twins check on first use as the sync classes do, with the same error."""
    ran: list[str] = []

    async def scenario() -> None:
        client = redis.asyncio.Redis(port=acl_server.port, username=user, password="pw")
        worker = aio.Worker(client, namespace="acl", handle_signals=False,
                            on_acquired=lambda job: ran.append(job.id))
        with pytest.raises(lockworker.PermissionDenied,
                           match=f"ACL SETUSER {user} .*{grant[1:]}"):
            await worker.process("j1")
        with pytest.raises(lockworker.PermissionDenied):
            await worker.serve([("j2", None)])
        await worker.close()
        leader = aio.Leader(client, name="acl", handle_signals=False,
                            on_acquired=lambda term: ran.append("leader"))
        with pytest.raises(lockworker.PermissionDenied, match=f"ACL SETUSER {user}"):
            await leader.run()
        await client.aclose()

    asyncio.run(scenario())
    assert ran == []
    admin = acl_server.client(decode_responses=True)
    assert admin.keys("lw:*{acl}*") + admin.keys("lw:*:acl:*") == []  # nothing written
    admin.close()


def test_an_asyncio_worker_with_the_documented_grants_passes(acl_server: RedisServer) -> None:
    async def scenario() -> lockworker.Outcome:
        client = redis.asyncio.Redis(port=acl_server.port, username="documented",
                                     password="pw")
        worker = aio.Worker(client, namespace="acl-aio", handle_signals=False,
                            on_acquired=lambda job: None)
        outcome = await worker.process("j")
        await worker.serve([("k", None)])
        await worker.close()
        await client.aclose()
        return outcome

    assert asyncio.run(scenario()) is lockworker.Outcome.DONE
