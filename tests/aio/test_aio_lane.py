"""``aio`` serving's lane (lockworker.aio.lane): the jobs a contest would take at once
are claimed in batches and their completions group-committed, with the events, hooks
and guarantees of ``process``.

Against a real server: the claims and completions share round trips; each job is
still acquired, run and marked done once, with its ``job.acquired`` and ``job.done``
events; a cancelled serving hands back a claim whose reply was in flight and still
lands a completion in flight; an override of ``process`` sees every job; a backup
while a primary serves does not take the lane.
"""

from __future__ import annotations

import asyncio
import collections
from collections.abc import AsyncIterator
from typing import Any

import pytest
import redis.asyncio
from helpers import FailingReports, ReportFailed

import lockworker
from lockworker import Job, Outcome
from lockworker.aio import lane
from lockworker.aio.jobrun import AsyncJobRun
from lockworker.aio.worker import Worker as AsyncWorker
from lockworker.model.state import JobStatus
from lockworker.protocol import script
from lockworker.testing import RedisServer
from lockworker.testing.events import capture_events


async def nothing(job: Job) -> None:
    await asyncio.sleep(0)


def client_of(server: RedisServer) -> Any:
    return redis.asyncio.Redis(host=server.connect_host, port=server.port)


class Sends:
    """Counts the lane's round trips by what they carry (claims, completions or both)
    and their steps by script; can hold back the next one carrying ``hold`` (its
    reply: the server applied it, the lane waits; or, with ``before``, the round trip
    itself) until ``release`` is set."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.count: collections.Counter[str] = collections.Counter()
        self.steps: collections.Counter[str] = collections.Counter()
        self.hold: Any = None
        self.before = False
        """Hold the round trip back before it is sent, rather than its reply."""
        self.held = asyncio.Event()
        self.release = asyncio.Event()
        real = lane.send

        async def send(client: Any, steps: list[Any]) -> list[Any]:
            kinds = collections.Counter(
                "claim" if step.script is script._ACQUIRE else "settle" for step in steps
            )
            self.count["both" if len(kinds) == 2 else next(iter(kinds))] += 1
            self.steps.update(kinds)
            carries = any(step.script is self.hold for step in steps)
            if self.hold is not None and carries and self.before:
                self.hold = None
                self.held.set()
                await self.release.wait()
            replies = await real(client, steps)
            if self.hold is not None and carries:
                self.hold = None
                self.held.set()
                await self.release.wait()
            return replies

        monkeypatch.setattr(lane, "send", send)


def test_claims_and_completions_share_round_trips_and_each_job_is_done_once(
    redis_server: RedisServer, namespace: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    jobs = 300

    async def scenario() -> tuple[Sends, list[Any], collections.Counter[str]]:
        sends = Sends(monkeypatch)
        client = client_of(redis_server)
        ran: collections.Counter[str] = collections.Counter()

        async def work(job: Job) -> None:
            ran[job.id] += 1
            await client.rpush(f"{namespace}:ran", job.id)  # a round trip of its own

        worker = AsyncWorker(client, namespace=namespace, on_acquired=work,
                             handle_signals=False)
        with capture_events() as events:
            await worker.serve([(f"job-{i}", {"n": i}) for i in range(jobs)], concurrency=64)
        statuses = await asyncio.gather(*(worker.inspect(f"job-{i}") for i in range(jobs)))
        assert {(s.status, s.attempt, s.owner) for s in statuses} == {
            (JobStatus.DONE, 1, worker.owner)
        }
        await worker.close()
        await client.aclose()
        return sends, events, ran

    sends, events, ran = asyncio.run(scenario())
    assert ran == collections.Counter({f"job-{i}": 1 for i in range(jobs)})
    assert sends.steps == {"claim": jobs, "settle": jobs}  # every job through the lane
    # One round trip per batch, not per job: 64 slots, so at least 5 carry claims.
    assert sends.count["claim"] + sends.count["both"] >= 5
    assert sum(sends.count.values()) <= jobs // 4
    by_event = collections.Counter(e["event"] for e in events if "job_id" in e)
    assert by_event["job.acquired"] == jobs and by_event["job.done"] == jobs


def test_a_cancelled_serving_hands_back_a_claim_whose_reply_was_in_flight(
    redis_server: RedisServer, namespace: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The grant landed, its reply was on the way when the serving was cancelled: the
    serving waits for the round trip in flight (it may carry completions too), then
    hands the lease back, the attempt refunded, as a cancelled ``process`` does; no
    hook ran."""

    async def scenario() -> Any:
        sends = Sends(monkeypatch)
        sends.hold = script._ACQUIRE
        client = client_of(redis_server)
        ran: list[str] = []

        async def work(job: Job) -> None:
            ran.append(job.id)

        worker = AsyncWorker(client, namespace=namespace, on_acquired=work,
                             handle_signals=False, lock_timeout=30.0)
        serving = asyncio.ensure_future(worker.serve([("job", None)], concurrency=4))
        await asyncio.wait_for(sends.held.wait(), 5)
        serving.cancel()
        await asyncio.sleep(0)
        assert not serving.done()  # waits for the round trip in flight
        sends.release.set()
        with pytest.raises(asyncio.CancelledError):
            await asyncio.wait_for(serving, 5)
        seen = await worker.inspect("job")
        await worker.close()
        await client.aclose()
        assert ran == []
        return seen

    seen = asyncio.run(scenario())
    assert seen.holder is None  # no lease left to run out (30 s)
    assert (seen.status, seen.attempt) == (JobStatus.PENDING, 0)


