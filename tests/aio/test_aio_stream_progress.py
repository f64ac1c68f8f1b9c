"""An asyncio Worker reading a stream behind its namespace's progress (a fan-out
reader, a group member) runs nothing the namespace finished again once the jobs' DONE
records are gone (deleted here, as if they had run out)."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import redis
import redis.asyncio
from helpers import until

import lockworker
from lockworker import Job, StreamSource, aio
from lockworker.daemons.sources import stream_keys
from lockworker.testing import RedisServer


async def _serve(
    server: RedisServer, client: redis.Redis, namespace: str, stream: str, *, owner: str,
    ran: list[str], done: Any, group: str | None = None,
) -> None:
    """Serve ``stream`` as ``owner`` with an asyncio worker until ``done()``."""
    aclient = redis.asyncio.Redis.from_url(server.url)

    async def hook(job: Job) -> None:
        ran.append(job.id)

    worker = aio.Worker(aclient, namespace=namespace, owner=owner, lock_timeout=5.0,
                        on_acquired=hook)
    source = StreamSource(client, stream, owner=owner, group=group, block=0.05)
    serving = asyncio.ensure_future(worker.serve(source, concurrency=4))
    await until(lambda: done(source) or serving.done(), timeout=20)
    worker.stop()
    await asyncio.wait_for(serving, 10)
    await worker.close()
    await aclient.aclose()


def _forget(client: redis.Redis, namespace: str) -> None:
    for key in client.scan_iter(match=f"lw:job:{namespace}:*"):
        client.delete(key)


def test_an_asyncio_reader_behind_runs_nothing_its_namespace_finished(
    redis_server: RedisServer, redis_client: redis.Redis, namespace: str
) -> None:
    stream = f"{namespace}-jobs"
    late = StreamSource(redis_client, stream, owner="late", block=0.05)
    late.attach(SimpleNamespace(namespace=namespace))  # type: ignore[arg-type]
    late.touch()  # registered at the start, then gone
    ids = [lockworker.submit(redis_client, stream, f"j{i}") for i in range(20)]
    first: list[str] = []
    asyncio.run(_serve(redis_server, redis_client, namespace, stream, owner="a", ran=first,
                       done=lambda s: s.position() == ids[-1]))
    assert sorted(first) == sorted(f"j{i}" for i in range(20))
    _forget(redis_client, namespace)
    more = lockworker.submit(redis_client, stream, "after")
    again: list[str] = []
    asyncio.run(_serve(redis_server, redis_client, namespace, stream, owner="late", ran=again,
                       done=lambda s: s.position() == more))
    assert again == ["after"]


def test_an_asyncio_group_member_back_after_the_records_expired_runs_nothing_again(
    redis_server: RedisServer, redis_client: redis.Redis, namespace: str
) -> None:
    stream = f"{namespace}-jobs"
    entries = stream_keys(stream).extra("entries")

    def acked(last: str) -> Any:
        def check(_source: StreamSource) -> bool:
            groups = redis_client.xinfo_groups(entries)
            return any(
                g["last-delivered-id"] in (last, last.encode()) and g["pending"] == 0
                for g in groups
            )
        return check

    ids = [lockworker.submit(redis_client, stream, f"j{i}") for i in range(20)]
    ran: list[str] = []
    asyncio.run(_serve(redis_server, redis_client, namespace, stream, owner="m", ran=ran,
                       done=acked(ids[-1]), group="g"))
    assert sorted(ran) == sorted(f"j{i}" for i in range(20))
    _forget(redis_client, namespace)
    more = lockworker.submit(redis_client, stream, "after")
    again: list[str] = []
    asyncio.run(_serve(redis_server, redis_client, namespace, stream, owner="m", ran=again,
                       done=acked(more), group="g"))
    assert again == ["after"]
