"""What a trailing backup asks of each poll (lockworker.serving.trail): nothing but the
progress while it moves, the entries at least ``backup_delay`` old once it stood still
that long, every entry at once after a handover."""

from __future__ import annotations

import threading

from lockworker.runtime.wake import WakeEvent
from lockworker.serving.trail import ANY_AGE, Trailing, heard

DELAY = 0.5


def trailing(now: float = 100.0) -> Trailing:
    return Trailing(lambda: True, DELAY, now)


def test_a_moving_progress_asks_for_no_entry() -> None:
    t = trailing()
    for step in range(20):  # the progress moves at every poll, for 10 delays
        now = 100.0 + step * DELAY / 2
        assert t.ask(now) is None
        t.saw(f"{step}-0", now)


def test_a_progress_that_stood_still_for_backup_delay_asks_for_entries_that_old() -> None:
    t = trailing()
    t.saw("5-0", 100.0)
    assert t.ask(100.0 + DELAY * 0.99) is None
    assert t.ask(100.0 + DELAY) == round(DELAY * 1000)
    t.saw("5-0", 100.0 + DELAY)  # the same progress: still standing
    assert t.ask(100.0 + DELAY * 1.5) == round(DELAY * 1000)
    t.saw("6-0", 101.0)  # it moved: the clock starts again
    assert t.ask(101.0 + DELAY / 2) is None


def test_a_handover_asks_for_every_entry_once_and_marks_it_urgent() -> None:
    t = trailing()
    t.nudge()
    assert t.ask(100.0) == ANY_AGE and t.urgent
    assert t.ask(100.0) is None and not t.urgent


def test_only_a_published_handover_nudges_not_a_deferrals_own_wake() -> None:
    t = trailing()
    own = WakeEvent()
    own.set()  # an urgent delivery added: a wake with no message
    heard(own, t)
    assert not t.nudged.is_set()
    published = WakeEvent()
    published.heard("0")
    published.set()
    heard(published, t)
    assert t.nudged.is_set()
    assert published.take() is None  # heard once
    heard(threading.Event(), None)  # no trailing, a plain event: nothing to do


def test_a_pause_sees_a_stall_within_half_the_delay_and_a_stop_within_block() -> None:
    t = trailing()
    assert t.pause(0.25) == 0.25
    assert t.pause(0.1) == 0.1
    assert Trailing(lambda: True, 0.05, 0.0).pause(0.25) == 0.025
