"""The server checks' verdicts, from plain values (no server): what each setting means
for the guarantees, and what to do about it."""

from __future__ import annotations

import pytest

from lockworker.model import servercheck as sc
from lockworker.model.servercheck import Denied, Status


@pytest.mark.parametrize(
    ("policy", "maxmemory", "status"),
    [
        ("noeviction", 8 << 20, Status.OK),
        ("allkeys-lru", 8 << 20, Status.FAILURE),
        ("volatile-lru", 8 << 20, Status.FAILURE),
        ("volatile-ttl", 8 << 20, Status.FAILURE),
        ("allkeys-random", None, Status.FAILURE),
        ("volatile-lru", 0, Status.OK),
        (None, None, Status.UNKNOWN),
    ],
)
def test_eviction_fails_unless_noeviction_or_no_limit(
    policy: str | None, maxmemory: int | None, status: Status
) -> None:
    finding = sc.eviction(policy, maxmemory)
    assert finding.status is status
    if status is Status.FAILURE:
        assert policy in finding.value and "noeviction" in finding.fix
        assert "run again" in finding.meaning


def test_volatile_policies_say_leases_go_first() -> None:
    assert "time to live first" in sc.eviction("volatile-lru", 1).meaning


@pytest.mark.parametrize(
    ("aof", "fsync", "save", "status", "words"),
    [
        ("yes", "always", "", Status.OK, "loses nothing"),
        ("yes", "everysec", "", Status.OK, "last second"),
        ("yes", "no", "", Status.WARNING, "operating system"),
        ("no", None, "3600 1", Status.WARNING, "since the last snapshot"),
        ("no", None, "", Status.WARNING, "nothing is persisted"),
        ("no", None, None, Status.WARNING, "no append-only log"),
        (None, None, None, Status.UNKNOWN, "neither"),
    ],
)
def test_persistence_says_what_a_restart_loses(
    aof: str | None, fsync: str | None, save: str | None, status: Status, words: str
) -> None:
    finding = sc.persistence(aof, fsync, save)
    assert finding.status is status
    assert words in finding.meaning


def test_version_and_scripting() -> None:
    assert sc.version("7.2.4", None).status is Status.OK
    assert sc.version("6.0.9", None).status is Status.FAILURE
    refused = sc.version("7.2.4", "NOSCRIPT scripting disabled")
    assert refused.status is Status.FAILURE and "scripting disabled" in refused.meaning
    assert sc.version(None, None).status is Status.UNKNOWN


def test_evicted_keys() -> None:
    assert sc.evicted_keys(0).status is Status.OK
    assert sc.evicted_keys(12).status is Status.WARNING
    assert "12" in sc.evicted_keys(12).meaning


@pytest.mark.parametrize(
    ("server", "low", "high", "status"),
    [
        (1.000, 0.999, 1.001, Status.OK),
        (1.050, 0.999, 1.001, Status.FAILURE),
        (0.950, 0.999, 1.001, Status.FAILURE),
        (1.000, 0.95, 1.05, Status.UNKNOWN),  # round trips too slow to tell
    ],
)
def test_clock_rate_within_one_percent(
    server: float, low: float, high: float, status: Status
) -> None:
    assert sc.clock_rate(server, low, high).status is status


def test_replicas() -> None:
    assert sc.replicas(0, None).status is Status.OK
    assert sc.replicas(2, 2).status is Status.OK
    short = sc.replicas(1, 2)
    assert short.status is Status.FAILURE and "replicas=2" in short.meaning


def test_permissions_name_the_grant() -> None:
    denied = [
        Denied("PUBLISH", "lw:job:ns:{p}:wake", "ERR ACL failure in script: No permissions "
               "to access a channel"),
        Denied("EVALSHA", "lw:job:ns:{p}:lock", "No permissions to access a key"),
        Denied("EVALSHA", "", "User app has no permissions to run the 'evalsha' command"),
    ]
    finding = sc.permissions(denied, "app")
    assert finding.status is Status.FAILURE
    assert finding.fix == "ACL SETUSER app &lw:* +evalsha ~lw:*"
    assert sc.permissions([], "app").status is Status.OK


def test_settings_fall_back_to_info() -> None:
    values = sc.settings({}, {"maxmemory_policy": "volatile-lru", "maxmemory": 8,
                              "aof_enabled": 0, "evicted_keys": 3, "redis_version": "7.2.4"})
    assert values["policy"] == "volatile-lru" and values["appendonly"] == "no"
    assert values["save"] is None and values["evicted"] == 3
    assert sc.settings({}, {})["policy"] is None


def test_worst() -> None:
    ok, warn, fail = sc.evicted_keys(0), sc.evicted_keys(1), sc.eviction("allkeys-lru", 1)
    assert sc.worst([ok, warn]) is Status.WARNING
    assert sc.worst([ok, fail, warn]) is Status.FAILURE
    assert sc.worst([]) is Status.OK
