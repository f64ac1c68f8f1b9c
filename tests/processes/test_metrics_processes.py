"""``lockworker run --metrics-port``: a real daemon serving a stream, scraped over HTTP."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers import wait_for
from prometheus_client.parser import text_string_to_metric_families

import lockworker
from lockworker.cli.demo_worker import records_key
from lockworker.daemons.sources import stream_keys
from lockworker.testing import RedisServer
from lockworker.testing.server import free_port

pytestmark = pytest.mark.processes

JOBS = 6


def scrape(port: int) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    """Every sample the endpoint serves now, by name and labels."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as reply:
        text = reply.read().decode()
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def sample(samples: dict[tuple[str, frozenset[tuple[str, str]]], float], name: str,
           **labels: str) -> float | None:
    return samples.get((name, frozenset(labels.items())))


def answers(port: int) -> bool:
    try:
        scrape(port)
    except OSError:
        return False
    return True


@pytest.fixture
def procs() -> Iterator[list[subprocess.Popen[bytes]]]:
    started: list[subprocess.Popen[bytes]] = []
    yield started
    for proc in started:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=10)


def run(procs: list[subprocess.Popen[bytes]], err: Path, *args: str) -> subprocess.Popen[bytes]:
    with err.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "lockworker", "run", *args],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=out,
        )
    procs.append(proc)
    return proc


def test_a_daemon_serves_its_job_metrics_over_http(
    redis_server: RedisServer, namespace: str, procs: list[subprocess.Popen[bytes]],
    tmp_path: Path,
) -> None:
    client = redis_server.client(decode_responses=True)
    stream, port, err = f"{namespace}-jobs", free_port(), tmp_path / "stderr"
    proc = run(
        procs, err, "lockworker.cli.demo_worker:DemoWorker", "--redis", redis_server.url,
        "--namespace", namespace, "--stream", stream, "--owner", "w1", "--lock-timeout", "2",
        "--metrics-port", str(port), "--metrics-host", "127.0.0.1", "--log-format", "json",
    )
    wait_for(lambda: answers(port), timeout=30)
    wait_for(lambda: client.zscore(stream_keys(stream).extra("readers"), "w1") is not None,
             timeout=30)
    for i in range(JOBS):
        lockworker.submit(client, stream, f"j{i}", {"ms": 10})

    def done() -> float | None:
        return sample(scrape(port), "lockworker_job_outcomes_total",
                      namespace=namespace, outcome="done")

    wait_for(lambda: done() == JOBS, timeout=20)
    did = client.llen(records_key(namespace))
    samples = scrape(port)
    assert did == JOBS  # one daemon: it did every job, each once
    assert sample(samples, "lockworker_attempt_duration_seconds_count", namespace=namespace) \
        == did
    assert sample(samples, "lockworker_leases_held", namespace=namespace) == 0
    assert sample(samples, "lockworker_job_outcomes_total", namespace=namespace,
                  outcome="failed") == 0
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=20) == 0
    started = json.loads(err.read_text().splitlines()[0])
    assert started["event"] == "run.started"
    assert started["metrics"] == f"http://127.0.0.1:{port}/metrics"
    client.close()


def test_a_taken_metrics_port_is_one_line_and_exit_2(
    redis_server: RedisServer, namespace: str, procs: list[subprocess.Popen[bytes]],
    tmp_path: Path,
) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        err = tmp_path / "stderr"
        proc = run(
            procs, err, "lockworker.cli.demo_worker:DemoWorker", "--redis", redis_server.url,
            "--namespace", namespace, "--metrics-port", str(port),
            "--metrics-host", "127.0.0.1",
        )
        assert proc.wait(timeout=30) == 2
    (line,) = err.read_text().strip().splitlines()
    assert line.startswith(f"lockworker run: --metrics-port: cannot listen on 127.0.0.1:{port}")
