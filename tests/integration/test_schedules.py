"""Schedules served for real: each tick once across processes, progress on the server,
catch-up, overlap, edits, and the asyncio worker."""

from __future__ import annotations

import asyncio
import itertools
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redis
import redis.asyncio
from helpers import wait_for

import lockworker
from lockworker import Every, Job, ScheduleSource, Worker
from lockworker.aio import Worker as AsyncWorker
from lockworker.daemons.schedules import server_now
from lockworker.protocol.schedules import schedule_key


class Runs:
    """on_acquired for the workers of one test: what ran, where, when (server time)."""

    def __init__(self, client: redis.Redis, hold: float = 0.0) -> None:
        self.client = client
        self.hold = hold
        self.lock = threading.Lock()
        self.ran: list[tuple[str, str, float, float]] = []
        self.release = threading.Event()

    def hook(self, name: str) -> Callable[[Job], None]:
        def on_acquired(job: Job) -> None:
            assert job.scheduled_for is not None
            assert job.id.endswith(job.scheduled_for.strftime("@%Y-%m-%dT%H:%M:%SZ"))
            start = server_now(self.client)
            if self.hold:
                self.release.wait(self.hold)
            with self.lock:
                self.ran.append((job.id, name, start, server_now(self.client)))

        return on_acquired

    @property
    def ids(self) -> list[str]:
        with self.lock:
            return [run[0] for run in self.ran]

    def ticks(self) -> list[int]:
        """The nominal seconds of what ran, in the order it ran."""
        return [_second(job_id) for job_id in self.ids]


def _second(job_id: str) -> int:
    from datetime import datetime, timezone

    moment = datetime.strptime(job_id.partition("@")[2], "%Y-%m-%dT%H:%M:%SZ")
    return int(moment.replace(tzinfo=timezone.utc).timestamp())


class Serving:
    """Workers serving schedules, each in a thread; all stopped at the end."""

    def __init__(self, client: redis.Redis, namespace: str) -> None:
        self.client = client
        self.namespace = namespace
        self.started: dict[Worker, threading.Thread] = {}

    def __call__(self, schedules: list[Any], hook: Callable[[Job], None], **kwargs: Any) -> Worker:
        kwargs.setdefault("lock_timeout", 2.0)
        worker = Worker(
            self.client, namespace=self.namespace, on_acquired=hook, handle_signals=False,
            **kwargs,
        )
        thread = threading.Thread(
            target=worker.serve, args=(ScheduleSource(self.client, schedules),),
            kwargs={"concurrency": 2}, daemon=True,
        )
        thread.start()
        self.started[worker] = thread
        return worker

    def stop(self, *workers: Worker) -> None:
        for worker in workers:
            worker.stop()
        for worker in workers:
            thread = self.started.pop(worker)
            thread.join(10)
            assert not thread.is_alive()
            worker.close()


@pytest.fixture
def serving(redis_client: redis.Redis, namespace: str) -> Iterator[Serving]:
    started = Serving(redis_client, namespace)
    yield started
    started.stop(*started.started)


def state(client: redis.Redis, namespace: str, name: str) -> dict[str, str]:
    raw = client.hgetall(schedule_key(namespace, name))
    return {
        (k.decode() if isinstance(k, bytes) else k): (v.decode() if isinstance(v, bytes) else v)
        for k, v in raw.items()
    }


def set_back(client: redis.Redis, namespace: str, name: str, second: int) -> None:
    """As if nobody had served ``name`` since ``second``: its progress written back."""
    client.hset(schedule_key(namespace, name), mapping={"last": second, "resolved": second})


