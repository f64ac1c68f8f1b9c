"""A worker's per-minute counts of what it did: the counter, what a flush sends, and
what the views make of the hashes. No Redis: the clock is a variable, the send a
function of the test's."""

from __future__ import annotations

import datetime
from types import SimpleNamespace
from typing import Any

import pytest

from lockworker.cli import throughput
from lockworker.errors import InvalidConfig
from lockworker.model import rates as model
from lockworker.model.state import Grant
from lockworker.protocol import rates as steps
from lockworker.runtime import rates
from lockworker.runtime.rates import Rates
from lockworker.serving.runbase import RunBase

HOUR0 = 1_800_000_000 - 1_800_000_000 % 3600
"""The start of an hour (Unix s)."""


class Clock:
    def __init__(self, at: float) -> None:
        self.at = at

    def __call__(self) -> float:
        return self.at


def test_counts_go_to_the_minute_of_the_clock_and_roll_over_at_its_end() -> None:
    clock = Clock(HOUR0 + 59.9)
    counter = Rates(clock)
    counter.add(model.DONE)
    counter.add(model.DONE)
    counter.add(model.FAILED)
    clock.at = HOUR0 + 60.0
    counter.add(model.DONE)
    counter.add(model.HANDED_OVER, 3)
    assert counter.take() == {
        (HOUR0, "done"): 2, (HOUR0, "failed"): 1,
        (HOUR0 + 60, "done"): 1, (HOUR0 + 60, "handed_over"): 3,
    }
    assert not counter.pending() and counter.take() == {}


def test_a_flush_sends_only_what_was_counted_since_the_last_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    sent: list[dict[tuple[int, str], int]] = []
    monkeypatch.setattr(steps, "record", lambda _client, _ns, counts: sent.append(dict(counts)))
    clock = Clock(HOUR0 + 10)
    counter = Rates(clock)
    assert rates.flush(None, "ns", counter) is False  # type: ignore[arg-type]
    assert sent == []  # nothing counted: no call at all
    counter.add(model.DONE)
    assert rates.flush(None, "ns", counter) is True  # type: ignore[arg-type]
    counter.add(model.DONE)
    counter.add(model.GAVE_UP)
    rates.flush(None, "ns", counter)  # type: ignore[arg-type]
    assert sent == [{(HOUR0, "done"): 1}, {(HOUR0, "done"): 1, (HOUR0, "gave_up"): 1}]


def test_a_failed_flush_keeps_its_counts_for_the_next_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    sent: list[dict[tuple[int, str], int]] = []
    failing = [True]

    def record(_client: Any, _ns: str, counts: dict[tuple[int, str], int]) -> None:
        if failing[0]:
            raise ConnectionError("down")
        sent.append(dict(counts))

    monkeypatch.setattr(steps, "record", record)
    clock = Clock(HOUR0 + 10)
    counter = Rates(clock)
    counter.add(model.DONE)
    with pytest.raises(ConnectionError):
        rates.flush(None, "ns", counter)  # type: ignore[arg-type]
    counter.add(model.DONE)  # counted while the server was away
    failing[0] = False
    rates.flush(None, "ns", counter)  # type: ignore[arg-type]
    assert sent == [{(HOUR0, "done"): 2}]


def test_counts_kept_past_two_hours_are_dropped_not_sent() -> None:
    clock = Clock(HOUR0 + 10)
    counter = Rates(clock)
    counter.add(model.FAILED)
    taken = counter.take()
    clock.at = HOUR0 + 60 + model.KEPT_AFTER_HOUR  # the minute is past what is kept
    counter.add(model.DONE)
    counter.restore(taken)
    assert counter.snapshot() == {(model.minute_of(clock.at), "done"): 1}


def test_the_record_call_names_each_hour_once_with_its_expiry_and_skips_zeros() -> None:
    counts = {
        (HOUR0 + 3540, "done"): 4, (HOUR0 + 3600, "done"): 1,
        (HOUR0 + 3600, "failed"): 0, (HOUR0 + 3540, "handed_over"): 2,
    }
    keys, args = model.record_call("billing", counts)
    assert keys == [f"lw:presence:workers:{{billing}}:rates:{HOUR0}",
                    f"lw:presence:workers:{{billing}}:rates:{HOUR0 + 3600}"]
    assert args[:2] == [HOUR0 + 3600 + 7200, HOUR0 + 7200 + 7200]
    assert args[2:] == [1, f"{HOUR0 + 3540}|done", 4, 1, f"{HOUR0 + 3540}|handed_over", 2,
                        2, f"{HOUR0 + 3600}|done", 1]
    assert model.record_call("billing", {(HOUR0, "done"): 0}) == ([], [])


def test_a_rates_key_names_its_namespace_and_others_are_not_rates_keys() -> None:
    for ns in ("billing", "a{b}c", "50%|x"):
        key = model.hour_key(ns, HOUR0)
        assert model.parse_rates_key(key) == ns
        assert key.startswith("lw:presence:workers:{")  # the presence keys' slot
    assert model.parse_rates_key("lw:presence:workers:{billing}:members") is None
    assert model.parse_rates_key("lw:presence:workers:{billing}:rates:x") is None


