"""examples/nightly: the shipped commands parse as lockworker reads them (the cron in
Europe/Berlin, a primary and a backup, the app's class found), and the config runs
under a real supervisord with the schedule made ``--every nightly=1``: each tick's
report is written once, by the primary, through the fence, and its job is DONE."""

from __future__ import annotations

import configparser
import json
import os
import shlex
import signal
import socket
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from helpers import wait_for

from lockworker.cli import periodic
from lockworker.cli.main import parse
from lockworker.cli.target import load
from lockworker.daemons.worker import Worker
from lockworker.model.keys import JobKeys
from lockworker.model.schedule import Cron
from lockworker.model.state import JobStatus
from lockworker.protocol import inspect
from lockworker.testing import RedisServer

pytestmark = pytest.mark.processes

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "nightly"
CONFIG = EXAMPLE / "supervisord.conf"
CRON = "--cron 'nightly=30 2 * * *' --tz Europe/Berlin"


def commands() -> dict[str, list[str]]:
    """Each program's command line, as supervisord splits it (``%(here)s`` expanded)."""
    config = configparser.RawConfigParser()
    config.read(CONFIG)
    found = {}
    for section in config.sections():
        if section.startswith("program:"):
            line = config.get(section, "command").replace("%(here)s", str(EXAMPLE))
            found[section.split(":", 1)[1]] = shlex.split(
                line.replace("%(host_node_name)s", "host")
            )
    return found


def test_the_shipped_commands_serve_the_nightly_cron_as_primary_and_backup() -> None:
    found = commands()
    assert sorted(found) == ["backup", "primary"]
    for program, argv in found.items():
        assert argv[:2] == ["lockworker", "run"], argv
        args = parse(argv[1:])
        assert args.role == program
        (nightly,) = periodic.schedules(args)
        assert isinstance(nightly, Cron) and nightly.name == "nightly"
        assert (nightly.expression, nightly.tz.key) == ("30 2 * * *", "Europe/Berlin")
        assert issubclass(load(args.target, args.app_dir), Worker)


def test_the_config_runs_each_tick_once_on_the_primary_under_supervisord(
    redis_server: RedisServer, tmp_path: Path
) -> None:
    namespace = f"nightly-{uuid.uuid4().hex[:8]}"
    text = CONFIG.read_text()
    for old, new in (
        (CRON, "--every nightly=1"),
        ("--namespace reports ", f"--namespace {namespace} "),
        ("--lock-timeout 30 ", "--lock-timeout 2 "),
        ("--grace 60", "--grace 3"),
        ("stopwaitsecs=75", "stopwaitsecs=6"),
        ("%(here)s", str(EXAMPLE)),
    ):
        assert old in text, old
        text = text.replace(old, new)
    conf = tmp_path / "supervisord.conf"
    conf.write_text(text)
    env = {
        **os.environ, "LOCKWORKER_REDIS_URL": redis_server.url, "LOCKWORKER_DIR": str(tmp_path),
        "PATH": str(Path(sys.executable).parent) + os.pathsep + os.environ.get("PATH", ""),
    }
    client = redis_server.client(decode_responses=True)
    proc = subprocess.Popen(
        [sys.executable, "-m", "supervisor.supervisord", "-c", str(conf)],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    try:
        prefix = f"report:{namespace}:"

        def reports() -> dict[str, dict[str, str]]:
            """Each tick's stored report, by the tick's id."""
            return {k[len(prefix):]: client.hgetall(k) for k in client.keys(prefix + "*")}

        wait_for(lambda: len(reports()) >= 3, timeout=60)
        primary = f"{socket.gethostname()}-primary"
        for tick_id, stored in reports().items():
            report = json.loads(stored["report"])
            assert report["by"] == primary, (tick_id, report)
            seen = inspect(client, JobKeys.of(namespace, tick_id))
            if seen.status is JobStatus.DONE:
                assert seen.token == int(stored["token"]), (tick_id, seen, stored)
    finally:
        proc.send_signal(signal.SIGTERM)  # supervisord stops both programs first
        try:
            assert proc.wait(timeout=30) == 0
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            client.close()
