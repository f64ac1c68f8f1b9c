"""The namespace's index on a real server: every step that changes a job's state
writes its entry in the same step, for both implementations of the protocol, and the
views' reads (counts and lists) see exactly the jobs in each state."""

from __future__ import annotations

import uuid

import pytest
import redis
from helpers import LEASE, RETENTION, grant, held, who
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lockworker.model.index import Kind
from lockworker.model.keys import JobKeys, escape
from lockworker.model.state import Settle
from lockworker.protocol import LockProtocol
from lockworker.protocol import index as reading


def kinds(client: redis.Redis, namespace: str) -> dict[str, Kind]:
    """Every job of the index with its kind, from the lists of every kind."""
    out: dict[str, Kind] = {}
    for kind in Kind:
        for e in reading.listed(client, namespace, kind):
            assert e.job_id not in out, f"{e.job_id} listed twice"
            out[e.job_id] = kind
    return out


def test_each_step_moves_the_jobs_entry(
    protocol: LockProtocol, keys: JobKeys, redis_client: redis.Redis
) -> None:
    ns, job = keys.namespace, keys.job_id
    assert kinds(redis_client, ns) == {}
    g = grant(protocol, keys, "a")
    assert kinds(redis_client, ns) == {job: Kind.HELD}
    protocol.fail(keys, held(g, "a"), 3, RETENTION)
    assert kinds(redis_client, ns) == {job: Kind.PENDING}
    g = grant(protocol, keys, "b")
    protocol.fail(keys, held(g, "b"), 3, RETENTION, delay_ms=60_000)
    [entry] = reading.listed(redis_client, ns, Kind.BACKOFF)
    counts = reading.count(redis_client, ns)
    assert entry.job_id == job and entry.ms > counts.now_ms + 50_000
    assert (counts.held, counts.backoff, counts.pending, counts.gave_up) == (0, 1, 0, 0)
    protocol.reset(keys, RETENTION)
    assert kinds(redis_client, ns) == {job: Kind.PENDING}
    g = grant(protocol, keys, "c")
    assert protocol.fail(keys, held(g, "c"), 1, RETENTION) is Settle.GAVE_UP
    assert kinds(redis_client, ns) == {job: Kind.GAVE_UP}
    protocol.reset(keys, RETENTION)
    g = grant(protocol, keys, "d")
    assert protocol.complete(keys, held(g, "d"), RETENTION) is Settle.DONE
    assert kinds(redis_client, ns) == {}


def test_a_release_leaves_the_job_pending_and_a_renewal_keeps_it_held(
    protocol: LockProtocol, keys: JobKeys, redis_client: redis.Redis
) -> None:
    g = grant(protocol, keys, "a")
    [before] = reading.listed(redis_client, keys.namespace, Kind.HELD)
    protocol.renew(keys, held(g, "a"), LEASE, RETENTION)
    [after] = reading.listed(redis_client, keys.namespace, Kind.HELD)
    assert after.ms >= before.ms
    protocol.release(keys, held(g, "a"), RETENTION)
    assert kinds(redis_client, keys.namespace) == {keys.job_id: Kind.PENDING}


def test_an_acquire_that_gives_a_job_up_indexes_it_given_up(
    protocol: LockProtocol, keys: JobKeys, redis_client: redis.Redis
) -> None:
    grant(protocol, keys, "a", max_attempts=1, lease_ms=50)
    redis_client.delete(keys.lock)  # the holder died and its lease ran out
    protocol.acquire(keys, who("b"), LEASE, 1, RETENTION)
    assert kinds(redis_client, keys.namespace) == {keys.job_id: Kind.GAVE_UP}


def test_the_entries_of_a_primitive_are_never_written(
    protocol: LockProtocol, redis_client: redis.Redis, namespace: str
) -> None:
    from lockworker.model.keys import Space

    keys = JobKeys(namespace, "a-lock", Space.LOCK)
    grant(protocol, keys, "a")
    assert not redis_client.keys(f"lw:index:{namespace}:*")


def test_the_limit_keeps_the_newest_of_a_kind_across_slots(
    protocol: LockProtocol, redis_client: redis.Redis, namespace: str
) -> None:
    ids = [f"job-{i}" for i in range(30)]
    for job in ids:
        keys = JobKeys(namespace, job)
        g = grant(protocol, keys, "a", max_attempts=1)
        protocol.fail(keys, held(g, "a"), 1, RETENTION)
    listed = reading.listed(redis_client, namespace, Kind.GAVE_UP, limit=5)
    every = reading.listed(redis_client, namespace, Kind.GAVE_UP)
    assert sorted(e.job_id for e in every) == sorted(ids)
    assert listed == every[:5]
    assert [e.ms for e in every] == sorted((e.ms for e in every), reverse=True)
    assert reading.count(redis_client, namespace).gave_up == 30


HOSTILE = st.text(
    alphabet=st.sampled_from("{}%:*?[]\\ |") | st.characters(blacklist_categories=("Cs",)),
    min_size=1, max_size=40
).filter(str.strip)
"""Names of any unicode that UTF-8 can encode (names are validated as such), with the
characters the key layout escapes or parses (``{``, ``}``, ``%``, ``:``) and SCAN's glob
characters often among them."""


@settings(max_examples=12, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(job=HOSTILE, suffix=HOSTILE)
def test_any_job_id_is_listed_as_itself_in_every_kind(
    job: str, suffix: str, protocol: LockProtocol, redis_client: redis.Redis, namespace: str
) -> None:
    """Any job id, in any namespace, round-trips through the index member (escaped in
    the job's slot's key) and back, whichever kind the job is in, for both protocols."""
    ns = f"{namespace}-{uuid.uuid4().hex[:8]}{suffix}"  # each example a namespace of its own
    keys = JobKeys.of(ns, job)

    def only(kind: Kind) -> None:
        assert kinds(redis_client, ns) == {job: kind}
        assert redis_client.zrange(keys.index, 0, -1) == [escape(job)]

    g = grant(protocol, keys, "a", max_attempts=1)
    only(Kind.HELD)
    protocol.renew(keys, held(g, "a"), LEASE, RETENTION)
    only(Kind.HELD)
    protocol.fail(keys, held(g, "a"), 2, RETENTION, delay_ms=60_000)
    only(Kind.BACKOFF)
    protocol.reset(keys, RETENTION)
    only(Kind.PENDING)
    g = grant(protocol, keys, "b", max_attempts=1)
    protocol.fail(keys, held(g, "b"), 1, RETENTION)
    only(Kind.GAVE_UP)
    protocol.reset(keys, RETENTION)
    g = grant(protocol, keys, "c")
    assert protocol.complete(keys, held(g, "c"), RETENTION) is Settle.DONE
    assert kinds(redis_client, ns) == {}
    assert redis_client.exists(keys.index) == 0


@pytest.mark.parametrize("kind", list(Kind))
def test_an_empty_namespace_counts_nothing(
    kind: Kind, redis_client: redis.Redis, namespace: str
) -> None:
    assert reading.count(redis_client, namespace).of(kind) == 0
