"""Delayed jobs on the real server: ``submit(..., delay=, at=)`` and ``lockworker submit
--in``. A delayed job waits off its stream: the jobs behind it run first, it holds no
slot, progress and trimming go on past it, and no process starts it before its due
time by the server's clock (TIME, recorded in the hook)."""

from __future__ import annotations

import re
import threading
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from types import SimpleNamespace
from typing import Any

import pytest
import redis
from helpers import wait_for

import lockworker
from lockworker import Job, StreamSource, Worker
from lockworker.cli.main import main
from lockworker.daemons.sources import stream_keys
from lockworker.daemons.submit import submit_job
from lockworker.protocol.delayed import delayed_key, move_due
from lockworker.testing import RedisServer

DELAY = 1.5
"""Seconds the delayed job waits: far longer than the ordinary jobs take."""
BLOCK = 2.5
"""The readers' XREAD block, well past DELAY: a reader that did not shorten its
block to the due time would start the delayed job a second or more late."""
PROMPT_MS = 700
"""How late, at most, a due job may start (the poll and the job's look-up)."""


def server_ms(client: redis.Redis) -> int:
    seconds, micros = client.time()
    return int(seconds) * 1000 + int(micros) // 1000


class Ran:
    """on_acquired recording each job's start and end by the server's clock."""

    def __init__(self, client: redis.Redis) -> None:
        self.client = client
        self.lock = threading.Lock()
        self.starts: dict[str, list[int]] = {}
        self.ends: dict[str, int] = {}

    def hook(self, job: Job) -> None:
        start = server_ms(self.client)
        with self.lock:
            self.starts.setdefault(job.id, []).append(start)
        with self.lock:
            self.ends[job.id] = server_ms(self.client)


@pytest.fixture
def serving(redis_server: RedisServer, namespace: str) -> Iterator[Any]:
    """Start ``Worker.serve`` threads on the stream (one slot, a short block unless
    told); all stopped and joined after."""
    running: list[tuple[Worker, threading.Thread, redis.Redis]] = []
    streams: set[str] = set()

    def start(stream: str, ran: Ran, owner: str, *, group: str | None = None,
              concurrency: int = 1, block: float = 0.25) -> StreamSource:
        client = redis_server.client(decode_responses=True)
        worker = Worker(client, namespace=namespace, owner=owner, lock_timeout=2.0,
                        handle_signals=False, on_acquired=ran.hook)
        source = StreamSource(client, stream, owner=owner, group=group, block=block)
        thread = threading.Thread(
            target=worker.serve, args=(source,), kwargs={"concurrency": concurrency},
            daemon=True,
        )
        thread.start()
        running.append((worker, thread, client))
        streams.add(stream)
        return source

    yield start
    for worker, _, _ in running:
        worker.stop()
    # A reader notices a stop when its XREAD returns (within ``block``, 2.5 s for some
    # tests here): an entry ends the block now, so the teardown does not wait it out.
    with redis_server.client() as waker:
        for stream in streams:
            lockworker.submit(waker, stream, "end-of-test")
    for worker, thread, client in running:
        thread.join(timeout=BLOCK + 10)
        assert not thread.is_alive()
        worker.close()
        client.close()


