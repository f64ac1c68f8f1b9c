"""What eviction does to lockworker's keys (docs/guarantees.md, "Eviction"): a server
with ``maxmemory 8mb`` and each policy, 200 jobs run to DONE, one job held by a running
handler, then the application fills memory with its own cache keys (``SET ... EX``),
then another worker runs the same 200 jobs."""

from __future__ import annotations

import threading
from typing import Any

import pytest
import redis
from helpers import wait_for
from redis.backoff import NoBackoff
from redis.retry import Retry

import lockworker
from lockworker.model.keys import JobKeys
from lockworker.testing.server import RedisServer

JOBS = 200
VALUE = "x" * 2000
CACHE_BYTES = 16 << 20  # twice maxmemory


def fill(client: redis.Redis) -> None:
    """The application's cache: until the server refuses a write or twice maxmemory."""
    for batch in range(CACHE_BYTES // len(VALUE) // 200):
        pipe = client.pipeline(transaction=False)
        for i in range(200):
            pipe.set(f"cache:{batch}:{i}", VALUE, ex=3600)
        try:
            pipe.execute()
        except redis.exceptions.OutOfMemoryError:  # noeviction: the application's write refused
            return


def run_scenario(policy: str) -> dict[str, Any]:
    with RedisServer(extra_args=("--maxmemory", "8mb", "--maxmemory-policy", policy)) as server:
        # No redis-py retries: the wake hub's reader, left with lingering channels when
        # the server stops below, then ends at once instead of retrying it for seconds.
        client = server.client(decode_responses=True, retry=Retry(NoBackoff(), 0))
        first = lockworker.Worker(client, namespace="ev", handle_signals=False,
                                  lock_timeout=5.0, on_acquired=lambda job: None)
        for i in range(JOBS):
            assert first.process(f"job-{i}") is lockworker.Outcome.DONE
        release = threading.Event()
        holding = threading.Event()

        def long_job(job: lockworker.Job) -> None:
            holding.set()
            release.wait(30)

        holder = lockworker.Worker(client, namespace="ev", handle_signals=False,
                                   lock_timeout=5.0, on_acquired=long_job)
        thread = threading.Thread(target=holder.process, args=("held",), daemon=True)
        thread.start()
        wait_for(holding.is_set)
        fill(client)
        evicted = int(client.info("stats")["evicted_keys"])
        lease_kept = client.exists(JobKeys.of("ev", "held").lock) == 1
        release.set()
        thread.join(10)
        again = lockworker.Worker(client, namespace="ev", handle_signals=False,
                                  lock_timeout=5.0, on_acquired=lambda job: None)
        reran = sum(again.process(f"job-{i}") is lockworker.Outcome.DONE for i in range(JOBS))
        for worker in (first, holder, again):
            worker.close()
        client.close()
        return {"evicted": evicted, "reran": reran, "lease_kept": lease_kept}


@pytest.mark.parametrize("policy", ["noeviction", "allkeys-lru", "volatile-lru", "volatile-ttl"])
def test_eviction_table(policy: str) -> None:
    seen = run_scenario(policy)
    print(f"| {policy} | {seen['evicted']} | {seen['reran']} of {JOBS} | "
          f"{'kept' if seen['lease_kept'] else 'gone'} |")
    if policy == "noeviction":
        assert seen == {"evicted": 0, "reran": 0, "lease_kept": True}
        return
    assert seen["evicted"] > 1000
    # Every evicting policy loses some of lockworker's promises: finished jobs run again,
    # or a running holder's lease goes (volatile-ttl evicts the shortest TTLs, leases).
    assert seen["reran"] > 0 or not seen["lease_kept"]
    if policy == "volatile-ttl":
        assert not seen["lease_kept"]