def test_a_cancelled_serving_still_sends_the_completions_due(
    redis_server: RedisServer, namespace: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The hook returned, its complete step waits to be sent when the serving is
    cancelled: it is sent all the same (``process`` shields it), not left to run out."""

    async def scenario() -> Any:
        sends = Sends(monkeypatch)
        sends.hold, sends.before = script._SETTLE, True
        client = client_of(redis_server)
        worker = AsyncWorker(client, namespace=namespace, on_acquired=nothing,
                             handle_signals=False, lock_timeout=30.0)
        serving = asyncio.ensure_future(worker.serve([("job", None)], concurrency=4))
        await asyncio.wait_for(sends.held.wait(), 5)
        serving.cancel()
        await asyncio.sleep(0)
        assert not serving.done()  # waits for the completion due
        sends.release.set()
        with pytest.raises(asyncio.CancelledError):
            await asyncio.wait_for(serving, 5)
        seen = await worker.inspect("job")
        await worker.close()
        await client.aclose()
        return seen

    seen = asyncio.run(scenario())
    assert (seen.status, seen.attempt, seen.holder) == (JobStatus.DONE, 1, None)


def test_a_failing_hook_in_the_lane_is_settled_as_process_settles_it(
    redis_server: RedisServer, namespace: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first attempt fails (on_failed runs, the retry is due at once); the contest
    goes on in the same serving and the second attempt is done."""

    async def scenario() -> tuple[list[tuple[str, int]], Any]:
        Sends(monkeypatch)
        client = client_of(redis_server)
        calls: list[tuple[str, int]] = []

        async def work(job: Job) -> None:
            calls.append(("acquired", job.attempt))
            if job.attempt == 1:
                raise RuntimeError("first attempt fails")

        async def failed(job: Job, exc: BaseException) -> None:
            calls.append(("failed", job.attempt))

        worker = AsyncWorker(client, namespace=namespace, on_acquired=work,
                             on_failed=failed, handle_signals=False, retry_delay=0)
        await asyncio.wait_for(worker.serve([("job", None)], concurrency=4), 20)
        seen = await worker.inspect("job")
        await worker.close()
        await client.aclose()
        return calls, seen

    calls, seen = asyncio.run(scenario())
    assert calls == [("acquired", 1), ("failed", 1), ("acquired", 2)]
    assert (seen.status, seen.attempt) == (JobStatus.DONE, 2)


def test_an_override_of_process_sees_every_job_and_the_lane_stays_shut(
    redis_server: RedisServer, namespace: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    class Counting(AsyncWorker):
        seen: list[str]

        async def process(self, job_id: str, payload: Any = None) -> Outcome:
            self.seen.append(job_id)
            return await super().process(job_id, payload)

    async def scenario() -> tuple[list[str], Sends]:
        sends = Sends(monkeypatch)
        client = client_of(redis_server)
        worker = Counting(client, namespace=namespace, on_acquired=nothing,
                          handle_signals=False)
        worker.seen = []
        await worker.serve([(f"job-{i}", None) for i in range(20)], concurrency=4)
        await worker.close()
        await client.aclose()
        return worker.seen, sends

    seen, sends = asyncio.run(scenario())
    assert sorted(seen) == sorted(f"job-{i}" for i in range(20))
    assert sends.count == {}


@pytest.mark.parametrize("through", ["lane", "process"])
@pytest.mark.parametrize(
    ("read", "fails"),
    [("on the loop", "resolved"), ("in a thread", "resolved"),
     ("in a thread", "resolving on entry"), ("in a thread", "resolving on exit")],
)
def test_a_source_whose_report_raises_stops_the_serving_with_that_error(
    redis_server: RedisServer, namespace: str, through: str, read: str, fails: str
) -> None:
    """``delivery.resolved()`` is the source's code, and so is its ``resolving()``
    (entered around the reports made together in a worker thread for a sync source):
    if either raises (reported on the loop for an async source, in a worker thread for
    a sync one), the serving stops and raises that error once the running jobs ended;
    it is neither lost with the task that reported it nor does the serving hang. The
    jobs themselves are DONE."""

    class AsyncSource(FailingReports):
        def __aiter__(self) -> AsyncIterator[lockworker.Delivery]:
            return self.items()

        async def items(self) -> AsyncIterator[lockworker.Delivery]:
            for job_id in self.ids:
                yield self.delivery(job_id)

    class Overriding(AsyncWorker):
        async def process(self, job_id: str, payload: Any = None) -> Outcome:
            return await super().process(job_id, payload)

    async def scenario() -> tuple[BaseException | None, JobStatus]:
        client = client_of(redis_server)
        kind = AsyncWorker if through == "lane" else Overriding
        worker = kind(client, namespace=namespace, on_acquired=nothing, handle_signals=False)
        source = AsyncSource(fails) if read == "on the loop" else FailingReports(fails)
        raised: BaseException | None = None
        try:
            await asyncio.wait_for(worker.serve(source, concurrency=2), 10)
        except ReportFailed as exc:
            raised = exc
        status = (await worker.inspect("job-3")).status
        await worker.close()
        await client.aclose()
        return raised, status

    raised, status = asyncio.run(scenario())
    assert isinstance(raised, ReportFailed)
    if fails == "resolved":
        assert status is JobStatus.DONE


def test_a_served_job_runs_the_attempt_process_runs_and_its_done_goes_in_a_batch(
    redis_server: RedisServer, namespace: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    jobs = 40
    calls: collections.Counter[str] = collections.Counter()
    for method in ("hooked", "send_done"):
        real = getattr(AsyncJobRun, method)

        async def counted(
            run: AsyncJobRun, *args: Any, _real: Any = real, _name: str = method
        ) -> Any:
            calls[_name] += 1
            return await _real(run, *args)

        monkeypatch.setattr(AsyncJobRun, method, counted)

    async def scenario() -> tuple[Sends, list[Any]]:
        sends = Sends(monkeypatch)
        client = client_of(redis_server)
        worker = AsyncWorker(client, namespace=namespace, on_acquired=nothing,
                             handle_signals=False)
        await worker.serve([(f"job-{i}", None) for i in range(jobs)], concurrency=8)
        statuses = [(await worker.inspect(f"job-{i}")).status for i in range(jobs)]
        await worker.close()
        await client.aclose()
        return sends, statuses

    sends, statuses = asyncio.run(scenario())
    assert statuses == [JobStatus.DONE] * jobs
    assert sends.steps == {"claim": jobs, "settle": jobs}  # every job through the lane
    assert calls == {"hooked": jobs}  # each hook in the run's attempt, no DONE sent alone
