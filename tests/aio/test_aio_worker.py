"""lockworker.aio.Worker beside lockworker.Worker: one scenario text asserts both sides.

Each test is a plain function running one scenario coroutine (:func:`play`). A scenario
makes its workers through :class:`Contender`, one interface over a sync
``lockworker.Worker`` (its blocking calls in threads, its hooks run on the scenario's
loop) and a ``lockworker.aio.Worker`` (awaited), so a scenario parametrised over
``SIDES`` runs the same steps and assertions on each side, and ``mixed`` puts sync and
async workers on one job. Hooks are recorded with their attempt, token and
``time.monotonic()``.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import subprocess
import sys
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import pytest
import redis
import redis.asyncio
from contender_proc import LOCK_TIMEOUT, RETRY_DELAY, record, should_fail
from helpers import RETENTION, grant, held, in_thread, until
from hypothesis import given, settings
from hypothesis import strategies as st

import lockworker
from lockworker import (
    Delivery,
    InvalidConfig,
    InvalidHook,
    Job,
    JobNotFound,
    JobStatus,
    Outcome,
    Snapshot,
    StreamSource,
    aio,
)
from lockworker.aio.worker import Worker as AsyncWorker
from lockworker.model.keys import JobKeys
from lockworker.protocol import ScriptProtocol
from lockworker.testing import RedisServer

T = TypeVar("T")

SIDES = ("sync", "async")
MIXED = (*SIDES, "mixed")
PROC = str(Path(__file__).with_name("contender_proc.py"))


def sides(kind: str, n: int) -> list[str]:
    """The sides of ``n`` contenders: all ``kind``, or alternating for ``mixed``."""
    return [SIDES[i % 2] for i in range(n)] if kind == "mixed" else [kind] * n




@dataclass(frozen=True)
class Call:
    hook: str
    attempt: int
    token: int
    t: float


Work = Callable[[Job], Awaitable[None]]


async def nothing(job: Job) -> None:
    """The default work: done at once."""


class Env:
    """A scenario's server, namespace, clients of both kinds, and its contenders."""

    def __init__(self, port: int, namespace: str) -> None:
        self.namespace = namespace
        self.client = redis.Redis(host="127.0.0.1", port=port, socket_timeout=5.0)
        self.aclient = redis.asyncio.Redis(host="127.0.0.1", port=port, socket_timeout=5.0)
        self.contenders: list[Contender] = []

    async def close(self) -> None:
        for contender in self.contenders:
            contender.stop()
        for contender in self.contenders:
            await contender.close()
        await self.aclient.aclose()
        self.client.close()


def play(server: RedisServer, namespace: str, scenario: Callable[[Env], Awaitable[T]]) -> T:
    """Run ``scenario`` in a new event loop, with threads enough for the sync side."""

    async def main() -> T:
        asyncio.get_running_loop().set_default_executor(
            ThreadPoolExecutor(32, thread_name_prefix="sync-side")
        )
        env = Env(server.port, namespace)
        try:
            return await scenario(env)
        finally:
            await env.close()

    return asyncio.run(main())


def on_loop(loop: asyncio.AbstractEventLoop, hook: Callable[..., Awaitable[None]]) -> Any:
    """A sync hook that runs the coroutine ``hook`` on ``loop`` and waits for it."""

    def call(*args: Any) -> None:
        asyncio.run_coroutine_threadsafe(hook(*args), loop).result()

    return call


class Contender:
    """A worker of either side with one awaitable interface; its hooks are recorded in
    ``calls`` and ``errors`` (on_failed's exceptions) and do ``work`` when acquired."""

    def __init__(self, env: Env, side: str, work: Work = nothing, **options: Any) -> None:
        self.side = side
        self.work = work
        self.calls: list[Call] = []
        self.errors: list[BaseException] = []
        options.setdefault("lock_timeout", 10.0)
        hooks: dict[str, Callable[..., Awaitable[None]]] = {
            "on_acquired": self._acquired, "on_locked": self._noted("locked"),
            "on_failed": self._failed, "on_lost": self._noted("lost"),
            "on_gave_up": self._noted("gave_up"),
        }
        self.worker: Any
        if side == "async":
            self.worker = AsyncWorker(
                env.aclient, namespace=env.namespace, handle_signals=False, **hooks, **options
            )
        else:
            loop = asyncio.get_running_loop()
            self.worker = lockworker.Worker(
                env.client, namespace=env.namespace, handle_signals=False,
                **{name: on_loop(loop, hook) for name, hook in hooks.items()}, **options,
            )
        env.contenders.append(self)

    @property
    def owner(self) -> str:
        return str(self.worker.owner)

    def of(self, hook: str) -> list[Call]:
        return [call for call in self.calls if call.hook == hook]

    def note(self, hook: str, job: Job) -> None:
        self.calls.append(Call(hook, job.attempt, job.token, time.monotonic()))

    async def _acquired(self, job: Job) -> None:
        self.note("acquired", job)
        await self.work(job)

    async def _failed(self, job: Job, exc: BaseException) -> None:
        self.note("failed", job)
        self.errors.append(exc)

    def _noted(self, hook: str) -> Callable[[Job], Awaitable[None]]:
        async def note(job: Job) -> None:
            self.note(hook, job)

        return note

    async def _call(self, name: str, *args: Any, **kwargs: Any) -> Any:
        method = getattr(self.worker, name)
        if self.side == "async":
            return await method(*args, **kwargs)
        return await asyncio.to_thread(method, *args, **kwargs)

    async def process(self, job_id: str, payload: Any = None) -> Outcome:
        outcome: Outcome = await self._call("process", job_id, payload)
        return outcome

    async def inspect(self, job_id: str) -> Snapshot:
        snapshot: Snapshot = await self._call("inspect", job_id)
        return snapshot

    async def reset(self, job_id: str, *, force: bool = False) -> bool:
        return bool(await self._call("reset", job_id, force=force))

    async def serve(self, source: Any, *, concurrency: int) -> None:
        await self._call("serve", source, concurrency=concurrency)

    def stop(self) -> None:
        self.worker.stop()

    async def close(self) -> None:
        await self._call("close")


