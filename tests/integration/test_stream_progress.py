"""A stream's progress: what its namespace resolved, whatever became of the jobs' DONE
records. A reader behind it (restarted, lagging, a backup) skips to it without a look
per job, and a dead or lagging reader holds back no entry its namespace resolved.

Expiry of DONE records is simulated by deleting the jobs' keys.
"""

from __future__ import annotations

import json
import threading
from typing import Any

import pytest
import redis
from helpers import in_thread, wait_for

import lockworker
from lockworker import Job, StreamSource, Worker
from lockworker.daemons import sources
from lockworker.daemons.sources import PROGRESS, stream_keys
from lockworker.protocol import streams, text
from lockworker.runtime import events


class Ran:
    """on_acquired that counts the jobs a worker ran."""

    def __init__(self) -> None:
        self.jobs: list[str] = []
        self.lock = threading.Lock()

    def __call__(self, job: Job) -> None:
        with self.lock:
            self.jobs.append(job.id)


def worker(client: redis.Redis, namespace: str, owner: str, ran: Ran, **kw: Any) -> Worker:
    return Worker(client, namespace=namespace, owner=owner, lock_timeout=2.0,
                  handle_signals=False, on_acquired=ran, **kw)


def serve_until(w: Worker, source: StreamSource, position: str) -> None:
    """Serve ``source`` with ``w`` until its saved position is ``position``; stop."""
    thread, box = in_thread(lambda: w.serve(source, concurrency=4))
    wait_for(lambda: source.position() == position or "error" in box, timeout=20)
    w.stop()
    thread.join(10)
    w.close()
    assert not thread.is_alive() and "error" not in box, box


def registered(client: redis.Redis, stream: str, owner: str, w: Worker, **kw: Any) -> StreamSource:
    """A reader of ``w``'s namespace registered at the stream's start, as a process
    that started and then died (or lags) would have left it."""
    source = StreamSource(client, stream, owner=owner, block=0.05, **kw)
    source.attach(w)
    source.touch()
    return source


def forget_jobs(client: redis.Redis, namespace: str) -> None:
    """Every key of the namespace's jobs gone: their DONE records ran out."""
    for key in client.scan_iter(match=f"lw:job:{namespace}:*"):
        client.delete(key)


def xlen(client: redis.Redis, stream: str) -> int:
    return int(client.xlen(stream_keys(stream).extra("entries")))


def test_a_reader_behind_runs_nothing_its_namespace_finished_once_the_records_expired(
    redis_client: redis.Redis, namespace: str
) -> None:
    stream = f"{namespace}-jobs"
    ran_a, ran_b = Ran(), Ran()
    b = worker(redis_client, namespace, "b", ran_b)
    late = registered(redis_client, stream, "b", b)  # registered, then gone for a while
    ids = [lockworker.submit(redis_client, stream, f"j{i}") for i in range(30)]
    serve_until(worker(redis_client, namespace, "a", ran_a), StreamSource(
        redis_client, stream, owner="a", block=0.05), ids[-1])
    assert sorted(ran_a.jobs) == sorted(f"j{i}" for i in range(30))
    assert late.position() == "0-0"  # b resolved nothing: it is 30 entries behind
    forget_jobs(redis_client, namespace)
    more = lockworker.submit(redis_client, stream, "after")
    serve_until(b, StreamSource(redis_client, stream, owner="b", block=0.05), more)
    assert ran_b.jobs == ["after"]  # none of the 30 again, though no record says DONE


def test_a_new_reader_of_a_namespace_starts_at_its_progress(
    redis_client: redis.Redis, namespace: str
) -> None:
    stream = f"{namespace}-jobs"
    ran = Ran()
    ids = [lockworker.submit(redis_client, stream, f"j{i}") for i in range(5)]
    serve_until(worker(redis_client, namespace, "a", ran), StreamSource(
        redis_client, stream, owner="a", block=0.05), ids[-1])
    forget_jobs(redis_client, namespace)
    newcomer = StreamSource(redis_client, stream, owner="new", block=0.05)  # start="0"
    newcomer.attach(worker(redis_client, namespace, "new", ran))
    assert newcomer.touch() == ids[-1] and newcomer.progress() == ids[-1]
    assert sorted(ran.jobs) == [f"j{i}" for i in range(5)]  # each once (4 at a time)


