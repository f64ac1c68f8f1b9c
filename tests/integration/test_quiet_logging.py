"""What a program that uses lockworker prints, depending on the logging it configured.

Each program runs in a process of its own, so the logging configuration is its own:
nothing (lockworker must stay quiet), ``logging.basicConfig`` (events as standard
records), or structlog (events through the application's structlog configuration).
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

from lockworker.testing import RedisServer

WORK = """
import redis
import lockworker
from lockworker.errors import LockLost
from lockworker.primitives import Lock, Semaphore

url, namespace = sys.argv[1], sys.argv[2]
client = redis.Redis.from_url(url, socket_timeout=5)

lock = Lock(client, "res", namespace=namespace)          # built before any event
configure()
assert lock.acquire()
lock.release()
assert lock.acquire()
client.delete(lock.keys.lock)                             # as if it had expired
try:
    lock.release()                                        # lock.lost: a warning
except LockLost:
    pass

worker = lockworker.Worker(
    client, namespace=namespace, on_acquired=lambda job: None, handle_signals=False
)
assert worker.process("job-1", {"n": 1}) is lockworker.Outcome.DONE
worker.close()

sem = Semaphore(client, "pool", 2, namespace=namespace)
with sem:
    pass
sem.close()
lock.close()
"""

PREAMBLES = {
    "nothing": "def configure():\n    pass\n",
    "basicConfig": (
        "import logging\n"
        "def configure():\n"
        "    logging.basicConfig(level=logging.DEBUG)\n"
    ),
    "structlog": (
        "import structlog\n"
        "def configure():\n"
        "    structlog.configure(processors=[structlog.processors.add_log_level,\n"
        "        structlog.processors.JSONRenderer()],\n"
        "        logger_factory=structlog.PrintLoggerFactory(sys.stdout))\n"
    ),
}

QUIET_EVENTS = (
    "lock.acquired", "lock.released", "job.acquired", "job.done", "semaphore.acquired",
    "semaphore.released",
)
"""Events below WARNING the program above emits."""


def run(server: RedisServer, namespace: str, preamble: str) -> tuple[str, str]:
    program = "import sys\n" + preamble + textwrap.dedent(WORK)
    proc = subprocess.run(
        [sys.executable, "-c", program, server.url, namespace],
        capture_output=True, text=True, timeout=60, check=False,
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout, proc.stderr


def test_without_logging_configured_only_warnings_reach_stderr(
    redis_server: RedisServer, namespace: str
) -> None:
    out, err = run(redis_server, namespace, PREAMBLES["nothing"])
    assert out == ""
    # Python's last-resort handler prints WARNING and above, the bare message: the
    # event and its fields.
    (line,) = err.splitlines()
    assert line.startswith(f"lock.lost lock=res namespace={namespace} token=")
    assert line.endswith(' reason="expired before release"')
    for name in QUIET_EVENTS:
        assert name not in err


def test_basic_config_shows_every_event_as_a_standard_record(
    redis_server: RedisServer, namespace: str
) -> None:
    out, err = run(redis_server, namespace, PREAMBLES["basicConfig"])
    assert out == ""
    lines = err.splitlines()
    for start in (
        f"DEBUG:lockworker.lock:lock.acquired lock=res namespace={namespace} ",
        f"DEBUG:lockworker.lock:lock.released lock=res namespace={namespace} token=",
        f"WARNING:lockworker.lock:lock.lost lock=res namespace={namespace} token=",
        f"INFO:lockworker.daemons.worker:job.acquired job_id=job-1 namespace={namespace} ",
        f"INFO:lockworker.daemons.worker:job.done job_id=job-1 namespace={namespace} ",
        f"DEBUG:lockworker.semaphore:semaphore.acquired semaphore=pool namespace={namespace} ",
        f"DEBUG:lockworker.semaphore:semaphore.released semaphore=pool namespace={namespace} ",
    ):
        assert any(line.startswith(start) for line in lines), start


def test_structlog_configured_by_the_application_gets_every_event(
    redis_server: RedisServer, namespace: str
) -> None:
    out, err = run(redis_server, namespace, PREAMBLES["structlog"])
    assert err == ""
    events = [json.loads(line) for line in out.splitlines()]
    names = [e["event"] for e in events]
    for name in (*QUIET_EVENTS, "lock.lost"):
        assert name in names
    acquired = next(e for e in events if e["event"] == "lock.acquired")
    assert acquired["lock"] == "res" and acquired["namespace"] == namespace
    assert acquired["level"] == "debug" and isinstance(acquired["token"], int)
    done = next(e for e in events if e["event"] == "job.done")
    assert done["job_id"] == "job-1" and done["attempt"] == 1

