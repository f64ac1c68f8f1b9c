"""Every product on a real Redis Cluster of three masters, through a ``RedisCluster``."""

from __future__ import annotations

import contextlib
import itertools
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from failover_runs import Runs, serve_in_thread
from helpers import in_thread, wait_for
from redis.cluster import RedisCluster

import lockworker
from lockworker import JobNotFound, JobStatus, Leader, Lock, Outcome, Semaphore, Term, Worker
from lockworker.model.keys import JobKeys, Space, parse_state_key, state_pattern
from lockworker.testing import Cluster, capture_events

pytestmark = pytest.mark.processes  # a real cluster: server processes

PROTOCOLS = ["script", "txn"]
JOBS = 30


def job_ids(count: int = JOBS) -> list[str]:
    return [f"job-{i}" for i in range(count)]


def jobs_per_master(cluster: Cluster, namespace: str, space: Space = Space.JOB) -> list[set[str]]:
    """For each master, the names whose state key it holds (a SCAN of that node alone)."""
    held = []
    for node in cluster.masters:
        with contextlib.closing(node.client(decode_responses=True)) as client:
            keys = client.scan_iter(match=state_pattern(space, namespace), count=1000)
            held.append({parsed[1] for key in keys if (parsed := parse_state_key(key, space))})
    return held


@pytest.fixture
def workers(redis_cluster: Cluster, namespace: str) -> Iterator[Any]:
    """Build workers on clients of their own, as separate processes would be."""
    made: list[tuple[Worker, RedisCluster]] = []

    def make(protocol: str, on_acquired: Any, **kwargs: Any) -> Worker:
        client = redis_cluster.client(decode_responses=True, socket_timeout=2.0)
        kwargs.setdefault("lock_timeout", 5.0)
        worker = Worker(
            client, namespace=namespace, protocol=protocol, handle_signals=False,
            on_acquired=on_acquired, **kwargs,
        )
        made.append((worker, client))
        return worker

    yield make
    for worker, client in made:
        worker.stop()
        worker.close()
        client.close()


def test_the_keys_of_one_job_share_a_slot_and_job_ids_reach_every_master(
    redis_cluster: Cluster, cluster_client: RedisCluster, namespace: str
) -> None:
    masters = set()
    for job_id in job_ids():
        keys = JobKeys.of(namespace, job_id)
        slots = {cluster_client.keyslot(k) for k in (keys.lock, keys.state, keys.wake)}
        assert len(slots) == 1
        masters.add(redis_cluster.node_of(keys.lock).port)
    assert masters == {node.port for node in redis_cluster.masters}


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_two_workers_run_each_job_once_on_every_master(
    redis_cluster: Cluster, workers: Any, namespace: str, protocol: str
) -> None:
    runs = Runs()
    pair = [workers(protocol, runs.hook) for _ in range(2)]
    outcomes: dict[str, list[Outcome]] = {job: [] for job in job_ids()}

    def process_all(worker: Worker) -> None:
        for job in job_ids():  # both in the same order: they race for every job
            outcomes[job].append(worker.process(job, {"id": job}))

    with capture_events() as logged:
        threads = [in_thread(lambda w=w: process_all(w)) for w in pair]
        for thread, box in threads:
            thread.join(timeout=60)
            assert "error" not in box, box.get("error")
    assert {job: len(tokens) for job, tokens in runs.tokens.items()} == dict.fromkeys(
        job_ids(), 1
    )
    assert all(sorted(o) == [Outcome.DONE, Outcome.DONE_ELSEWHERE] for o in outcomes.values())
    assert all(pair[0].inspect(job).status is JobStatus.DONE for job in job_ids())
    assert not [e for e in logged if e.get("log_level") == "error"]
    held = jobs_per_master(redis_cluster, namespace)
    assert all(held) and set().union(*held) == set(job_ids())