def task(coro: Awaitable[T]) -> asyncio.Task[T]:
    return asyncio.ensure_future(coro)


async def held_and_awaited(
    a: Contender, b: Contender
) -> tuple[asyncio.Task[Outcome], asyncio.Task[Outcome], float]:
    """``a`` holds "job" and ``b`` waits, having seen it held: their tasks, and the
    time from which a handover is measured."""
    ta = task(a.process("job"))
    await until(lambda: a.of("acquired"))
    tb = task(b.process("job"))
    await until(lambda: b.of("locked"))
    return ta, tb, time.monotonic()


# -- contention: the same scenarios on each side, and mixed -----------------------------


@pytest.mark.parametrize("kind", MIXED)
def test_a_job_is_done_once_among_contenders(
    redis_server: RedisServer, namespace: str, kind: str
) -> None:
    """Four contenders: the holder finishes only once the three others saw it held;
    exactly one on_acquired ran, the others end DONE_ELSEWHERE."""

    async def scenario(env: Env) -> tuple[list[Contender], list[Outcome]]:
        async def work(job: Job) -> None:
            await until(lambda: sum(bool(c.of("locked")) for c in contenders) == 3)

        contenders = [Contender(env, side, work) for side in sides(kind, 4)]
        outcomes = await asyncio.gather(*(c.process("job") for c in contenders))
        return contenders, list(outcomes)

    contenders, outcomes = play(redis_server, namespace, scenario)
    assert sorted(outcomes) == sorted([Outcome.DONE] + [Outcome.DONE_ELSEWHERE] * 3)
    winner = contenders[outcomes.index(Outcome.DONE)]
    assert [len(c.of("acquired")) for c in contenders] == [int(c is winner) for c in contenders]
    assert winner.of("acquired")[0].attempt == 1


@pytest.mark.parametrize("kind", MIXED)
def test_a_failed_attempt_is_taken_over_with_the_next_attempt_and_a_larger_token(
    redis_server: RedisServer, namespace: str, kind: str
) -> None:
    async def scenario(env: Env) -> None:
        go = asyncio.Event()

        async def fail_on_go(job: Job) -> None:
            await go.wait()
            raise RuntimeError("attempt fails")

        first_side, second_side = sides(kind, 2)
        a = Contender(env, first_side, fail_on_go)
        b = Contender(env, second_side)
        ta, tb, failed_at = await held_and_awaited(a, b)
        go.set()
        assert await asyncio.gather(ta, tb) == [Outcome.DONE_ELSEWHERE, Outcome.DONE]
        assert [repr(e) for e in a.errors] == [repr(RuntimeError("attempt fails"))]
        (first,), (second,) = a.of("acquired"), b.of("acquired")
        assert (first.attempt, second.attempt) == (1, 2)
        assert second.token > first.token
        assert second.t - failed_at < 10.0 / 2  # woken, not the lease's end
        seen = await b.inspect("job")
        assert (seen.status, seen.attempt, seen.owner) == (JobStatus.DONE, 2, b.owner)

    play(redis_server, namespace, scenario)


@pytest.mark.parametrize("kind", MIXED)
def test_max_attempts_used_up_gives_up_for_everyone(
    redis_server: RedisServer, namespace: str, kind: str
) -> None:
    async def scenario(env: Env) -> None:
        async def fail(job: Job) -> None:
            raise RuntimeError(f"attempt {job.attempt} fails")

        contenders = [
            Contender(env, side, fail, max_attempts=3, retry_delay=0.05)
            for side in sides(kind, 3)
        ]
        outcomes = await asyncio.gather(*(c.process("job") for c in contenders))
        assert outcomes == [Outcome.GAVE_UP] * 3
        assert [len(c.of("gave_up")) for c in contenders] == [1, 1, 1]
        attempts = sorted(
            (call.attempt, call.token) for c in contenders for call in c.of("acquired")
        )
        assert [attempt for attempt, _ in attempts] == [1, 2, 3]
        tokens = [token for _, token in attempts]
        assert tokens == sorted(set(tokens))
        assert sum(len(c.errors) for c in contenders) == 3
        seen = await contenders[0].inspect("job")
        assert (seen.status, seen.attempt) == (JobStatus.GAVE_UP, 3)

    play(redis_server, namespace, scenario)


