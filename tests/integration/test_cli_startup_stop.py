"""``lockworker run`` stopped while it is still starting (supervisord stopping a program
in its STARTING state): a clean exit, never death by the signal.

The application's module blocks its own import until the test says go, so the signal
lands at a known point of the start-up, with no sleeps: each step waits for a marker
file the module writes."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from helpers import wait_for

from lockworker.testing import RedisServer

pytestmark = pytest.mark.processes

SLOW_APP = textwrap.dedent(
    """
    import pathlib
    import time

    import lockworker
    import lockworker.aio

    HERE = pathlib.Path(__file__).parent
    SWALLOW = (HERE / "swallow").exists()  # an import that catches everything
    (HERE / "importing").write_text("")
    deadline = time.monotonic() + 60
    while not (HERE / "go").exists():
        if time.monotonic() > deadline:
            raise RuntimeError("never told to go on")
        try:
            time.sleep(0.01)
        except BaseException:
            if not SWALLOW:
                raise
            (HERE / "swallowed").write_text("")

    class Slow(lockworker.Worker):
        def on_acquired(self, job):
            pass

    class SlowAio(lockworker.aio.Worker):
        async def on_acquired(self, job):
            pass
    """
)


def start(tmp_path: Path, url: str, target: str = "slow_app:Slow",
          swallow: bool = False) -> tuple[subprocess.Popen[str], Path]:
    (tmp_path / "slow_app.py").write_text(SLOW_APP)
    if swallow:
        (tmp_path / "swallow").write_text("")
    err = tmp_path / "run.err"
    with err.open("w") as err_file:
        proc = subprocess.Popen(
            [sys.executable, "-m", "lockworker", "run", target, "--app-dir", str(tmp_path),
             "--redis", url, "--namespace", "starting", "--owner", "w1",
             "--log-format", "json"],
            stdout=subprocess.DEVNULL, stderr=err_file, stdin=subprocess.DEVNULL, text=True,
        )
    try:
        wait_for(lambda: (tmp_path / "importing").exists() or proc.poll() is not None,
                 timeout=60)
    except BaseException:
        proc.kill()
        raise
    assert proc.poll() is None, err.read_text()
    return proc, err


def events(err: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in err.read_text().splitlines() if line.startswith("{")]


def ended(proc: subprocess.Popen[str]) -> int:
    try:
        return proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_signal_while_the_module_imports_ends_the_start_up_cleanly(
    redis_server: RedisServer, tmp_path: Path, sig: signal.Signals
) -> None:
    proc, err = start(tmp_path, redis_server.url)
    proc.send_signal(sig)
    assert ended(proc) == 0, err.read_text()
    seen = events(err)
    assert [e["event"] for e in seen] == ["run.stopped_while_starting"], err.read_text()
    assert seen[0]["signal"] == sig and seen[0]["exit_code"] == 0
    assert "Traceback" not in err.read_text()


@pytest.mark.parametrize("target", ["slow_app:Slow", "slow_app:SlowAio"], ids=["sync", "aio"])
def test_a_signal_the_module_swallowed_still_stops_it_before_the_daemon_runs(
    redis_server: RedisServer, tmp_path: Path, target: str
) -> None:
    """The import goes on (it caught the stop): the command remembers the signal and
    stops where the daemon would have begun, without serving."""
    proc, err = start(tmp_path, redis_server.url, target, swallow=True)
    proc.send_signal(signal.SIGTERM)
    wait_for((tmp_path / "swallowed").exists, timeout=30)
    (tmp_path / "go").write_text("")
    assert ended(proc) == 0, err.read_text()
    assert [e["event"] for e in events(err)] == ["run.stopped_while_starting"], err.read_text()


def test_a_second_signal_while_starting_exits_130_at_once(
    redis_server: RedisServer, tmp_path: Path
) -> None:
    proc, err = start(tmp_path, redis_server.url, swallow=True)
    proc.send_signal(signal.SIGTERM)
    wait_for((tmp_path / "swallowed").exists, timeout=30)
    proc.send_signal(signal.SIGTERM)  # the import is still held up: end now
    assert ended(proc) == 130, err.read_text()
    (last,) = events(err)
    assert (last["event"], last["starting"], last["exit_code"]) == ("run.interrupted", True, 130)


@pytest.mark.parametrize("target", ["slow_app:Slow", "slow_app:SlowAio"], ids=["sync", "aio"])
def test_a_signal_while_it_waits_for_redis_to_answer_ends_the_start_up_cleanly(
    tmp_path: Path, target: str
) -> None:
    """A server that accepts the connection and never answers the PING: the signal
    lands while the command waits for it (up to its socket timeout; an asyncio class
    waits inside its event loop)."""
    (tmp_path / "go").write_text("")  # the module imports at once
    with socket.socket() as mute:
        mute.bind(("127.0.0.1", 0))
        mute.listen()
        mute.settimeout(60)
        url = f"redis://127.0.0.1:{mute.getsockname()[1]}/0"
        proc, err = start(tmp_path, url, target)
        connection, _ = mute.accept()  # the command is waiting for its PING's answer
        with connection:
            proc.send_signal(signal.SIGTERM)
            assert ended(proc) == 0, err.read_text()
    assert [e["event"] for e in events(err)] == ["run.stopped_while_starting"], err.read_text()
