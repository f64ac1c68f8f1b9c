"""Consumer-group delivery (``StreamSource(group=...)``): members in threads of this
process, against the suite's server. Crashes of member processes are in
tests/processes/test_group_processes.py."""

from __future__ import annotations

import collections
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redis
from helpers import in_thread, wait_for

import lockworker
from lockworker import InvalidConfig, Job, StreamSource, Worker
from lockworker.daemons.sources import stream_keys
from lockworker.model.state import JobStatus
from lockworker.protocol import streams


class Group:
    """Members of one group serving one stream, each a Worker serving in a thread."""

    def __init__(self, client: redis.Redis, namespace: str) -> None:
        self.client = client
        self.namespace = namespace
        self.stream = f"{namespace}-jobs"
        self.name = "g"
        self.lock = threading.Lock()
        self.did: list[tuple[str, str, int]] = []
        self.members: dict[str, tuple[Worker, threading.Thread, dict[str, Any]]] = {}

    @property
    def entries(self) -> str:
        return stream_keys(self.stream).extra("entries")

    def record(self, job: Job, owner: str) -> None:
        with self.lock:
            self.did.append((job.id, owner, job.attempt))

    def start(
        self, owner: str, hook: Callable[[Job, str], None] | None = None, **kwargs: Any
    ) -> Worker:
        def on_acquired(job: Job) -> None:
            self.record(job, owner)
            if hook is not None:
                hook(job, owner)

        kwargs.setdefault("lock_timeout", 2.0)
        worker = Worker(
            self.client, namespace=self.namespace, owner=owner, on_acquired=on_acquired,
            handle_signals=False, **kwargs,
        )
        source = StreamSource(self.client, self.stream, owner=owner, group=self.name, block=0.05)
        thread, box = in_thread(lambda: worker.serve(source, concurrency=4))
        self.members[owner] = (worker, thread, box)
        wait_for(lambda: owner in self.read_by() or "error" in box, timeout=10)
        return worker

    def stop(self, owner: str) -> None:
        worker, thread, box = self.members.pop(owner)
        worker.stop()
        thread.join(10)
        worker.close()
        assert not thread.is_alive() and "error" not in box, box

    def submit(self, job_id: str, payload: Any = None) -> str:
        return lockworker.submit(self.client, self.stream, job_id, payload)

    def pending(self) -> int:
        return int(self.client.xpending(self.entries, self.name)["pending"])

    def read_by(self) -> dict[str, int]:
        """Entries each consumer was given (read or claimed), from the server."""
        try:
            found = self.client.xinfo_consumers(self.entries, self.name)
        except redis.ResponseError:  # no group yet
            return {}
        return {c["name"]: c["pending"] for c in found}

    def status(self, job_id: str) -> JobStatus:
        w = next(iter(self.members.values()))[0]
        return w.inspect(job_id).status

    def close(self) -> None:
        for owner in list(self.members):
            self.stop(owner)


@pytest.fixture
def group(redis_client: redis.Redis, namespace: str) -> Iterator[Group]:
    g = Group(redis_client, namespace)
    yield g
    g.close()


def done_once(g: Group, count: int) -> bool:
    with g.lock:
        return len({job for job, _, _ in g.did}) >= count


def test_three_members_share_the_jobs_each_done_once(group: Group) -> None:
    def slow(job: Job, owner: str) -> None:
        time.sleep(0.003)  # a job takes a while, so that every member gets some

    for owner in ("a", "b", "c"):
        group.start(owner, slow)
    for i in range(120):
        group.submit(f"j{i}")
    wait_for(lambda: done_once(group, 120), timeout=20)
    jobs = collections.Counter(job for job, _, _ in group.did)
    assert set(jobs) == {f"j{i}" for i in range(120)} and set(jobs.values()) == {1}
    assert {owner for _, owner, _ in group.did} == {"a", "b", "c"}
    wait_for(lambda: group.pending() == 0, timeout=10)  # every entry acknowledged
    group.close()
    # Members that left with nothing pending removed their consumers.
    assert group.read_by() == {}


