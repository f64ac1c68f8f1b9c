"""The backup's decision, as a table: no Redis, no clock."""

from __future__ import annotations

import pytest

from lockworker.model.policy import Timing, backup_step
from lockworker.model.state import JobStatus, Snapshot

T = Timing(lock_timeout=10.0, retry_delay=1.0, backup_delay=0.5)
FREE = Snapshot(JobStatus.PENDING, 1, 7, "primary")
HELD = Snapshot(JobStatus.PENDING, 2, 8, "primary", holder="primary", pttl_ms=4000)


@pytest.mark.parametrize(
    ("seen", "free_since", "free_token", "now", "compete", "look_again", "new_since"),
    [
        # first look at a free job: start the delay's clock, look again when it ends
        (FREE, None, None, 100.0, False, 100.5, 100.0),
        # still free at the same token, delay not over yet
        (FREE, 100.0, 7, 100.3, False, 100.5, 100.0),
        # free for the whole delay: compete
        (FREE, 100.0, 7, 100.5, True, 100.5, 100.0),
        # somebody held it in between (new token): the delay starts again
        (FREE, 100.0, 6, 100.6, False, 101.1, 100.6),
        # held: forget the clock, look again at the lease's end (+ margin)
        (HELD, 100.0, 7, 100.6, False, 104.601, None),
    ],
)
def test_backup_step(  # noqa: PLR0917 (one argument per column of the table)
    seen: Snapshot,
    free_since: float | None,
    free_token: int | None,
    now: float,
    compete: bool,
    look_again: float,
    new_since: float | None,
) -> None:
    view = backup_step(seen, free_since, free_token, now, T)
    assert view.compete is compete
    assert view.look_again == pytest.approx(look_again)
    assert view.free_since == new_since
    if new_since is not None:
        assert view.free_token == seen.token


def test_primary_timing_has_no_delay() -> None:
    """With backup_delay 0 (a primary's timing) a free job is competed for at once."""
    view = backup_step(FREE, None, None, 5.0, Timing(10.0, 1.0))
    assert view.compete


def test_sightings_report_the_wait_and_a_takeover_past_the_seen_lease() -> None:
    from lockworker.model.policy import Sightings
    from lockworker.model.state import JobStatus, Snapshot

    held = Snapshot(JobStatus.PENDING, 1, 7, "a", holder="a", pttl_ms=2000)
    s = Sightings()
    s.saw(Snapshot(JobStatus.PENDING, 0, 0, ""), 10.0)  # free: nothing recorded
    assert s.granted(10.5) == {}
    s.saw(held, 10.0)
    s.saw(held, 11.0)  # renewed: the lease now ends at 13.0; the wait began at 10.0
    assert s.granted(13.25) == {"waited_ms": 3250.0, "past_lease_ms": 250.0}
    assert s.granted(14.0) == {}  # forgotten after a grant


def test_sightings_of_a_handover_before_the_lease_end_carry_no_takeover() -> None:
    from lockworker.model.policy import Sightings
    from lockworker.model.state import JobStatus, Snapshot

    s = Sightings()
    s.saw(Snapshot(JobStatus.PENDING, 1, 7, "a", holder="a", pttl_ms=5000), 1.0)
    assert s.granted(2.0) == {"waited_ms": 1000.0}


# -- with the view of the namespace's primaries ---------------------------------------


@pytest.mark.parametrize(
    ("seen", "free_since", "now", "primary_until", "compete", "look_again"),
    [
        # a primary serves until 105: the delay is kept
        (FREE, None, 100.0, 105.0, False, 100.5),
        # ... but its registration ends before the delay does: look again then
        (FREE, None, 100.0, 100.2, False, 100.2),
        # no primary serves (any more): compete at once, delay or not
        (FREE, None, 100.0, 99.0, True, 100.0),
        (FREE, 100.0, 100.1, float("-inf"), True, 100.1),
        # held by somebody: wait for the lease's end, primary or not
        (HELD, None, 100.0, float("-inf"), False, 104.001),
    ],
)
def test_backup_step_with_the_primarys_registration(  # noqa: PLR0917
    seen: Snapshot, free_since: float | None, now: float, primary_until: float,
    compete: bool, look_again: float,
) -> None:
    token = None if free_since is None else seen.token
    view = backup_step(seen, free_since, token, now, T, primary_until=primary_until)
    assert view.compete is compete
    assert view.look_again == pytest.approx(look_again)


def test_a_backup_defers_only_while_a_primary_is_registered() -> None:
    from lockworker.model.policy import primary_serving

    assert primary_serving(10.0, 9.999)
    assert not primary_serving(10.0, 10.0)
    assert not primary_serving(float("-inf"), 0.0)
