"""Where lockworker's events go: standard logging records, or the application's structlog."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator
from typing import Any

import pytest
import structlog

from lockworker.cli import logs
from lockworker.runtime import events
from lockworker.testing import capture_events


@pytest.fixture(autouse=True)
def _structlog_unconfigured() -> Iterator[None]:
    """Each test starts with structlog as an application that never configured it."""
    was_configured, saved = structlog.is_configured(), structlog.get_config()
    structlog.reset_defaults()
    yield
    if was_configured:
        structlog.configure(**saved)
    else:
        structlog.reset_defaults()


@pytest.fixture
def records() -> Iterator[list[logging.LogRecord]]:
    """The records reaching the ``lockworker`` logger tree, every level."""
    got: list[logging.LogRecord] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            got.append(record)

    root = logging.getLogger("lockworker")
    handler, level = Keep(), root.level
    root.addHandler(handler)
    root.setLevel(logging.DEBUG)
    yield got
    root.removeHandler(handler)
    root.setLevel(level)


def log_something(log: Any) -> None:
    log.info("thing.happened", token=7)


def test_a_record_carries_the_event_and_its_fields(records: list[logging.LogRecord]) -> None:
    log = events.logger(events.LOCK, None, lock="res", namespace="ns").bind(owner="me")
    log_something(log)
    (record,) = records
    assert record.name == "lockworker.lock" and record.levelno == logging.INFO
    assert record.getMessage() == "thing.happened"
    assert (record.lock, record.namespace, record.owner, record.token) == (  # type: ignore[attr-defined]
        "res", "ns", "me", 7
    )
    assert record.funcName == "log_something"  # the caller, not lockworker's plumbing


def test_levels_below_the_loggers_are_dropped_before_any_work(
    records: list[logging.LogRecord],
) -> None:
    logging.getLogger("lockworker").setLevel(logging.INFO)
    log = events.logger(events.WORKER, None, job_id="j")
    log.debug(events.RENEWED)
    log.info(events.DONE)
    assert [r.getMessage() for r in records] == ["job.done"]


def test_fields_named_like_record_attributes_are_renamed(
    records: list[logging.LogRecord],
) -> None:
    events.logger(events.LEADER, None).warning("x", name="boss", message="m", lineno=3)
    (record,) = records
    assert record.name == "lockworker.daemons.leader"
    assert (record.name_, record.message_, record.lineno_) == ("boss", "m", 3)  # type: ignore[attr-defined]


def test_exception_attaches_the_exception(records: list[logging.LogRecord]) -> None:
    log = events.logger(events.SERVE, None)
    try:
        raise ValueError("bad")
    except ValueError:
        log.exception("serve.job_error", job_id="j")
    (record,) = records
    assert record.levelno == logging.ERROR and record.exc_info is not None
    assert record.exc_info[0] is ValueError


def test_every_logger_is_under_lockworker() -> None:
    assert all(name.startswith("lockworker.") for name in events.LOGGERS)
    assert len(set(events.LOGGERS)) == len(events.LOGGERS)


def test_structlog_configured_after_the_logger_was_built_gets_the_events(
    records: list[logging.LogRecord],
) -> None:
    log = events.logger(events.LOCK, None, lock="res")
    with capture_events() as captured:
        log.debug("lock.acquired", token=1)
    assert captured == [
        {"lock": "res", "token": 1, "event": "lock.acquired", "log_level": "debug"}
    ]
    assert records == []
    out = io.StringIO()
    structlog.configure(
        processors=[structlog.processors.JSONRenderer()],
        logger_factory=structlog.PrintLoggerFactory(out),
        wrapper_class=structlog.make_filtering_bound_logger(logging.INFO),
    )
    log.debug("lock.acquired", token=2)  # filtered by the application's structlog
    log.info("lock.extended", token=2)
    assert [json.loads(line) for line in out.getvalue().splitlines()] == [
        {"lock": "res", "token": 2, "event": "lock.extended"}
    ]
    structlog.reset_defaults()
    log.info("lock.extended", token=3)
    assert [r.token for r in records] == [3]  # type: ignore[attr-defined]


def test_a_logger_passed_by_the_application_gets_every_event(
    records: list[logging.LogRecord],
) -> None:
    seen: list[tuple[str, dict[str, Any]]] = []

    class Mine:
        def __init__(self, context: dict[str, Any]) -> None:
            self.context = context

        def bind(self, **more: Any) -> Mine:
            return Mine({**self.context, **more})

        def debug(self, event: str, **fields: Any) -> None:
            seen.append((event, {**self.context, **fields}))

    events.logger(events.LOCK, Mine({}), lock="res").debug("lock.acquired", token=1)
    assert seen == [("lock.acquired", {"lock": "res", "token": 1})]
    assert records == []


def test_the_cli_renders_library_events_and_plain_records_alike() -> None:
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    first, out = io.StringIO(), io.StringIO()
    try:
        logs.configure("json", "info", first)
        logs.configure("json", "info", out)  # again: replaces its handler
        assert [h.get_name() for h in root.handlers].count(logs.HANDLER_NAME) == 1
        events.logger(events.WORKER, None, job_id="j").info(events.DONE, attempt=1)
        events.logger(events.WORKER, None).debug(events.RENEWED)
        logging.getLogger("myapp").warning("disk %s", "full", extra={"free": 0})
    finally:
        root.handlers[:] = handlers
        root.setLevel(level)
    assert first.getvalue() == ""
    done, plain = (json.loads(line) for line in out.getvalue().splitlines())
    assert list(done) == ["job_id", "attempt", "event", "level", "timestamp"]
    assert (done["event"], done["level"], done["attempt"]) == ("job.done", "info", 1)
    assert (plain["event"], plain["level"], plain["logger"], plain["free"]) == (
        "disk full", "warning", "myapp", 0
    )


def test_capture_events_leaves_structlog_unconfigured_as_it_found_it(
    records: list[logging.LogRecord],
) -> None:
    log = events.logger(events.SEMAPHORE, None, semaphore="pool")
    with capture_events() as captured:
        log.debug("semaphore.acquired")
    assert [e["event"] for e in captured] == ["semaphore.acquired"]
    assert not structlog.is_configured() and records == []
    log.debug("semaphore.released")
    assert [r.getMessage() for r in records] == ["semaphore.released"]
