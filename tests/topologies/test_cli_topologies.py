"""The ``lockworker`` command on a real cluster and a real Sentinel group: ``--redis``
takes their URL forms, and ``status`` lists the jobs of every master."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import redis
from redis.cluster import RedisCluster

import lockworker
from lockworker.testing import Cluster, SentinelGroup

pytestmark = pytest.mark.processes


def lockworker_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "lockworker", *args], capture_output=True, text=True,
        timeout=60, check=False, env={**os.environ, "LOCKWORKER_REDIS_URL": ""},
    )


def test_status_on_a_cluster_lists_the_jobs_of_every_master(
    redis_cluster: Cluster, cluster_client: RedisCluster, namespace: str
) -> None:
    worker = lockworker.Worker(cluster_client, namespace=namespace, on_acquired=lambda j: None)
    ids = [f"job-{i}" for i in range(40)]
    for job_id in ids:
        assert worker.process(job_id) is lockworker.Outcome.DONE
    worker.close()
    masters = {redis_cluster.node_of(f"{{{job_id}}}").port for job_id in ids}
    assert len(masters) == len(redis_cluster.masters)  # the jobs are spread over all
    seeds = ",".join(f"127.0.0.1:{m.port}" for m in redis_cluster.masters[:2])
    out = lockworker_cli(
        "status", "--json", "--namespace", namespace, "--redis", f"redis+cluster://{seeds}"
    )
    assert out.returncode == 0, out.stderr
    jobs = json.loads(out.stdout)["jobs"]
    assert [r["id"] for r in jobs] == sorted(ids, key=lambda i: int(i.split("-")[1]))
    assert {r["state"] for r in jobs} == {"done"}


def test_a_worker_command_reaches_the_master_through_the_sentinels(
    redis_sentinel: SentinelGroup, sentinel_master: redis.Redis, namespace: str
) -> None:
    worker = lockworker.Worker(sentinel_master, namespace=namespace, on_acquired=lambda j: None)
    assert worker.process("j1") is lockworker.Outcome.DONE
    worker.close()
    sentinels = ",".join(f"{h}:{p}" for h, p in redis_sentinel.sentinels)
    url = f"redis+sentinel://{sentinels}/{redis_sentinel.master_name}"
    out = lockworker_cli("status", "--json", "--namespace", namespace, "--redis", url)
    assert out.returncode == 0, out.stderr
    assert [(r["id"], r["state"]) for r in json.loads(out.stdout)["jobs"]] == [("j1", "done")]
    reset = lockworker_cli("reset", "j1", "--namespace", namespace, "--yes", "--redis", url)
    assert reset.returncode == 0, reset.stderr
    assert sentinel_master.get(f"lw:job:{namespace}:{{j1}}:lock") is None


def test_a_sentinel_url_naming_an_unknown_master_is_one_line(
    redis_sentinel: SentinelGroup,
) -> None:
    sentinels = ",".join(f"{h}:{p}" for h, p in redis_sentinel.sentinels)
    out = lockworker_cli("status", "--redis", f"redis+sentinel://{sentinels}/nosuchmaster")
    assert out.returncode == 1
    assert len(out.stderr.strip().splitlines()) == 1, out.stderr
