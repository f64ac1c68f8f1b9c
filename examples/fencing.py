"""Fencing tokens: a downstream store rejects a stale holder.

A lease can end while its holder still thinks it holds it: a long GC pause, a stopped
VM, a slow network. Then a backup takes over, and two processes may both write. Locks
alone cannot prevent it; the store must check. lockworker hands every attempt a token
(``job.token``) that only grows, so the store keeps the highest token it has seen per
job and refuses writes that carry a lower one.

This example freezes the holder (SIGSTOP) past its lease, lets a backup take over and
write, then thaws the holder: its late write is refused.

    python examples/fencing.py

Uses $LOCKWORKER_REDIS_URL if set (as the ``lockworker`` command does), otherwise
starts an embedded real server for the run.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import signal
import sys
import uuid
from multiprocessing.synchronize import Event
from pathlib import Path

import redis
import structlog

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _server import redis_url

import lockworker

# The downstream store: write only if this token is at least the highest seen so far.
# Tokens are compared as decimal strings (length, then text): exact at any size, where
# Lua's numbers would round past 2^53.
# KEYS[1] token key, KEYS[2] data key; ARGV[1] token, ARGV[2] value -> 1 written, 0 refused
FENCED_WRITE = """
local seen = redis.call('GET', KEYS[1]) or '0'
local t = ARGV[1]
if #t < #seen or (#t == #seen and t < seen) then return 0 end
redis.call('SET', KEYS[1], ARGV[1])
redis.call('SET', KEYS[2], ARGV[2])
return 1
"""


def fenced_write(client: redis.Redis, job_id: str, token: int, value: str) -> bool:
    """Write ``value`` for ``job_id`` unless a newer holder already wrote."""
    script = client.register_script(FENCED_WRITE)
    return bool(script(keys=[f"store:{job_id}:token", f"store:{job_id}:data"],
                       args=[token, value]))


def holder(url: str, namespace: str, acquired: Event) -> None:
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.ERROR))
    client = redis.Redis.from_url(url)

    def work(job: lockworker.Job) -> None:
        acquired.set()
        # The parent freezes this process here, past the lease; when it thaws:
        os.kill(os.getpid(), signal.SIGSTOP)
        ok = fenced_write(client, job.id, job.token, "written by the stale holder")
        print(f"holder: attempt {job.attempt}, lost={job.lost}, store accepted write: {ok}")

    with lockworker.Worker(client, namespace=namespace, lock_timeout=1.0,
                           owner="holder", on_acquired=work) as worker:
        print("holder: outcome", worker.process("invoice-42").value)


def main() -> int:
    namespace = f"fencing-{uuid.uuid4().hex[:8]}"
    with redis_url() as url:
        client = redis.Redis.from_url(url, decode_responses=True)
        acquired = multiprocessing.Event()
        child = multiprocessing.Process(target=holder, args=(url, namespace, acquired))
        child.start()
        acquired.wait(10)
        print("holder: acquired the job, now frozen past its 1 s lease")

        def takeover(job: lockworker.Job) -> None:
            ok = fenced_write(client, job.id, job.token, "written by the backup")
            print(f"backup: took over attempt {job.attempt} with a larger token, "
                  f"store accepted write: {ok}")

        with lockworker.Worker(client, namespace=namespace, lock_timeout=1.0, owner="backup",
                               on_acquired=takeover) as backup:
            print("backup: outcome", backup.process("invoice-42").value)
        assert child.pid is not None
        os.kill(child.pid, signal.SIGCONT)
        child.join(10)
        print("store holds:", client.get("store:invoice-42:data"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
