"""``lockworker run --metrics-port``'s probes on real daemons: ``/readyz`` turns 503 when
the server stops and 200 when it is back, ``/healthz`` stays 200 through it (a Redis
outage is no reason to restart the process), sync and asyncio, worker and leader."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers import reap, wait_for

from lockworker.testing import RedisServer
from lockworker.testing.server import free_port

pytestmark = pytest.mark.processes

APP = textwrap.dedent(
    """
    from lockworker import aio

    class AsyncBoss(aio.Leader):
        async def on_acquired(self, term):
            while not await term.wait(0.05):
                pass
    """
)

TARGETS = {
    "sync worker": "lockworker.cli.demo_worker:DemoWorker",
    "asyncio leader": "probes_app:AsyncBoss",
}


def probe(port: int, path: str) -> tuple[int, str] | None:
    """The status and the text of ``path``, or None while nothing answers."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as reply:
            return reply.status, reply.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode()
    except OSError:
        return None


@pytest.fixture
def own_server() -> Iterator[RedisServer]:
    with RedisServer() as server:
        yield server


@pytest.mark.parametrize("kind", list(TARGETS))
def test_readiness_follows_the_server_and_liveness_stays(
    own_server: RedisServer, tmp_path: Path, kind: str
) -> None:
    (tmp_path / "probes_app.py").write_text(APP)
    port = free_port()
    with (tmp_path / "stderr").open("wb") as err:
        proc = subprocess.Popen(
            [sys.executable, "-m", "lockworker", "run", TARGETS[kind], "--app-dir",
             str(tmp_path), "--redis", own_server.url, "--namespace", "probes", "--owner",
             "p1", "--lock-timeout", "2", "--metrics-port", str(port), "--metrics-host",
             "127.0.0.1"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err,
        )
    try:
        ready = wait_for(lambda: (r := probe(port, "/readyz")) and r[0] == 200 and r, 30)
        assert ready == (200, "ready: serving; Redis answered PING\n")
        assert probe(port, "/healthz") is not None
        own_server.stop()
        down = wait_for(lambda: (r := probe(port, "/readyz")) and r[0] == 503 and r, 30)
        assert down[1].startswith("Redis unreachable: ") and down[1].count("\n") == 1
        assert (probe(port, "/healthz") or (0, ""))[0] == 200  # Redis's trouble, not ours
        own_server.start()
        wait_for(lambda: probe(port, "/readyz") == ready, 30)
        assert (probe(port, "/healthz") or (0, ""))[0] == 200
        assert (probe(port, "/metrics") or (0, ""))[1].count("lockworker_") > 0
        assert proc.poll() is None  # the daemon rode the outage out
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
    finally:
        reap([proc])