@pytest.mark.parametrize("kind", MIXED)
def test_stop_requested_hands_the_job_over_without_spending_an_attempt(
    redis_server: RedisServer, namespace: str, kind: str
) -> None:
    async def scenario(env: Env) -> None:
        async def until_stopped(job: Job) -> None:
            await until(lambda: job.stopping)
            job.check()  # raises StopRequested

        first_side, second_side = sides(kind, 2)
        a = Contender(env, first_side, until_stopped)
        b = Contender(env, second_side)
        ta, tb, stopped_at = await held_and_awaited(a, b)
        a.stop()
        assert await asyncio.gather(ta, tb) == [Outcome.STOPPED, Outcome.DONE]
        (first,), (second,) = a.of("acquired"), b.of("acquired")
        assert (first.attempt, second.attempt) == (1, 1)
        assert second.token > first.token
        assert second.t - stopped_at < 10.0 / 2
        assert a.errors == []

    play(redis_server, namespace, scenario)


@pytest.mark.parametrize("kind", MIXED)
def test_stop_ends_a_waiting_process_with_stopped_and_leaves_the_holder_alone(
    redis_server: RedisServer, namespace: str, kind: str
) -> None:
    async def scenario(env: Env) -> None:
        release = asyncio.Event()

        async def hold(job: Job) -> None:
            await release.wait()

        holder_side, waiter_side = sides(kind, 2)
        holder = Contender(env, holder_side, hold)
        waiter = Contender(env, waiter_side)
        th = task(holder.process("job"))
        await until(lambda: holder.of("acquired"))
        tw = task(waiter.process("job"))
        await until(lambda: waiter.of("locked"))
        stopped_at = time.monotonic()
        waiter.stop()
        assert await tw is Outcome.STOPPED
        assert time.monotonic() - stopped_at < 10.0 / 2  # not the holder's lease
        assert (await waiter.inspect("job")).holder == holder.owner
        assert waiter.of("acquired") == []
        release.set()
        assert await th is Outcome.DONE

    play(redis_server, namespace, scenario)


@pytest.mark.parametrize("side", SIDES)
def test_reset_makes_a_known_job_pending_raises_for_an_unknown_one_refuses_a_held_one_unless_forced(
    redis_server: RedisServer, namespace: str, side: str
) -> None:
    async def scenario(env: Env) -> None:
        release = asyncio.Event()

        async def hold(job: Job) -> None:
            await release.wait()

        worker = Contender(env, side)
        with pytest.raises(JobNotFound) as missing:
            await worker.reset("job")
        assert missing.value.args == (f"no job 'job' in namespace {env.namespace!r}",)
        assert await worker.process("job") is Outcome.DONE
        assert await worker.reset("job") is True
        seen = await worker.inspect("job")
        assert (seen.status, seen.attempt, seen.holder) == (JobStatus.PENDING, 0, None)
        assert await worker.process("job") is Outcome.DONE
        first, second = worker.of("acquired")
        assert (second.attempt, second.token > first.token) == (1, True)

        holder = Contender(env, side, hold, retry_delay=0.05)
        th = task(holder.process("held"))
        await until(lambda: holder.of("acquired"))
        assert await worker.reset("held") is False
        assert (await worker.inspect("held")).holder == holder.owner
        assert await worker.reset("held", force=True) is True
        seen = await worker.inspect("held")
        assert (seen.status, seen.attempt, seen.holder) == (JobStatus.PENDING, 0, None)
        release.set()
        # The holder's completion is refused (its lease is gone); it takes the job anew.
        assert await th is Outcome.DONE
        assert len(holder.of("lost")) == 1
        taken, again = holder.of("acquired")
        assert (again.attempt, again.token > taken.token) == (1, True)

    play(redis_server, namespace, scenario)


@pytest.mark.parametrize("side", SIDES)
def test_inspect_shows_the_holder_then_the_finished_job(
    redis_server: RedisServer, namespace: str, side: str
) -> None:
    async def scenario(env: Env) -> None:
        release = asyncio.Event()

        async def hold(job: Job) -> None:
            await release.wait()

        holder = Contender(env, side, hold)
        looker = Contender(env, side)
        th = task(holder.process("job"))
        await until(lambda: holder.of("acquired"))
        (taken,) = holder.of("acquired")
        seen = await looker.inspect("job")
        assert (seen.status, seen.attempt, seen.token, seen.holder, seen.owner) == (
            JobStatus.PENDING, 1, taken.token, holder.owner, holder.owner,
        )
        assert seen.run == holder.worker.run_id
        assert seen.pttl_ms is not None and 0 < seen.pttl_ms <= 10_000
        release.set()
        assert await th is Outcome.DONE
        seen = await looker.inspect("job")
        assert (seen.status, seen.attempt, seen.token, seen.holder, seen.owner) == (
            JobStatus.DONE, 1, taken.token, None, holder.owner,
        )

    play(redis_server, namespace, scenario)


HOOK_FORMS = ("passed async", "passed plain", "overridden async", "overridden plain")


