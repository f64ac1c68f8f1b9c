"""lockworker.aio.Leader against a real server, beside sync leaders of the same name."""

from __future__ import annotations

import asyncio
import itertools
import threading
import time
from typing import Any

import pytest
import redis
import redis.asyncio as aredis
from helpers import wait_for

from lockworker import InvalidConfig, Leader, LockworkerError, Term, aio
from lockworker.testing.server import RedisServer

History = list[tuple[str, int, float, float]]
"""(who, token, entered, left) of every term, on this process's monotonic clock."""


def overlapping(history: History) -> list[tuple[Any, Any]]:
    ordered = sorted(history, key=lambda h: h[2])
    return [(a, b) for a, b in itertools.pairwise(ordered) if b[2] < a[3]]


def test_sync_and_async_leaders_elect_one_leader_at_a_time(
    redis_server: RedisServer, namespace: str
) -> None:
    history: History = []
    mutex = threading.Lock()
    wanted = 16

    def record(who: str, token: int, entered: float) -> None:
        with mutex:
            history.append((who, token, entered, time.monotonic()))

    def sync_lead(who: str) -> Any:
        def lead(term: Term) -> None:
            entered = time.monotonic()
            term.wait(0.02)
            record(who, term.token, entered)
        return lead

    def async_lead(who: str) -> Any:
        async def lead(term: aio.AsyncTerm) -> None:
            entered = time.monotonic()
            await term.wait(0.02)
            record(who, term.token, entered)
        return lead

    sync_leaders = [
        Leader(redis_server.client(), name=namespace, on_acquired=sync_lead(f"sync-{i}"),
               handle_signals=False, lock_timeout=2.0)
        for i in range(2)
    ]
    threads = [threading.Thread(target=leader.run, daemon=True) for leader in sync_leaders]
    for thread in threads:
        thread.start()

    async def scenario() -> None:
        client = aredis.Redis(host="127.0.0.1", port=redis_server.port)
        leaders = [
            aio.Leader(client, name=namespace, on_acquired=async_lead(f"async-{i}"),
                       handle_signals=False, lock_timeout=2.0)
            for i in range(2)
        ]
        tasks = [asyncio.create_task(leader.run()) for leader in leaders]
        while len(history) < wanted:
            await asyncio.sleep(0.01)
        for leader in leaders:
            leader.stop()
        await asyncio.wait_for(asyncio.gather(*tasks), 10)
        await client.aclose()

    try:
        asyncio.run(scenario())
    finally:
        for leader in sync_leaders:
            leader.stop()
        for thread in threads:
            thread.join(10)
    assert not overlapping(history)
    tokens = [h[1] for h in sorted(history, key=lambda h: h[2])]
    assert tokens == sorted(tokens) and len(set(tokens)) == len(tokens)
    kinds = {who.split("-")[0] for who, *_ in history}
    assert kinds == {"sync", "async"}


def test_cancelling_a_leading_task_resigns_at_once(
    redis_server: RedisServer, namespace: str
) -> None:
    """The term is released, not left to run out: a sync follower leads long before the
    10 s lease would have ended, with a larger token."""
    follower_terms: list[tuple[int, float]] = []
    follower = Leader(
        redis_server.client(), name=namespace, handle_signals=False, lock_timeout=10.0,
        role="backup", backup_delay=0.0,
        on_acquired=lambda term: (follower_terms.append((term.token, time.monotonic())),
                                  term.wait(30)),
    )
    thread: threading.Thread | None = None

    async def scenario() -> tuple[int, float]:
        nonlocal thread
        client = aredis.Redis(host="127.0.0.1", port=redis_server.port)
        leading = asyncio.Event()
        tokens: list[int] = []

        async def lead(term: aio.AsyncTerm) -> None:
            tokens.append(term.token)
            leading.set()
            await asyncio.sleep(60)

        leader = aio.Leader(client, name=namespace, on_acquired=lead,
                            handle_signals=False, lock_timeout=10.0)
        task = asyncio.create_task(leader.run())
        await asyncio.wait_for(leading.wait(), 10)
        thread = threading.Thread(target=follower.run, daemon=True)
        thread.start()
        cancelled_at = time.monotonic()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await client.aclose()
        return tokens[0], cancelled_at

    token, cancelled_at = asyncio.run(scenario())
    try:
        wait_for(lambda: follower_terms, timeout=5.0)
        new_token, led_at = follower_terms[0]
        assert new_token > token
        assert led_at - cancelled_at < 5.0  # well before the 10 s lease would end
    finally:
        follower.stop()
        assert thread is not None
        thread.join(10)


