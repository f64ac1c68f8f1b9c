"""The ``lockworker`` command on a real cluster and a real Sentinel group: ``--redis``
takes their URL forms, and ``status`` lists the jobs of every master."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import redis
from helpers import wait_for
from redis.cluster import RedisCluster

import lockworker
from lockworker.daemons.sources import stream_keys
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
    # Given up, so in the namespace's index: one index key per slot, read on every master.
    worker = lockworker.Worker(cluster_client, namespace=namespace, max_attempts=1,
                               on_acquired=lambda j: 1 / 0)
    ids = [f"job-{i}" for i in range(40)]
    for job_id in ids:
        assert worker.process(job_id) is lockworker.Outcome.GAVE_UP
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
    assert {r["state"] for r in jobs} == {"gave_up"}
    assert json.loads(out.stdout)["counts"]["jobs"]["gave_up"] == 40


def test_a_worker_command_reaches_the_master_through_the_sentinels(
    redis_sentinel: SentinelGroup, sentinel_master: redis.Redis, namespace: str
) -> None:
    worker = lockworker.Worker(sentinel_master, namespace=namespace, on_acquired=lambda j: None)
    assert worker.process("j1") is lockworker.Outcome.DONE
    worker.close()
    sentinels = ",".join(f"{h}:{p}" for h, p in redis_sentinel.sentinels)
    url = f"redis+sentinel://{sentinels}/{redis_sentinel.master_name}"
    out = lockworker_cli(
        "status", "--json", "--namespace", namespace, "--job", "j1", "--redis", url
    )
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



ASYNC_APP = """
from lockworker import aio

class Marker(aio.Worker):
    async def on_acquired(self, job):
        await self.client.rpush(self.namespace + ":did", job.id)

class Boss(aio.Leader):
    async def on_acquired(self, term):
        while not await term.wait(0.05):
            pass
"""


def run_async(tmp: Path, target: str, url: str, *options: str) -> subprocess.Popen[str]:
    """``lockworker run`` of an asyncio class of :data:`ASYNC_APP` on ``url``."""
    (tmp / "async_app.py").write_text(ASYNC_APP)
    return subprocess.Popen(
        [sys.executable, "-m", "lockworker", "run", f"async_app:{target}", "--app-dir",
         str(tmp), "--owner", "a1", "--lock-timeout", "2", "--redis", url, *options],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        text=True, env={**os.environ, "LOCKWORKER_REDIS_URL": ""},
    )


def serve_jobs_and_stop(
    tmp: Path, url: str, client: redis.Redis, namespace: str, ids: list[str]
) -> None:
    """An asyncio Worker daemon on ``url`` does the jobs ``lockworker submit`` adds, each
    once, and exits 0 on SIGTERM."""
    proc = run_async(tmp, "Marker", url, "--namespace", namespace)
    try:
        readers = stream_keys(namespace).extra("readers")
        wait_for(lambda: client.zscore(readers, "a1") is not None, timeout=30)
        for job_id in ids:
            submitted = lockworker_cli("submit", namespace, job_id, "--redis", url)
            assert submitted.returncode == 0, submitted.stderr
        did = f"{namespace}:did"
        wait_for(lambda: client.llen(did) == len(ids), timeout=30)
        assert sorted(client.lrange(did, 0, -1)) == sorted(ids)
        proc.send_signal(signal.SIGTERM)
        _out, err = proc.communicate(timeout=20)
        assert proc.returncode == 0, err
        assert '"run.stopped"' in err and "Traceback" not in err
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=10)


def test_an_asyncio_worker_daemon_serves_the_master_through_the_sentinels(
    redis_sentinel: SentinelGroup, sentinel_master: redis.Redis, namespace: str,
    tmp_path: Path,
) -> None:
    sentinels = ",".join(f"{h}:{p}" for h, p in redis_sentinel.sentinels)
    url = f"redis+sentinel://{sentinels}/{redis_sentinel.master_name}"
    serve_jobs_and_stop(tmp_path, url, sentinel_master, namespace, ["j1", "j2"])


def test_an_asyncio_worker_daemon_does_jobs_on_every_master_of_a_cluster(
    redis_cluster: Cluster, cluster_client: RedisCluster, namespace: str, tmp_path: Path,
) -> None:
    ids = [f"job-{i}" for i in range(4)]
    seeds = ",".join(f"127.0.0.1:{m.port}" for m in redis_cluster.masters[:2])
    serve_jobs_and_stop(
        tmp_path, f"redis+cluster://{seeds}", cluster_client, namespace, ids
    )
    masters = {redis_cluster.node_of(f"{{{job_id}}}").port for job_id in ids}
    assert len(masters) == len(redis_cluster.masters)  # the jobs were spread over all


def test_an_asyncio_leader_daemon_leads_on_a_cluster_and_resigns_on_sigterm(
    redis_cluster: Cluster, cluster_client: RedisCluster, namespace: str, tmp_path: Path,
) -> None:
    url = f"redis+cluster://127.0.0.1:{redis_cluster.masters[0].port}"
    proc = run_async(tmp_path, "Boss", url, "--name", namespace)
    try:
        def holder() -> str | None:
            info = lockworker.Leader.current(cluster_client, namespace)
            return None if info is None else info.holder

        wait_for(lambda: holder() == "a1", timeout=30)
        proc.send_signal(signal.SIGTERM)
        _out, err = proc.communicate(timeout=20)
        assert proc.returncode == 0, err
        assert holder() is None  # resigned on the way out
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=10)


def test_check_reports_the_one_misconfigured_master_by_name(
    redis_cluster: Cluster, capsys: pytest.CaptureFixture[str]
) -> None:
    from lockworker.cli.main import main as cli_main

    bad = redis_cluster.masters[1]
    node = bad.client(decode_responses=True)
    node.config_set("maxmemory-policy", "volatile-lru")
    node.config_set("maxmemory", "64mb")
    try:
        url = redis_cluster.url.replace("redis://", "redis+cluster://", 1)
        assert cli_main(["check", "--redis", url, "--json", "--clock-interval", "0.2"]) == 1
    finally:
        node.config_set("maxmemory-policy", "noeviction")
        node.config_set("maxmemory", "0")
        node.close()
    doc = json.loads(capsys.readouterr().out)
    evictions = {c["server"]: c["status"] for c in doc["checks"] if c["check"] == "eviction"}
    assert len(evictions) == len(redis_cluster.masters)
    assert {s for s, status in evictions.items() if status == "failure"} == {
        f"127.0.0.1:{bad.port}"
    }
