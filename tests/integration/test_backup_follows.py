"""A backup follows its namespace's progress (lockworker.serving.follow), on a real server.

A primary and a backup serve one fan-out stream. While the primary keeps up, the
backup trails it (lockworker.serving.trail): it reads next to no entry and looks at
next to no job. A backup that does read the entries settles every held-back delivery
the progress covers without a look at its job, and reading the progress costs at most
one call per batch; a job given up is still looked at, and reported given up.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
import redis
from helpers import in_thread, wait_for

import lockworker
from lockworker import GiveUp, Job, StreamSource, Worker
from lockworker.daemons import defer
from lockworker.daemons.sources import stream_keys
from lockworker.protocol import batch as protocol_batch
from lockworker.protocol import text
from lockworker.protocol.streams import NOT_DONE, entry_order
from lockworker.runtime import events
from lockworker.serving import follow, rules

N = 400


class Ran:
    """on_acquired that records the jobs a worker ran (and gives up those named)."""

    def __init__(self, give_up: frozenset[str] = frozenset()) -> None:
        self.jobs: list[str] = []
        self.give_up = give_up
        self.lock = threading.Lock()

    def __call__(self, job: Job) -> None:
        with self.lock:
            self.jobs.append(job.id)
        if job.id in self.give_up:  # after the backup read it: it is handed over
            time.sleep(0.2)
            raise GiveUp("a job that cannot succeed")


class Counted:
    """The backup's looks (INSPECT steps it sends) and progress reads (FOLLOW calls)."""

    def __init__(self, backup: Worker, monkeypatch: pytest.MonkeyPatch) -> None:
        self.looks = 0
        self.reads = 0
        real_send, real_follow = protocol_batch.send, defer.FOLLOW

        def send(client: Any, steps: Any) -> Any:
            if client is backup.client:
                self.looks += len(steps)
            return real_send(client, steps)

        def read(*args: Any, **kw: Any) -> Any:
            self.reads += 1
            return real_follow(*args, **kw)

        monkeypatch.setattr(protocol_batch, "send", send)
        monkeypatch.setattr(defer, "FOLLOW", read)


class Recording(StreamSource):
    """A fan-out reader that records the jobs it hands ``serve`` (not those it skips,
    the progress past them when it read them)."""

    def __init__(self, *args: Any, **kw: Any) -> None:
        super().__init__(*args, **kw)
        self.handed: list[str] = []

    def _decode(self, entry_id: str, fields: dict[str, str], urgent: bool = False) -> Any:
        delivery = super()._decode(entry_id, fields, urgent)
        if delivery is not None:
            self.handed.append(delivery.job_id)
        return delivery


class Reported:
    """The outcomes the backup reported, by job: ``job.done_elsewhere`` (followed or
    looked at) and ``job.gave_up``."""

    def __init__(self, backup: Worker) -> None:
        self.done: dict[str, bool] = {}
        self.gave_up: list[str] = []
        self.run = backup.run_id

    def __call__(self, logger: str, event: str, fields: dict[str, Any]) -> None:
        if fields.get("run") != self.run:
            return
        if event == events.DONE_ELSEWHERE:
            self.done[fields["job_id"]] = bool(fields.get("followed"))
        elif event == events.GAVE_UP:
            self.gave_up.append(fields["job_id"])

    def every(self, source: Recording) -> bool:
        """Whether every job ``source`` handed the backup is reported."""
        return set(source.handed) <= set(self.done) | set(self.gave_up)


