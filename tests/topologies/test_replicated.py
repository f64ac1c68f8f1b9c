"""``durability="replicated"`` on a real Sentinel group (a master and 2 replicas): a
step counts only once the replicas acknowledged it, so what a worker reports is on the
replicas when it reports it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import redis
from helpers import wait_for

import lockworker
from lockworker.daemons.leader import leader_keys
from lockworker.model.keys import JobKeys
from lockworker.testing import SentinelGroup

pytestmark = pytest.mark.processes


def replicas_of(group: SentinelGroup) -> list[redis.Redis]:
    master = group.master()
    return [s.client(decode_responses=True) for s in group.servers if s.port != master.port]


def test_a_replicated_done_is_on_every_replica_when_process_returns(
    redis_sentinel: SentinelGroup, sentinel_master: redis.Redis, namespace: str
) -> None:
    worker = lockworker.Worker(
        sentinel_master, namespace=namespace, on_acquired=lambda job: None,
        durability="replicated", replicas=2,
    )
    replicas = replicas_of(redis_sentinel)
    assert len(replicas) == 2
    for i in range(20):
        job_id = f"r{i}"
        assert worker.process(job_id) is lockworker.Outcome.DONE
        state = JobKeys.of(namespace, job_id).state
        # Read at once, no waiting: WAIT already saw both replicas take the DONE.
        expected = sentinel_master.get(state)
        assert expected is not None and expected.startswith("lw2|done|")
        assert [r.get(state) for r in replicas] == [expected, expected]
    worker.close()
    for r in replicas:
        r.close()


def test_a_step_more_replicas_than_exist_cannot_acknowledge_does_not_count(
    sentinel_master: redis.Redis, namespace: str
) -> None:
    """Three replicas asked for, two exist: the step is retried within the budget, then
    reported; the job is not DONE, and stays recoverable (pending)."""
    worker = lockworker.Worker(
        sentinel_master, namespace=namespace, on_acquired=lambda job: None,
        durability="replicated", replicas=3, replica_timeout=0.05,
        redis_retry=lockworker.RetryPolicy(budget=0.4, initial=0.01, maximum=0.05),
    )
    with pytest.raises(lockworker.RedisUnavailable) as error:
        worker.process("never")
    assert isinstance(error.value.__cause__, lockworker.NotReplicated)
    assert worker.inspect("never").status is lockworker.JobStatus.PENDING
    worker.close()


def test_what_replicated_durability_costs(
    sentinel_master: redis.Redis, namespace: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Not a timed test (it asserts no speed): prints jobs/s of both settings, measured
    here on loopback, for docs/topologies.md."""
    rates = {}
    for durability in ("local", "replicated"):
        worker = lockworker.Worker(
            sentinel_master, namespace=f"{namespace}-{durability}",
            on_acquired=lambda job: None, durability=durability, replicas=2,
        )
        start = time.perf_counter()
        for i in range(100):
            assert worker.process(f"c{i}") is lockworker.Outcome.DONE
        rates[durability] = 100 / (time.perf_counter() - start)
        worker.close()
    with capsys.disabled():
        print(f"\njob cycles/s on a Sentinel master with 2 replicas: {rates}")


def test_the_run_command_takes_replicated_durability(
    redis_sentinel: SentinelGroup, sentinel_master: redis.Redis, namespace: str
) -> None:
    """``lockworker run --durability replicated --replicas 2`` runs jobs with such a
    worker (that each of its steps waits for the replicas is the first test's)."""
    lockworker.submit(sentinel_master, namespace, "d1")
    sentinels = ",".join(f"{h}:{p}" for h, p in redis_sentinel.sentinels)
    url = f"redis+sentinel://{sentinels}/{redis_sentinel.master_name}"
    proc = subprocess.Popen(
        [sys.executable, "-m", "lockworker", "run", "lockworker.cli.demo_worker:DemoWorker",
         "--namespace", namespace, "--redis", url, "--durability", "replicated",
         "--replicas", "2", "--lock-timeout", "2"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "LOCKWORKER_REDIS_URL": ""},
    )
    try:
        state = JobKeys.of(namespace, "d1").state
        value = wait_for(
            lambda: (v := sentinel_master.get(state)) and v.startswith("lw2|done|") and v,
            timeout=20,
        )
        replicas = replicas_of(redis_sentinel)
        wait_for(lambda: [r.get(state) for r in replicas] == [value, value], timeout=5)
    finally:
        proc.terminate()
        _, err = proc.communicate(timeout=10)
    assert "Traceback" not in err