@pytest.mark.parametrize("source", ["list", "stream"])
@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_serve_runs_every_job_of_a_list_or_a_stream(
    redis_cluster: Cluster, workers: Any, namespace: str, protocol: str, source: str
) -> None:
    runs = Runs()
    worker = workers(protocol, runs.hook)
    client = worker.client
    jobs = [(job, {"n": n}) for n, job in enumerate(job_ids())]
    if source == "list":
        worker.serve(jobs, concurrency=4)
    else:
        last = [lockworker.submit(client, namespace, job, p) for job, p in jobs][-1]
        stream = lockworker.StreamSource(client, namespace, owner="reader", block=0.1)
        thread, raised = serve_in_thread(worker, stream, concurrency=4)
        wait_for(lambda: stream.position() == last, timeout=30)  # every job resolved
        worker.stop()
        thread.join(timeout=30)
        assert raised == []
    assert runs.payloads == dict(jobs)
    assert all(len(tokens) == 1 for tokens in runs.tokens.values())
    assert all(worker.inspect(job).status is JobStatus.DONE for job, _ in jobs)
    assert all(jobs_per_master(redis_cluster, namespace))


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_inspect_and_reset_keep_tokens_growing(workers: Any, protocol: str) -> None:
    runs = Runs()
    worker = workers(protocol, runs.hook)
    assert worker.process("report") is Outcome.DONE
    done = worker.inspect("report")
    assert (done.status, done.attempt) == (JobStatus.DONE, 1)
    assert worker.reset("report") is True
    pending = worker.inspect("report")
    assert (pending.status, pending.attempt, pending.token) == (JobStatus.PENDING, 0, done.token)
    assert worker.process("report") is Outcome.DONE
    assert runs.tokens["report"] == [done.token, runs.tokens["report"][1]]
    assert runs.tokens["report"][1] > done.token
    # the attempt history is read in the job's slot, on both protocols, and kept by reset
    assert [(r.ending, r.token) for r in done.history] == [("done", done.token)]
    again = worker.inspect("report").history
    assert [(r.ending, r.token) for r in again] == [
        ("done", done.token), ("done", runs.tokens["report"][1])
    ]
    with pytest.raises(JobNotFound):
        worker.reset("never-submitted")


class Member(Leader):
    """A leader that records its terms and resigns when asked."""

    def __init__(self, client: RedisCluster, board: dict[str, Any], **kwargs: Any) -> None:
        super().__init__(client, handle_signals=False, lock_timeout=2.0, **kwargs)
        self.board = board

    def on_acquired(self, term: Term) -> None:
        board = self.board
        with board["mutex"]:
            board["inside"] += 1
            board["most"] = max(board["most"], board["inside"])
            board["terms"].append((self.owner, term.token))
        try:
            while not term.wait(0.01) and not board["resign"].is_set():
                pass
        finally:
            with board["mutex"]:
                board["inside"] -= 1
                board["resign"].clear()


def test_one_leader_among_three_and_each_handover_raises_the_token(
    redis_cluster: Cluster, cluster_client: RedisCluster, namespace: str
) -> None:
    board: dict[str, Any] = {
        "mutex": threading.Lock(), "inside": 0, "most": 0, "terms": [],
        "resign": threading.Event(),
    }
    clients = [redis_cluster.client(decode_responses=True, socket_timeout=2.0) for _ in range(3)]
    members = [Member(c, board, name=namespace, owner=f"m{i}") for i, c in enumerate(clients)]
    threads = [threading.Thread(target=m.run, daemon=True) for m in members]
    for thread in threads:
        thread.start()
    try:
        for count in (1, 2, 3):
            wait_for(lambda c=count: len(board["terms"]) >= c, timeout=10)
            owner, token = board["terms"][-1]
            info = wait_for(lambda: Leader.current(cluster_client, namespace))
            assert (info.holder, info.token) == (owner, token)
            board["resign"].set()
    finally:
        for member in members:
            member.stop()
        for thread in threads:
            thread.join(timeout=10)
        for client in clients:
            client.close()
    tokens = [token for _, token in board["terms"]]
    assert board["most"] == 1
    assert tokens == sorted(set(tokens))
    assert len({owner for owner, _ in board["terms"]}) >= 2


def test_lock_excludes_threads_and_its_tokens_strictly_increase(
    redis_cluster: Cluster, namespace: str
) -> None:
    seen: list[int] = []
    inside = [0, 0]  # now, most

    def contend(client: RedisCluster) -> None:
        lock = Lock(client, "shared", namespace=namespace, ttl=5.0)
        for _ in range(8):
            with lock:
                inside[0] += 1
                inside[1] = max(inside)
                seen.append(lock.token or 0)
                inside[0] -= 1
        lock.close()

    clients = [redis_cluster.client(decode_responses=True, socket_timeout=2.0) for _ in range(4)]
    threads = [in_thread(lambda c=c: contend(c)) for c in clients]
    for thread, box in threads:
        thread.join(timeout=60)
        assert "error" not in box, box.get("error")
    for client in clients:
        client.close()
    assert inside[1] == 1
    assert len(seen) == 32
    assert all(later > earlier for earlier, later in itertools.pairwise(seen))


