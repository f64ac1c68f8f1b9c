"""Schedules as pure values: validation, Every's ticks, Cron's ticks across DST (checked
against cronsim), jitter, and the look back that catch-up uses."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from zoneinfo import ZoneInfo

import pytest
from cronsim import CronSim
from hypothesis import given, settings
from hypothesis import strategies as st

from lockworker import Cron, Every, InvalidConfig

UTC = timezone.utc
BERLIN = ZoneInfo("Europe/Berlin")
ZONES = ["Europe/Berlin", "America/New_York", "Australia/Sydney", "Asia/Kolkata", "UTC",
         "America/Santiago", "Australia/Lord_Howe"]
EXPRESSIONS = ["30 2 * * *", "0 * * * *", "*/15 * * * *", "0,30 1-3 * * *", "59 23 * * *",
               "0 2 * * 0", "15 2 1 * *", "*/7 2-3 * * 1-5"]


def at(*parts: int, tz: timezone | ZoneInfo = UTC) -> datetime:
    return datetime(*parts, tzinfo=tz)  # type: ignore[misc]


def local(ticks: list[datetime], tz: ZoneInfo) -> list[str]:
    return [t.astimezone(tz).strftime("%H:%M%z") for t in ticks]


def test_berlin_spring_day_runs_a_missing_time_once_after_the_gap() -> None:
    nightly = Cron("nightly", "30 2 * * *", tz="Europe/Berlin")
    day = nightly.ticks(at(2025, 3, 29, 12), at(2025, 3, 31, 12))
    assert local(day, BERLIN) == ["03:00+0200", "02:30+0200"]  # 30th, then 31st
    halves = Cron("halves", "*/30 * * * *", tz="Europe/Berlin")
    night = halves.ticks(at(2025, 3, 30, 0, 15), at(2025, 3, 30, 1, 45))
    assert local(night, BERLIN) == ["01:30+0100", "03:00+0200", "03:30+0200"]


def test_berlin_autumn_day_runs_a_repeated_time_once_at_its_first_occurrence() -> None:
    nightly = Cron("nightly", "30 2 * * *", tz="Europe/Berlin")
    day = nightly.ticks(at(2025, 10, 25, 12), at(2025, 10, 27, 12))
    assert local(day, BERLIN) == ["02:30+0200", "02:30+0100"]  # 26th, then 27th
    assert day[0] == at(2025, 10, 26, 0, 30)  # the first 02:30, not the second (01:30Z)
    hourly = Cron("hourly", "0 * * * *", tz="Europe/Berlin")
    night = hourly.ticks(at(2025, 10, 25, 23, 30), at(2025, 10, 26, 2, 30))
    assert local(night, BERLIN) == ["02:00+0200", "03:00+0100"]


def test_every_ticks_on_multiples_of_its_interval_since_the_epoch() -> None:
    five = Every("five", 300)
    assert five.ticks(at(2026, 1, 1, 10, 2), at(2026, 1, 1, 10, 15)) == [
        at(2026, 1, 1, 10, 5), at(2026, 1, 1, 10, 10), at(2026, 1, 1, 10, 15),
    ]
    assert five.ticks(at(2026, 1, 1, 10, 5), at(2026, 1, 1, 10, 5)) == []


@pytest.mark.parametrize(
    ("make", "match"),
    [
        (lambda: Every("e", 0), "seconds must be"),
        (lambda: Every("e", 2.5), "whole number of seconds >= 1, got 2.5"),
        (lambda: Every("e", True), "seconds must be"),
        (lambda: Every("", 5), "schedule name"),
        (lambda: Every("e", 5, catch_up="some"), "catch_up must be one of latest, all, none"),
        (lambda: Every("e", 5, overlap="queue"), "overlap must be one of skip, allow, wait"),
        (lambda: Every("e", 5, jitter=-1), "jitter must be"),
        (lambda: Every("e", 5, payload={1: 2}), "payload"),
        (lambda: Cron("c", "* * * *"), "five-field cron expression"),
        (lambda: Cron("c", "0 0 * * * *"), "five-field cron expression"),
        (lambda: Cron("c", "61 * * * *"), "five-field cron expression"),
        (lambda: Cron("c", "0 0 30 2 *"), "five-field cron expression"),
        (lambda: Cron("c", "* * * * *", tz="Mars/Olympus"), "IANA time zone"),
        (lambda: Every("e", 5).ticks(datetime(2026, 1, 1), at(2026, 1, 2)), "aware datetime"),
    ],
)
def test_bad_values_are_refused_naming_what_was_expected(make: object, match: str) -> None:
    with pytest.raises(InvalidConfig, match=match):
        make()  # type: ignore[operator]


def test_jitter_delays_the_start_below_the_next_tick_and_never_the_id() -> None:
    plain, jittered = Every("j", 10), Every("j", 10, jitter=60)
    for tick in range(0, 10_000, 10):
        delay = jittered.delay(tick)
        assert 0 <= delay < 10
        assert delay == jittered.delay(tick)  # every process alike
        assert jittered.tick_id(tick) == plain.tick_id(tick)
    assert plain.delay(50) == 0.0


def _cronsim_reference(
    expression: str, tz: ZoneInfo, after: datetime, until: datetime
) -> list[datetime]:
    """cronsim's own iteration, with the stated rule applied: a repeated local time only
    at its first occurrence; times that land on one instant once."""
    found: list[datetime] = []
    for moment in CronSim(expression, after.astimezone(tz)):
        instant = moment.astimezone(UTC)
        if instant > until:
            return found
        repeated = moment.fold and moment.replace(fold=0).utcoffset() != moment.utcoffset()
        if not repeated and instant > after and (not found or instant > found[-1]):
            found.append(instant)
    return found


def _ambiguous(moment: datetime, tz: ZoneInfo) -> bool:
    wall = moment.astimezone(tz).replace(tzinfo=None)
    first, second = wall.replace(tzinfo=tz, fold=0), wall.replace(tzinfo=tz, fold=1)
    return first.utcoffset() != second.utcoffset()


# Any day of 2024-2026, and mostly a few days around a DST change of the zones above
# (EU, US, Sydney and Lord Howe, Santiago; spring and autumn).
CHANGES = [at(2025, 3, 30), at(2025, 10, 26), at(2025, 3, 9), at(2025, 11, 2),
           at(2025, 4, 6), at(2025, 10, 5), at(2025, 9, 7), at(2026, 3, 29), at(2026, 10, 25)]
STARTS = st.one_of(
    st.datetimes(
        min_value=datetime(2024, 1, 1), max_value=datetime(2026, 12, 31), timezones=st.just(UTC)
    ),
    st.builds(
        lambda day, minutes: day + timedelta(minutes=minutes),
        st.sampled_from(CHANGES), st.integers(-3 * 24 * 60, 24 * 60),
    ),
    st.builds(
        lambda day, minutes: day + timedelta(minutes=minutes),
        st.sampled_from(CHANGES), st.integers(-3 * 24 * 60, 24 * 60),
    ),
)


@settings(max_examples=300, deadline=None)
@given(
    expression=st.sampled_from(EXPRESSIONS), tz=st.sampled_from(ZONES), start=STARTS,
    hours=st.integers(1, 24 * 5), split=st.floats(0, 1),
)
def test_cron_ticks_match_cronsim_across_dst(
    expression: str, tz: str, start: datetime, hours: int, split: float
) -> None:
    zone = ZoneInfo(tz)
    cron = Cron("c", expression, tz=tz)
    until = start + timedelta(hours=hours)
    ticks = cron.ticks(start, until)
    assert ticks == _cronsim_reference(expression, zone, start, until)
    assert all(t.tzinfo is UTC and start < t <= until for t in ticks)
    assert ticks == sorted(set(ticks))
    for tick in ticks:  # never the second occurrence of a repeated local time
        if _ambiguous(tick, zone):
            assert tick.astimezone(zone).fold == 0
    middle = start + (until - start) * split  # any split gives the same ticks
    assert cron.ticks(start, middle) + cron.ticks(middle, until) == ticks
    if ticks:
        assert cron.recent(start.timestamp(), until.timestamp(), 3) == [
            int(t.timestamp()) for t in ticks[-3:]
        ]


@pytest.mark.parametrize("tz", ["Europe/Berlin", "America/New_York", "Australia/Sydney"])
def test_each_dst_day_of_a_year_runs_a_daily_time_once_per_day(tz: str) -> None:
    zone = ZoneInfo(tz)
    ticks = Cron("d", "30 2 * * *", tz=tz).ticks(at(2025, 1, 1), at(2026, 1, 1))
    days = [t.astimezone(zone).date() for t in ticks]
    assert len(days) == len(set(days)) == 365


@settings(max_examples=200, deadline=None)
@given(
    interval=st.integers(1, 100_000), after=st.integers(0, 4_000_000_000),
    span=st.integers(0, 500_000), split=st.integers(0, 500_000),
)
def test_every_ticks_are_the_multiples_in_the_range(
    interval: int, after: int, span: int, split: int
) -> None:
    every = Every("e", interval)
    until = after + span
    ticks = every.seconds_between(after, until)
    assert ticks == [t for t in range((after // interval + 1) * interval, until + 1, interval)]
    middle = after + min(split, span)
    assert every.seconds_between(after, middle) + every.seconds_between(middle, until) == ticks
    assert every.recent(after, until, 5) == ticks[-5:]
    assert every.ticks(
        datetime.fromtimestamp(after, UTC), datetime.fromtimestamp(until, UTC)
    ) == [datetime.fromtimestamp(t, UTC) for t in ticks]
