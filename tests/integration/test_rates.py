"""What the workers did, per minute, on a real server: the counts a worker sends add up
to exactly its outcomes once it closed, they are sent while it serves, ``lockworker
status`` shows them, and the asyncio worker counts as the sync one does."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Callable

import pytest
import redis
import redis.asyncio as aredis
from helpers import in_thread, wait_for

import lockworker
from lockworker import aio
from lockworker.cli.main import main
from lockworker.model import rates as model
from lockworker.runtime import events
from lockworker.runtime import rates as counting
from lockworker.runtime.rates import arates, done_in_window, rates
from lockworker.testing import RedisServer, capture_events


@pytest.fixture(scope="module")
def redis_server(own_server: RedisServer) -> RedisServer:
    """This module's own server (conftest ``own_server``): its tests read every
    registered namespace, which on the session's server grows with the suite."""
    return own_server


def hour_totals(client: redis.Redis, namespace: str) -> dict[str, int]:
    return model.total(rates(client, namespace, 120))


def serve_mixed(make: Callable[..., lockworker.Worker]) -> dict[str, int]:
    """One worker runs 6 clean jobs, 3 that fail once then pass, 2 that fail twice (the
    last attempt: given up) and 1 that gives up at once; what it did, by kind."""

    def hook(job: lockworker.Job) -> None:
        if job.id.startswith("flaky") and job.attempt == 1:
            raise RuntimeError("first attempt fails")
        if job.id.startswith("bad"):
            raise RuntimeError("always fails")
        if job.id.startswith("hopeless"):
            raise lockworker.GiveUp("no point")

    # a 1 s lease: a failed attempt steps back a quarter of it (not 0.5 s) before the next
    worker = make(hook, max_attempts=2, retry_delay=0, lock_timeout=1.0)
    ids = ([f"ok-{i}" for i in range(6)] + [f"flaky-{i}" for i in range(3)]
           + ["bad-0", "bad-1", "hopeless"])
    outcomes = [worker.process(job_id) for job_id in ids]
    assert outcomes.count(lockworker.Outcome.DONE) == 9
    assert outcomes.count(lockworker.Outcome.GAVE_UP) == 3
    worker.stop()
    worker.close()
    return {"done": 9, "failed": 3 + 4 + 1, "gave_up": 3, "handed_over": 0}


def test_after_close_the_server_s_counts_are_exactly_the_worker_s_outcomes(
    make: Callable[..., lockworker.Worker], redis_client: redis.Redis, namespace: str
) -> None:
    expected = serve_mixed(make)
    assert hour_totals(redis_client, namespace) == expected
    assert done_in_window(redis_client, namespace, 3600) == expected["done"]
    # one hash per hour in the namespace's presence slot, expiring two hours after it
    keys = [k for k in redis_client.scan_iter(match=model.RATES_PATTERN)
            if model.parse_rates_key(k) == namespace]
    assert 1 <= len(keys) <= 2
    for key in keys:
        assert 2 * 3600 < redis_client.ttl(key) <= 3 * 3600


def test_a_job_taken_over_after_another_process_failed_is_one_handover(
    make: Callable[..., lockworker.Worker], redis_client: redis.Redis, namespace: str
) -> None:
    go = threading.Event()

    def fails(_job: lockworker.Job) -> None:
        go.wait(10)
        raise RuntimeError("attempt fails")

    a = make(fails, owner="a", retry_delay=0)
    b = make(lambda job: None, owner="b", retry_delay=0)
    ta, box_a = in_thread(lambda: a.process("j"))  # a fails, then sees b's DONE
    wait_for(lambda: a.inspect("j").holder == "a")
    with capture_events() as logs:
        tb, box_b = in_thread(lambda: b.process("j"))
        wait_for(lambda: any(e["event"] == events.LOCKED and e["owner"] == "b" for e in logs))
    go.set()
    ta.join(10)
    tb.join(10)
    assert box_b["result"] is lockworker.Outcome.DONE
    assert box_a["result"] is lockworker.Outcome.DONE_ELSEWHERE
    for worker in (a, b):
        worker.stop()
        worker.close()
    assert hour_totals(redis_client, namespace) == {
        "done": 1, "failed": 1, "gave_up": 0, "handed_over": 1,
    }