@pytest.mark.parametrize("group", [None, "g"], ids=["fan-out", "group"])
def test_a_delayed_job_in_front_lets_the_jobs_behind_it_run_first_holding_no_slot(
    redis_client: redis.Redis, namespace: str, serving: Any, group: str | None
) -> None:
    stream = f"{namespace}-jobs"
    late = submit_job(redis_client, stream, "late", {"n": -1}, delay=DELAY)
    assert late.entry is None and late.id.startswith("delayed:") and late.due_ms is not None
    ids = [f"j{i}" for i in range(10)]
    for n, job_id in enumerate(ids):
        lockworker.submit(redis_client, stream, job_id, {"n": n})
    keys = stream_keys(stream)
    # It waits off the stream: the stream holds only the jobs behind it.
    assert redis_client.zcard(delayed_key(keys)) == 1
    assert [f["job_id"] for _, f in redis_client.xrange(keys.extra("entries"))] == ids
    ran = Ran(redis_client)
    serving(stream, ran, "w1", group=group, block=BLOCK)  # one slot: none to spare
    wait_for(lambda: "late" in ran.ends, timeout=DELAY + BLOCK + 15)
    assert sorted(ran.starts) == sorted([*ids, "late"])
    assert all(len(s) == 1 for s in ran.starts.values())
    # Every ordinary job finished before the delayed one was even due...
    assert max(ran.ends[j] for j in ids) < late.due_ms
    # ...and it started no earlier than due by the server's clock, and promptly.
    (started,) = ran.starts["late"]
    assert late.due_ms <= started < late.due_ms + PROMPT_MS
    assert redis_client.zcard(delayed_key(keys)) == 0


def test_a_job_due_in_an_hour_holds_back_neither_progress_nor_trimming(
    redis_client: redis.Redis, namespace: str, serving: Any
) -> None:
    stream = f"{namespace}-jobs"
    keys = stream_keys(stream)
    submit_job(redis_client, stream, "later", delay=3600)
    entries = [lockworker.submit(redis_client, stream, f"j{i}") for i in range(5)]
    ran = Ran(redis_client)
    source = serving(stream, ran, "w1")
    wait_for(lambda: source.position() == entries[-1], timeout=15)
    source.touch()  # trims up to the saved position
    assert redis_client.xlen(keys.extra("entries")) == 0
    assert redis_client.zcard(delayed_key(keys)) == 1
    assert "later" not in ran.starts


@pytest.mark.parametrize("group", [None, "g"], ids=["fan-out", "group"])
def test_with_two_readers_each_delayed_job_runs_once(
    redis_client: redis.Redis, namespace: str, serving: Any, group: str | None
) -> None:
    stream = f"{namespace}-jobs"
    dues = [submit_job(redis_client, stream, f"d{i}", delay=0.5).due_ms for i in range(20)]
    ran = Ran(redis_client)
    serving(stream, ran, "w1", group=group, concurrency=2)
    serving(stream, ran, "w2", group=group, concurrency=2)
    wanted = {f"d{i}" for i in range(20)}
    wait_for(lambda: wanted <= set(ran.ends), timeout=BLOCK + 15)
    assert {j: len(s) for j, s in ran.starts.items()} == dict.fromkeys(wanted, 1)
    assert all(ran.starts[f"d{i}"][0] >= due for i, due in enumerate(dues) if due)


def test_many_readers_moving_at_once_add_each_due_job_once_a_bounded_batch_a_call(
    redis_client: redis.Redis, redis_server: RedisServer, namespace: str
) -> None:
    stream = f"{namespace}-jobs"
    keys = stream_keys(stream)
    last = max(
        submit_job(redis_client, stream, f"d{i}", {"i": i}, delay=0.3).due_ms or 0
        for i in range(250)
    )
    assert redis_client.xlen(keys.extra("entries")) == 0
    wait_for(lambda: server_ms(redis_client) >= last, timeout=10)
    moved: list[int] = []
    clients = [redis_server.client(decode_responses=True) for _ in range(4)]

    def mover(client: redis.Redis) -> None:
        while True:
            n, wait = move_due(client, keys)
            assert n <= 100  # never the whole backlog in one script
            moved.append(n)
            if wait is None:
                return

    threads = [threading.Thread(target=mover, args=(c,)) for c in clients]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=20)
    for client in clients:
        client.close()
    assert sum(moved) == 250
    rows = redis_client.xrange(keys.extra("entries"))
    assert sorted(f["job_id"] for _, f in rows) == sorted(f"d{i}" for i in range(250))
    assert {f["job_id"]: f["payload"] for _, f in rows}["d7"] == '{"i":7}'
    assert redis_client.zcard(delayed_key(keys)) == 0