@pytest.mark.parametrize("form", HOOK_FORMS)
def test_aio_hooks_may_be_async_or_plain_passed_or_overridden(
    redis_server: RedisServer, namespace: str, form: str
) -> None:
    """Each form runs on_acquired once per attempt and the other hooks as called for: a
    plain override is called, not awaited (awaiting its None would fail the attempt after
    its work ran, and run it again)."""
    calls: list[tuple[str, str]] = []

    def note(hook: str, job: Job) -> None:
        calls.append((hook, job.id))
        if hook == "on_acquired" and job.id == "fails":
            raise RuntimeError("fails")

    def plain(hook: str) -> Callable[..., None]:
        return lambda job, *_exc: note(hook, job)

    def coroutine(hook: str) -> Callable[..., Awaitable[None]]:
        async def run(job: Job, *_exc: BaseException) -> None:
            note(hook, job)

        return run

    class Plain(AsyncWorker):
        def on_acquired(self, job: Job) -> None:  # type: ignore[override]
            note("on_acquired", job)

        def on_failed(self, job: Job, exc: BaseException) -> None:  # type: ignore[override]
            note("on_failed", job)

        def on_gave_up(self, job: Job) -> None:  # type: ignore[override]
            note("on_gave_up", job)

    class Async(AsyncWorker):
        async def on_acquired(self, job: Job) -> None:
            note("on_acquired", job)

        async def on_failed(self, job: Job, exc: BaseException) -> None:
            note("on_failed", job)

        async def on_gave_up(self, job: Job) -> None:
            note("on_gave_up", job)

    async def scenario(env: Env) -> list[Outcome]:
        options: dict[str, Any] = {"namespace": namespace, "handle_signals": False,
                                   "max_attempts": 1}
        if form.startswith("passed"):
            make = coroutine if form == "passed async" else plain
            hooks = {name: make(name) for name in ("on_acquired", "on_failed", "on_gave_up")}
            worker = AsyncWorker(env.aclient, **options, **hooks)
        else:
            worker = (Async if form == "overridden async" else Plain)(env.aclient, **options)
        async with worker:
            return [await worker.process("works"), await worker.process("fails")]

    assert play(redis_server, namespace, scenario) == [Outcome.DONE, Outcome.GAVE_UP]
    assert calls == [
        ("on_acquired", "works"),
        ("on_acquired", "fails"), ("on_failed", "fails"), ("on_gave_up", "fails"),
    ]


# -- settings: both constructors accept or refuse alike ---------------------------------


def _ok(job: Job) -> None:
    """A valid on_acquired."""


def refusal(side: str, options: dict[str, Any]) -> tuple[str, str] | None:
    """The InvalidConfig or InvalidHook (class name, message) that ``options`` get from
    ``side``'s Worker, or None if it accepts them. ``on_acquired=None`` leaves the hook out."""
    options = {"on_acquired": _ok, **options}
    if options["on_acquired"] is None:
        del options["on_acquired"]

    namespace = options.pop("namespace", "ns")

    async def make_async() -> tuple[str, str] | None:
        client = redis.asyncio.Redis(host="127.0.0.1", port=1)
        try:
            worker = AsyncWorker(client, namespace=namespace, handle_signals=False, **options)
        except (InvalidConfig, InvalidHook) as exc:
            return type(exc).__name__, str(exc)
        finally:
            await client.aclose()
        await worker.close()
        return None

    if side == "async":
        return asyncio.run(make_async())
    client = redis.Redis(host="127.0.0.1", port=1)
    try:
        lockworker.Worker(client, namespace=namespace, handle_signals=False, **options).close()
    except (InvalidConfig, InvalidHook) as exc:
        return type(exc).__name__, str(exc)
    finally:
        client.close()
    return None


INVALID: list[dict[str, Any]] = [
    {"lock_timeout": 0.001},
    {"lock_timeout": float("nan")},
    {"lock_timeout": "10"},
    {"lock_timeout": True},
    {"max_attempts": 0},
    {"max_attempts": 2.5},
    {"retention": 5.0},
    {"retention": -1},
    {"retry_delay": -0.5},
    {"backup_delay": float("inf")},
    {"role": "leader"},
    {"role": True},
    {"namespace": ""},
    {"namespace": 7},
    {"namespace": "x" * 10_000},
    {"owner": " "},
    {"owner": "\ud800"},
    {"on_locked": 5},
    {"on_gave_up": "not a function"},
]


@pytest.mark.parametrize("options", INVALID, ids=[repr(o)[:40] for o in INVALID])
def test_invalid_settings_are_refused_with_the_same_message_on_both_sides(
    options: dict[str, Any],
) -> None:
    sync = refusal("sync", options)
    assert sync is not None
    assert refusal("async", options) == sync