def reads_of_keys(client: redis.Redis) -> int:
    """GETs the server ran so far, scripts' included (INFO commandstats): a look at a
    job reads its state and lock."""
    return int(client.info("commandstats").get("cmdstat_get", {}).get("calls", 0))


def test_a_lagging_backup_skips_without_a_look_per_job(
    redis_client: redis.Redis, namespace: str
) -> None:
    stream = f"{namespace}-jobs"
    ran_a, ran_b = Ran(), Ran()
    a = worker(redis_client, namespace, "a", ran_a)
    b = worker(redis_client, namespace, "b", ran_b, role="backup", backup_delay=0.2)
    registered(redis_client, stream, "b", b)
    source_a = StreamSource(redis_client, stream, owner="a", block=0.05)
    thread_a, box_a = in_thread(lambda: a.serve(source_a, concurrency=4))
    ids = [lockworker.submit(redis_client, stream, f"j{i}") for i in range(300)]
    wait_for(lambda: source_a.position() == ids[-1], timeout=30)
    looked: set[str] = set()

    def seen_by_b(logger: str, event: str, fields: Any) -> None:
        if fields.get("run") == b.run_id and "job_id" in fields:
            looked.add(fields["job_id"])

    events.add_observer(seen_by_b)
    try:
        before = reads_of_keys(redis_client)
        source_b = StreamSource(redis_client, stream, owner="b", block=0.05)
        thread_b, box_b = in_thread(lambda: b.serve(source_b, concurrency=4))
        last = lockworker.submit(redis_client, stream, "last")
        wait_for(lambda: source_b.position() == last, timeout=20)
        calls = reads_of_keys(redis_client) - before
    finally:
        events.remove_observer(seen_by_b)
    for w, thread in ((b, thread_b), (a, thread_a)):
        w.stop()
        thread.join(10)
        w.close()
    assert "error" not in box_a and "error" not in box_b
    assert ran_b.jobs == []
    assert sorted(ran_a.jobs) == sorted([f"j{i}" for i in range(300)] + ["last"])
    # The 300 entries the primary resolved cost b no look: the reads counted are the
    # last job's, on both sides (5 when written), not one or two per job (305 without
    # the progress).
    assert calls < 50, calls
    assert looked <= {"last"}, looked


