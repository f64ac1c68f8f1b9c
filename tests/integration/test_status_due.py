"""``lockworker status`` says when a pending job's next attempt is due (and ``--json``)."""

from __future__ import annotations

import json
import re
import threading

import pytest
import redis
from helpers import wait_for

import lockworker
from lockworker.cli.main import main
from lockworker.testing import RedisServer


def test_status_shows_when_a_backing_off_job_is_due(
    redis_server: RedisServer, redis_client: redis.Redis, namespace: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    def fail(job: lockworker.Job) -> None:
        raise lockworker.Retry(after=120)

    worker = lockworker.Worker(
        redis_client, namespace=namespace, handle_signals=False, on_acquired=fail
    )
    thread = threading.Thread(target=worker.process, args=("backing-off",), daemon=True)
    thread.start()
    wait_for(lambda: worker.inspect("backing-off").due_ms is not None, timeout=10)
    done = lockworker.Worker(
        redis_client, namespace=namespace, handle_signals=False, on_acquired=lambda job: None
    )
    assert done.process("fine") is lockworker.Outcome.DONE
    try:
        url = ["--namespace", namespace, "--redis", redis_server.url]
        assert main(["status", "--json", *url]) == 0
        doc = json.loads(capsys.readouterr().out)
        assert main(["status", *url]) == 0
        table = capsys.readouterr().out.splitlines()
        # A DONE job is not listed by default: --job reads it.
        assert main(["status", "--job", "fine", "--json", *url]) == 0
        (fine,) = json.loads(capsys.readouterr().out)["jobs"]
        assert main(["status", "--job", "fine", *url]) == 0
        fine_table = capsys.readouterr().out.splitlines()
    finally:
        worker.stop()
        thread.join(10)
        worker.close()
        done.close()
    rows = {r["id"]: r for r in doc["jobs"]}
    assert rows["backing-off"]["state"] == "pending" and rows["backing-off"]["attempt"] == 1
    assert 100 < rows["backing-off"]["next_attempt_in"] <= 120
    assert "fine" not in rows
    assert fine["state"] == "done" and fine["next_attempt_in"] is None
    line = next(line for line in table if "backing-off" in line)
    assert re.search(r"pending, next attempt in (1m5\d|2m00)s", line), line
    fine_line = next(line for line in fine_table if line.startswith("job "))
    assert fine_line.split()[2:4] == ["fine", "done"]
    assert "next attempt" not in fine_line
