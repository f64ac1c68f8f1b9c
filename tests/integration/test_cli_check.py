"""``lockworker check`` and ``lockworker run --require-safe-server`` against real servers."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from lockworker.cli.main import main
from lockworker.testing.server import RedisServer

FAST = ["--clock-interval", "0.2"]


@pytest.fixture(scope="module")
def evicting() -> Iterator[RedisServer]:
    with RedisServer(extra_args=("--maxmemory", "8mb", "--maxmemory-policy", "allkeys-lru")) as s:
        yield s


@pytest.fixture(scope="module")
def safe() -> Iterator[RedisServer]:
    with RedisServer(extra_args=("--maxmemory", "8mb", "--maxmemory-policy", "noeviction",
                                 "--appendonly", "yes")) as s:
        yield s


def test_check_passes_a_safe_server(safe: RedisServer, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check", "--redis", safe.url, *FAST]) == 0
    out = capsys.readouterr().out
    for check in ("eviction", "persistence", "version", "evicted_keys", "clock", "replicas",
                  "permissions"):
        assert any(line.split()[1:2] == [check] for line in out.splitlines()), check
    assert "FAILURE" not in out


def test_check_fails_an_evicting_server_with_the_fix(
    evicting: RedisServer, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["check", "--redis", evicting.url, *FAST]) == 1
    line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("FAILURE"))
    assert "eviction" in line and "allkeys-lru" in line and "noeviction" in line
    assert f"127.0.0.1:{evicting.port}" in line


def test_check_json(evicting: RedisServer, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check", "--redis", evicting.url, "--json", *FAST]) == 1
    doc = json.loads(capsys.readouterr().out)
    assert doc["status"] == "failure"
    eviction = next(c for c in doc["checks"] if c["check"] == "eviction")
    assert eviction["status"] == "failure" and "allkeys-lru" in eviction["value"]


def test_check_replicas_wanted(safe: RedisServer, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check", "--redis", safe.url, "--replicas", "1", *FAST]) == 1
    assert "replicas=1 cannot be met" in capsys.readouterr().out


def test_run_require_safe_server_refuses_to_start(
    evicting: RedisServer, capsys: pytest.CaptureFixture[str], tmp_path: object
) -> None:
    code = main(["run", "lockworker.daemons.worker:Worker", "--namespace", "x",
                 "--redis", evicting.url, "--require-safe-server", "--owner", "o"])
    assert code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1
    assert "--require-safe-server" in err[0] and "allkeys-lru" in err[0]
