"""Key names are injective over (product, namespace, name), whatever the characters."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lockworker.errors import InvalidConfig
from lockworker.model.keys import JobKeys, Space, check_name, escape, parse_state_key, unescape


def _encodable(s: str) -> bool:
    try:
        s.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


# Names built from the characters that matter to the key layout, plus any unicode.
TRICKY = st.sampled_from([":", "{", "}", "%", "%7B", "%25", "{}", ":{", "}:", "*", "?", " "])
NAMES = st.lists(
    st.one_of(TRICKY, st.text(min_size=0, max_size=8)), min_size=1, max_size=8
).map("".join).filter(lambda s: s.strip() != "")
UTF8 = NAMES.filter(_encodable)
SPACES = st.sampled_from(list(Space))
TRIPLES = st.tuples(SPACES, UTF8, UTF8)


def _all_keys(k: JobKeys) -> list[str]:
    return [k.lock, k.state, k.wake, k.extra("value")]


def hash_tag(key: str) -> str:
    """The part of ``key`` Redis Cluster hashes (its first ``{...}``, if non-empty)."""
    start = key.find("{")
    if start >= 0:
        end = key.find("}", start + 1)
        if end > start + 1:
            return key[start + 1 : end]
    return key


@settings(max_examples=400)
@given(TRIPLES, TRIPLES)
def test_distinct_names_never_share_a_key(
    first: tuple[Space, str, str], second: tuple[Space, str, str]
) -> None:
    (s1, ns1, id1), (s2, ns2, id2) = first, second
    a, b = JobKeys(ns1, id1, s1), JobKeys(ns2, id2, s2)
    if first == second:
        assert _all_keys(a) == _all_keys(b)
    else:
        assert not set(_all_keys(a)) & set(_all_keys(b))


def test_the_reported_collision_is_gone() -> None:
    assert JobKeys("N:{x", "y").state != JobKeys("N", "x:{y").state
    assert JobKeys("locks", "report", Space.JOB).lock != JobKeys("locks", "report", Space.LOCK).lock
    assert JobKeys("once", "report", Space.JOB).lock != JobKeys("once", "report", Space.ONCE).lock


@settings(max_examples=300)
@given(SPACES, UTF8, UTF8)
def test_every_key_of_a_name_shares_one_hash_tag(space: Space, ns: str, name: str) -> None:
    keys = JobKeys(ns, name, space)
    tags = {hash_tag(k) for k in _all_keys(keys)}
    assert tags == {escape(name)}


@settings(max_examples=300)
@given(SPACES, UTF8, UTF8)
def test_a_state_key_parses_back_to_its_names(space: Space, ns: str, name: str) -> None:
    # parse_state_key is a left inverse of the mapping, which proves it injective.
    keys = JobKeys(ns, name, space)
    assert parse_state_key(keys.state, space) == (ns, name)
    other = next(s for s in Space if s is not space)
    assert parse_state_key(keys.state, other) is None


@given(st.text())
def test_escape_round_trips_and_leaves_no_brace(text: str) -> None:
    escaped = escape(text)
    assert "{" not in escaped and "}" not in escaped
    assert unescape(escaped) == text


@pytest.mark.parametrize("bad", ["", "   ", "x" * 1025, "\udcff", 3, None, b"job"])
def test_unusable_names_are_refused_naming_the_argument(bad: object) -> None:
    with pytest.raises(InvalidConfig, match="job_id"):
        check_name(bad, "job_id")
