"""An asyncio Worker as a member of a consumer group (``StreamSource(group=...)``),
beside a sync member: the jobs are shared, each done once, and a job that fails in
the asyncio member is handed to the sync one at once."""

from __future__ import annotations

import asyncio
import threading

import redis
import redis.asyncio
from helpers import in_thread, until

import lockworker
from lockworker import Job, JobStatus, StreamSource, aio
from lockworker.daemons.sources import stream_keys
from lockworker.testing import RedisServer


def test_an_asyncio_member_shares_the_group_and_hands_over_its_failures(
    redis_server: RedisServer, namespace: str
) -> None:
    stream = f"{namespace}-jobs"
    entries = stream_keys(stream).extra("entries")
    sync_client = redis_server.client(decode_responses=True)
    did: list[tuple[str, str, int]] = []
    lock = threading.Lock()

    def sync_hook(job: Job) -> None:
        with lock:
            did.append((job.id, "sync", job.attempt))

    sync_worker = lockworker.Worker(
        sync_client, namespace=namespace, owner="sync", lock_timeout=5.0,
        on_acquired=sync_hook, handle_signals=False,
    )
    sync_source = StreamSource(sync_client, stream, owner="sync", group="g", block=0.05)
    thread, box = in_thread(lambda: sync_worker.serve(sync_source, concurrency=4))

    go = threading.Event()

    async def scenario() -> None:
        client = redis.asyncio.Redis.from_url(redis_server.url, decode_responses=True)

        async def async_hook(job: Job) -> None:
            with lock:
                did.append((job.id, "async", job.attempt))
            if job.id == "fails":
                await until(go.is_set)
                raise RuntimeError("fails in the asyncio member")
            await asyncio.sleep(0.005)

        worker = aio.Worker(
            client, namespace=namespace, owner="async", lock_timeout=5.0,
            on_acquired=async_hook,
        )
        source = StreamSource(sync_client, stream, owner="async", group="g", block=0.05)
        serving = asyncio.ensure_future(worker.serve(source, concurrency=4))
        await until(lambda: "async" in consumers(sync_client, entries))
        for i in range(40):
            lockworker.submit(sync_client, stream, f"j{i}")
        await until(lambda: len({j for j, _, _ in did if j != "fails"}) == 40, timeout=20)
        # A job only the asyncio member fails: it sends it to the sync member at once.
        sync_worker.stop()  # so that the asyncio member reads the next entry...
        thread.join(10)
        await until(lambda: "sync" not in consumers(sync_client, entries))
        lockworker.submit(sync_client, stream, "fails")
        await until(lambda: any(j == "fails" for j, _, _ in did))
        # ...and a new sync member joins before the asyncio member's attempt fails.
        again = lockworker.Worker(
            sync_client, namespace=namespace, owner="sync2", lock_timeout=5.0,
            on_acquired=sync_hook, handle_signals=False,
        )
        again_source = StreamSource(sync_client, stream, owner="sync2", group="g", block=0.05)
        t2, box2 = in_thread(lambda: again.serve(again_source, concurrency=2))
        await until(lambda: "sync2" in consumers(sync_client, entries))
        failed_at = asyncio.get_running_loop().time()
        go.set()
        await until(lambda: len([j for j, _, _ in did if j == "fails"]) == 2, timeout=10)
        # Handed over at once: well before the asyncio member's own step back (1.25 s).
        assert asyncio.get_running_loop().time() - failed_at < 1.0
        await until(lambda: sync_client.xpending(entries, "g")["pending"] == 0, timeout=10)
        assert [(side, a) for j, side, a in did if j == "fails"] == [("async", 1), ("sync", 2)]
        assert (await worker.inspect("fails")).status is JobStatus.DONE
        await shut_down(worker, serving, client)
        again.stop()
        t2.join(10)
        again.close()
        assert "error" not in box2

    try:
        asyncio.run(scenario())
    finally:
        sync_worker.stop()
        thread.join(10)
        sync_worker.close()
        sync_client.close()
    assert "error" not in box, box
    counts: dict[str, int] = {}
    for job, _, _ in did:
        counts[job] = counts.get(job, 0) + 1
    assert all(n == 1 for job, n in counts.items() if job != "fails")
    assert {side for job, side, _ in did if job.startswith("j")} == {"sync", "async"}


async def shut_down(
    worker: aio.Worker, serving: asyncio.Future[None], client: redis.asyncio.Redis
) -> None:
    """Stop ``worker``, wait for its serving to end, close it and its client."""
    worker.stop()
    await asyncio.wait_for(serving, 10)
    await worker.close()
    await client.aclose()


