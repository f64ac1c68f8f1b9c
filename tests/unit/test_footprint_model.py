"""Classifying keys by namespace and kind, whatever characters the names hold, and
estimating totals from a sample."""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lockworker.daemons.sources import stream_keys
from lockworker.model.footprint import Kind, Sample, classify, estimate, parse, size
from lockworker.model.keys import JobKeys, Space
from lockworker.model.presence import presence_keys
from lockworker.serving.leadership import leader_keys

# Names built from the characters that matter to the key grammar, plus any unicode.
TRICKY = st.sampled_from([":", "{", "}", "%", "%7B", "%25", "{}", ":{", "}:", "lw:", "*",
                          ":state", ":lock", "}:history", " "])
NAMES = st.lists(st.one_of(TRICKY, st.text(min_size=0, max_size=6)), min_size=1,
                 max_size=6).map("".join).filter(lambda s: s.strip() != "")


def utf8(s: str) -> bool:
    try:
        s.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


NAME = NAMES.filter(utf8)


@settings(max_examples=400)
@given(NAME, NAME)
def test_a_jobs_keys_are_counted_under_its_namespace_by_kind(namespace: str, job: str) -> None:
    keys = JobKeys(namespace, job)
    assert classify(keys.lock) == (namespace, Kind.JOB_LEASE)
    assert classify(keys.state) == (namespace, Kind.JOB_STATE)
    assert classify(keys.history) == (namespace, Kind.JOB_HISTORY)
    assert classify(keys.extra("something-new")) == (namespace, Kind.OTHER)
    assert parse(keys.extra("a:b}{c")) == ("job", namespace, job, "a:b}{c")


@settings(max_examples=300)
@given(NAME, NAME, st.sampled_from([Space.LOCK, Space.SEMAPHORE, Space.ONCE, Space.REDLOCK]))
def test_primitives_are_counted_under_their_namespace(
    namespace: str, name: str, space: Space
) -> None:
    keys = JobKeys(namespace, name, space)
    for key in (keys.lock, keys.state, keys.extra("queue"), keys.extra("grant:run-1")):
        assert classify(key) == (namespace, Kind.PRIMITIVE)


@settings(max_examples=300)
@given(NAME)
def test_streams_leaders_and_presence(name: str) -> None:
    stream = stream_keys(name)
    assert classify(stream.extra("entries")) == ("streams", Kind.STREAM_ENTRIES)
    assert classify(stream.extra("delayed")) == ("streams", Kind.STREAM_ENTRIES)
    assert classify(stream.extra("positions")) == ("streams", Kind.STREAM_READERS)
    assert classify(stream.extra("readers")) == ("streams", Kind.STREAM_READERS)
    leader = leader_keys(name)
    for key in (leader.lock, leader.state, leader.extra("term")):
        assert classify(key) == ("leaders", Kind.LEADER)
    # A worker's presence is counted under the namespace it registers in.
    assert classify(presence_keys(name).extra("members")) == (name, Kind.PRESENCE)


@settings(max_examples=300)
@given(st.text(max_size=40))
def test_any_other_key_is_other_and_never_raises(key: str) -> None:
    namespace, kind = classify(key)
    if not key.startswith("lw:"):
        assert (namespace, kind) == (None, Kind.OTHER)


@pytest.mark.parametrize("key", [
    "lw", "lw:", "lw:job", "lw:job:ns", "lw:job:ns:{id}", "lw:job:ns:{id}:", "lw:job::{id}:state",
    "lw:job:ns:{}:state", "lw:job:n{s:{id}:state", "lw:job:ns:{id}state", "cache:lw:job:a:{b}:c",
])
def test_malformed_keys_are_no_namespace(key: str) -> None:
    assert classify(key) == (None, Kind.OTHER)


def test_an_unknown_product_keeps_its_namespace() -> None:
    assert classify("lw:future:ns:{x}:value") == ("ns", Kind.OTHER)


def test_a_sample_is_scaled_to_the_key_count_and_sized_by_its_mean() -> None:
    first = Sample(total=1_000)
    first.seen.update({("a", Kind.JOB_STATE): 80, (None, Kind.OTHER): 20})
    first.sizes = {("a", Kind.JOB_STATE): [100, 300], (None, Kind.OTHER): [50]}
    second = Sample(total=10, complete=True)
    second.seen.update({("a", Kind.JOB_STATE): 10})
    found = estimate([first, second], 0.02, {"used_memory": 5, "maxmemory": 0})
    shares = {(s.namespace, s.kind): s for s in found.shares}
    state = shares["a", Kind.JOB_STATE]
    assert (state.keys, state.sampled) == (810, 90)
    assert state.bytes == 200 * 810  # the mean of every size of the class, on every master
    assert shares[None, Kind.OTHER].keys == 200
    assert shares[None, Kind.OTHER].bytes == 50 * 200
    assert found.shares[0] is state  # largest first
    assert (found.total_keys, found.sampled, found.exact) == (1_010, 110, False)
    assert (found.used_memory, found.maxmemory) == (5, 0)
    assert [s.namespace for s in found.of("a").shares] == ["a"]


def test_a_complete_scan_is_exact_and_an_unsized_class_has_no_bytes() -> None:
    whole = Sample(total=7, complete=True)
    whole.add(["lw:job:x:{1}:state", "lw:job:x:{2}:state", "other"])
    found = estimate([whole], 0.001)
    assert found.exact and {s.kind: s.keys for s in found.shares} == Counter(
        {Kind.JOB_STATE: 2, Kind.OTHER: 1})
    assert all(s.bytes is None for s in found.shares)


@pytest.mark.parametrize(("count", "shown"), [
    (None, "?"), (0, "0 B"), (205, "205 B"), (2048, "2.0 KiB"), (17_712_000_000, "16.5 GiB"),
    (5 << 40, "5120.0 GiB"),
])
def test_sizes(count: int | None, shown: str) -> None:
    assert size(count) == shown


def test_the_index_schedules_and_the_registry_are_counted_as_lockworker_s() -> None:
    from lockworker.model.keys import JobKeys
    from lockworker.protocol.schedules import schedule_key

    assert classify(JobKeys("billing", "job-1").index) == ("billing", Kind.INDEX)
    assert classify(JobKeys("a:{b}%", "j").index) == ("a:{b}%", Kind.INDEX)
    assert classify(schedule_key("billing", "nightly")) == ("billing", Kind.SCHEDULE)
    assert classify("lw:registry") == (None, Kind.REGISTRY)
    assert classify("lw:registry:indexed") == (None, Kind.REGISTRY)
    assert classify("lw:index:no-brace") == (None, Kind.OTHER)