def test_a_failed_job_is_handed_to_another_member_at_once_and_acked_once_done(
    group: Group,
) -> None:
    release = threading.Event()

    def fail_then_hold(job: Job, owner: str) -> None:
        if job.attempt == 1:
            raise RuntimeError("first attempt fails")
        release.wait(10)

    for owner in ("a", "b"):
        group.start(owner, fail_then_hold, lock_timeout=10.0)
    group.submit("f")
    wait_for(lambda: len(group.did) == 2, timeout=10)
    (_, first, a1), (_, second, a2) = group.did
    assert (a1, a2) == (1, 2) and first != second  # handed over, not retried at home
    assert group.pending() == 1  # not acknowledged while the job is not DONE
    release.set()
    wait_for(lambda: group.pending() == 0, timeout=10)
    assert group.status("f") is JobStatus.DONE
    assert [job for job, _, _ in group.did] == ["f", "f"]


def test_a_job_that_gives_up_is_acked_once_given_up(group: Group) -> None:
    def always_fails(job: Job, owner: str) -> None:
        raise RuntimeError("never works")

    for owner in ("a", "b"):
        group.start(owner, always_fails, max_attempts=3, retry_delay=0.0)
    group.submit("x")
    wait_for(lambda: group.pending() == 0 and len(group.did) == 3, timeout=15)
    assert group.status("x") is JobStatus.GAVE_UP
    assert [attempt for _, _, attempt in group.did] == [1, 2, 3]


def test_a_stopped_members_entry_is_served_by_another(group: Group) -> None:
    started = threading.Event()

    def hold_until_stopped(job: Job, owner: str) -> None:
        if owner == "a":
            started.set()
            while True:
                job.check()  # StopRequested once stopping: handed over, no attempt spent
                time.sleep(0.01)

    group.start("a", hold_until_stopped, lock_timeout=10.0)
    group.submit("s")
    assert started.wait(10)
    group.start("b", hold_until_stopped, lock_timeout=10.0)
    t0 = time.monotonic()
    group.stop("a")
    wait_for(lambda: group.pending() == 0, timeout=10)
    assert time.monotonic() - t0 < 5.0  # at once, not at the end of a 10 s lease
    assert [(job, owner) for job, owner, _ in group.did] == [("s", "a"), ("s", "b")]
    assert group.status("s") is JobStatus.DONE


def test_a_stopped_members_entry_is_served_when_it_restarts(group: Group) -> None:
    started = threading.Event()
    runs: list[int] = []

    def hold_once(job: Job, owner: str) -> None:
        runs.append(job.attempt)
        if len(runs) == 1:
            started.set()
            while True:
                job.check()
                time.sleep(0.01)

    group.start("a", hold_once)
    group.submit("r")
    assert started.wait(10)
    group.stop("a")
    assert group.pending() == 1  # left pending, not acknowledged
    group.start("a", hold_once)
    wait_for(lambda: group.pending() == 0, timeout=10)
    assert group.status("r") is JobStatus.DONE and len(runs) == 2


def test_backups_read_nothing_while_a_primary_serves(group: Group) -> None:
    group.start("p", role="primary")
    group.start("b1", role="backup")
    group.start("b2", role="backup")
    for i in range(30):
        group.submit(f"p{i}")
    wait_for(lambda: done_once(group, 30) and group.pending() == 0, timeout=15)
    assert {owner for _, owner, _ in group.did} == {"p"}
    group.stop("p")
    for i in range(10):
        group.submit(f"q{i}")
    wait_for(lambda: done_once(group, 40) and group.pending() == 0, timeout=15)
    later = {owner for job, owner, _ in group.did if job.startswith("q")}
    assert later and later <= {"b1", "b2"}


