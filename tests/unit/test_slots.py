"""``serve``'s slots (lockworker.runtime.park.Slots): at most ``size`` taken at once;
a job that gave its slot back (parked, or its hook returned in the lane) takes one
again ahead of new jobs; at most ``park_limit`` park.

Threads wait on conditions with deadlines, never on sleeps: a thread that should be
blocked is checked to be alive (still waiting) after the other side had every chance
to let it through, and the order of admissions is recorded as it happens.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import pytest

from lockworker.runtime.park import Slots

DEADLINE = 5.0


def _in_thread(target: Callable[[], None]) -> threading.Thread:
    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    return thread


def _waits(slots: Slots, thread: threading.Thread, waiters: int) -> None:
    """Until ``waiters`` threads wait on ``slots`` (``thread`` among them, alive):
    polled against a deadline, as nothing notifies a thread that another blocked."""
    deadline = time.monotonic() + DEADLINE
    while len(slots._cond._waiters) < waiters:  # type: ignore[attr-defined]
        assert time.monotonic() < deadline, "the thread never blocked"
        time.sleep(0.001)
    assert thread.is_alive()


def test_at_most_size_slots_are_taken_and_a_give_lets_the_next_in() -> None:
    slots = Slots(2)
    slots.take()
    slots.take()
    assert slots.working == 2
    third = _in_thread(slots.take)
    _waits(slots, third, 1)
    slots.give()
    third.join(DEADLINE)
    assert not third.is_alive() and slots.working == 2


@pytest.mark.parametrize("again", ["retake", "unpark"])
def test_a_job_taking_its_slot_again_goes_before_new_jobs(again: str) -> None:
    slots = Slots(1)
    slots.take()
    if again == "unpark":
        assert slots.park()  # gives the slot back for the wait
        slots.take()  # a new job takes it meanwhile
    admitted: list[str] = []
    lock = threading.Lock()

    def admit(name: str, take: Callable[[], None]) -> Callable[[], None]:
        def run() -> None:
            take()
            with lock:
                admitted.append(name)
        return run

    new = _in_thread(admit("new", slots.take))
    _waits(slots, new, 1)
    returning = _in_thread(admit(again, getattr(slots, again)))
    _waits(slots, returning, 2)
    slots.give()  # one slot: the returning job's, though the new one waited longer
    returning.join(DEADLINE)
    assert admitted == [again] and new.is_alive()
    slots.give()
    new.join(DEADLINE)
    assert admitted == [again, "new"]
    assert slots.parked == 0


def test_no_more_than_park_limit_jobs_park() -> None:
    slots = Slots(3, park_limit=2)
    for _ in range(3):
        slots.take()
    assert slots.park() and slots.park()
    assert not slots.park()  # the third keeps its slot and waits in it
    assert slots.parked == 2 and slots.working == 1