def test_counts_are_sent_every_few_seconds_while_the_worker_serves(
    make: Callable[..., lockworker.Worker], redis_client: redis.Redis, namespace: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A 60 s lease refreshes the registration every 20 s; the counts still go within
    ``FLUSH_EVERY``, long before the worker closes (the interval shortened to 0.2 s
    here, so the test waits a fraction of the refresh, not the 5 s)."""
    monkeypatch.setattr(counting, "FLUSH_EVERY", 0.2)
    worker = make(lambda job: None, lock_timeout=60.0)
    assert worker.process("j") is lockworker.Outcome.DONE
    wait_for(lambda: hour_totals(redis_client, namespace)["done"] == 1, timeout=10)


def test_status_shows_a_line_of_rates_and_json_has_the_minutes(
    make: Callable[..., lockworker.Worker], redis_client: redis.Redis, namespace: str,
    redis_server: RedisServer, capsys: pytest.CaptureFixture[str],
) -> None:
    expected = serve_mixed(make)
    url = ["--redis", redis_server.url]
    assert main(["status", "--namespace", namespace, "--json", *url]) == 0
    doc = json.loads(capsys.readouterr().out)
    shown = doc["rates"][namespace]
    assert shown["last_hour"] == expected
    assert len(shown["minutes"]) == 61
    assert sum(m["done"] for m in shown["minutes"]) == expected["done"]
    assert {"jobs", "counts", "workers"} <= set(doc)  # the status document, unchanged
    # finished jobs are not walked: status counts the done ones from the rates
    assert doc["counts"]["namespaces"][namespace]["done"] == expected["done"]
    assert main(["status", "--namespace", namespace, *url]) == 0
    out = capsys.readouterr().out
    assert (f"rates of {namespace}: last minute" in out
            and "last hour 9 done, 8 failed, 3 gave up, 0 handed over" in out)
    assert main(["status", "--json", *url]) == 0  # every namespace: the registered ones
    assert json.loads(capsys.readouterr().out)["rates"][namespace]["last_hour"] == expected


def test_the_asyncio_worker_counts_as_the_sync_one(
    redis_server: RedisServer, namespace: str
) -> None:
    async def hook(job: lockworker.Job) -> None:
        if job.id.startswith("flaky") and job.attempt == 1:
            raise RuntimeError("first attempt fails")
        if job.id == "hopeless":
            raise lockworker.GiveUp("no point")

    async def scenario() -> dict[str, int]:
        client = aredis.Redis(host="127.0.0.1", port=redis_server.port)
        async with aio.Worker(
            client, namespace=namespace, on_acquired=hook, retry_delay=0,
            handle_signals=False, lock_timeout=1.0,
        ) as worker:
            for job_id in ("ok-1", "ok-2", "flaky-1", "hopeless"):
                await worker.process(job_id)
        found = model.total(await arates(client, namespace, 120))
        await client.aclose()
        return found

    assert asyncio.run(scenario()) == {"done": 3, "failed": 2, "gave_up": 1, "handed_over": 0}


def test_clean_jobs_pay_no_server_call_for_their_counts(
    make: Callable[..., lockworker.Worker], redis_client: redis.Redis, namespace: str
) -> None:
    """50 jobs, one count sent per minute (at most two minutes, two sends): the counts
    cost the jobs nothing, and the sends do not grow with them."""

    def increments() -> int:
        return int(redis_client.info("commandstats").get("cmdstat_hincrby", {}).get("calls", 0))

    worker = make(lambda job: None, lock_timeout=60.0)
    before = increments()
    for i in range(50):
        assert worker.process(f"j{i}") is lockworker.Outcome.DONE
    worker.stop()
    worker.close()
    assert 1 <= increments() - before <= 4
    assert hour_totals(redis_client, namespace)["done"] == 50