def test_every_tick_runs_once_with_a_primary_and_a_backup(
    redis_client: redis.Redis, namespace: str, serving: Serving
) -> None:
    runs = Runs(redis_client)
    beat = Every("beat", 1)
    serving([beat], runs.hook("primary"), owner="primary")
    serving([beat], runs.hook("backup"), owner="backup", role="backup")
    wait_for(lambda: len(runs.ids) >= 4, timeout=10)
    ids = runs.ids
    assert len(ids) == len(set(ids)), ids
    ticks = sorted(runs.ticks())
    assert ticks == list(range(ticks[0], ticks[0] + len(ticks))), "a tick was lost"
    # the hook records a run before its tick is settled: the progress follows it
    wait_for(lambda: int(state(redis_client, namespace, "beat").get("resolved", 0))
             >= ticks[3], timeout=5)


def test_a_restarted_process_resumes_from_the_servers_progress(
    redis_client: redis.Redis, namespace: str, serving: Serving
) -> None:
    runs = Runs(redis_client)
    beat = Every("beat", 1, catch_up="all")
    first = serving([beat], runs.hook("first"))
    wait_for(lambda: len(runs.ids) >= 2, timeout=10)
    serving.stop(first)
    progress = int(state(redis_client, namespace, "beat")["resolved"])
    assert progress == max(runs.ticks())  # every tick it ran is settled on the server
    runs2 = Runs(redis_client)
    serving([beat], runs2.hook("second"))  # a new process: no memory of the first
    wait_for(lambda: len(runs2.ids) >= 1, timeout=10)
    assert runs2.ticks()[0] == progress + 1  # resumed from the server's progress
    assert set(runs2.ids).isdisjoint(runs.ids)


@pytest.mark.parametrize("policy", ["latest", "all", "none"])
def test_catch_up_after_nobody_served(
    redis_client: redis.Redis, namespace: str, serving: Serving, policy: str
) -> None:
    now = int(server_now(redis_client))
    set_back(redis_client, namespace, "beat", now - 6)  # ticks now-5 .. now missed
    runs = Runs(redis_client)
    serving([Every("beat", 1, catch_up=policy)], runs.hook("late"))
    wait_for(lambda: len(runs.ids) >= 2, timeout=10)
    ticks = runs.ticks()
    assert len(ticks) == len(set(ticks))
    if policy == "all":
        assert ticks[:6] == list(range(now - 5, now + 1)) or ticks[0] == now - 5
        wait_for(lambda: len(runs.ids) >= 7, timeout=10)
        assert runs.ticks()[:7] == sorted(runs.ticks()[:7])
        assert runs.ticks()[:6] == list(range(now - 5, now + 1))
        assert int(state(redis_client, namespace, "beat")["caught_up"]) >= 5
    elif policy == "latest":
        assert ticks[0] >= now and not any(now - 5 <= t < now for t in ticks)
    else:
        assert ticks[0] > now
    assert_accounted(redis_client, namespace, serving, now - 6, runs)


def assert_accounted(
    client: redis.Redis, namespace: str, serving: Serving, since: int, runs: Runs
) -> None:
    """Every tick after ``since`` up to the latest decided one ran (in ``runs``), is
    admitted and still open, or is counted ``skipped`` or ``dropped`` on the server: a
    gap is always accounted for. Read with the workers stopped, so nothing moves."""
    serving.stop(*serving.started)
    seen = state(client, namespace, "beat")
    last = int(seen["last"])
    ran = {t for t in runs.ticks() if since < t <= last}
    still_open = {int(f[2:]) for f in seen if f.startswith("r:")} - ran
    counted = int(seen.get("skipped", 0)) + int(seen.get("dropped", 0))
    assert len(ran) + len(still_open) + counted == last - since, (seen, sorted(ran))


