"""A finished job's record is kept for ``done_retention`` (one hour by default), apart
from ``retention`` (a day), which keeps given-up jobs: finished work costs a window.

Inside the window a duplicate of the id never runs (DONE_ELSEWHERE); after it, the id
runs again with a larger token (docs/guarantees.md states the trade). Checked against a
real server: the time to live the DONE record was written with, on every path that
marks a job DONE (``process``, ``serve``'s lane at concurrency 1 and 4, asyncio).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

import redis
import redis.asyncio

import lockworker
from lockworker import Outcome, aio
from lockworker.model.keys import JobKeys
from lockworker.serving.settings import DAY, DONE_RETENTION
from lockworker.testing.server import RedisServer


def ttl_s(client: redis.Redis, key: str) -> float:
    return int(client.pttl(key)) / 1000.0


def test_the_default_window_keeps_a_day_at_1000_jobs_a_second_under_1_gib() -> None:
    """The default's arithmetic, with the record size the benchmark page measures for a
    clean DONE job (at most 200 B of server memory, key and expiry included)."""
    assert DONE_RETENTION * 1000 * 200 < 2**30
    assert DAY > DONE_RETENTION


def test_a_done_record_is_kept_for_done_retention_a_dead_letter_for_retention(
    make: Callable[..., lockworker.Worker], redis_client: redis.Redis,
) -> None:
    def hook(job: lockworker.Job) -> None:
        if job.id == "dead":
            raise lockworker.GiveUp("no")

    worker = make(hook, retention=7200.0, done_retention=600.0)
    assert worker.process("ok") is Outcome.DONE
    assert worker.process("dead") is Outcome.GAVE_UP
    ok, dead = (JobKeys.of(worker.namespace, j) for j in ("ok", "dead"))
    assert 590 < ttl_s(redis_client, ok.state) <= 600
    assert 7190 < ttl_s(redis_client, dead.state) <= 7200


def test_a_job_done_after_a_failure_keeps_its_history_for_the_window(
    make: Callable[..., lockworker.Worker], redis_client: redis.Redis,
) -> None:
    """The attempt history of a job that needed two attempts expires with its DONE."""

    def hook(job: lockworker.Job) -> None:
        if job.attempt == 1:
            raise RuntimeError("once")

    worker = make(hook, retry_delay=0, done_retention=600.0)
    assert worker.process("twice") is Outcome.DONE
    keys = JobKeys.of(worker.namespace, "twice")
    assert redis_client.llen(keys.history) == 2
    assert 590 < ttl_s(redis_client, keys.history) <= 600
    assert 590 < ttl_s(redis_client, keys.state) <= 600


def test_serving_marks_done_with_the_window_at_any_concurrency(
    make: Callable[..., lockworker.Worker], redis_client: redis.Redis,
) -> None:
    """The serving lane's batched DONEs (concurrency 1 and 4) write the same window."""
    for concurrency in (1, 4):
        worker = make(lambda job: None, done_retention=900.0)
        ids = [f"c{concurrency}-{i}" for i in range(6)]
        worker.serve([(j, None) for j in ids], concurrency=concurrency)
        for job_id in ids:
            state = JobKeys.of(worker.namespace, job_id).state
            assert 890 < ttl_s(redis_client, state) <= 900, (concurrency, job_id)


def test_a_duplicate_inside_the_window_never_runs_after_it_runs_again_with_a_larger_token(
    make: Callable[..., lockworker.Worker], redis_client: redis.Redis,
) -> None:
    tokens: list[int] = []
    worker = make(lambda job: tokens.append(job.token), lock_timeout=1.0,
                  done_retention=1.5)
    assert worker.process("dup") is Outcome.DONE
    assert worker.process("dup") is Outcome.DONE_ELSEWHERE  # inside the window
    state = JobKeys.of(worker.namespace, "dup").state
    deadline = time.monotonic() + 10.0
    while redis_client.exists(state):  # the window ends on the server's clock
        assert time.monotonic() < deadline, "the DONE record never expired"
        time.sleep(0.05)
    assert worker.process("dup") is Outcome.DONE
    assert len(tokens) == 2 and tokens[1] > tokens[0]


def test_an_asyncio_worker_keeps_its_done_records_for_the_window(
    redis_server: RedisServer, namespace: str, redis_client: redis.Redis,
) -> None:
    async def main() -> None:
        client = redis.asyncio.Redis.from_url(redis_server.url, socket_timeout=5.0)
        try:
            async with aio.Worker(
                client, namespace=namespace, on_acquired=lambda job: None,
                handle_signals=False, done_retention=700.0,
            ) as worker:
                assert await worker.process("a") is Outcome.DONE
                await worker.serve([("b", None), ("c", None)], concurrency=2)
        finally:
            await client.aclose()

    asyncio.run(main())
    for job_id in "abc":
        state = JobKeys.of(namespace, job_id).state
        assert 690 < ttl_s(redis_client, state) <= 700, job_id


def test_status_reads_a_done_job_s_age_with_the_window(
    make: Callable[..., lockworker.Worker], redis_client: redis.Redis,
) -> None:
    """A job just finished is seconds old to ``lockworker status`` (its DONE record's
    time to live is read against ``--done-retention``, a given-up one's against
    ``--retention``), not the difference between the two windows."""
    from lockworker.cli import indexed
    from lockworker.cli.kept import Kept
    from lockworker.cli.status import collect, read_rows

    def hook(job: lockworker.Job) -> None:
        if job.id == "dead":
            raise lockworker.GiveUp("no")

    worker = make(hook)
    worker.process("fresh")
    worker.process("dead")
    rows = {row.id: row for row in collect(redis_client, worker.namespace, Kept(), None)}
    assert "fresh" not in rows  # DONE: counted, not listed; read as --job reads it
    (fresh,) = read_rows(redis_client, [indexed.key_of(worker.namespace, "fresh")], Kept())
    rows["fresh"] = fresh
    assert rows["fresh"].state == "done" and rows["fresh"].age is not None
    assert rows["fresh"].age < 60
    assert rows["dead"].state == "gave_up" and rows["dead"].age is not None
    assert rows["dead"].age < 60
