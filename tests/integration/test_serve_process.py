"""``serve`` runs every job through the worker's public ``process``, sync and asyncio.

A subclass that overrides ``process`` (tracing, metrics, a payload check) sees every
job ``serve`` takes, and what its override returns is the job's outcome: a stream's
position moves past a delivery only when the override said it was resolved. A job
waiting on another holder still parks (gives its slot back) when ``serve`` called the
override, which called ``super().process``.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from typing import Any

import pytest
import redis
import redis.asyncio
from helpers import RETENTION, grant, held, wait_for

import lockworker
from lockworker import InvalidConfig, Job, JobStatus, Outcome, StreamSource, aio
from lockworker.model.codec import payload_view
from lockworker.model.keys import JobKeys
from lockworker.protocol import ScriptProtocol
from lockworker.testing import RedisServer

SIDES = ("sync", "async")


class Traced(lockworker.Worker):
    """Records every job its ``process`` sees; vetoes some without running them."""

    seen: list[str]

    def process(self, job_id: str, payload: Any = None) -> Outcome:
        self.seen.append(job_id)
        if (payload or {}).get("veto"):
            return Outcome.STOPPED  # not resolved: the stream must not move past it
        if (payload or {}).get("refuse"):
            raise InvalidConfig(f"payload of {job_id!r} refused")  # skipped, as refused
        if (payload or {}).get("retag"):
            payload = {**payload, "tag": (1, 2)}  # a new payload: its view is made
        return super().process(job_id, payload)


class AsyncTraced(aio.Worker):
    seen: list[str]

    async def process(self, job_id: str, payload: Any = None) -> Outcome:
        self.seen.append(job_id)
        if (payload or {}).get("veto"):
            return Outcome.STOPPED
        if (payload or {}).get("refuse"):
            raise InvalidConfig(f"payload of {job_id!r} refused")
        if (payload or {}).get("retag"):
            payload = {**payload, "tag": (1, 2)}
        return await super().process(job_id, payload)


class Side:
    """A traced worker of one side, served in a thread (its own loop for asyncio)."""

    def __init__(self, side: str, server: RedisServer, namespace: str, **options: Any) -> None:
        self.side = side
        self.server = server
        self.ran: list[str] = []
        self.payloads: dict[str, Any] = {}
        self.failures: list[BaseException] = []
        self.thread: threading.Thread | None = None
        self.worker: Traced | AsyncTraced | None = None
        self.ready = threading.Event()
        self.options = dict(
            namespace=namespace, handle_signals=False, lock_timeout=5.0,
            on_acquired=self.acquired, **options,
        )

    def acquired(self, job: Job) -> None:
        self.payloads[job.id] = job.payload
        self.ran.append(job.id)

    def serve(self, source: Any, concurrency: int) -> None:
        self.thread = threading.Thread(target=self._serve, args=(source, concurrency))
        self.thread.start()
        assert self.ready.wait(10)

    def _serve(self, source: Any, concurrency: int) -> None:
        try:
            if self.side == "sync":
                with Traced(self.server.client(), **self.options) as worker:
                    worker.seen = []
                    self.worker = worker
                    self.ready.set()
                    worker.serve(source, concurrency=concurrency)
            else:
                asyncio.run(self._aserve(source, concurrency))
        except BaseException as exc:
            self.failures.append(exc)
            self.ready.set()

    async def _aserve(self, source: Any, concurrency: int) -> None:
        client = redis.asyncio.Redis(port=self.server.port, socket_timeout=5.0)
        try:
            async with AsyncTraced(client, **self.options) as worker:
                worker.seen = []
                self.worker = worker
                self.ready.set()
                await worker.serve(source, concurrency=concurrency)
        finally:
            await client.aclose()

    @property
    def seen(self) -> list[str]:
        assert self.worker is not None
        return self.worker.seen

    def stop(self) -> None:
        if self.worker is not None:
            self.worker.stop()
        if self.thread is not None:
            self.thread.join(20)
            assert not self.thread.is_alive()
        assert self.failures == []


@pytest.fixture(params=SIDES)
def side(
    request: pytest.FixtureRequest, redis_server: RedisServer, namespace: str,
    redis_client: redis.Redis,
) -> Iterator[Side]:
    """Stopped before ``redis_client`` (a test's StreamSource reads on it) is closed."""
    s = Side(request.param, redis_server, namespace)
    yield s
    s.stop()


def test_an_overridden_process_sees_every_served_job_and_its_result_is_honoured(
    side: Side, redis_client: redis.Redis, namespace: str
) -> None:
    stream = f"{namespace}-jobs"
    first = lockworker.submit(redis_client, stream, "first")
    lockworker.submit(redis_client, stream, "veto", {"veto": True})
    lockworker.submit(redis_client, stream, "last")
    source = StreamSource(redis_client, stream, owner="traced", block=0.05)
    side.serve(source, concurrency=1)  # one slot: the jobs come in order
    wait_for(lambda: side.ran == ["first", "last"], timeout=20)
    side.stop()  # its end makes the last reports and saves the position
    assert side.seen == ["first", "veto", "last"]
    # "last" is resolved, but the override said "veto" was not: the position stays.
    assert source.position() == first
    inspect = ScriptProtocol(redis_client).inspect
    assert inspect(JobKeys.of(namespace, "veto")).status is JobStatus.PENDING
    assert inspect(JobKeys.of(namespace, "last")).status is JobStatus.DONE


def test_a_stream_s_payload_is_not_encoded_again_unless_an_override_changes_it(
    side: Side, redis_client: redis.Redis, namespace: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A stream's payload was decoded from strict JSON text: it is what every process
    sees already, so ``process`` does not encode and decode it again; a payload an
    override made still gets its view (a tuple reaches the hook as a list)."""
    views: list[Any] = []

    def counted(payload: Any) -> Any:
        views.append(payload)
        return payload_view(payload)

    monkeypatch.setattr("lockworker.daemons.worker.payload_view", counted)
    monkeypatch.setattr("lockworker.aio.worker.payload_view", counted)
    stream = f"{namespace}-jobs"
    lockworker.submit(redis_client, stream, "as-read", {"n": [1, 2]})
    lockworker.submit(redis_client, stream, "retagged", {"retag": True})
    side.serve(StreamSource(redis_client, stream, owner="traced", block=0.05), concurrency=1)
    wait_for(lambda: side.ran == ["as-read", "retagged"], timeout=20)
    assert side.payloads == {"as-read": {"n": [1, 2]}, "retagged": {"retag": True, "tag": [1, 2]}}
    assert views == [{"retag": True, "tag": (1, 2)}]


def test_a_refusal_raised_by_an_overridden_process_skips_the_job(side: Side) -> None:
    side.serve([("ok-1", None), ("bad", {"refuse": True}), ("ok-2", None)], concurrency=1)
    assert side.thread is not None
    side.thread.join(20)
    assert side.seen == ["ok-1", "bad", "ok-2"]
    assert side.ran == ["ok-1", "ok-2"]


def test_a_job_held_elsewhere_parks_through_an_overridden_process(
    side: Side, redis_client: redis.Redis, namespace: str
) -> None:
    """One slot, and the held job came first: "new" runs only if "held" gave its slot
    back, which it can only do with the slots ``serve`` lent through the override."""
    protocol = ScriptProtocol(redis_client)
    keys = JobKeys.of(namespace, "held")
    g = grant(protocol, keys, "alive", lease_ms=30_000)
    side.serve([("held", None), ("new", None)], concurrency=1)
    wait_for(lambda: side.ran == ["new"], timeout=20)
    protocol.release(keys, held(g, "alive"), RETENTION)
    wait_for(lambda: side.ran == ["new", "held"], timeout=20)
    assert side.seen == ["held", "new"]
