"""The asyncio ``serve`` of a blocking source (a stream): one thread hop per chunk.

A sync source may block, so the loop reads it in a worker thread; entries the source
already read come along in the same hop (``StreamSource.buffered``), and resolutions
reported while one report is in flight go together in the next. Nothing of that may
lose a job: a stop leaves what was read ahead unresolved, and a restart serves it.
"""

from __future__ import annotations

import asyncio
import collections
from collections.abc import Iterator
from typing import Any

import pytest
import redis
import redis.asyncio as aredis

import lockworker
import lockworker.aio
from lockworker.aio import feed
from lockworker.aio import serve as aio_serve
from lockworker.daemons.sources import Delivery
from lockworker.testing.server import RedisServer
from tests.helpers import until


class Buffered:
    """A sync source's iterator, and how many of its items it holds already."""

    def __init__(self, n: int, held: int) -> None:
        self.items = iter([Delivery(f"j{i}", None) for i in range(n)])
        self.buffered = held

    def __iter__(self) -> Iterator[Delivery]:
        for item in self.items:
            self.buffered = max(0, self.buffered - 1)
            yield item


def test_a_chunk_is_the_next_delivery_and_those_the_source_holds_already() -> None:
    source = Buffered(200, held=100)
    deliveries = iter(source)
    chunk, ended = feed._take(deliveries, source)
    assert [d.job_id for d in chunk] == [f"j{i}" for i in range(feed.CHUNK)]
    assert not ended
    source.buffered = 0  # the next delivery may block: it comes alone
    chunk, ended = feed._take(deliveries, source)
    assert len(chunk) == 1 and not ended
    assert feed._take(deliveries, None)[0][0].job_id == f"j{feed.CHUNK + 1}"
    source.buffered = 10_000
    sizes, ended = [], False
    while not ended:
        chunk, ended = feed._take(deliveries, source)
        sizes.append(len(chunk))
    assert sum(sizes) == 200 - feed.CHUNK - 2  # every delivery once, then the end
    assert max(sizes) == feed.CHUNK


def _worker(server: RedisServer, namespace: str, ran: collections.Counter[str],
            stop_after: int | None = None) -> Any:
    client = aredis.Redis(host=server.connect_host, port=server.port)
    worker: Any = None

    async def on_acquired(job: lockworker.Job) -> None:
        ran[job.id] += 1
        if stop_after is not None and sum(ran.values()) >= stop_after:
            worker.stop()

    worker = lockworker.aio.Worker(
        client, namespace=namespace, owner="reader", lock_timeout=10,
        on_acquired=on_acquired, handle_signals=False,
    )
    return worker


async def _serve_until_saved(
    server: RedisServer, client: redis.Redis, namespace: str, ids: list[str],
    ran: collections.Counter[str], *, concurrency: int,
) -> None:
    """Serve the namespace's stream until its position is saved past its last entry."""
    worker = _worker(server, namespace, ran)
    source = lockworker.StreamSource(client, f"{namespace}-jobs", owner="reader", block=0.05)
    serving = asyncio.ensure_future(worker.serve(source, concurrency=concurrency))
    await until(lambda: source.position() == ids[-1], timeout=20)
    worker.stop()
    await asyncio.wait_for(serving, 10)
    await worker.close()


def test_a_stream_is_read_in_chunks_and_its_resolutions_reported_together(
    redis_server: RedisServer, redis_client: redis.Redis, namespace: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    stream = f"{namespace}-jobs"
    ids = [lockworker.submit(redis_client, stream, f"job-{i}") for i in range(300)]
    hops = collections.Counter[str]()
    real_take, real_report = feed._take, aio_serve._report_all

    def take(*args: Any) -> Any:
        hops["take"] += 1
        return real_take(*args)

    def report(deliveries: list[Delivery], together: Any) -> Any:
        hops["report"] += 1
        return real_report(deliveries, together)

    monkeypatch.setattr(feed, "_take", take)
    monkeypatch.setattr(aio_serve, "_report_all", report)
    ran = collections.Counter[str]()
    # Saved while serving, not only at its end: the reports reach the source.
    asyncio.run(_serve_until_saved(redis_server, redis_client, namespace, ids, ran, concurrency=16))
    assert sorted(ran) == sorted(f"job-{i}" for i in range(300))
    assert set(ran.values()) == {1}
    assert hops["take"] <= 300 // feed.CHUNK + 20  # not one hop per delivery
    assert 0 < hops["report"] < 300


def test_a_stop_leaves_what_was_read_ahead_unresolved_and_a_restart_serves_it(
    redis_server: RedisServer, redis_client: redis.Redis, namespace: str
) -> None:
    stream = f"{namespace}-jobs"
    ids = [lockworker.submit(redis_client, stream, f"job-{i}") for i in range(200)]
    ran = collections.Counter[str]()

    async def serve_once(stop_after: int | None) -> str | None:
        worker = _worker(redis_server, namespace, ran, stop_after)
        source = lockworker.StreamSource(redis_client, stream, owner="reader", block=0.05)
        serving = asyncio.ensure_future(worker.serve(source, concurrency=4))
        if stop_after is None:
            await until(lambda: len(ran) == 200, timeout=20)
            worker.stop()
        await asyncio.wait_for(serving, 10)
        await worker.close()
        return source.position()

    stopped_at = asyncio.run(serve_once(stop_after=10))
    assert len(ran) < 200 and stopped_at != ids[-1]  # the stop came with work read ahead
    asyncio.run(serve_once(stop_after=None))
    assert sorted(ran) == sorted(f"job-{i}" for i in range(200))
    assert set(ran.values()) == {1}  # none lost, none run twice


def test_one_job_at_a_time_shares_its_report_hops(
    redis_server: RedisServer, redis_client: redis.Redis, namespace: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """At concurrency 1 each job resolves alone, and each report used to start a hop to
    a worker thread of its own. A hop now waits ``REPORT_WAIT`` first: the reports of
    the jobs resolved meanwhile go with it (made long here, so that every job of this
    short stream shares a few hops whatever the machine's speed)."""
    stream = f"{namespace}-jobs"
    ids = [lockworker.submit(redis_client, stream, f"job-{i}") for i in range(40)]
    hops: list[int] = []
    real_report = aio_serve._report_all

    def report(deliveries: list[Delivery], together: Any) -> Any:
        hops.append(len(deliveries))
        return real_report(deliveries, together)

    monkeypatch.setattr(aio_serve, "_report_all", report)
    monkeypatch.setattr(aio_serve, "REPORT_WAIT", 0.5)
    ran = collections.Counter[str]()
    asyncio.run(_serve_until_saved(redis_server, redis_client, namespace, ids, ran, concurrency=1))
    assert set(ran.values()) == {1} and len(ran) == 40
    assert sum(hops) == 40  # every job reported once
    assert len(hops) < 40 // 4  # together, not one hop per job
