"""``lockworker run --group NAME``: two daemons share a stream through a consumer group,
each job done once and every entry acknowledged; a bad group name is one line, exit 2."""

from __future__ import annotations

import signal
import subprocess
import sys
from collections.abc import Iterator

import pytest
from helpers import wait_for

import lockworker
from lockworker.cli.demo_worker import records_key
from lockworker.daemons.sources import stream_keys
from lockworker.testing import RedisServer


def lockworker_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "lockworker", *args]


@pytest.fixture
def procs() -> Iterator[list[subprocess.Popen[str]]]:
    started: list[subprocess.Popen[str]] = []
    yield started
    for proc in started:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=10)


def test_run_group_shares_the_stream_between_daemons(
    redis_server: RedisServer, namespace: str, procs: list[subprocess.Popen[str]]
) -> None:
    client = redis_server.client(decode_responses=True)
    stream = f"{namespace}-jobs"
    entries = stream_keys(stream).extra("entries")
    for owner in ("w1", "w2"):
        procs.append(subprocess.Popen(
            lockworker_cmd(
                "run", "lockworker.cli.demo_worker:DemoWorker", "--redis", redis_server.url,
                "--namespace", namespace, "--stream", stream, "--group", "workers",
                "--owner", owner, "--lock-timeout", "2",
            ),
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
            stdin=subprocess.DEVNULL,
        ))

    def members() -> set[str]:
        try:
            return {c["name"] for c in client.xinfo_consumers(entries, "workers")}
        except Exception:  # no group yet
            return set()

    wait_for(lambda: members() == {"w1", "w2"}, timeout=30)
    for i in range(20):
        lockworker.submit(client, stream, f"j{i}", {"ms": 10})
    wait_for(lambda: client.llen(records_key(namespace)) >= 20, timeout=30)
    wait_for(lambda: client.xpending(entries, "workers")["pending"] == 0, timeout=10)
    assert client.llen(records_key(namespace)) == 20  # none twice
    for proc in procs:
        proc.send_signal(signal.SIGTERM)
    for proc in procs:
        _out, err = proc.communicate(timeout=20)
        assert proc.returncode == 0, err
    assert members() == set()  # both left with nothing pending: consumers removed
    client.close()


def test_run_refuses_a_bad_group_name(redis_server: RedisServer) -> None:
    out = subprocess.run(
        lockworker_cmd(
            "run", "lockworker.cli.demo_worker:DemoWorker", "--redis", redis_server.url,
            "--namespace", "n", "--group", " ",
        ),
        capture_output=True, text=True, timeout=60, check=False,
    )
    assert out.returncode == 2
    assert "group must be a non-empty str" in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1
