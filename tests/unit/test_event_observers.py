"""Event observers: every event, any level, wherever it goes, and never at the library's cost."""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping
from typing import Any

import pytest
import structlog

from lockworker.runtime import events
from lockworker.testing import capture_events

Seen = list[tuple[str, str, dict[str, Any]]]


@pytest.fixture(autouse=True)
def _clean() -> Iterator[None]:
    """structlog as an application that never configured it; no observer left behind."""
    was_configured, saved = structlog.is_configured(), structlog.get_config()
    structlog.reset_defaults()
    before = events._observers
    yield
    for observer in events._observers:
        if observer not in before:
            events.remove_observer(observer)
    if was_configured:
        structlog.configure(**saved)
    else:
        structlog.reset_defaults()


@pytest.fixture
def seen() -> Iterator[Seen]:
    got: Seen = []

    def observer(name: str, event: str, fields: Mapping[str, Any]) -> None:
        got.append((name, event, dict(fields)))

    events.add_observer(observer)
    yield got
    events.remove_observer(observer)


@pytest.fixture
def records() -> Iterator[list[logging.LogRecord]]:
    """Records reaching the ``lockworker`` logger, WARNING and above only."""
    got: list[logging.LogRecord] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            got.append(record)

    root = logging.getLogger("lockworker")
    handler, level = Keep(), root.level
    root.addHandler(handler)
    root.setLevel(logging.WARNING)
    yield got
    root.removeHandler(handler)
    root.setLevel(level)


def test_an_observer_sees_every_level_even_where_logging_drops_it(
    seen: Seen, records: list[logging.LogRecord]
) -> None:
    log = events.logger(events.WORKER, None, namespace="ns").bind(job_id="j")
    log.debug(events.RENEWED)
    log.info(events.ACQUIRED, token=3)
    log.warning(events.FAILED, error="boom")
    log.error(events.STATE_LOST, step="renew")
    assert [event for _name, event, _fields in seen] == [
        events.RENEWED, events.ACQUIRED, events.FAILED, events.STATE_LOST,
    ]
    assert [getattr(r, "event", None) for r in records] == [events.FAILED, events.STATE_LOST]


def test_an_observer_gets_the_logger_name_and_the_context_merged_with_the_fields(
    seen: Seen,
) -> None:
    log = events.logger(events.LEADER, None, leader="boss", owner="a").bind(token=1)
    log.info("leader.elected", token=2, reentered=False)
    assert seen == [(
        events.LEADER, "leader.elected",
        {"leader": "boss", "owner": "a", "token": 2, "reentered": False},
    )]


def test_an_observer_sees_events_that_structlog_takes(seen: Seen) -> None:
    log = events.logger(events.LOCK, None, lock="res")
    with capture_events() as captured:
        log.info("lock.acquired", token=5)
    assert [e["event"] for e in captured] == ["lock.acquired"]
    assert seen == [(events.LOCK, "lock.acquired", {"lock": "res", "token": 5})]


def test_exception_events_reach_observers_with_exc_info(seen: Seen) -> None:
    try:
        raise RuntimeError("x")
    except RuntimeError:
        events.logger(events.SERVE, None).exception("serve.job_error", job_id="j")
    assert seen == [(events.SERVE, "serve.job_error", {"job_id": "j", "exc_info": True})]


class Recording:
    """An application's structlog-style logger: records what lockworker asks of it."""

    def __init__(self, calls: list[tuple[Any, ...]], context: dict[str, Any]) -> None:
        self.calls = calls
        self.context = context

    def bind(self, **more: Any) -> Recording:
        self.calls.append(("bind", more))
        return Recording(self.calls, {**self.context, **more})

    def info(self, event: str, **fields: Any) -> str:
        self.calls.append(("info", event, fields, self.context))
        return "returned"

    def warning(self, event: str, **fields: Any) -> None:
        self.calls.append(("warning", event, fields, self.context))


def drive(log: events.EventLog) -> Any:
    bound = log.bind(job_id="j")
    bound.warning(events.FAILED, error="boom")
    return bound.info(events.DONE, attempt=1)


def recorder(into: Seen) -> events.Observer:
    def observer(name: str, event: str, fields: Mapping[str, Any]) -> None:
        into.append((name, event, dict(fields)))

    return observer


def test_an_application_logger_gets_the_same_calls_and_observers_see_its_events() -> None:
    plain: list[tuple[Any, ...]] = []
    returned = drive(events.logger(events.WORKER, Recording(plain, {"app": 1}), namespace="ns"))
    seen: Seen = []
    events.add_observer(recorder(seen))
    observed: list[tuple[Any, ...]] = []
    again = drive(events.logger(events.WORKER, Recording(observed, {"app": 1}), namespace="ns"))
    assert observed == plain  # what the application's logger receives is unchanged
    assert returned == again == "returned"
    assert seen == [
        (events.WORKER, events.FAILED, {"namespace": "ns", "job_id": "j", "error": "boom"}),
        (events.WORKER, events.DONE, {"namespace": "ns", "job_id": "j", "attempt": 1}),
    ]


def test_an_observer_that_raises_is_reported_once_and_the_library_goes_on(
    records: list[logging.LogRecord],
) -> None:
    def broken(name: str, event: str, fields: Mapping[str, Any]) -> None:
        raise ValueError("observer bug")

    seen: Seen = []
    events.add_observer(broken)
    events.add_observer(recorder(seen))  # runs after the broken one
    log = events.logger(events.WORKER, None)
    log.warning(events.FAILED, error="a")
    log.warning(events.FAILED, error="b")
    reports = [r for r in records if r.name == "lockworker"]
    assert len(reports) == 1
    assert reports[0].exc_info is not None and "observer bug" in str(reports[0].exc_info[1])
    assert "job.failed" in reports[0].getMessage()
    assert [getattr(r, "event", None) for r in records if r.name == events.WORKER] == [
        events.FAILED
    ] * 2
    assert [fields["error"] for _n, _e, fields in seen] == ["a", "b"]


def test_adding_twice_calls_once_and_removing_stops_the_calls(seen: Seen) -> None:
    (observer,) = events._observers
    events.add_observer(observer)
    log = events.logger(events.ONCE, None)
    log.info("once.computed")
    events.remove_observer(observer)
    events.remove_observer(observer)  # not registered any more: nothing happens
    log.info("once.computed")
    assert [event for _n, event, _f in seen] == ["once.computed"]


def test_without_observers_an_event_never_builds_their_fields(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The no-observer path is one test of a module global: nothing is merged or called."""
    assert events._observers == ()

    def must_not_run(*args: Any) -> None:
        raise AssertionError("observers notified while none is registered")

    monkeypatch.setattr(events, "_notify", must_not_run)
    plain = events.logger(events.WORKER, None, namespace="ns")
    forwarded = events.logger(events.WORKER, Recording([], {}), namespace="ns")
    for log in (plain, forwarded):
        log.info(events.DONE, attempt=1)
        log.warning(events.FAILED, error="x")
