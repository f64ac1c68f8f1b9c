"""Decoding a schedule's hash and the rows ``lockworker status`` makes of it (pure)."""

from __future__ import annotations

import pytest

from lockworker import Cron, Every
from lockworker.cli.schedules import due, schedule_row, table
from lockworker.model.schedule import definition, from_definition, period
from lockworker.protocol.schedules import (
    decode_progress,
    parse_schedule_key,
    schedule_key,
    schedule_pattern,
)


def test_a_hash_decodes_with_what_became_of_its_latest_tick() -> None:
    seen = decode_progress({
        "last": "120", "resolved": "59", "last_ran": "60", "r:120": "1", "w:180": "1",
        "s:90": "1", "ran": "2", "skipped": "1", "caught_up": "3",
        "definition": '{"every": 30}',
    })
    assert (seen.last, seen.resolved, seen.last_ran) == (120, 59, 60)
    assert (seen.running, seen.waiting, seen.skipped_recent) == ([120], [180], [90])
    assert (seen.ran, seen.skipped, seen.caught_up) == (2, 1, 3)
    assert seen.definition == {"every": 30} and seen.outcome == "running"
    assert decode_progress({"last": "60", "last_ran": "60"}).outcome == "ran"
    assert decode_progress({"last": "60", "w:60": "1"}).outcome == "waiting"
    assert decode_progress({"last": "60", "last_ran": "30"}).outcome == "skipped"
    assert decode_progress({}).outcome is None


def test_fields_lockworker_did_not_write_are_left_out() -> None:
    seen = decode_progress({"last": "soon", "ran": "-4", "r:x": "1", "definition": "{no"})
    assert (seen.last, seen.ran, seen.running, seen.definition) == (None, 0, [], None)


@pytest.mark.parametrize(
    "schedule", [Every("sync", 300), Cron("nightly", "30 2 * * *", tz="Europe/Berlin")]
)
def test_a_definition_round_trips(schedule: Every | Cron) -> None:
    again = from_definition(schedule.name, definition(schedule))
    assert again is not None and again.spec == schedule.spec
    assert again.next_after(1_800_000_000) == schedule.next_after(1_800_000_000)


def test_a_definition_this_release_cannot_read_is_none() -> None:
    for found in (None, {"every": 0}, {"cron": "nope", "tz": "UTC"}, {"every": 5, "x": 1}):
        assert from_definition("x", found) is None


def test_the_period_of_a_weekday_cron_is_its_weekend() -> None:
    assert period(Every("sync", 300), 0) == 300
    assert period(Cron("daily", "0 9 * * *"), 1_800_000_000) == 86400
    assert period(Cron("weekdays", "0 9 * * 1-5"), 1_800_000_000) == 3 * 86400


def test_the_key_pattern_finds_the_schedule_keys_and_only_them() -> None:
    key = schedule_key("re{po}rts", "night:ly")
    assert parse_schedule_key(key) == ("re{po}rts", "night:ly")
    assert schedule_pattern() == "lw:schedule:*:{*}:ticks"
    assert parse_schedule_key("lw:schedule:reports:{nightly}:state") is None
    assert parse_schedule_key("lw:job:reports:{nightly}:ticks") is None


def test_a_row_tells_the_next_tick_after_the_latest_decided_one() -> None:
    seen = decode_progress({"last": "600", "last_ran": "600", "definition": '{"every": 300}'})
    row = schedule_row("reports", "sync", seen, now=700.0, job_state="done")
    assert (row.last_tick, row.outcome) == ("1970-01-01T00:10:00Z", "ran (done)")
    assert row.spec == "every 300 s"
    assert (row.next_due, row.next_due_in) == ("1970-01-01T00:15:00Z", 200.0)
    assert due(row) == "1970-01-01T00:15:00Z (in 3m20s)"
    late = schedule_row("reports", "sync", seen, now=1000.0)
    assert due(late) == "1970-01-01T00:15:00Z (overdue 1m40s)" and late.outcome == "ran"
    blind = schedule_row("reports", "old", decode_progress({"last": "600"}), now=700.0)
    assert (blind.spec, blind.next_due, due(blind)) == (None, None, "-")
    assert "unknown (no definition recorded)" in table([blind])