def test_a_groups_backups_do_not_hold_back_behind_a_backup_ranked_before(
    redis_client: redis.Redis, namespace: str, group: Group
) -> None:
    # "a-first" ranks before "b-member" and stays registered, serving nothing here; the
    # group gives every entry to b-member, which nobody else sees: holding them back
    # behind a-first (as a fan-out backup would) would cost each its 5 s delay.
    first = Worker(redis_client, namespace=namespace, owner="a-first", role="backup",
                   on_acquired=lambda job: None, handle_signals=False)
    assert first.process("register") is lockworker.Outcome.DONE
    try:
        group.start("b-member", role="backup", backup_delay=5.0)
        group.submit("warm-up")  # taken once its start-up grace is over (no primary)
        wait_for(lambda: done_once(group, 1) and group.pending() == 0, timeout=15)
        sent = time.monotonic()
        for i in range(10):
            group.submit(f"g{i}")
        wait_for(lambda: done_once(group, 11) and group.pending() == 0, timeout=15)
        assert time.monotonic() - sent < 3.0  # well below the 5 s delay
        assert {owner for _, owner, _ in group.did} == {"b-member"}
    finally:
        first.close()


def test_trimming_keeps_what_a_fan_out_reader_or_a_group_still_needs(
    redis_client: redis.Redis, group: Group
) -> None:
    streams.create_group(redis_client, group.entries, group.name, "0")
    reader = StreamSource(redis_client, group.stream, owner="fan", block=0.05)
    for i in range(5):
        group.submit(f"t{i}")
    stop = threading.Event()
    for n, delivery in enumerate(reader.deliveries(stop), 1):
        delivery.resolved()  # the reader saves its position past every entry...
        if n == 5:
            break
    assert redis_client.xlen(group.entries) == 5  # ...but the group has read none yet
    group.start("a")
    wait_for(lambda: done_once(group, 5) and group.pending() == 0, timeout=10)
    reader.touch()
    assert redis_client.xlen(group.entries) == 0  # now nobody needs them

    for i in range(3):
        group.submit(f"u{i}")
    wait_for(lambda: done_once(group, 8) and group.pending() == 0, timeout=10)
    late = StreamSource(redis_client, group.stream, owner="late", start="0", block=0.05)
    late.touch()  # a fan-out reader that has resolved nothing yet
    keys = streams.fanout_keys(stream_keys(group.stream))
    streams.TIDY(redis_client, keys, [group.name, 3_600_000])  # the group's trimming
    assert redis_client.xlen(group.entries) == 3


def test_a_group_source_checks_its_name_and_needs_serve(redis_client: redis.Redis) -> None:
    with pytest.raises(InvalidConfig, match="group"):
        StreamSource(redis_client, "jobs", owner="a", group="")
    with pytest.raises(InvalidConfig, match="group"):
        StreamSource(redis_client, "jobs", owner="a", group=3)  # type: ignore[arg-type]
    source = StreamSource(redis_client, f"s-{uuid.uuid4().hex[:6]}", owner="a", group="g")
    with pytest.raises(InvalidConfig, match=r"Worker\.serve"):
        next(source.deliveries(threading.Event()))


def test_acknowledgements_that_come_together_go_in_one_xack(
    group: Group, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Jobs resolved while an XACK is in flight are acknowledged by the next one: fewer
    XACKs than jobs, every entry acknowledged, and the consumer removed once it left."""
    xacks: list[int] = []
    real = redis.Redis.xack

    def counted(self: redis.Redis, name: Any, groupname: Any, *ids: Any) -> Any:
        xacks.append(len(ids))
        time.sleep(0.002)  # a round trip long enough for others to queue behind it
        return real(self, name, groupname, *ids)

    monkeypatch.setattr(redis.Redis, "xack", counted)
    group.start("a")
    for i in range(200):
        group.submit(f"j{i}")
    wait_for(lambda: done_once(group, 200), timeout=20)
    wait_for(lambda: group.pending() == 0, timeout=10)
    group.close()
    assert sum(xacks) == 200 and len(xacks) < 200 and max(xacks) > 1
    assert group.read_by() == {}
