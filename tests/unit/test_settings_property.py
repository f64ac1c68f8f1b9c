"""Every numeric setting accepts exactly its valid values and names itself when refusing.

For each public numeric argument, hypothesis draws values of every kind (floats
including NaN, the infinities, negative zero and huge ones; ints; bools; strings;
None) and checks the constructor or method against an independent statement of the
setting's rule: a valid value is accepted, anything else raises ``InvalidConfig``
whose message names the argument and shows the value.
"""

from __future__ import annotations

import argparse
import itertools
import math
import numbers
from collections.abc import Callable
from typing import Any

import fakeredis
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

import lockworker
from lockworker import InvalidConfig, Lock, Redlock, RetryPolicy, Semaphore, compute_once
from lockworker.cli.main import lease_seconds, non_negative_float, positive_float, positive_int
from lockworker.config import MAX_COUNT, MAX_SECONDS, MIN_LEASE
from lockworker.daemons.sources import StreamSource
from lockworker.testing import FakeClock

# -- the rules, stated independently of lockworker.config ---------------------------


def is_real(v: object) -> bool:
    if isinstance(v, bool) or not isinstance(v, numbers.Real):
        return False
    try:
        return math.isfinite(float(v))
    except OverflowError:  # an int too large for a float
        return False


def seconds_above_zero(v: object) -> bool:
    return is_real(v) and 0 < v <= MAX_SECONDS  # type: ignore[operator]


def a_lease(v: object) -> bool:
    """A lease: at least MIN_LEASE, which a round trip and a renewal need."""
    return is_real(v) and MIN_LEASE <= v <= MAX_SECONDS  # type: ignore[operator]


def seconds_from_zero(v: object) -> bool:
    return is_real(v) and 0 <= v <= MAX_SECONDS  # type: ignore[operator]


def timeout(v: object) -> bool:
    return v is None or seconds_from_zero(v)


def count_from(low: int) -> Callable[[object], bool]:
    def rule(v: object) -> bool:
        return isinstance(v, int) and not isinstance(v, bool) and low <= v <= MAX_COUNT

    return rule


def or_none(rule: Callable[[object], bool]) -> Callable[[object], bool]:
    return lambda v: v is None or rule(v)


def fraction(v: object) -> bool:
    return is_real(v) and 0 <= v < 1  # type: ignore[operator]


def both(*rules: Callable[[object], bool]) -> Callable[[object], bool]:
    return lambda v: all(rule(v) for rule in rules)


# -- how each setting is given ------------------------------------------------------

_names = itertools.count()


def unique(prefix: str) -> str:
    return f"{prefix}{next(_names)}"


def ok(job: lockworker.Job) -> None:
    """A valid on_acquired."""


def worker(**kwargs: Any) -> None:
    w = lockworker.Worker(
        fakeredis.FakeRedis(), namespace="ns", on_acquired=ok, handle_signals=False, **kwargs
    )
    w.close()


def leader(**kwargs: Any) -> None:
    lead = lockworker.Leader(
        fakeredis.FakeRedis(), name="n", on_acquired=lambda term: None, handle_signals=False,
        **kwargs,
    )
    lead.close()


def serve(concurrency: Any) -> None:
    w = lockworker.Worker(fakeredis.FakeRedis(), namespace="ns", on_acquired=ok,
                          handle_signals=False)
    try:
        w.serve([], concurrency=concurrency)
    finally:
        w.close()


def lock_acquire(value: Any) -> None:
    lock = Lock(fakeredis.FakeRedis(), unique("acq"))
    if lock.acquire(timeout=value):  # a free lock: taken at the first try, no wait
        lock.close()


def lock_extend(value: Any) -> None:
    lock = Lock(fakeredis.FakeRedis(), unique("ext"))
    assert lock.acquire(blocking=False)
    try:
        lock.extend(value)
    finally:
        lock.close()


def redlock(**kwargs: Any) -> None:
    Redlock([fakeredis.FakeRedis() for _ in range(3)], "r", **kwargs)


def once(**kwargs: Any) -> None:
    """compute_once on a key already cached: after the checks, no lock is taken."""
    client = fakeredis.FakeRedis()
    compute_once(client, "k", lambda: 1, ttl=60.0)
    args: dict[str, Any] = {"ttl": 60.0, **kwargs}
    assert compute_once(client, "k", lambda: 2, **args) == 1


