"""Steps of one script looped in one command (lockworker.protocol.many).

Every step must give, looped with any others, exactly what it gives sent alone: its
value, a nil, a table, an error reply it returns, an error it raises (a foreign value
of the wrong type), and its writes, whatever its neighbours did.
"""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pytest
import redis
import redis.asyncio as aredis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lockworker.aio import batcher as aio_batcher
from lockworker.errors import ForeignValueError
from lockworker.model.keys import JobKeys
from lockworker.protocol import batch
from lockworker.protocol.luacall import LuaScript
from lockworker.protocol.many import many
from lockworker.protocol.script import Step, acquire_step
from lockworker.testing.server import RedisServer
from tests.helpers import who

# A toy step of every reply shape a job step can give; it also writes, so a step's
# writes can be checked to land exactly once, before any error it raises.
TOY = LuaScript("""
redis.call('INCR', KEYS[2])
local mode = ARGV[1]
if mode == 'nil' then return nil end
if mode == 'false' then return false end
if mode == 'value' then return ARGV[2] end
if mode == 'int' then return tonumber(ARGV[3]) end
if mode == 'table' then return {ARGV[2], tonumber(ARGV[3]), {ARGV[2]}} end
if mode == 'error' then return redis.error_reply('LWTEST ' .. ARGV[2]) end
if mode == 'raise' then return redis.call('LPUSH', KEYS[1], 'x') end
if mode == 'status' then return redis.status_reply('FINE') end
return redis.call('GET', KEYS[3])
""")
MODES = ("nil", "false", "value", "int", "table", "error", "raise", "status", "get")
VALUES = st.text(
    st.characters(codec="utf-8", exclude_categories=["Cs"]), max_size=20
).filter(lambda s: "\x00" not in s) | st.sampled_from(["", " ", "lw2|done|1|1||x", "{", "nil"])


def toy(keys: JobKeys, mode: str, value: str, number: int) -> Step[Any]:
    return Step(TOY, keys, (mode, value, number), decode=lambda reply: reply)


def shape(result: Any) -> Any:
    """A result as compared: an error by its class and its code (the first word; a
    raised error's reply alone also names the script after its text)."""
    if isinstance(result, BaseException):
        return (type(result).__name__, str(result).split(" ")[0])
    return result


def prepare(client: redis.Redis, keys: JobKeys) -> None:
    client.set(keys.lock, "a string: LPUSH on it raises WRONGTYPE")
    client.set(keys.history, "kept")


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(st.lists(st.tuples(st.sampled_from(MODES), VALUES, st.integers(-2**40, 2**40)),
                min_size=2, max_size=30))
def test_a_looped_step_gives_and_writes_what_it_gives_and_writes_alone(
    redis_client: redis.Redis, namespace: str, calls: list[tuple[str, str, int]]
) -> None:
    run = uuid.uuid4().hex[:8]
    looped_keys = [JobKeys.of(f"{namespace}-{run}-l", f"j{i}") for i in range(len(calls))]
    alone_keys = [JobKeys.of(f"{namespace}-{run}-a", f"j{i}") for i in range(len(calls))]
    for k in looped_keys + alone_keys:
        prepare(redis_client, k)
    steps = [toy(k, *c) for k, c in zip(looped_keys, calls, strict=True)]
    assert len(batch.plan(redis_client, steps)) == 1  # one command carries them all
    looped = batch.send(redis_client, steps)
    alone = [
        batch.send(redis_client, [toy(k, *c)])[0] for k, c in zip(alone_keys, calls, strict=True)
    ]
    assert [shape(r) for r in looped] == [shape(r) for r in alone]
    for lk, ak in zip(looped_keys, alone_keys, strict=True):  # each step ran once
        assert redis_client.get(lk.state) == redis_client.get(ak.state) == "1"


def test_one_command_per_script_on_one_server(
    redis_client: redis.Redis, namespace: str
) -> None:
    """Ten acquires and five toy steps: two commands, in one round trip."""
    steps: list[Step[Any]] = [
        acquire_step(JobKeys.of(namespace, f"j{i}"), who("me"), 10_000, 3, 60_000)
        for i in range(10)
    ]
    steps += [toy(JobKeys.of(namespace, f"t{i}"), "value", "v", 1) for i in range(5)]
    calls = batch.plan(redis_client, steps)
    assert sorted(len(c.steps) for c in calls) == [5, 10]
    for call in calls:  # cached already, so no NOSCRIPT reply is counted below
        redis_client.script_load(call.script.source)
    before = redis_client.info("commandstats").get("cmdstat_evalsha", {}).get("calls", 0)
    batch.send(redis_client, steps)
    after = redis_client.info("commandstats")["cmdstat_evalsha"]["calls"]
    assert after - before == 2


def test_a_lone_step_is_not_looped() -> None:
    """(A cluster's batches: tests/topologies/test_cluster_batch.py.)"""
    steps = [toy(JobKeys.of("ns", "j0"), "value", "v", 1)]
    assert [(c.script, c.node) for c in batch.plan(object(), steps)] == [(TOY, None)]


def test_a_looped_command_after_the_script_cache_was_flushed_runs_each_step_once(
    redis_client: redis.Redis, namespace: str
) -> None:
    keys = [JobKeys.of(namespace, f"j{i}") for i in range(4)]
    redis_client.script_load(many(TOY).source)
    redis_client.script_flush()
    results = batch.send(redis_client, [toy(k, "value", str(i), i) for i, k in enumerate(keys)])
    assert results == [str(i) for i in range(4)]
    assert [redis_client.get(k.state) for k in keys] == ["1"] * 4


def test_the_asyncio_side_sends_the_same_looped_command(
    redis_server: RedisServer, redis_client: redis.Redis, namespace: str
) -> None:
    keys = [JobKeys.of(namespace, f"j{i}") for i in range(len(MODES))]
    for k in keys:
        prepare(redis_client, k)
    redis_client.script_flush()  # the asyncio side loads the looped script itself

    async def main() -> list[Any]:
        client = aredis.Redis(
            host=redis_server.connect_host, port=redis_server.port, decode_responses=True
        )
        try:
            return await aio_batcher.send(
                client, [toy(k, m, "v", 7) for k, m in zip(keys, MODES, strict=True)]
            )
        finally:
            await client.aclose()

    got = [shape(r) for r in asyncio.run(main())]
    other = [JobKeys.of(namespace + "-sync", f"j{i}") for i in range(len(MODES))]
    for k in other:
        prepare(redis_client, k)
    want = [shape(r) for r in batch.send(
        redis_client, [toy(k, m, "v", 7) for k, m in zip(other, MODES, strict=True)]
    )]
    assert got == want
    assert want[MODES.index("raise")][0] == "ForeignValueError"  # WRONGTYPE, named
    assert want[MODES.index("nil")] is None


@pytest.mark.parametrize(
    ("mode", "error"), [("raise", ForeignValueError), ("error", redis.ResponseError)]
)
def test_an_error_of_one_step_leaves_its_neighbours_alone(
    redis_client: redis.Redis, namespace: str, mode: str, error: type[Exception]
) -> None:
    keys = [JobKeys.of(namespace, f"j{i}") for i in range(3)]
    for k in keys:
        prepare(redis_client, k)
    results = batch.send(redis_client, [
        toy(keys[0], "value", "a", 1), toy(keys[1], mode, "b", 2), toy(keys[2], "value", "c", 3)
    ])
    assert results[0] == "a" and results[2] == "c"
    assert isinstance(results[1], error)
