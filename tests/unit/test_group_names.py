"""Consumer-group names: validated once (``check_name``), and each group's channel
is its own (no two names share one). Pure: no server is contacted."""

from __future__ import annotations

from typing import Any

import pytest
import redis
from hypothesis import given
from hypothesis import strategies as st

from lockworker import InvalidConfig, StreamSource
from lockworker.daemons.sources import stream_keys
from lockworker.model.keys import MAX_NAME_LENGTH
from lockworker.protocol.streams import group_channel

CLIENT = redis.Redis()  # never connected: the constructor sends nothing


def usable(name: str) -> bool:
    return bool(name.strip()) and len(name) <= MAX_NAME_LENGTH and (
        not any(0xD800 <= ord(c) <= 0xDFFF for c in name)
    )


@given(st.text(max_size=40))
def test_a_group_name_is_taken_as_given_or_refused_naming_the_argument(name: str) -> None:
    if usable(name):
        assert StreamSource(CLIENT, "jobs", owner="a", group=name).group == name
    else:
        with pytest.raises(InvalidConfig, match="group"):
            StreamSource(CLIENT, "jobs", owner="a", group=name)


@given(st.one_of(st.integers(), st.binary(), st.lists(st.text()), st.booleans()))
def test_a_group_that_is_not_a_str_is_refused(value: Any) -> None:
    with pytest.raises(InvalidConfig, match="group must be a non-empty str"):
        StreamSource(CLIENT, "jobs", owner="a", group=value)


@given(st.text(min_size=1, max_size=20), st.text(min_size=1, max_size=20))
def test_each_group_has_a_channel_of_its_own(a: str, b: str) -> None:
    keys = stream_keys("jobs")
    same = group_channel(keys, a) == group_channel(keys, b)
    assert same == (a == b)
    # in the stream's slot, and never one of the stream's keys
    assert group_channel(keys, a).startswith(keys.extra("groups:"))
    own = {keys.extra(k) for k in ("entries", "positions", "readers")}
    assert group_channel(keys, a) not in own