def test_at_in_the_past_goes_to_the_stream_at_once_and_runs_promptly(
    redis_client: redis.Redis, namespace: str, serving: Any
) -> None:
    stream = f"{namespace}-jobs"
    ran = Ran(redis_client)
    serving(stream, ran, "w1")
    past = datetime.now(timezone.utc) - timedelta(hours=1)
    done = submit_job(redis_client, stream, "overdue", {"x": 1}, at=past)
    assert done.entry is not None and done.id == done.entry and done.delayed is None
    sent = server_ms(redis_client)
    wait_for(lambda: "overdue" in ran.ends, timeout=10)
    assert ran.starts["overdue"][0] - sent < 2000
    assert redis_client.zcard(delayed_key(stream_keys(stream))) == 0


def test_at_a_future_time_runs_no_earlier_than_it_by_the_servers_clock(
    redis_client: redis.Redis, namespace: str, serving: Any
) -> None:
    stream = f"{namespace}-jobs"
    at = datetime.fromtimestamp((server_ms(redis_client) + 1500) / 1000, timezone.utc)
    done = submit_job(redis_client, stream, "timed", at=at)
    assert done.entry is None and done.due_ms == round(at.timestamp() * 1000)
    ran = Ran(redis_client)
    serving(stream, ran, "w1", block=BLOCK)  # its first read blocks past the due time
    wait_for(lambda: "timed" in ran.ends, timeout=BLOCK + 10)
    assert done.due_ms <= ran.starts["timed"][0] < done.due_ms + PROMPT_MS


def test_cli_submit_in_says_when_it_is_due_and_status_counts_it(
    redis_server: RedisServer, redis_client: redis.Redis, namespace: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    stream = f"{namespace}-jobs"
    keys = stream_keys(stream)
    url = redis_server.url
    before = server_ms(redis_client)
    assert main(["submit", stream, "j1", '{"n": 1}', "--in", "30s", "--redis", url]) == 0
    said = capsys.readouterr().out.splitlines()
    after = server_ms(redis_client)
    assert len(said) == 2
    assert said[0].startswith(f"submitted job 'j1' to stream '{stream}' on {url}, due 20")
    assert "UTC by the server's clock: it waits off the stream (delayed:" in said[0]
    assert said[0].endswith(') until a reader of the stream adds it then, payload {"n":1}')
    (member, score), = redis_client.zrange(delayed_key(keys), 0, -1, withscores=True)
    assert before + 30_000 <= score <= after + 30_000
    assert member.endswith(':2:j1{"n":1}')

    assert main(["submit", stream, "j2", "--in", "1h", "-q", "--redis", url]) == 0
    quiet = capsys.readouterr().out.strip()
    assert quiet.startswith("delayed:") and len(quiet) == len("delayed:") + 16
    assert redis_client.zscore(delayed_key(keys), quiet.removeprefix("delayed:") + ":2:j2null")
    assert main(["submit", stream, "j3", "--at", "2001-01-01T00:00:00Z", "-q",
                 "--redis", url]) == 0
    entry = capsys.readouterr().out.strip()
    assert [f["job_id"] for _, f in redis_client.xrange(keys.extra("entries"))] == ["j3"]
    assert entry == redis_client.xrange(keys.extra("entries"))[0][0]

    reader = StreamSource(redis_client, stream, owner="r")
    reader.attach(SimpleNamespace(namespace=namespace))  # type: ignore[arg-type]
    reader.touch()  # a reader of the namespace: status lists the stream
    assert main(["status", "--namespace", namespace, "--redis", url]) == 0
    out = capsys.readouterr().out
    line = next(x for x in out.splitlines() if x.startswith(f"stream {stream}:"))
    assert re.search(r"; 2 delayed, the next due in (29\.\d|30\.0)s$", line), line
