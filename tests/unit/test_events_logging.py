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
    assert record.event == "thing.happened"  # type: ignore[attr-defined]
    assert record.getMessage() == "thing.happened lock=res namespace=ns owner=me token=7"
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
    assert [r.getMessage() for r in records] == ["job.done job_id=j"]


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


def plain(record: logging.LogRecord) -> str:
    """The record as ``logging.basicConfig`` shows it."""
    return logging.Formatter(logging.BASIC_FORMAT).format(record)


def test_a_plain_handler_shows_the_identifying_fields_first_then_the_others(
    records: list[logging.LogRecord],
) -> None:
    log = events.logger(events.WORKER, None, namespace="digest", owner="host-a:41", run="r9")
    log.bind(job_id="a").bind(attempt=1, token=17).warning(
        events.FAILED, last=False, error="RuntimeError('downstream said no')"
    )
    events.logger(events.LOCK, None).info("lock.plain")
    assert [plain(r) for r in records] == [
        "WARNING:lockworker.daemons.worker:job.failed job_id=a namespace=digest owner=host-a:41"
        " attempt=1 token=17 error=\"RuntimeError('downstream said no')\" run=r9 last=False",
        "INFO:lockworker.lock:lock.plain",
    ]
    assert records[0].msg == "job.failed %s"  # one template per event, for grouping
    assert (records[0].event, records[0].job_id, records[0].last) == (  # type: ignore[attr-defined]
        events.FAILED, "a", False
    )


def test_no_value_can_add_a_field_or_a_line_to_the_message(
    records: list[logging.LogRecord],
) -> None:
    hostile = 'x" job_id=forged\nCRITICAL:lockworker:forged\u2028\x1b[2J'
    events.logger(events.WORKER, None, job_id="j 1").warning(
        "event%s", error=hostile, ids=["1-0", "2-0"], pct="100%", none=None, name="n"
    )
    (record,) = records
    shown = plain(record)
    assert "\n" not in shown and "\u2028" not in shown and "\x1b" not in shown
    assert shown == (
        'WARNING:lockworker.daemons.worker:event%s job_id="j 1" '
        'error="x\\" job_id=forged\\nCRITICAL:lockworker:forged\\u2028\\u001b[2J" '
        "ids=\"['1-0', '2-0']\" pct=\"100%\" none=None name=n"
    )
    assert record.error == hostile  # type: ignore[attr-defined]  # the attribute is intact


def test_a_message_is_rendered_only_when_a_handler_shows_it(
    records: list[logging.LogRecord],
) -> None:
    rendered: list[int] = []

    class Counted:
        def __repr__(self) -> str:
            rendered.append(1)
            return "counted"

    tree = logging.getLogger("lockworker")
    tree.setLevel(logging.INFO)
    tree.propagate = False  # away from the test runner's own handlers, which format
    try:
        log = events.logger(events.WORKER, None, job_id="j")
        log.debug(events.RENEWED, value=Counted())  # level off: no record at all
        log.info(events.ACQUIRED, value=Counted())  # a record that nothing formats
    finally:
        tree.propagate = True
    assert rendered == [] and len(records) == 1
    assert records[0].getMessage() == "job.acquired job_id=j value=counted"
    assert rendered == [1]


def test_a_structured_handler_gets_the_event_name_and_the_fields_apart(
    records: list[logging.LogRecord],
) -> None:
    out = io.StringIO()
    handler = logging.StreamHandler(out)
    handler.setFormatter(structlog.stdlib.ProcessorFormatter(  # as docs/hooks.md shows
        foreign_pre_chain=[structlog.stdlib.ExtraAdder(), structlog.stdlib.add_logger_name],
        processors=[
            structlog.stdlib.ProcessorFormatter.remove_processors_meta,
            structlog.processors.JSONRenderer(),
        ],
    ))
    logging.getLogger("lockworker").addHandler(handler)
    try:
        events.logger(events.WORKER, None, job_id="j1").info(events.DONE, attempt=1)
    finally:
        logging.getLogger("lockworker").removeHandler(handler)
    assert json.loads(out.getvalue()) == {
        "event": "job.done", "job_id": "j1", "attempt": 1, "logger": "lockworker.daemons.worker"
    }


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
    assert [r.getMessage() for r in records] == ["semaphore.released semaphore=pool"]