def test_the_minutes_read_are_filled_with_zeros_and_foreign_fields_left_out() -> None:
    found = model.parse_hash({
        f"{HOUR0}|done": "3", f"{HOUR0 + 120}|gave_up": "1", "nonsense": "9",
        f"{HOUR0}|other": "5", f"{HOUR0}|failed": "x",
    })
    assert found == {(HOUR0, "done"): 3, (HOUR0 + 120, "gave_up"): 1}
    shown = model.buckets(found, HOUR0 + 120, 3)
    assert [start for start, _ in shown] == [
        datetime.datetime.fromtimestamp(HOUR0 + 60 * i, tz=datetime.timezone.utc)
        for i in range(3)
    ]
    assert shown[0][1] == {"done": 3, "failed": 0, "gave_up": 0, "handed_over": 0}
    assert shown[1][1] == dict.fromkeys(model.KINDS, 0)
    assert model.total(shown) == {"done": 3, "failed": 0, "gave_up": 1, "handed_over": 0}


def test_the_read_asks_for_a_sane_number_of_minutes() -> None:
    for bad in (0, 181, 1.5, "60"):
        with pytest.raises(InvalidConfig, match="minutes"):
            rates.rates(None, "ns", bad)  # type: ignore[arg-type]


def test_a_grant_is_a_handover_only_after_another_process_s_grant() -> None:
    def run(tokens: list[int], seen: int | None = None) -> Any:
        return SimpleNamespace(tokens=tokens, seen_token=seen)

    def handed(grant: Grant, tokens: list[int], seen: int | None = None) -> bool:
        return RunBase.handed_over(run([*tokens, grant.token], seen), grant)  # type: ignore[arg-type]

    assert not handed(Grant(1, 500), [])  # a first grant, nobody seen before
    assert handed(Grant(2, 501), [])  # attempt 1 was spent elsewhere
    assert not handed(Grant(2, 501), [500])  # this run's own retry
    assert handed(Grant(3, 502), [500])  # attempt 2 was another process's
    assert handed(Grant(1, 501), [], seen=500)  # a holder seen, then a release at its stop
    assert not handed(Grant(1, 501), [], seen=400)
    assert not handed(Grant(2, 501, reentered=True), [])  # a lost reply's retry


def test_status_summary_and_chart_of_the_minutes_read() -> None:
    found = model.buckets({(HOUR0, "done"): 2, (HOUR0 + 60, "failed"): 4,
                           (HOUR0 + 120, "done"): 1}, HOUR0 + 120, 3)
    shown = throughput.summary(found)
    assert shown["last_minute"] == {"done": 0, "failed": 4, "gave_up": 0, "handed_over": 0}
    assert shown["last_hour"] == {"done": 3, "failed": 4, "gave_up": 0, "handed_over": 0}
    line = throughput.lines({"billing": found})
    assert line == ["rates of billing: last minute 0 done, 4 failed, 0 gave up, 0 handed "
                    "over; last hour 3 done, 4 failed, 0 gave up, 0 handed over"]
    assert throughput.lines({"quiet": model.buckets({}, HOUR0, 3)}) == []
    points = throughput.chart(found)
    top, bottom = 1.0, throughput.HEIGHT - 1.0  # the busiest minute reaches the top
    assert points["failed"].split()[1] == f"{throughput.WIDTH / 2:.1f},{top:.1f}"
    assert points["gave_up"].split() == [f"{x:.1f},{bottom:.1f}"
                                         for x in (0, throughput.WIDTH / 2, throughput.WIDTH)]


def test_a_window_counts_every_minute_that_overlaps_it(monkeypatch: pytest.MonkeyPatch) -> None:
    asked: list[list[int]] = []
    kept = {(HOUR0 - 60, "done"): 100, (HOUR0, "done"): 2, (HOUR0 + 60, "done"): 3,
            (HOUR0 + 60, "failed"): 7}

    def read(_client: Any, _ns: str, hours: list[int]) -> dict[tuple[int, str], int]:
        asked.append(hours)
        return kept

    monkeypatch.setattr(steps, "read", read)
    now = HOUR0 + 90  # half way through the second minute of the hour
    assert rates.done_in_window(None, "ns", 60, now=now) == 5  # type: ignore[arg-type]
    assert rates.done_in_window(None, "ns", 30, now=now) == 3  # type: ignore[arg-type]
    assert rates.done_in_window(None, "ns", 91, now=now) == 105  # type: ignore[arg-type]
    assert asked[-1] == [HOUR0 - 3600, HOUR0]  # the window reaches into the hour before
    with pytest.raises(InvalidConfig, match="seconds"):
        rates.done_in_window(None, "ns", 0, now=now)  # type: ignore[arg-type]