VALUES = st.one_of(
    st.sampled_from([0, 0.05, 0.1, 1, 10, 10.0, 86400, -1, True, None, "1", float("nan"),
                     float("inf")]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.integers(min_value=-2, max_value=10**7),
)
OPTIONS = st.fixed_dictionaries(
    {},
    optional={
        "lock_timeout": VALUES,
        "max_attempts": VALUES,
        "retention": VALUES,
        "retry_delay": VALUES,
        "backup_delay": VALUES,
        "role": st.sampled_from(["primary", "backup", "Backup", "", 1, None]),
        "namespace": st.text(max_size=3),
        "owner": st.one_of(st.none(), st.text(max_size=3)),
    },
)


@settings(max_examples=150, deadline=None)
@given(options=OPTIONS)
def test_generated_settings_are_accepted_or_refused_alike(options: dict[str, Any]) -> None:
    assert refusal("async", options) == refusal("sync", options)


def test_the_asyncio_worker_refuses_what_it_does_not_support() -> None:
    async def refused(client: Any, **options: Any) -> str:
        with pytest.raises(InvalidConfig) as exc:
            AsyncWorker(client, namespace="ns", on_acquired=_ok, **options)
        return str(exc.value)

    async def scenario() -> None:
        client = redis.asyncio.Redis(host="127.0.0.1", port=1)
        # each names the argument, the value, and what to use instead
        assert await refused(client, protocol="txn") == (
            "lockworker.aio supports protocol='script' only (for 'txn' use "
            "lockworker.Worker), got protocol='txn'"
        )
        assert await refused(client, durability="replicated") == (
            "lockworker.aio supports durability='local' only (for 'replicated' use "
            "lockworker.Worker), got durability='replicated'"
        )
        with pytest.raises(InvalidConfig) as leader:
            aio.Leader(client, name="n", on_acquired=_ok, durability="replicated")
        assert str(leader.value) == (
            "lockworker.aio supports durability='local' only (for 'replicated' use "
            "lockworker.Leader), got durability='replicated'"
        )
        sync_client = redis.Redis(host="127.0.0.1", port=1)
        message = await refused(sync_client)
        assert message.startswith("client must be a redis.asyncio client") and (
            "for a redis.Redis client use lockworker.Worker" in message
        )
        await client.aclose()

    asyncio.run(scenario())


@pytest.mark.parametrize(
    ("source", "concurrency", "named"),
    [([], 0, "concurrency"), ([], True, "concurrency"), ([], "4", "concurrency"),
     (5, 1, "source"), ([("only-id",)], 1, "source")],
)
def test_serve_refuses_a_bad_concurrency_or_source_with_the_same_message_on_both_sides(
    redis_server: RedisServer, namespace: str, source: Any, concurrency: Any, named: str
) -> None:
    async def scenario(env: Env) -> list[str]:
        messages = []
        for side in SIDES:
            with pytest.raises(InvalidConfig) as exc:
                await Contender(env, side).serve(source, concurrency=concurrency)
            messages.append(str(exc.value))
        return messages

    sync, async_ = play(redis_server, namespace, scenario)
    assert named in sync
    assert async_ == sync


# -- mixed holders: threads, tasks and processes of both sides on the same jobs ---------


@pytest.mark.processes
def test_sync_and_async_holders_in_threads_tasks_and_processes_never_overlap(
    redis_server: RedisServer, namespace: str
) -> None:
    """Two sync Workers in threads, two aio Workers in tasks, and one process of each
    side process the same jobs (``fail-*`` ones fail their first attempt). Across the
    whole history: no two holders of a job overlap, its tokens only grow, and it ends
    DONE exactly once."""
    jobs = [f"{'fail' if i % 2 == 0 else 'ok'}-{i}" for i in range(8)]
    key = f"{namespace}:events"

    async def scenario(env: Env) -> list[dict[str, Any]]:
        children = {
            f"proc-{side}": subprocess.Popen(
                [sys.executable, PROC, redis_server.url, namespace, f"proc-{side}", side,
                 *(jobs if side == "sync" else jobs[::-1])],
                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
            )
            for side in SIDES
        }
        try:
            await until(lambda: len(env.client.lrange(key, 0, -1)) == 2, timeout=20)

            def contender(owner: str, side: str) -> Contender:
                async def work(job: Job) -> None:
                    await env.aclient.rpush(key, record(owner, "enter", job))
                    await asyncio.sleep(0.02)  # the work
                    failing = should_fail(job)
                    await env.aclient.rpush(key, record(owner, "exit", job, ok=not failing))
                    if failing:
                        raise RuntimeError("first attempt fails on purpose")

                return Contender(
                    env, side, work, owner=owner, lock_timeout=LOCK_TIMEOUT,
                    retry_delay=RETRY_DELAY,
                )

            async def run_all(c: Contender, order: list[str]) -> None:
                for job_id in order:
                    outcome = await c.process(job_id)
                    await env.aclient.rpush(
                        key, record(c.owner, "outcome", job=job_id, outcome=outcome.value)
                    )

            local = [contender(f"{side}-{n}", side) for n in range(2) for side in SIDES]
            env.client.set(f"{namespace}:go", 1)
            await asyncio.gather(
                *(run_all(c, jobs if n % 2 else jobs[::-1]) for n, c in enumerate(local))
            )
            for owner, child in children.items():
                _, err = await asyncio.to_thread(child.communicate, timeout=20)
                assert child.returncode == 0, f"{owner}: {err.decode()}"
            statuses = [(await local[0].inspect(j)).status for j in jobs]
            assert statuses == [JobStatus.DONE] * len(jobs)
        finally:
            for child in children.values():
                if child.poll() is None:
                    child.kill()
                    child.wait(10)
        return [json.loads(item) for item in env.client.lrange(key, 0, -1)]

    history = play(redis_server, namespace, scenario)
    owners = {e["owner"] for e in history if e["event"] == "outcome"}
    assert len(owners) == 6
    for job_id in jobs:
        enters = sorted(
            (e for e in history if e["event"] == "enter" and e["job"] == job_id),
            key=lambda e: e["t"],
        )
        exits = {
            (e["owner"], e["token"]): e
            for e in history if e["event"] == "exit" and e["job"] == job_id
        }
        assert len(exits) == len(enters)
        spans = [(e, exits[e["owner"], e["token"]]) for e in enters]
        for (_, before_exit), (after_enter, _) in itertools.pairwise(spans):
            assert before_exit["t"] <= after_enter["t"], (job_id, spans)
        tokens = [e["token"] for e in enters]
        assert tokens == sorted(set(tokens)), (job_id, tokens)
        finished = [x for _, x in spans if x["ok"]]
        assert len(finished) == 1, (job_id, spans)
        assert [e["attempt"] for e in enters] == ([1, 2] if job_id.startswith("fail") else [1])
        outcomes = sorted(
            (e["outcome"], e["owner"])
            for e in history if e["event"] == "outcome" and e["job"] == job_id
        )
        assert len(outcomes) == 6
        assert [o for o, _ in outcomes] == ["done"] + ["done_elsewhere"] * 5
        assert outcomes[0][1] == finished[0]["owner"]


# -- cancellation and a hook that outlives its lease -------------------------------------


@pytest.mark.parametrize("waiter_side", SIDES)
def test_cancelling_a_running_hook_releases_the_lease_at_once_and_refunds_the_attempt(
    redis_server: RedisServer, namespace: str, waiter_side: str
) -> None:
    async def scenario(env: Env) -> None:
        async def forever(job: Job) -> None:
            await asyncio.Event().wait()

        a = Contender(env, "async", forever, lock_timeout=10.0)
        b = Contender(env, waiter_side, lock_timeout=10.0)
        ta, tb, cancelled_at = await held_and_awaited(a, b)
        ta.cancel()
        with pytest.raises(asyncio.CancelledError):
            await ta
        assert (await a.inspect("job")).holder != a.owner  # released before it ended
        assert await tb is Outcome.DONE
        (first,), (second,) = a.of("acquired"), b.of("acquired")
        assert second.t - cancelled_at < 10.0 / 2
        assert (first.attempt, second.attempt) == (1, 1)
        assert second.token > first.token
        assert (a.errors, a.of("lost")) == ([], [])

    play(redis_server, namespace, scenario)


def test_a_hook_blocking_the_loop_past_its_lease_gets_on_lost_and_the_next_holder_a_larger_token(
    redis_server: RedisServer, namespace: str
) -> None:
    """The hook blocks the event loop, so no renewal runs; a sync worker in another
    thread takes the job over when the lease ends. When the loop runs again the
    heartbeat finds the lease ended and calls the async ``on_lost`` while the hook still
    runs; the completion is then refused and the job ends DONE_ELSEWHERE."""
    entered = threading.Event()
    taken_over = threading.Event()
    taken: list[tuple[int, int]] = []

    def take(job: Job) -> None:
        taken.append((job.attempt, job.token))
        taken_over.set()

    async def scenario(env: Env) -> None:
        async def block(job: Job) -> None:
            entered.set()
            assert taken_over.wait(10)  # the event loop is blocked meanwhile
            await until(lambda: a.of("lost"))  # called while this hook still runs

        a = Contender(env, "async", block, lock_timeout=1.0)
        b = lockworker.Worker(
            env.client, namespace=namespace, lock_timeout=1.0, handle_signals=False,
            on_acquired=take,
        )
        thread, box = in_thread(lambda: entered.wait(10) and b.process("job"))
        try:
            assert await a.process("job") is Outcome.DONE_ELSEWHERE
        finally:
            thread.join(10)
            b.close()
        assert box == {"result": Outcome.DONE}
        (first,) = a.of("acquired")
        assert len(a.of("lost")) == 1
        assert a.errors == []
        ((attempt, token),) = taken
        assert (first.attempt, attempt) == (1, 2)
        assert token > first.token

    play(redis_server, namespace, scenario)


# -- serve ---------------------------------------------------------------------------------


async def numbered(n: int) -> AsyncIterator[tuple[str, dict[str, int]]]:
    for i in range(n):
        yield f"job-{i}", {"n": i}


@pytest.mark.parametrize(
    ("side", "source"), [("async", "async generator"), ("async", "list"), ("sync", "list")]
)
def test_serve_runs_every_job_once_at_most_concurrency_at_a_time(
    redis_server: RedisServer, namespace: str, side: str, source: str
) -> None:
    """100 jobs, concurrency 8: the first eight hooks wait until eight run at once (so
    a smaller bound fails), and no more than eight ever do."""

    async def scenario(env: Env) -> None:
        active = 0
        most = 0
        entered = 0
        payloads: dict[str, int] = {}

        async def work(job: Job) -> None:
            nonlocal active, most, entered
            active += 1
            entered += 1
            most = max(most, active)
            if entered <= 8:
                await until(lambda: most == 8)
            else:
                await asyncio.sleep(0)
            payloads[job.id] = job.payload["n"]
            active -= 1

        worker = Contender(env, side, work)
        jobs = numbered(100) if source == "async generator" else [
            (f"job-{i}", {"n": i}) for i in range(100)
        ]
        await worker.serve(jobs, concurrency=8)
        assert len(worker.of("acquired")) == 100
        assert payloads == {f"job-{i}": i for i in range(100)}
        assert most == 8
        statuses = await asyncio.gather(*(worker.inspect(f"job-{i}") for i in range(100)))
        assert {s.status for s in statuses} == {JobStatus.DONE}

    play(redis_server, namespace, scenario)


@pytest.mark.parametrize("side", SIDES)
def test_serve_parks_a_job_held_elsewhere_and_its_slot_serves_the_next(
    redis_server: RedisServer, namespace: str, side: str
) -> None:
    """One slot, and the held job came first: "new" runs only if "held" gave its slot
    back; the holder's release (not its 30 s lease) ends the wait."""

    async def scenario(env: Env) -> None:
        protocol = ScriptProtocol(env.client)
        keys = JobKeys.of(namespace, "held")
        g = grant(protocol, keys, "alive", lease_ms=30_000)
        ran: list[str] = []

        async def work(job: Job) -> None:
            ran.append(job.id)

        worker = Contender(env, side, work)
        serving = task(worker.serve([("held", None), ("new", None)], concurrency=1))
        await until(lambda: ran == ["new"])
        released_at = time.monotonic()
        protocol.release(keys, held(g, "alive"), RETENTION)
        await asyncio.wait_for(serving, 10)
        assert ran == ["new", "held"]
        assert time.monotonic() - released_at < 5.0
        seen = await worker.inspect("held")
        assert (seen.status, seen.owner) == (JobStatus.DONE, worker.owner)

    play(redis_server, namespace, scenario)


@pytest.mark.parametrize("waiter_side", SIDES)
def test_cancelling_serve_while_it_reads_its_source_releases_its_running_jobs_at_once(
    redis_server: RedisServer, namespace: str, waiter_side: str
) -> None:
    async def scenario(env: Env) -> None:
        more = asyncio.Event()

        async def source() -> AsyncIterator[tuple[str, None]]:
            yield "job", None
            await more.wait()  # no more jobs for now: serve waits on its source

        async def forever(job: Job) -> None:
            await asyncio.Event().wait()

        server = Contender(env, "async", forever)
        waiter = Contender(env, waiter_side)
        serving = task(server.serve(source(), concurrency=2))
        await until(lambda: server.of("acquired"))
        waiting = task(waiter.process("job"))
        await until(lambda: waiter.of("locked"))
        cancelled_at = time.monotonic()
        serving.cancel()
        with pytest.raises(asyncio.CancelledError):
            await asyncio.wait_for(serving, 5)
        assert await waiting is Outcome.DONE
        (first,), (second,) = server.of("acquired"), waiter.of("acquired")
        assert second.t - cancelled_at < 10.0 / 2  # released, not left to run out
        assert (first.attempt, second.attempt) == (1, 1)
        assert second.token > first.token

    play(redis_server, namespace, scenario)


class WaitingSource:
    """A sync source (so read in a thread): one job, then it waits for its stop flag."""

    def __init__(self) -> None:
        self.closed = threading.Event()

    def deliveries(self, stop: threading.Event) -> Iterator[Delivery]:
        try:
            yield Delivery("job", None)
            stop.wait()
        finally:
            self.closed.set()


def test_cancelling_serve_stops_and_closes_a_sync_source_read_in_a_thread(
    redis_server: RedisServer, namespace: str
) -> None:
    """The cancellation ends serve (CancelledError, not the source's "generator already
    executing"), and the reader thread is stopped, not left waiting on the source."""

    async def scenario(env: Env) -> None:
        source = WaitingSource()
        server = Contender(env, "async")
        serving = task(server.serve(source, concurrency=1))
        await until(lambda: server.of("acquired"))
        serving.cancel()
        with pytest.raises(asyncio.CancelledError):
            await asyncio.wait_for(serving, 5)
        assert source.closed.is_set()
        assert not server.worker.stopping  # only that serving ended
        assert (await server.inspect("job")).status is JobStatus.DONE

    play(redis_server, namespace, scenario)


def test_serve_reads_a_stream_source_and_saves_its_position_past_resolved_jobs(
    redis_server: RedisServer, namespace: str
) -> None:
    async def scenario(env: Env) -> None:
        stream = f"{namespace}-jobs"
        ids = [lockworker.submit(env.client, stream, f"job-{i}", {"n": i}) for i in range(20)]
        worker = Contender(env, "async")
        source = StreamSource(env.client, stream, owner=worker.owner, block=0.05)
        serving = task(worker.serve(source, concurrency=4))
        await until(lambda: source.position() == ids[-1])
        assert len(worker.of("acquired")) == 20
        statuses = await asyncio.gather(*(worker.inspect(f"job-{i}") for i in range(20)))
        assert {s.status for s in statuses} == {JobStatus.DONE}
        assert not serving.done()  # a stream has no end: serving waits for more
        worker.stop()
        await asyncio.wait_for(serving, 5)

    play(redis_server, namespace, scenario)


def test_stop_ends_serve_while_its_async_source_waits_for_the_next_item(
    redis_server: RedisServer, namespace: str
) -> None:
    """An idle async source (a queue nobody feeds) does not keep serve alive past stop."""

    async def scenario(env: Env) -> None:
        idle = asyncio.Event()
        closed: list[bool] = []

        async def source() -> AsyncIterator[tuple[str, None]]:
            try:
                yield "job", None
                await idle.wait()  # never set: the source has nothing more for now
            finally:
                closed.append(True)

        server = Contender(env, "async")
        serving = task(server.serve(source(), concurrency=2))
        await until(lambda: server.of("acquired"))
        server.stop()
        await asyncio.wait_for(serving, 5)  # returns: stopped, not cancelled
        assert closed == [True]
        assert (await server.inspect("job")).status is JobStatus.DONE

    play(redis_server, namespace, scenario)


def test_a_blocking_sync_generator_is_read_off_the_event_loop(
    redis_server: RedisServer, namespace: str
) -> None:
    """The generator blocks until a task of the loop lets it go on: read on the loop,
    it would block that task for ever (its wait times out); read in a thread, it is
    released at once."""
    released = threading.Event()
    waited: list[bool] = []

    def jobs() -> Iterator[tuple[str, int]]:
        waited.append(released.wait(5.0))
        yield from ((f"job-{i}", i) for i in range(3))

    async def scenario(env: Env) -> None:
        async def release() -> None:
            released.set()

        server = Contender(env, "async")
        releasing = task(release())
        await asyncio.wait_for(server.serve(jobs(), concurrency=2), 10)
        await releasing
        assert len(server.of("acquired")) == 3

    play(redis_server, namespace, scenario)
    assert waited == [True]


class LateReplies(redis.asyncio.Redis):
    """A client whose next reply to a chosen script is held back until cancelled: the
    server applied the step, the caller never learns it (a reply lost in flight)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.hold: tuple[str, str] | None = None  # a script's (sha, source)
        self.held = asyncio.Event()

    async def execute_command(self, *args: Any, **options: Any) -> Any:
        reply = await super().execute_command(*args, **options)
        if self.hold is not None and args[0] in ("EVALSHA", "EVAL") and args[1] in self.hold:
            self.hold = None
            self.held.set()
            await asyncio.Event().wait()  # until cancelled
        return reply


@pytest.mark.parametrize("step", ["acquire", "complete"])
def test_a_cancellation_while_a_step_reply_is_in_flight_leaves_no_lease_behind(
    redis_server: RedisServer, namespace: str, step: str
) -> None:
    """acquire: the grant landed unread; the run asks again (re-entering its own lease)
    and hands it back, attempt refunded. complete: the step is shielded and lands (DONE)."""
    from lockworker.protocol import script

    async def scenario() -> Any:
        client = LateReplies(host="127.0.0.1", port=redis_server.port)
        lua = script._ACQUIRE if step == "acquire" else script._SETTLE
        client.hold = (lua.sha, lua.source)
        worker = AsyncWorker(client, namespace=namespace, on_acquired=nothing,
                             handle_signals=False, lock_timeout=30.0)
        running = asyncio.ensure_future(worker.process("job"))
        await asyncio.wait_for(client.held.wait(), 5)
        running.cancel()
        with pytest.raises(asyncio.CancelledError):
            await running
        seen = await worker.inspect("job")
        await worker.close()
        await client.aclose()
        return seen

    seen = asyncio.run(scenario())
    assert seen.holder is None  # no lease left to run out (30 s)
    if step == "acquire":
        assert (seen.status, seen.attempt) == (JobStatus.PENDING, 0)  # refunded
    else:
        assert (seen.status, seen.attempt) == (JobStatus.DONE, 1)


def test_a_cancellation_in_on_failed_still_settles_the_failed_attempt(
    redis_server: RedisServer, namespace: str
) -> None:
    async def scenario() -> Any:
        client = redis.asyncio.Redis(host="127.0.0.1", port=redis_server.port)
        in_hook = asyncio.Event()

        async def fail(job: Job) -> None:
            raise RuntimeError("boom")

        async def on_failed(job: Job, exc: BaseException) -> None:
            in_hook.set()
            await asyncio.Event().wait()  # until cancelled

        worker = AsyncWorker(client, namespace=namespace, on_acquired=fail,
                             on_failed=on_failed, handle_signals=False, lock_timeout=30.0)
        running = asyncio.ensure_future(worker.process("job"))
        await asyncio.wait_for(in_hook.wait(), 5)
        running.cancel()
        with pytest.raises(asyncio.CancelledError):
            await running
        seen = await worker.inspect("job")
        await worker.close()
        await client.aclose()
        return seen

    seen = asyncio.run(scenario())
    assert seen.holder is None
    assert (seen.status, seen.attempt) == (JobStatus.PENDING, 1)  # the failure counts