SETTINGS: list[tuple[str, str, Callable[[Any], None], Callable[[object], bool]]] = [
    ("Worker", "lock_timeout", lambda v: worker(lock_timeout=v),
     both(a_lease, lambda v: v < 3600)),  # below the default done_retention
    ("Worker", "max_attempts", lambda v: worker(max_attempts=v), count_from(1)),
    ("Worker", "retention", lambda v: worker(retention=v),
     both(seconds_above_zero, lambda v: v > 10)),  # above the default lock_timeout
    ("Worker", "done_retention", lambda v: worker(done_retention=v),
     both(seconds_above_zero, lambda v: v > 10)),  # above the default lock_timeout
    ("Worker", "retry_delay", lambda v: worker(retry_delay=v), timeout),  # None: default
    ("Worker", "backup_delay", lambda v: worker(backup_delay=v), seconds_from_zero),
    ("Worker.serve", "concurrency", serve, count_from(1)),
    ("Leader", "lock_timeout", lambda v: leader(lock_timeout=v), a_lease),
    ("Leader", "backup_delay", lambda v: leader(backup_delay=v), seconds_from_zero),
    ("Lock", "ttl", lambda v: Lock(fakeredis.FakeRedis(), "l", ttl=v), a_lease),
    ("Lock", "timeout", lambda v: Lock(fakeredis.FakeRedis(), "l", timeout=v), timeout),
    ("Lock.acquire", "timeout", lock_acquire, timeout),
    ("Lock.extend", "ttl", lock_extend,
     lambda v: v is None or a_lease(v)),  # None: the lock's ttl
    ("Semaphore", "limit", lambda v: Semaphore(fakeredis.FakeRedis(), "s", v), count_from(1)),
    ("Semaphore", "ttl", lambda v: Semaphore(fakeredis.FakeRedis(), "s", 2, ttl=v),
     a_lease),
    ("Semaphore", "timeout", lambda v: Semaphore(fakeredis.FakeRedis(), "s", 2, timeout=v),
     timeout),
    ("Redlock", "ttl", lambda v: redlock(ttl=v), a_lease),
    ("Redlock", "retry_count", lambda v: redlock(retry_count=v), count_from(0)),
    ("Redlock", "retry_delay", lambda v: redlock(retry_delay=v), seconds_from_zero),
    ("Redlock", "drift_factor", lambda v: redlock(drift_factor=v), fraction),
    ("Redlock", "timeout", lambda v: redlock(timeout=v), timeout),
    ("compute_once", "ttl", lambda v: once(ttl=v), seconds_above_zero),
    ("compute_once", "lock_timeout", lambda v: once(lock_timeout=v), a_lease),
    ("compute_once", "timeout", lambda v: once(timeout=v), timeout),
    ("RetryPolicy", "budget", lambda v: RetryPolicy(budget=v), seconds_above_zero),
    ("RetryPolicy", "initial", lambda v: RetryPolicy(initial=v), seconds_above_zero),
    ("RetryPolicy", "maximum", lambda v: RetryPolicy(maximum=v), seconds_above_zero),
    ("StreamSource", "block",
     lambda v: StreamSource(fakeredis.FakeRedis(), "s", owner="o", block=v), seconds_above_zero),
    ("StreamSource", "batch",
     lambda v: StreamSource(fakeredis.FakeRedis(), "s", owner="o", batch=v),
     or_none(count_from(1))),  # None: the mode's default (100 fan-out, 16 in a group)
    ("StreamSource", "reader_ttl",
     lambda v: StreamSource(fakeredis.FakeRedis(), "s", owner="o", reader_ttl=v),
     seconds_above_zero),
    ("FakeClock.advance", "seconds", lambda v: FakeClock().advance(v), seconds_from_zero),
]

EDGES = [
    math.nan, math.inf, -math.inf, 0, 0.0, -0.0, -1, 1, True, False, None, "1", b"1", [1],
    1e-300, 0.5, 2.5, 86400, 86400.0, MAX_SECONDS, math.nextafter(MAX_SECONDS, math.inf),
    MAX_COUNT, MAX_COUNT + 1, 10**400,
]

values = st.one_of(
    st.sampled_from(EDGES),
    st.floats(allow_nan=True, allow_infinity=True),
    st.floats(min_value=-2.0, max_value=2.0),
    st.integers(min_value=-3, max_value=2**60),
    st.booleans(),
    st.none(),
    st.text(max_size=4),
)


@pytest.mark.parametrize(
    ("where", "argument", "give", "valid"), SETTINGS,
    ids=[f"{where}-{argument}" for where, argument, _, _ in SETTINGS],
)
@settings(max_examples=60, deadline=None)
@given(value=values)
@example(value=math.nan)
@example(value=math.inf)
@example(value=True)
def test_a_setting_accepts_exactly_its_valid_values(
    where: str, argument: str, give: Callable[[Any], None], valid: Callable[[object], bool],
    value: Any,
) -> None:
    if valid(value):
        give(value)
        return
    with pytest.raises(InvalidConfig) as refused:
        give(value)
    message = str(refused.value)
    assert argument in message, message
    assert "must be" in message, message


@pytest.mark.parametrize(
    ("parse", "valid"),
    [(positive_float, seconds_above_zero), (non_negative_float, seconds_from_zero),
     (lease_seconds, a_lease), (positive_int, count_from(1))],
    ids=["positive_float", "non_negative_float", "lease_seconds", "positive_int"],
)
@settings(max_examples=80, deadline=None)
@given(value=st.one_of(st.sampled_from(EDGES), st.floats(), st.integers(-3, 2**60)))
def test_the_command_line_applies_the_same_rules(
    parse: Callable[[str], float], valid: Callable[[object], bool], value: Any
) -> None:
    text = str(value)
    as_number: object
    try:
        as_number = int(text) if parse is positive_int else float(text)
    except ValueError:
        as_number = text
    if valid(as_number):
        assert parse(text) == as_number
        return
    with pytest.raises(argparse.ArgumentTypeError):
        parse(text)


@pytest.mark.parametrize(
    "make",
    [
        lambda: worker(lock_timeout=0.001),
        lambda: Lock(fakeredis.FakeRedis(), "l", ttl=0.001),
        lambda: leader(lock_timeout=0.05),
        lambda: once(lock_timeout=0.01),
    ],
    ids=["Worker", "Lock", "Leader", "compute_once"],
)
def test_a_lease_too_short_to_hold_is_refused_naming_the_minimum(
    make: Callable[[], object],
) -> None:
    """A lease of 1 ms was accepted, invalid when granted: the hook ran 3 times and the
    job gave up with a misleading reason. It is refused before any Redis call."""
    with pytest.raises(InvalidConfig, match=r">= 0\.1, got 0\.0.*a lease must outlast"):
        make()