def test_a_replicated_leaders_term_is_on_every_replica_when_it_starts_leading(
    redis_sentinel: SentinelGroup, sentinel_master: redis.Redis, namespace: str
) -> None:
    """``Leader(durability="replicated")``: its term (lease and token) is on both
    replicas when ``on_acquired`` runs, read at once; its resignation too."""
    keys = leader_keys(namespace)
    replicas = replicas_of(redis_sentinel)
    seen: list[tuple[str, list[str | None]]] = []

    def lead(term: lockworker.Term) -> None:
        value = sentinel_master.get(keys.lock)
        seen.append((value, [r.get(keys.lock) for r in replicas]))

    leader = lockworker.Leader(
        sentinel_master, name=namespace, on_acquired=lead, lock_timeout=2.0,
        durability="replicated", replicas=2, handle_signals=False,
    )
    assert leader.durability is lockworker.Durability.REPLICATED
    runner = threading.Thread(target=leader.run)
    runner.start()
    try:
        wait_for(lambda: len(seen) >= 3, timeout=20)  # on_acquired returns: new terms
    finally:
        leader.stop()
        runner.join(10)
    assert not runner.is_alive()
    for value, on_replicas in seen:
        assert value is not None and value.startswith("lw2|")
        assert on_replicas == [value, value]
    for r in replicas:
        r.close()


def test_a_leader_asking_more_replicas_than_exist_never_leads(
    sentinel_master: redis.Redis, namespace: str
) -> None:
    led: list[int] = []
    leader = lockworker.Leader(
        sentinel_master, name=namespace, on_acquired=lambda term: led.append(term.token),
        durability="replicated", replicas=3, replica_timeout=0.05, handle_signals=False,
        redis_retry=lockworker.RetryPolicy(budget=0.4, initial=0.01, maximum=0.05),
    )
    with pytest.raises(lockworker.RedisUnavailable) as error:
        leader.run()
    assert isinstance(error.value.__cause__, lockworker.NotReplicated)
    assert led == []


LEADER_APP = '''
import json, os
import redis
import lockworker
from lockworker.daemons.leader import leader_keys

class Boss(lockworker.Leader):
    def on_acquired(self, term):
        key = leader_keys(self.name).lock
        replicas = [redis.Redis.from_url(u, decode_responses=True)
                    for u in os.environ["REPLICA_URLS"].split(",")]
        here = self.client.get(key)
        there = [r.get(key) for r in replicas]
        self.client.rpush(os.environ["RECORD"], json.dumps(
            {"durability": str(self.durability.value), "here": here, "there": there}))
        term.wait(60)
'''


def test_the_run_command_takes_replicated_durability_for_a_leader(
    redis_sentinel: SentinelGroup, sentinel_master: redis.Redis, namespace: str,
    tmp_path: Path,
) -> None:
    """``lockworker run Boss --durability replicated --replicas 2``: the Leader is built
    with it, so its term is on both replicas when ``on_acquired`` runs."""
    (tmp_path / "boss_app.py").write_text(LEADER_APP)
    sentinels = ",".join(f"{h}:{p}" for h, p in redis_sentinel.sentinels)
    url = f"redis+sentinel://{sentinels}/{redis_sentinel.master_name}"
    record = f"{namespace}:record"
    master = redis_sentinel.master()
    replica_urls = [s.url for s in redis_sentinel.servers if s.port != master.port]
    proc = subprocess.Popen(
        [sys.executable, "-m", "lockworker", "run", "boss_app:Boss", "--app-dir",
         str(tmp_path), "--namespace", namespace, "--redis", url,
         "--durability", "replicated", "--replicas", "2", "--lock-timeout", "2"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "LOCKWORKER_REDIS_URL": "", "RECORD": record,
             "REPLICA_URLS": ",".join(replica_urls)},
    )
    try:
        seen = wait_for(lambda: sentinel_master.lrange(record, 0, -1), timeout=20)
    finally:
        proc.terminate()
        _, err = proc.communicate(timeout=10)
    assert "Traceback" not in err
    first = json.loads(seen[0])
    assert first["durability"] == "replicated"
    assert first["here"] is not None and first["there"] == [first["here"]] * 2
