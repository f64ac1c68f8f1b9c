"""Value encoding, key names and the worker's pure decisions."""

from __future__ import annotations

import json

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from lockworker.errors import InvalidConfig
from lockworker.model import policy
from lockworker.model.codec import (
    LockValue,
    StateValue,
    check_payload,
    decode_lock,
    decode_state,
    payload_view,
)
from lockworker.model.keys import JobKeys, Space, parse_state_key, state_pattern
from lockworker.model.state import JobStatus, Snapshot
from lockworker.serving.delivery import job_of


@pytest.mark.parametrize("owner", ["a", "host:12:ab", "with|pipes|inside", "ü", "", "new\nline"])
def test_lock_and_state_values_round_trip(owner: str) -> None:
    lock = LockValue(token=12, attempt=3, run="ab12", owner=owner)
    assert decode_lock(lock.encode()) == lock
    assert decode_lock(lock.encode().encode()) == lock
    state = StateValue(JobStatus.GAVE_UP, 3, 12, "ab12", owner)
    assert decode_state(state.encode()) == state


@pytest.mark.parametrize("token", [0, 1, 10**15, 2**53 + 1, 10**40])
def test_tokens_round_trip_exactly_at_any_size(token: int) -> None:
    assert decode_lock(LockValue(token, 1, "a", "o").encode()) == LockValue(token, 1, "a", "o")


@pytest.mark.parametrize(
    "raw",
    [
        "", "hello", "lw2|", "lw1|1|1|o", "lw2|x|1|ab|o", "lw2|1|1|o", "lw2|01|1|ab|o",
        "lw2|1|1|AB|o", "lw2|1e+15|1|ab|o", "lw2|-1|1|ab|o", "lw2|\u00b2|1|ab|o",
        "lw2|bogus|1|1|ab|x", "lw2|done|1|1|zz|x", "lw2|pending|1|01|ab|x",
    ],
)
def test_values_lockworker_did_not_write_are_recognised(raw: str) -> None:
    assert decode_lock(raw) is None
    assert decode_state(raw) is None


def test_keys_are_namespaced_and_parse_back() -> None:
    keys = JobKeys.of("digest", "2026-11-22")
    assert keys.lock == "lw:job:digest:{2026-11-22}:lock"
    assert keys.state == "lw:job:digest:{2026-11-22}:state"
    assert parse_state_key(keys.state) == ("digest", "2026-11-22")
    assert parse_state_key(keys.lock) is None
    assert parse_state_key(keys.state, Space.LOCK) is None
    assert state_pattern(Space.JOB, "a*b") == "lw:job:a\\*b:{*}:state"
    assert state_pattern(Space.JOB) == "lw:job:*:{*}:state"


def seen(pttl_ms: int | None, holder: str = "b", token: int = 1) -> Snapshot:
    return Snapshot(JobStatus.PENDING, 1, token, holder, holder=holder, pttl_ms=pttl_ms)


TIMING = policy.Timing(lock_timeout=5.0, retry_delay=0.5)


def test_a_waiter_looks_again_when_the_holders_lease_ends() -> None:
    assert policy.recheck_at(seen(1200), 100.0, TIMING) == pytest.approx(
        100.0 + 1.2 + policy.EXPIRY_MARGIN)


def test_a_lease_of_unknown_length_is_rechecked_after_a_full_lock_timeout() -> None:
    assert policy.recheck_at(seen(None), 100.0, TIMING) == 105.0


def test_a_failed_process_steps_back_for_retry_delay() -> None:
    assert policy.compete_after_failure(100.0, TIMING) == 100.5


def test_on_locked_news_is_a_new_holder_or_attempt() -> None:
    assert policy.is_news(None, seen(100))
    assert not policy.is_news(seen(100), seen(50))
    assert policy.is_news(seen(100), seen(100, holder="c"))
    assert policy.is_news(seen(100), seen(100, token=2))


_JSON_LEAVES = (
    st.none() | st.booleans() | st.integers() | st.text()
    | st.floats(allow_nan=False, allow_infinity=False)
)
_JSON_LIKE = st.recursive(
    _JSON_LEAVES,
    lambda inner: st.lists(inner) | st.lists(inner).map(tuple)
    | st.dictionaries(st.text(), inner),
    max_leaves=20,
)


@given(_JSON_LIKE)
def test_the_local_hook_sees_the_payload_every_other_process_sees(payload: object) -> None:
    """A tuple used to reach the local hook as a tuple and every other process as a
    list: the local view is now the decoded JSON, as anywhere else."""
    view = payload_view(payload)
    assert view == json.loads(check_payload(payload))
    assert payload_view(view) == view  # the view is stable: seen once, seen the same


_ANY_JSON_TEXT = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text() | st.floats(),  # NaN, inf too
    lambda inner: st.lists(inner) | st.dictionaries(st.text(), inner),
    max_leaves=20,
).map(json.dumps) | st.text()


def _strict(text: str) -> object:
    """``text`` read as strict JSON: no NaN, no infinities, no number out of range."""

    def refuse(constant: str) -> object:
        raise ValueError(constant)

    value = json.loads(text, parse_constant=refuse)
    check_payload(value)  # 1e999 reads as an infinity, which JSON cannot write
    return value


@given(_ANY_JSON_TEXT)
@example("1e999")
@example('{"a": [-Infinity]}')
@example("[NaN]")
@example('{"a": 1, "a": 2}')
def test_a_stream_entry_s_payload_is_refused_or_already_every_process_s_view(
    text: str,
) -> None:
    """``serve`` does not encode and decode a stream's payload again: what an entry's
    reader decodes must be refused as a bad entry (text that is not strict JSON: NaN
    and the infinities too) or be exactly what ``payload_view`` would make of it."""
    job = job_of({"job_id": "j", "payload": text})
    try:
        strict = _strict(text)
    except (ValueError, InvalidConfig):
        assert job is None
        return
    assert job is not None and job[1] == strict
    assert payload_view(job[1]) == job[1]


@pytest.mark.parametrize(
    "payload", [{1: "a"}, {"outer": [{2.5: "x"}]}, ({(1, 2): "t"},), {True: 1}]
)
def test_a_payload_with_keys_json_would_rename_is_refused(payload: object) -> None:
    """``{1: "a"}`` would arrive elsewhere as ``{"1": "a"}``: refused, naming the key."""
    with pytest.raises(InvalidConfig, match="payload dict keys must be strings"):
        payload_view(payload)