def test_catch_up_all_never_skips_the_last_missed_tick_behind_the_one_running(
    redis_client: redis.Redis, namespace: str, serving: Serving
) -> None:
    """The last missed tick is due alone once the one before it was admitted: it waits
    for that one, in every process (the hash's ``catching``), rather than be skipped by
    ``overlap="skip"`` as a current tick would be."""
    now = int(server_now(redis_client))
    redis_client.hset(schedule_key(namespace, "beat"), mapping={
        "last": now - 1, "resolved": now - 2, f"r:{now - 1}": 1, "catching": now,
    })  # catching up elsewhere: now-1 admitted and running, now still to come
    runs = Runs(redis_client)
    serving([Every("beat", 1, catch_up="all")], runs.hook("other"))
    wait_for(lambda: len(runs.ids) >= 3, timeout=10)
    assert runs.ticks()[:3] == [now - 1, now, now + 1]
    seen = state(redis_client, namespace, "beat")
    assert f"s:{now}" not in seen and seen.get("skipped", "0") == "0", seen


def test_catch_up_all_is_capped(
    redis_client: redis.Redis, namespace: str, serving: Serving
) -> None:
    now = int(server_now(redis_client))
    set_back(redis_client, namespace, "beat", now - 500)
    runs = Runs(redis_client)
    serving([Every("beat", 1, catch_up="all")], runs.hook("late"))
    wait_for(lambda: len(runs.ids) >= 101, timeout=20)
    ticks = runs.ticks()
    assert now - 500 < ticks[0] and ticks[0] >= now - 100 - 1
    assert ticks[:101] == sorted(ticks[:101])


def test_a_started_tick_is_never_dropped(
    redis_client: redis.Redis, namespace: str, serving: Serving
) -> None:
    """A tick admitted to run long ago (its process died) runs, even with catch_up none."""
    old = int(server_now(redis_client)) - 30
    redis_client.hset(
        schedule_key(namespace, "beat"),
        mapping={"last": old, "resolved": old - 1, f"r:{old}": 1},
    )
    runs = Runs(redis_client)
    serving([Every("beat", 1, catch_up="none")], runs.hook("late"))
    wait_for(lambda: old in runs.ticks(), timeout=10)
    wait_for(lambda: int(state(redis_client, namespace, "beat")["resolved"]) >= old)


def test_overlap_skip_across_two_processes(
    redis_client: redis.Redis, namespace: str, serving: Serving
) -> None:
    runs = Runs(redis_client, hold=2.5)
    beat = Every("beat", 1)
    serving([beat], runs.hook("a"), owner="a")
    serving([beat], runs.hook("b"), owner="b")
    wait_for(lambda: len(runs.ids) >= 2, timeout=15)
    runs.release.set()
    with runs.lock:
        ran = sorted(runs.ran, key=lambda run: run[2])
    for before, after in itertools.pairwise(ran):
        assert after[2] >= before[3] - 0.05, "two ticks of the schedule ran at once"
    skipped = int(state(redis_client, namespace, "beat")["skipped"])
    assert skipped >= 2
    assert _second(ran[1][0]) - _second(ran[0][0]) >= 2


def test_overlap_wait_runs_one_after_the_running_one(
    redis_client: redis.Redis, namespace: str, serving: Serving
) -> None:
    runs = Runs(redis_client, hold=1.6)
    serving([Every("beat", 1, overlap="wait")], runs.hook("a"))
    wait_for(lambda: len(runs.ids) >= 2, timeout=15)
    with runs.lock:
        first, second = runs.ran[0], runs.ran[1]
    assert _second(second[0]) == _second(first[0]) + 1  # the one that waited
    assert second[2] >= first[3] - 0.05
    # a third tick, due while one runs and one waits, is skipped
    wait_for(lambda: int(state(redis_client, namespace, "beat").get("skipped", 0)) >= 1)
    runs.release.set()