@pytest.mark.parametrize("following", [True, False], ids=["following", "looking"])
def test_a_backup_behind_a_live_primary_looks_at_next_to_no_job(
    redis_client: redis.Redis, namespace: str, monkeypatch: pytest.MonkeyPatch,
    following: bool,
) -> None:
    """N jobs submitted while a primary and a backup serve: the primary runs each once,
    the backup none, and the backup reports each job it was handed ``job.done_elsewhere``
either way (its reader skips those the progress passed before it read them). By
    following the progress, the backup looks at next to no job (a few, when the
    primary's save had not passed them yet) and reads the progress at most once per
    batch; looking, as before, it looks at every job once."""
    stream = f"{namespace}-jobs"
    ran_p, ran_b = Ran(), Ran()
    primary = Worker(redis_client, namespace=namespace, owner="p", handle_signals=False,
                     on_acquired=ran_p, lock_timeout=5.0)
    backup = Worker(redis.Redis(connection_pool=redis_client.connection_pool),
                    namespace=namespace, owner="b", role="backup", backup_delay=0.3,
                    handle_signals=False, on_acquired=ran_b, lock_timeout=5.0)
    if not following:
        monkeypatch.setattr(follow, "follows", lambda worker: False)
    counted = Counted(backup, monkeypatch)
    reported = Reported(backup)
    source_p = StreamSource(redis_client, stream, owner="p", block=0.05)
    source_b = Recording(redis_client, stream, owner="b", block=0.05)
    events.add_observer(reported)
    try:
        thread_p, box_p = in_thread(lambda: primary.serve(source_p, concurrency=8))
        primary._presence.start()
        backup._presence.start()
        wait_for(lambda: rules.deferring(backup), timeout=10)
        thread_b, box_b = in_thread(lambda: backup.serve(source_b, concurrency=8))
        ids: list[str] = []
        for burst in range(20):  # a stream served live, not a backlog
            ids += [lockworker.submit(redis_client, stream, f"j{burst}-{i}")
                    for i in range(N // 20)]
            time.sleep(0.02)
        wait_for(lambda: source_p.position() == ids[-1] and source_b.position() == ids[-1]
                 and reported.every(source_b), timeout=60)
    finally:
        events.remove_observer(reported)
        for w in (backup, primary):
            w.stop()
        for w in (backup, primary):
            w.close()
    thread_p.join(10)
    thread_b.join(10)
    assert "error" not in box_p and "error" not in box_b, (box_p, box_b)
    jobs = [f"j{b}-{i}" for b in range(20) for i in range(N // 20)]
    assert sorted(ran_p.jobs) == sorted(jobs) and ran_b.jobs == []
    # Each job the backup was handed is reported done elsewhere; the others its reader
    # skipped, the progress already past them when it read them.
    assert sorted(reported.done) == sorted(source_b.handed) and set(reported.done) <= set(jobs)
    followed = sum(reported.done.values())
    print(f"\nlooks per job handed: {counted.looks / max(1, len(reported.done)):.3f} "
          f"({counted.looks} looks, "
          f"{counted.reads} progress reads, {len(reported.done)} handed over, "
          f"{followed} followed, N={N})")
    if following:  # it trails the primary: it reads next to no entry, looks at none
        assert len(source_b.handed) <= N // 10, source_b.handed
        assert counted.looks <= N // 10, counted.looks
        assert followed >= len(reported.done) - counted.looks
        assert counted.reads <= N // 10, counted.reads
    else:
        assert counted.looks >= len(reported.done) and followed == 0 and counted.reads == 0


def test_a_job_given_up_is_looked_at_and_reported_given_up_by_a_following_backup(
    redis_client: redis.Redis, namespace: str, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The primary gives one job up: the position that passes it records it as not
    DONE, so a backup that reads the entries (here one that does not trail the
    primary, as one does while the primary stalls) looks at it (``job.gave_up``,
    ``on_gave_up``) instead of reporting it done; the jobs after it are followed."""
    monkeypatch.setattr(defer.Deferrals, "trail", lambda self, source: None)
    stream = f"{namespace}-jobs"
    ran_p, ran_b = Ran(give_up=frozenset({"bad"})), Ran()
    backup_gave_up: list[str] = []
    primary = Worker(redis_client, namespace=namespace, owner="p", handle_signals=False,
                     on_acquired=ran_p, lock_timeout=5.0)
    backup = Worker(redis.Redis(connection_pool=redis_client.connection_pool),
                    namespace=namespace, owner="b", role="backup", backup_delay=0.3,
                    handle_signals=False, on_acquired=ran_b, lock_timeout=5.0,
                    on_gave_up=lambda job: backup_gave_up.append(job.id))
    counted = Counted(backup, monkeypatch)
    reported = Reported(backup)
    source_p = StreamSource(redis_client, stream, owner="p", block=0.05)
    source_b = Recording(redis_client, stream, owner="b", block=0.05)
    events.add_observer(reported)
    try:
        thread_p, box_p = in_thread(lambda: primary.serve(source_p, concurrency=4))
        primary._presence.start()
        backup._presence.start()
        wait_for(lambda: rules.deferring(backup), timeout=10)
        thread_b, box_b = in_thread(lambda: backup.serve(source_b, concurrency=4))
        readers = stream_keys(stream).extra("readers")
        wait_for(lambda: redis_client.zscore(readers, "b") is not None, timeout=10)
        ids = [lockworker.submit(redis_client, stream, f"a{i}") for i in range(20)]
        bad = lockworker.submit(redis_client, stream, "bad")
        ids += [lockworker.submit(redis_client, stream, f"c{i}") for i in range(40)]
        wait_for(lambda: source_p.position() == ids[-1] and source_b.position() == ids[-1]
                 and reported.every(source_b), timeout=60)
    finally:
        events.remove_observer(reported)
        for w in (backup, primary):
            w.stop()
        for w in (backup, primary):
            w.close()
    thread_p.join(10)
    thread_b.join(10)
    assert "error" not in box_p and "error" not in box_b, (box_p, box_b)
    mark = redis_client.hget(stream_keys(stream).extra(NOT_DONE), namespace)
    assert mark is not None and entry_order(text(mark)) >= entry_order(bad)
    assert ran_b.jobs == [] and ran_p.jobs.count("bad") == 1
    assert backup_gave_up == ["bad"] and reported.gave_up == ["bad"]
    assert "bad" not in reported.done
    assert "bad" in source_b.handed and counted.looks >= 1  # bad was looked at
    assert sorted(reported.done) == sorted(set(source_b.handed) - {"bad"})
    # The jobs before it are looked at (the mark covers them), none reported followed.
    assert not any(reported.done.get(f"a{i}") for i in range(20))
