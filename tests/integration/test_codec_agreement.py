"""The Lua and Python parsers of the value format agree on every value, hostile ones too.

The scripts parse lock and state values with :data:`lockworker.model.codec.LUA_PROLOGUE`, the
Python side with :func:`decode_lock`/:func:`decode_state`. Both are fed the same values
on the real server; they must accept the same ones and read the same fields.
"""

from __future__ import annotations

import redis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lockworker.model.codec import LUA_PROLOGUE, LockValue, StateValue, decode_lock, decode_state
from lockworker.model.history import record_tail
from lockworker.model.state import JobStatus
from lockworker.protocol.lua import HISTORY

PARSE = LUA_PROLOGUE + """
local l = lw_lock(ARGV[1])
local s = lw_state(ARGV[1])
local out = {}
if l then out[1] = {l.token, l.attempt, l.run, l.owner} else out[1] = false end
if s then out[2] = {s.status, s.attempt, s.token, s.run, s.owner, s.took or ''}
else out[2] = false end
return out
"""

ROUND_TRIP = LUA_PROLOGUE + """
local s = lw_state(ARGV[1])
return lw_state_value(s.status, s.attempt, lw_incr(s.token), s.run, s.owner)
"""

NUMBERS = st.one_of(
    st.integers(min_value=0, max_value=10**40).map(str),
    st.sampled_from(["", "01", "00", "-1", "1e+15", "1.5", "\u00b2", " 1", "1 ", "9" * 30]),
)
RUNS = st.one_of(
    st.text("0123456789abcdef", max_size=32), st.sampled_from(["AB", "zz", "a-b"])
)
OWNERS = st.text(max_size=20)
STATUSES = st.sampled_from(["pending", "done", "gave_up", "bogus", "DONE", "", "pending "])
LOCKS = st.builds(
    lambda t, a, r, o: f"lw2|{t}|{a}|{r}|{o}", NUMBERS, NUMBERS, RUNS, OWNERS
)
STATES = st.builds(
    lambda s, a, t, r, o: f"lw2|{s}|{a}|{t}|{r}|{o}", STATUSES, NUMBERS, NUMBERS, RUNS, OWNERS
)
VALUES = st.one_of(LOCKS, STATES, st.text(max_size=30), st.just("lw1|1|1|owner"))


SETTINGS = settings(
    max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)


def as_text(raw: object) -> str:
    return raw.decode("utf-8", "surrogateescape") if isinstance(raw, bytes) else str(raw)


def lua_view(client: redis.Redis, value: str) -> tuple[object, object]:
    lock, state = client.eval(PARSE, 0, value)  # type: ignore[misc]
    fields = [[as_text(f) for f in part] if part else None for part in (lock, state)]
    return fields[0], fields[1]


@SETTINGS
@given(VALUES)
def test_lua_and_python_accept_the_same_values_and_read_the_same_fields(
    redis_client: redis.Redis, value: str
) -> None:
    lua_lock, lua_state = lua_view(redis_client, value)
    lock, state = decode_lock(value), decode_state(value)
    assert (lua_lock is None) == (lock is None), value
    assert (lua_state is None) == (state is None), value
    if lock is not None:
        assert lua_lock == [str(lock.token), str(lock.attempt), lock.run, lock.owner]
    if state is not None:
        took = "" if state.took_ms is None else value.split("|")[4][16:]
        assert lua_state == [
            state.status.value, str(state.attempt), str(state.token), state.run, state.owner,
            took,
        ]
        assert (state.took_ms is None) or int(took, 16) == state.took_ms


OWNER_TAIL = HISTORY + "return lw_owner_tail(ARGV[1])"


@SETTINGS
@given(st.text(max_size=40) | st.sampled_from(['"', "\\", "\n\t\x00\x1f\x7f", "\u2028/é"]))
def test_lua_writes_a_folded_records_owner_as_python_does(
    redis_client: redis.Redis, owner: str
) -> None:
    """A reset writes a DONE state's folded attempt back to the history with the owner
    JSON the Lua side makes: byte for byte what Python's ``record_tail`` makes."""
    written = redis_client.eval(OWNER_TAIL, 0, owner)  # type: ignore[misc]
    assert as_text(written) == record_tail(owner)


@SETTINGS
@given(st.integers(0, 16**12 - 1))
def test_a_folded_duration_reads_back_exactly(redis_client: redis.Redis, took: int) -> None:
    value = StateValue(JobStatus.DONE, 1, 1_795_000_000_000_123, "ab" * 8, "o", took_ms=took)
    state = decode_state(value.encode())
    assert state == value and state.folded() == (1_795_000_000_000, 1_795_000_000_000 + took)
    _, lua = lua_view(redis_client, value.encode())
    assert lua is not None and int(str(lua[5]), 16) == took


@SETTINGS
@given(st.integers(min_value=0, max_value=10**40))
def test_lua_increments_tokens_exactly_at_any_size(redis_client: redis.Redis, token: int) -> None:
    value = StateValue(JobStatus.PENDING, 1, token, "ab", "o").encode()
    written = redis_client.eval(ROUND_TRIP, 0, value)  # type: ignore[misc]
    assert decode_state(as_text(written)) == StateValue(JobStatus.PENDING, 1, token + 1, "ab", "o")


def test_ten_to_the_fifteenth_is_written_back_as_digits(redis_client: redis.Redis) -> None:
    value = StateValue(JobStatus.PENDING, 1, 10**15, "ab", "o").encode()
    written = redis_client.eval(ROUND_TRIP, 0, value)  # type: ignore[misc]
    assert as_text(written) == "lw2|pending|1|1000000000000001|ab|o"
    assert decode_lock(LockValue(10**15, 1, "ab", "o").encode()) is not None