def test_a_lock_waiter_gets_the_lock_on_release(
    cluster_client: RedisCluster, redis_cluster: Cluster, namespace: str
) -> None:
    """With a 30 s ttl, only the release can hand the lock over within seconds."""
    holder = Lock(cluster_client, "handover", namespace=namespace, ttl=30.0)
    other = redis_cluster.client(decode_responses=True, socket_timeout=2.0)
    waiter = Lock(other, "handover", namespace=namespace, ttl=30.0)
    assert holder.acquire()
    thread, box = in_thread(lambda: (waiter.acquire(timeout=20.0), time.monotonic()))
    wait_for(lambda: cluster_client.zcard(holder.keys.extra("queue")) == 1, timeout=10)
    released = time.monotonic()
    holder.release()
    thread.join(timeout=20)
    got, when = box["result"]
    assert got and when - released < 2.0
    assert (waiter.token or 0) > (holder.token or 0)
    waiter.release()
    other.close()


def test_semaphore_admits_at_most_its_limit_and_a_waiter_enters_on_release(
    redis_cluster: Cluster, cluster_client: RedisCluster, namespace: str
) -> None:
    first = Semaphore(cluster_client, "pool", 2, namespace=namespace, ttl=30.0)
    second = Semaphore(cluster_client, "pool", 2, namespace=namespace, ttl=30.0)
    other = redis_cluster.client(decode_responses=True, socket_timeout=2.0)
    third = Semaphore(other, "pool", 2, namespace=namespace, ttl=30.0)
    assert first.acquire() and second.acquire()
    assert third.acquire(blocking=False) is False
    assert first.holders() == 2
    thread, box = in_thread(lambda: (third.acquire(timeout=20.0), time.monotonic()))
    wait_for(lambda: cluster_client.zcard(first.keys.extra("queue")) == 1, timeout=10)
    released = time.monotonic()
    first.release()
    thread.join(timeout=20)
    got, when = box["result"]
    assert got and when - released < 2.0
    assert third.holders() == 2
    second.release()
    third.release()
    other.close()


def test_compute_once_runs_fn_once_for_a_stampede(
    redis_cluster: Cluster, namespace: str
) -> None:
    calls: list[int] = []
    release = threading.Event()

    def fn() -> dict[str, int]:
        calls.append(1)
        assert release.wait(20)
        return {"answer": 42}

    clients = [redis_cluster.client(decode_responses=True, socket_timeout=2.0) for _ in range(5)]
    threads = [
        in_thread(lambda c=c: lockworker.compute_once(
            c, "report", fn, ttl=30.0, namespace=namespace, timeout=20.0
        ))
        for c in clients
    ]
    wait_for(lambda: calls)
    release.set()
    for thread, box in threads:
        thread.join(timeout=20)
        assert box.get("result") == {"answer": 42}, box.get("error")
    assert calls == [1]
    value_key = JobKeys(namespace, "report", Space.ONCE).extra("value")
    assert 0 < clients[0].pttl(value_key) <= 30_000
    for client in clients:
        client.close()


def test_delayed_jobs_wait_off_their_streams_and_run_once_due_on_every_master(
    workers: Any, namespace: str
) -> None:
    runs = Runs()
    streams = [f"{namespace}-{i}" for i in range(6)]  # their slots spread over the masters
    served = [(s, workers("script", runs.hook)) for s in streams]
    for stream, worker in served:
        assert lockworker.submit(worker.client, stream, f"late-{stream}", delay=0.5).startswith(
            "delayed:"
        )
        lockworker.submit(worker.client, stream, f"now-{stream}")
    threads = [
        serve_in_thread(w, lockworker.StreamSource(w.client, s, owner="r", block=0.1), 2)
        for s, w in served
    ]
    wanted = {f"{kind}-{s}" for s in streams for kind in ("late", "now")}
    wait_for(lambda: wanted <= set(runs.payloads), timeout=30)
    for _, worker in served:
        worker.stop()
    for thread, raised in threads:
        thread.join(timeout=30)
        assert raised == []
    assert all(len(runs.tokens[job]) == 1 for job in wanted)
