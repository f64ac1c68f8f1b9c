"""A timed acquire is back by its deadline, whatever the round trip: the lock's wait
loop driven by hand on a fake clock.

The loop (:meth:`LockCore._acquire_steps`) yields its calls to Redis; here each is
answered as a server holding the lock for 30 s would, and the fake clock moves as the
network would make it: a look takes one round trip, a wait ends at its pause and its
answer arrives one round trip later (the nudge, then the reply), and the caller leaves
the queue with one more round trip after the loop gives up. The deadline must hold
for all of it. (The loop used to wait until the deadline and then look once more and
leave: three round trips late, every time.)
"""

from __future__ import annotations

import uuid
from typing import Any

import redis
from hypothesis import given, settings
from hypothesis import strategies as st

from lockworker.model.state import JobStatus, Snapshot
from lockworker.primitives import Lock
from lockworker.primitives.common import RoundTrips
from lockworker.testing import FakeClock

HELD = Snapshot(JobStatus.PENDING, 1, 7, "other", holder="other", pttl_ms=30_000)


def timed_out(lock: Lock, clock: FakeClock, timeout: float, rtt: float) -> tuple[float, list[Any]]:
    """Drive one ``acquire(timeout=...)`` of a held lock; how far past its deadline it
    came back (leave included), and the calls it made (name, time, pause)."""
    who, start, deadline = lock._begin(True, timeout)
    assert deadline is not None
    steps = lock._acquire_steps(who, True, start, deadline)
    calls: list[Any] = []
    reply: Any = None
    while True:
        try:
            call = steps.send(reply)
        except StopIteration as stop:
            assert stop.value is False
            break
        name, now = call.func.__name__, clock.monotonic()
        if name == "_look":
            calls.append((name, now, 0.0))
            clock.advance(rtt)
            reply = HELD
        elif name == "_await_grant":
            _, pause, _ = call.args
            calls.append((name, now, pause))
            clock.advance(pause + rtt)
            reply = None
        else:
            assert name == "_look_wait"
            _, pause, _ = call.args
            calls.append((name, now, pause))
            clock.advance(pause + rtt)
            reply = (HELD, None, True)
    clock.advance(rtt)  # the leave
    return clock.monotonic() - deadline, calls


@settings(max_examples=200, deadline=None)
@given(
    rtt=st.floats(0.00005, 0.02),
    timeouts=st.lists(st.floats(0.0, 3.0), min_size=1, max_size=4),
)
def test_timed_acquires_of_a_held_lock_end_by_their_deadline(
    rtt: float, timeouts: list[float]
) -> None:
    clock = FakeClock()
    client = redis.Redis()  # never connected: the loop's calls are answered here
    for timeout in timeouts:  # the later ones start with a pipelined look and wait
        lock = Lock(client, "res", namespace=f"unit-{uuid.uuid4().hex[:8]}", clock=clock,
                    ttl=30.0)
        late, calls = timed_out(lock, clock, timeout, rtt)
        # The deadline, or, for a timeout shorter than that, the one look every
        # acquire makes (``timeout=0`` is one try) and its leave.
        assert late <= max(0.0, 2 * rtt - timeout) + 1e-9, (late, calls)
        waits = [c for c in calls if c[0] != "_look"]
        # It waited, rather than gave up early: the reserve is two round trips and a
        # margin, and at most one wait (a slice is 1 s) is cut for it.
        if timeout > RoundTrips.MARGIN + 4 * max(rtt, RoundTrips.GUESS) + 0.001:
            assert waits, calls
            assert late >= -(4 * max(rtt, RoundTrips.GUESS) + RoundTrips.MARGIN + 0.0011), calls


def test_a_timed_acquire_makes_no_look_it_cannot_finish() -> None:
    clock = FakeClock()
    lock = Lock(redis.Redis(), "res", namespace=f"unit-{uuid.uuid4().hex[:8]}", clock=clock,
                ttl=30.0)
    late, calls = timed_out(lock, clock, 0.2, 0.001)
    assert late <= 0
    assert [c[0] for c in calls][-1] != "_look", calls  # the last call is the wait