def test_stop_from_another_thread_ends_the_term_and_the_run(
    redis_server: RedisServer, namespace: str
) -> None:
    seen: list[bool] = []

    async def scenario() -> None:
        client = aredis.Redis(host="127.0.0.1", port=redis_server.port)

        async def lead(term: aio.AsyncTerm) -> None:
            seen.append(await term.wait(30))  # True: over because stopping
            seen.append(term.stopping)

        leader = aio.Leader(client, name=namespace, on_acquired=lead, handle_signals=False)
        task = asyncio.create_task(leader.run())
        info = None
        while info is None:
            info = await aio.Leader.current(client, namespace)
            await asyncio.sleep(0.01)
        assert info.holder == leader.owner
        threading.Thread(target=leader.stop).start()
        await asyncio.wait_for(task, 10)
        assert await aio.Leader.current(client, namespace) is None  # resigned
        await client.aclose()

    asyncio.run(scenario())
    assert seen == [True, True]


@pytest.mark.parametrize(
    "kwargs",
    [
        {"lock_timeout": 0.01}, {"lock_timeout": float("nan")}, {"role": "leader"},
        {"backup_delay": -1}, {"owner": ""}, {"name": ""}, {"on_acquired": 3},
    ],
)
def test_bad_arguments_are_refused_alike_on_both_sides(kwargs: dict[str, Any]) -> None:
    args = {"name": "n", "on_acquired": lambda term: None, **kwargs}

    def refusal(build: Any) -> str:
        with pytest.raises(LockworkerError) as caught:
            build()
        return f"{type(caught.value).__name__}: {caught.value}"

    sync_message = refusal(lambda: Leader(redis.Redis(), **args))

    async def build_async() -> str:
        client = aredis.Redis()
        try:
            return refusal(lambda: aio.Leader(client, **args))
        finally:
            await client.aclose()

    assert asyncio.run(build_async()) == sync_message


def test_a_sync_client_is_refused_by_the_asyncio_leader() -> None:
    with pytest.raises(InvalidConfig, match=r"redis\.asyncio"):
        aio.Leader(redis.Redis(), name="n", on_acquired=lambda term: None)


def test_a_plain_on_acquired_override_leads_without_being_awaited(
    redis_server: RedisServer, namespace: str
) -> None:
    terms: list[int] = []

    class Plain(aio.Leader):
        def on_acquired(self, term: aio.AsyncTerm) -> None:  # type: ignore[override]
            terms.append(term.token)
            self.stop()

    async def scenario() -> None:
        client = aredis.Redis(host="127.0.0.1", port=redis_server.port)
        await asyncio.wait_for(
            Plain(client, name=namespace, handle_signals=False).run(), 10
        )
        await client.aclose()

    asyncio.run(scenario())
    assert len(terms) == 1


def test_a_cancellation_while_the_election_reply_is_in_flight_leaves_no_term_behind(
    redis_server: RedisServer, namespace: str
) -> None:
    from lockworker.protocol import script

    class LateReply(aredis.Redis):
        """Holds back the first acquire reply until cancelled (the server elected us;
        we never learn it)."""

        held = asyncio.Event()
        waiting = True

        async def execute_command(self, *args: Any, **options: Any) -> Any:
            reply = await super().execute_command(*args, **options)
            lua = script._ACQUIRE
            if self.waiting and args[0] in ("EVALSHA", "EVAL") and args[1] in (
                lua.sha, lua.source,
            ):
                self.waiting = False
                self.held.set()
                await asyncio.Event().wait()
            return reply

    async def scenario() -> Any:
        client = LateReply(host="127.0.0.1", port=redis_server.port)
        leader = aio.Leader(client, name=namespace, on_acquired=lambda term: None,
                            handle_signals=False, lock_timeout=30.0)
        running = asyncio.ensure_future(leader.run())
        await asyncio.wait_for(client.held.wait(), 5)
        running.cancel()
        with pytest.raises(asyncio.CancelledError):
            await running
        info = await aio.Leader.current(client, namespace)
        await client.aclose()
        return info

    assert asyncio.run(scenario()) is None  # resigned, not left leading for 30 s
