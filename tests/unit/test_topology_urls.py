"""Cluster and Sentinel URLs on the command line: parsed, refused with a reason, and
never echoing a password."""

from __future__ import annotations

import pytest

from lockworker.cli.common import CliError, check_url
from lockworker.cli.topology_urls import is_topology, parse


def test_a_cluster_url_names_its_seed_nodes_and_credentials() -> None:
    t = parse("redis+cluster://app:s%40cret@10.0.0.1:7000,10.0.0.2:7001?")
    assert (t.kind, t.hosts, t.username, t.password, t.tls) == (
        "cluster", (("10.0.0.1", 7000), ("10.0.0.2", 7001)), "app", "s@cret", False
    )


def test_a_sentinel_url_names_the_sentinels_the_master_and_the_database() -> None:
    t = parse("rediss+sentinel://:pw@s1:26379,[::1]:26380/mymaster/3?sentinel_password=x")
    assert (t.kind, t.hosts, t.master, t.db, t.password, t.tls) == (
        "sentinel", (("s1", 26379), ("::1", 26380)), "mymaster", 3, "pw", True
    )
    assert t.options == {"sentinel_password": "x"}


@pytest.mark.parametrize(
    ("url", "reason"),
    [
        ("redis+sentinel://s1:26379", "names the master"),
        ("redis+sentinel://s1:26379/m/zero", "database number"),
        ("redis+cluster://h:7000/2", "no database number"),
        ("redis+cluster://h", "host:port"),
        ("redis+cluster://h:99999", "1 to 65535"),
        ("redis+cluster://h:7000?colour=red", "unknown option 'colour'"),
    ],
)
def test_a_topology_url_that_cannot_work_is_a_usage_error(url: str, reason: str) -> None:
    assert is_topology(url)
    with pytest.raises(CliError, match=reason) as error:
        check_url(url)
    assert error.value.code == 2


def test_the_password_of_a_bad_topology_url_is_masked() -> None:
    with pytest.raises(CliError) as error:
        check_url("redis+sentinel://:hunter2@s1:26379")
    assert "hunter2" not in str(error.value) and "***" in str(error.value)


def test_plain_urls_are_not_topologies() -> None:
    assert not is_topology("redis://h:6379/0") and not is_topology("unix:///tmp/r.sock")