def test_an_idle_reader_follows_its_namespaces_progress_past_entries_it_never_read(
    redis_client: redis.Redis, namespace: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A reader blocked on an empty stream while another reader of its namespace
    resolves entries that are trimmed before it reads them (added and passed in one
    MULTI/EXEC) saves the progress as its own position within ``IDLE_TOUCH``: it never
    shows behind for what its namespace resolved."""
    monkeypatch.setattr(sources, "IDLE_TOUCH", 0.1)
    stream = f"{namespace}-jobs"
    keys = stream_keys(stream)
    b = worker(redis_client, namespace, "b", Ran())
    source_b = StreamSource(redis_client, stream, owner="b", block=0.05)
    thread, box = in_thread(lambda: b.serve(source_b, concurrency=2))
    wait_for(lambda: source_b.position() is not None, timeout=10)
    a = StreamSource(redis_client, stream, owner="a", block=0.05)
    a.attach(worker(redis_client, namespace, "a", Ran()))
    a.touch()
    ids = [f"{10**12 + n}-0" for n in range(3)]
    args = ["a", ids[-1], 60_000, "0-0", namespace, ""]
    touch_keys = [*streams.fanout_keys(keys), keys.extra(streams.NOT_DONE)]
    with redis_client.pipeline(transaction=True) as pipe:
        for entry_id in ids:
            pipe.xadd(keys.extra("entries"), {"job": f"x{entry_id}"}, id=entry_id)
        pipe.eval(streams.TOUCH.source, len(touch_keys), *touch_keys, *args)
        pipe.execute()
    assert xlen(redis_client, stream) == 0  # trimmed: b never reads them
    try:
        wait_for(lambda: source_b.position() == ids[-1], timeout=10)
    finally:
        b.stop()
        thread.join(10)
        b.close()
    assert "error" not in box, box


def test_a_dead_reader_holds_back_nothing_its_namespace_resolved(
    redis_client: redis.Redis, namespace: str
) -> None:
    stream = f"{namespace}-jobs"
    ran = Ran()
    dead = registered(redis_client, stream, "dead", worker(redis_client, namespace, "dead", ran))
    seen: list[dict[str, Any]] = []

    def progress(_logger: str, event: str, fields: Any) -> None:
        if event == PROGRESS:
            seen.append(dict(fields))

    events.add_observer(progress)
    try:
        _dead_and_old_readers(redis_client, namespace, stream, dead, ran)
    finally:
        events.remove_observer(progress)
    assert any(f.get("holds_trimming") is True for f in seen)
    assert any(f.get("holds_trimming") is False and f.get("progress") for f in seen)


def _dead_and_old_readers(
    redis_client: redis.Redis, namespace: str, stream: str, dead: StreamSource, ran: Ran
) -> None:
    ids = [lockworker.submit(redis_client, stream, f"j{i}") for i in range(20)]
    serve_until(worker(redis_client, namespace, "a", ran), StreamSource(
        redis_client, stream, owner="a", block=0.05), ids[-1])
    # "dead" is still registered (six hours), at position 0-0: the stream is trimmed to
    # its namespace's progress all the same.
    assert redis_client.zscore(stream_keys(stream).extra("readers"), "dead") is not None
    assert dead.position() == "0-0" and xlen(redis_client, stream) == 0
    # A reader of no namespace (a source read without serve, a 0.3.0 process) holds
    # trimming back by its own position, as before.
    old = StreamSource(redis_client, stream, owner="old", block=0.05)
    old.touch()
    ids = [lockworker.submit(redis_client, stream, f"k{i}") for i in range(5)]
    serve_until(worker(redis_client, namespace, "a", ran), StreamSource(
        redis_client, stream, owner="a", block=0.05), ids[-1])
    assert xlen(redis_client, stream) == 5


def test_progress_is_per_namespace_and_unresolved_entries_are_kept(
    redis_client: redis.Redis, namespace: str
) -> None:
    stream = f"{namespace}-shared"
    ran = Ran()
    mine = StreamSource(redis_client, stream, owner="mine", block=0.05)
    mine.attach(worker(redis_client, namespace, "mine", ran))
    ids = [lockworker.submit(redis_client, stream, f"j{i}") for i in range(5)]
    stop = threading.Event()
    got = []
    for delivery in mine.deliveries(stop):
        got.append(delivery)
        if len(got) == 5:
            break
    got[0].resolved()
    got[1].resolved()  # then this reader dies with three entries unresolved
    assert mine.position() == ids[1]
    # Another namespace's reader of the same stream resolves everything: its progress
    # says nothing of this namespace's jobs.
    serve_until(worker(redis_client, f"{namespace}-other", "x", ran), StreamSource(
        redis_client, stream, owner="x", block=0.05), ids[-1])
    assert xlen(redis_client, stream) == 3  # what follows this namespace's progress
    again = StreamSource(redis_client, stream, owner="mine", block=0.05)
    again.attach(worker(redis_client, namespace, "mine", ran))
    assert [d.job_id for d in _first(again, 3)] == ["j2", "j3", "j4"]


def _first(source: StreamSource, n: int) -> list[Any]:
    got = []
    for delivery in source.deliveries(threading.Event()):
        got.append(delivery)
        if len(got) == n:
            break
    return got


def touch(client: redis.Redis, stream: str, owner: str, namespace: str, position: str = "") -> Any:
    return streams.touched(streams.TOUCH(
        client, streams.fanout_keys(stream_keys(stream)),
        [owner, position, 60_000, "0-0", namespace],
    ))


def test_a_reader_that_joins_a_namespace_starts_at_its_progress_either_way(
    redis_client: redis.Redis, namespace: str
) -> None:
    """A 0.3.0 reader's saved position (no namespace recorded) is replaced by the
    progress when it first names its namespace: ahead of it (its start is unknown, so
    its position proves nothing of earlier entries) as behind it."""
    stream = f"{namespace}-join"
    ids = [lockworker.submit(redis_client, stream, f"j{i}") for i in range(6)]
    positions = stream_keys(stream).extra("positions")
    redis_client.hset(positions, mapping={"ahead": ids[4], "behind": ids[0]})
    assert touch(redis_client, stream, "first", namespace, ids[2]) == (ids[2], ids[2], 0)
    assert touch(redis_client, stream, "ahead", namespace)[:2] == (ids[2], ids[2])
    assert touch(redis_client, stream, "behind", namespace)[:2] == (ids[2], ids[2])
    # From now on each moves the progress forward, and one behind is brought up to it.
    assert touch(redis_client, stream, "ahead", namespace, ids[5])[:2] == (ids[5], ids[5])
    assert touch(redis_client, stream, "behind", namespace, ids[3])[:2] == (ids[5], ids[5])


def test_a_group_member_back_after_the_records_expired_runs_nothing_again(
    redis_client: redis.Redis, namespace: str
) -> None:
    """Acknowledged entries are never delivered again (XREADGROUP ``>`` and the
    member's own pending list hold none of them), whatever became of their records."""
    stream = f"{namespace}-jobs"
    ran = Ran()
    ids = [lockworker.submit(redis_client, stream, f"j{i}") for i in range(20)]
    entries = stream_keys(stream).extra("entries")
    group_name = "g"

    def serve_group(owner: str, until: Any) -> None:
        w = worker(redis_client, namespace, owner, ran)
        source = StreamSource(redis_client, stream, owner=owner, group=group_name, block=0.05)
        thread, box = in_thread(lambda: w.serve(source, concurrency=4))
        wait_for(lambda: until() or "error" in box, timeout=20)
        w.stop()
        thread.join(10)
        w.close()
        assert "error" not in box, box

    def acked(last: str) -> bool:
        info = {g["name"]: g for g in redis_client.xinfo_groups(entries)}
        g = info.get(group_name.encode()) or info.get(group_name)
        delivered = g is not None and g["last-delivered-id"] in (last, last.encode())
        return delivered and g is not None and g["pending"] == 0

    serve_group("m", lambda: acked(ids[-1]))
    assert sorted(ran.jobs) == sorted(f"j{i}" for i in range(20))
    forget_jobs(redis_client, namespace)
    more = lockworker.submit(redis_client, stream, "after")
    serve_group("m", lambda: acked(more))
    serve_group("n", lambda: acked(more))
    assert sorted(ran.jobs) == sorted([f"j{i}" for i in range(20)] + ["after"])


def test_status_and_metrics_show_each_readers_lag_and_whether_trimming_waits_for_it(
    redis_server: Any, redis_client: redis.Redis, namespace: str,
    metrics_registry: Any, capsys: pytest.CaptureFixture[str],
) -> None:
    from lockworker.cli.main import main

    stream = f"{namespace}-shown"
    entries = stream_keys(stream).extra("entries")
    ran = Ran()
    dead = registered(redis_client, stream, "dead", worker(redis_client, namespace, "dead", ran))
    old = StreamSource(redis_client, stream, owner="old", block=0.05)  # of no namespace
    old.touch()
    ids = [  # one entry a second, in 1970: the lags are exact
        text(redis_client.xadd(entries, {"job_id": f"j{i}", "payload": "null"}, id=f"{i}000-0"))
        for i in range(1, 11)
    ]
    serve_until(worker(redis_client, namespace, "a", ran), StreamSource(
        redis_client, stream, owner="a", block=0.05), ids[-1])
    assert main(["status", "--namespace", namespace, "--json", "--redis", redis_server.url]) == 0
    doc = json.loads(capsys.readouterr().out)
    (shown,) = [s for s in doc["streams"] if s["stream"] == stream]
    assert shown["progress"] == {namespace: ids[-1]} and shown["entries"] == 10
    readers = {r["owner"]: r for r in shown["readers"]}
    assert set(readers) == {"a", "dead"}  # "old" names no namespace: not this one's
    assert readers["dead"]["behind"] == 9.0 and not readers["dead"]["trimming_waits"]
    assert readers["a"]["behind"] == 0.0
    assert main(["status", "--redis", redis_server.url]) == 0
    lines = [line.split() for line in capsys.readouterr().out.splitlines() if stream in line]
    assert next(r for r in lines if "old" in r)[-3:] == ["yes", "(no", "namespace)"]
    assert next(r for r in lines if "dead" in r)[-1] == "no"

    dead.touch()  # it comes back: skips 9 s of entries, and says so
    old.touch()
    labels = {"stream": stream, "namespace": namespace}
    sample = metrics_registry.get_sample_value
    assert sample("lockworker_stream_behind_seconds", labels) == 9.0
    assert sample("lockworker_stream_trimming_waits", labels) == 0
    assert sample("lockworker_stream_trimming_waits", {**labels, "namespace": ""}) == 1