def consumers(client: redis.Redis, entries: str) -> set[str]:
    try:
        return {c["name"] for c in client.xinfo_consumers(entries, "g")}
    except redis.ResponseError:
        return set()



def test_an_asyncio_member_acknowledges_what_resolved_together_in_one_xack(
    redis_server: RedisServer, namespace: str
) -> None:
    """asyncio serve reports the jobs that resolved meanwhile in one hop to a worker
    thread; inside the source's ``resolving()`` their entries go in one XACK. Reported
    one by one, each found no acknowledgement in flight and sent its own: an XACK round
    trip per job, in one thread, which fell behind a busy stream (the entries in hand
    then grew without bound)."""
    stream = f"{namespace}-jobs"
    entries = stream_keys(stream).extra("entries")
    sync_client = redis_server.client(decode_responses=True)
    jobs = 300
    pipe = sync_client.pipeline(transaction=False)
    for i in range(jobs):
        pipe.xadd(entries, {"job_id": f"j{i}", "payload": "null"})
    pipe.execute()
    ran: list[str] = []

    def xacks() -> int:
        stats = sync_client.info("commandstats").get("cmdstat_xack", {})
        return int(stats.get("calls", 0))

    def settled() -> bool:
        """Every job ran, and every entry is acknowledged."""
        try:
            return len(ran) == jobs and sync_client.xpending(entries, "g")["pending"] == 0
        except redis.ResponseError:  # the group is not there yet
            return False

    async def scenario() -> int:
        client = redis.asyncio.Redis.from_url(redis_server.url, decode_responses=True)
        worker = aio.Worker(
            client, namespace=namespace, owner="async", lock_timeout=5.0,
            on_acquired=lambda job: ran.append(job.id), handle_signals=False,
        )
        source = StreamSource(sync_client, stream, owner="async", group="g", block=0.05)
        before = xacks()
        serving = asyncio.ensure_future(worker.serve(source, concurrency=16))
        await until(settled, timeout=30)
        sent = xacks() - before
        await shut_down(worker, serving, client)
        return sent

    try:
        sent = asyncio.run(scenario())
    finally:
        sync_client.close()
    assert sorted(ran) == sorted(f"j{i}" for i in range(jobs))
    assert sent <= jobs / 4, sent  # one per report hop, many jobs each


def test_an_asyncio_group_backup_does_not_hold_back_behind_a_backup_ranked_before(
    redis_server: RedisServer, namespace: str
) -> None:
    """As the sync twin (tests/integration/test_group_source.py): ranking among
    backups concerns only sources every process reads whole; a group's entries go to
    one member, which nobody else sees."""
    stream = f"{namespace}-jobs"
    sync_client = redis_server.client(decode_responses=True)
    first = lockworker.Worker(
        sync_client, namespace=namespace, owner="a-first", role="backup",
        on_acquired=lambda job: None, handle_signals=False,
    )
    assert first.process("register") is lockworker.Outcome.DONE  # registered, serving nothing
    ran: list[str] = []

    async def scenario() -> float:
        client = redis.asyncio.Redis.from_url(redis_server.url, decode_responses=True)
        worker = aio.Worker(
            client, namespace=namespace, owner="b-member", role="backup", backup_delay=5.0,
            lock_timeout=5.0, on_acquired=lambda job: ran.append(job.id),
            handle_signals=False,
        )
        source = StreamSource(sync_client, stream, owner="b-member", group="g", block=0.05)
        serving = asyncio.ensure_future(worker.serve(source, concurrency=4))
        entries = stream_keys(stream).extra("entries")
        await until(lambda: "b-member" in consumers(sync_client, entries))
        lockworker.submit(sync_client, stream, "warm-up")  # after its start-up grace
        await until(lambda: len(ran) == 1, timeout=15)
        sent = asyncio.get_running_loop().time()
        for i in range(10):
            lockworker.submit(sync_client, stream, f"g{i}")
        await until(lambda: len(ran) == 11, timeout=15)
        took = asyncio.get_running_loop().time() - sent
        await shut_down(worker, serving, client)
        return took

    try:
        took = asyncio.run(scenario())
    finally:
        first.close()
        sync_client.close()
    assert sorted(ran) == sorted(["warm-up", *(f"g{i}" for i in range(10))])
    assert took < 3.0  # well below the 5 s delay a held-back entry would wait
