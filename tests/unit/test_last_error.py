"""``lockworker status``'s LAST ERROR cell: read from a job's last history values without
decoding the JSON of the attempt running now, and the same as reading every record."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from lockworker.cli.history import last_error
from lockworker.model.history import AttemptEnd, read_history

_ENDINGS = st.sampled_from(["", *(e.value for e in AttemptEnd)])
_TAILS = st.sampled_from([
    '{"owner":"a"}',
    '{"owner":"b","error_type":"ValueError","error":"bad row"}',
    '{"owner":"c","error_type":"KeyError"}',
    "{not json",
    "[1]",
])


@st.composite
def _raw(draw: Any) -> str:
    """A history value: mostly records (open or ended, some with an error), some not."""
    if draw(st.booleans()) and draw(st.booleans()):
        return draw(st.sampled_from(["", "lw2|x", "garbage", "lw2|1|2|ab|3|4|done|"]))
    ending = draw(_ENDINGS)
    ended = str(draw(st.integers(1, 9))) if ending else ""
    token = draw(st.integers(1, 3))
    return f"lw2|{draw(st.integers(1, 3))}|{token}|ab|5|{ended}|{ending}|{draw(_TAILS)}"


def _reference(raws: list[str], live_token: int | None) -> str | None:
    """The definition: the newest ended attempt among every decoded record."""
    for record in reversed(read_history(raws, live_token)):
        if record.ending is None:
            continue
        if record.error_type is not None:
            return f"{record.error_type}: {record.error or ''}".rstrip()
        return "lease lost" if record.ending == AttemptEnd.LOST.value else None
    return None


@given(st.lists(_raw(), max_size=3), st.none() | st.integers(1, 3))
def test_the_last_error_is_the_newest_ended_attempt_s(
    raws: list[str], live_token: int | None
) -> None:
    assert last_error(raws, live_token) == _reference(raws, live_token)


def test_a_held_job_shows_the_error_of_the_attempt_before_the_running_one() -> None:
    failed = 'lw2|1|1|ab|5|6|failed|{"owner":"a","error_type":"ValueError","error":"bad row"}'
    running = 'lw2|2|2|cd|7|||{"owner":"b"}'
    assert last_error([failed, running], 2) == "ValueError: bad row"
    assert last_error([failed, running], None) == "lease lost"  # its lease is not live
