"""Redis Streams fan-out: submit, every reader sees every job, resume, trimming."""

from __future__ import annotations

import threading
import uuid
from typing import Any

import pytest
import redis
from helpers import wait_for

import lockworker
from lockworker import InvalidConfig, Job, JobStatus, StreamSource, Worker
from lockworker.daemons.sources import Delivery, stream_keys


def fresh(name: str) -> str:
    """A stream name no other test uses."""
    return f"{name}-{uuid.uuid4().hex[:8]}"


def drain(source: StreamSource, count: int, stop: threading.Event | None = None) -> list[Delivery]:
    """The next ``count`` deliveries of ``source`` (read, not resolved)."""
    got: list[Delivery] = []
    for delivery in source.deliveries(stop or threading.Event()):
        got.append(delivery)
        if len(got) == count:
            break
    return got


def xlen(client: redis.Redis, stream: str) -> int:
    return int(client.xlen(stream_keys(stream).extra("entries")))


class Recorder:
    """on_acquired for workers that share jobs: records who did what."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.done: list[tuple[str, str]] = []

    def hook(self, name: str) -> Any:
        def on_acquired(job: Job) -> None:
            with self.lock:
                self.done.append((job.id, name))

        return on_acquired


def test_submit_validates_and_returns_the_entry_id(redis_client: redis.Redis) -> None:
    stream = fresh("jobs-v")
    entry = lockworker.submit(redis_client, stream, "a", {"x": 1})
    assert entry.count("-") == 1
    with pytest.raises(InvalidConfig, match="stream"):
        lockworker.submit(redis_client, "", "a")
    with pytest.raises(InvalidConfig, match="job_id"):
        lockworker.submit(redis_client, stream, "")
    with pytest.raises(InvalidConfig, match="payload"):
        lockworker.submit(redis_client, stream, "a", object())
    assert xlen(redis_client, stream) == 1


@pytest.mark.parametrize(
    ("kwargs", "argument"),
    [
        ({"owner": ""}, "owner"),
        ({"owner": "a", "block": 0}, "block"),
        ({"owner": "a", "batch": 0}, "batch"),
        ({"owner": "a", "start": "yesterday"}, "start"),
        ({"owner": "a", "reader_ttl": -1}, "reader_ttl"),
    ],
)
def test_stream_source_validates(
    redis_client: redis.Redis, kwargs: dict[str, Any], argument: str
) -> None:
    with pytest.raises(InvalidConfig, match=argument):
        StreamSource(redis_client, "jobs", **kwargs)


def test_every_worker_sees_every_job_and_each_is_done_once(
    redis_client: redis.Redis, namespace: str
) -> None:
    stream = f"{namespace}-jobs"
    recorder = Recorder()
    workers = [
        Worker(redis_client, namespace=namespace, lock_timeout=2.0, handle_signals=False,
               owner=name, on_acquired=recorder.hook(name))
        for name in ("w1", "w2")
    ]
    sources = [StreamSource(redis_client, stream, owner=w.owner, block=0.05) for w in workers]
    threads = [
        threading.Thread(target=w.serve, args=(s,), kwargs={"concurrency": 3}, daemon=True)
        for w, s in zip(workers, sources, strict=True)
    ]
    for thread in threads:
        thread.start()
    entries = [lockworker.submit(redis_client, stream, f"job-{i}", {"n": i}) for i in range(12)]
    # Both readers resolve every job (done here or done elsewhere) and save past it.
    wait_for(lambda: all(s.position() == entries[-1] for s in sources), timeout=15)
    for w in workers:
        w.stop()
    for thread in threads:
        thread.join(timeout=10)
        assert not thread.is_alive()
    for w in workers:
        w.close()
    ids = sorted(job for job, _ in recorder.done)
    assert ids == sorted(f"job-{i}" for i in range(12))  # each exactly once
    # Every live reader resolved everything: the stream is trimmed down to nothing left.
    assert xlen(redis_client, stream) == 0


def test_restart_with_the_same_owner_catches_up(redis_client: redis.Redis, namespace: str) -> None:
    stream = f"{namespace}-jobs"
    recorder = Recorder()

    def run_until(expected_position: str) -> None:
        worker = Worker(redis_client, namespace=namespace, lock_timeout=2.0,
                        handle_signals=False, owner="a", on_acquired=recorder.hook("a"))
        source = StreamSource(redis_client, stream, owner="a", block=0.05)
        thread = threading.Thread(target=worker.serve, args=(source,), daemon=True)
        thread.start()
        wait_for(lambda: source.position() == expected_position, timeout=10)
        worker.stop()
        thread.join(timeout=10)
        assert not thread.is_alive()
        worker.close()

    first = [lockworker.submit(redis_client, stream, f"job-{i}") for i in range(3)]
    run_until(first[-1])
    # Submitted while the reader was down:
    missed = [lockworker.submit(redis_client, stream, f"job-{i}") for i in range(3, 6)]
    run_until(missed[-1])
    assert sorted(job for job, _ in recorder.done) == [f"job-{i}" for i in range(6)]


def test_position_is_saved_only_past_resolved_jobs(redis_client: redis.Redis) -> None:
    stream = fresh("jobs-crash")
    ids = [lockworker.submit(redis_client, stream, f"job-{i}") for i in range(3)]
    source = StreamSource(redis_client, stream, owner="r", block=0.05)
    first, second, third = drain(source, 3)
    second.resolved()  # done, but the first is not: the position must not move past it
    assert source.position() == "0-0"
    # A crash now: a new process with the same owner sees the unresolved first job again.
    again = StreamSource(redis_client, stream, owner="r", block=0.05)
    assert [d.job_id for d in drain(again, 1)] == ["job-0"]
    first.resolved()
    assert source.position() == ids[1]
    third.resolved()
    assert source.position() == ids[2]


def test_trimming_waits_for_the_slowest_live_reader(redis_client: redis.Redis) -> None:
    stream = fresh("jobs-trim")
    fast = StreamSource(redis_client, stream, owner="fast", block=0.05)
    slow = StreamSource(redis_client, stream, owner="slow", block=0.05)
    fast.touch()
    slow.touch()
    ids = [lockworker.submit(redis_client, stream, f"job-{i}") for i in range(5)]
    for delivery in drain(fast, 5):
        delivery.resolved()
    assert fast.position() == ids[-1]
    assert xlen(redis_client, stream) == 5  # the slow reader has resolved nothing yet
    slow_deliveries = drain(slow, 2)
    for delivery in slow_deliveries:
        delivery.resolved()
    assert xlen(redis_client, stream) == 3  # trimmed up to the slow reader's position
    # A reader that goes away stops holding trimming back once its ttl ran out.
    gone = StreamSource(redis_client, stream, owner="gone", block=0.05, reader_ttl=0.2)
    gone.touch()
    slow_rest = drain(StreamSource(redis_client, stream, owner="slow", block=0.05), 3)
    for delivery in slow_rest:
        delivery.resolved()
    assert xlen(redis_client, stream) == 3  # "gone" (position 0-0) is still live
    wait_for(lambda: (fast.touch(), xlen(redis_client, stream) == 0)[1], timeout=5)
    assert gone.position() is None  # forgotten: it starts afresh if it ever comes back


def test_start_dollar_skips_the_backlog(redis_client: redis.Redis) -> None:
    stream = fresh("jobs-new")
    lockworker.submit(redis_client, stream, "old")
    source = StreamSource(redis_client, stream, owner="late", start="$", block=0.05)
    source.touch()
    lockworker.submit(redis_client, stream, "new")
    assert [d.job_id for d in drain(source, 1)] == ["new"]


def test_stop_is_noticed_while_the_stream_is_idle(redis_client: redis.Redis) -> None:
    source = StreamSource(redis_client, fresh("jobs-idle"), owner="idle", block=0.05)
    stop = threading.Event()
    got: list[Delivery] = []
    thread = threading.Thread(target=lambda: got.extend(source.deliveries(stop)), daemon=True)
    thread.start()
    stop.set()
    thread.join(timeout=2)
    assert not thread.is_alive()
    assert got == []


def test_bad_entries_are_skipped(redis_client: redis.Redis, namespace: str) -> None:
    stream = fresh("jobs-bad")
    key = stream_keys(stream).extra("entries")
    redis_client.xadd(key, {"something": "else"})
    redis_client.xadd(key, {"job_id": "x", "payload": "{not json"})
    good = lockworker.submit(redis_client, stream, "fine", [1])
    source = StreamSource(redis_client, stream, owner="r", block=0.05)
    (delivery,) = drain(source, 1)
    assert (delivery.job_id, delivery.payload) == ("fine", [1])
    delivery.resolved()
    assert source.position() == good


def test_done_status_visible(redis_client: redis.Redis, namespace: str) -> None:
    """A stream-served job ends DONE under the worker's namespace, like process()."""
    stream = f"{namespace}-s"
    worker = Worker(redis_client, namespace=namespace, handle_signals=False,
                    on_acquired=lambda job: None)
    source = StreamSource(redis_client, stream, owner="o", block=0.05)
    entry = lockworker.submit(redis_client, stream, "one")
    thread = threading.Thread(target=worker.serve, args=(source,), daemon=True)
    thread.start()
    wait_for(lambda: source.position() == entry)
    worker.stop()
    thread.join(timeout=5)
    worker.close()
    assert worker.inspect("one").status is JobStatus.DONE