def test_edits_neither_rerun_past_ticks_nor_block_new_ones(
    redis_client: redis.Redis, namespace: str, serving: Serving
) -> None:
    runs = Runs(redis_client)
    first = serving([Every("beat", 1)], runs.hook("v1"))
    wait_for(lambda: len(runs.ids) >= 2, timeout=10)
    serving.stop(first)
    progress = int(state(redis_client, namespace, "beat")["resolved"])
    # Changed to every 2 s (same name): nothing at or before the progress runs again.
    runs2 = Runs(redis_client)
    second = serving([Every("beat", 2, catch_up="all")], runs2.hook("v2"))
    wait_for(lambda: len(runs2.ids) >= 1, timeout=10)
    serving.stop(second)
    assert all(t > progress for t in runs2.ticks())
    assert set(runs2.ids).isdisjoint(runs.ids)
    # Removed (its state deleted) and added again: its DONE ticks block nothing.
    redis_client.delete(schedule_key(namespace, "beat"))
    runs3 = Runs(redis_client)
    serving([Every("beat", 1, catch_up="all")], runs3.hook("v3"))
    wait_for(lambda: len(runs3.ids) >= 1, timeout=10)
    assert set(runs3.ids).isdisjoint(runs.ids + runs2.ids)


def test_a_schedule_source_under_an_asyncio_worker(
    redis_server: Any, namespace: str, redis_client: redis.Redis
) -> None:
    runs = Runs(redis_client)

    async def main() -> None:
        aclient = redis.asyncio.Redis(host="127.0.0.1", port=redis_server.port)
        hook = runs.hook("aio")

        async def on_acquired(job: Job) -> None:
            await asyncio.to_thread(hook, job)

        worker = AsyncWorker(
            aclient, namespace=namespace, on_acquired=on_acquired, handle_signals=False
        )
        task = asyncio.ensure_future(
            worker.serve(ScheduleSource(redis_client, [Every("beat", 1)]))
        )
        deadline = asyncio.get_running_loop().time() + 10
        while len(runs.ids) < 2 and asyncio.get_running_loop().time() < deadline:
            await asyncio.sleep(0.02)
        worker.stop()
        await asyncio.wait_for(task, 10)
        await worker.close()
        await aclient.aclose()

    asyncio.run(main())
    assert len(runs.ids) >= 2 and len(set(runs.ids)) == len(runs.ids)


def test_tick_ids_and_payload(redis_client: redis.Redis, namespace: str) -> None:
    beat = Every("digest", 60, payload={"to": "ops"})
    assert beat.tick_id(1796018400) == "digest@2026-11-30T06:00:00Z"
    assert beat.tick_payload(1796018400) == {
        "schedule": "digest", "tick": 1796018400, "at": "2026-11-30T06:00:00Z",
        "payload": {"to": "ops"},
    }
    job = Job("digest@2026-11-30T06:00:00Z", beat.tick_payload(1796018400), 1, 1, 5, None)
    assert job.scheduled_for is not None and job.scheduled_for.timestamp() == 1796018400
    assert Job("x", {"tick": 5}, 1, 1, 5, None).scheduled_for is None
    assert lockworker.Cron("c", "0 6 * * *").tick_id(1796018400) == "c@2026-11-30T06:00:00Z"


def test_schedules_beside_a_stream_in_one_serve(
    redis_client: redis.Redis, namespace: str
) -> None:
    done: list[str] = []
    stream = f"jobs-{namespace}"
    worker = Worker(
        redis_client, namespace=namespace, handle_signals=False,
        on_acquired=lambda job: done.append(job.id),
    )
    source = ScheduleSource(
        redis_client, [Every("beat", 1)],
        beside=lockworker.StreamSource(redis_client, stream, owner="me"),
    )
    thread = threading.Thread(target=worker.serve, args=(source,), daemon=True)
    thread.start()
    try:
        for n in range(3):
            lockworker.submit(redis_client, stream, f"job-{n}", {"n": n})
        wait_for(lambda: {"job-0", "job-1", "job-2"} <= set(done), timeout=10)
        wait_for(lambda: sum(job_id.startswith("beat@") for job_id in done) >= 2, timeout=10)
    finally:
        worker.stop()
        thread.join(10)
        worker.close()
    assert not thread.is_alive()
