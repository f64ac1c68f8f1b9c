"""The one log vocabulary: the event names lockworker emits, and the loggers that emit them.

Events are emitted only by the control layer (worker, leader, primitives), never by the
protocol. Each job's events carry ``job_id``, ``namespace``, ``owner``, and where they
apply ``attempt`` and ``token``.

lockworker configures no logging, neither ``logging`` nor structlog. Where an event goes
is decided when it is logged, not when the object logging it was built:

- If the application configured structlog (``structlog.configure``, or
  ``structlog.testing.capture_logs`` in a test, or the ``lockworker`` CLI), the event
  goes through structlog's global configuration, as ``structlog.get_logger(name)``
  would send it.
- Otherwise it goes to the standard :mod:`logging` logger of its product (:data:`LOGGERS`:
  ``lockworker.daemons.worker``, ``lockworker.lock``, ...). The record's message is the
  event name and its fields (``job.failed job_id=a attempt=1 ...``: :class:`Fields`),
  so any handler shows what happened; the event name is ``record.event`` and every
  field an attribute (``record.job_id``), for handlers that keep them apart. Without
  any logging configured nothing is printed but WARNING and above, on stderr, by
  Python's last-resort handler.

Observers (:func:`add_observer`) see every event besides: any level, wherever it goes,
including the events of an application's own ``logger=``. They are what
:mod:`lockworker.metrics` counts from; with none registered, an event pays one test of
a module global for them.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from functools import cache
from types import MappingProxyType
from typing import Any, Protocol

import structlog

from lockworker.model.redrive import Redrive
from lockworker.model.state import Renewal
from lockworker.runtime.message import RESERVED, Fields, template

ACQUIRED = "job.acquired"
LOCKED = "job.locked"
RENEWED = "lease.renewed"
DONE = "job.done"
DONE_ELSEWHERE = "job.done_elsewhere"
FAILED = "job.failed"
LOST = "lease.lost"
RELEASED = "job.released"
GAVE_UP = "job.gave_up"
STOPPED = "job.stopped"
REDIS_UNAVAILABLE = "redis.unavailable"
REDIS_RETRY = "redis.retry"
PARKED = "job.parked"
RESET = "job.reset"
"""A reset made the job pending again (``Worker.reset``/``reset_all``): ``redriven``
names the stream it was added to again, or is None; a reset job that nothing will run
(resolved, and no payload kept to re-add it) is a WARNING with ``resubmit``, the
command that submits it again (:mod:`lockworker.daemons.redrive`)."""
HELD_HERE = "job.held_here"
"""An acquire re-entered a lease that another call of the same worker holds (or may
hold): this call treats the job as held by another process (debug)."""
HOOK_ERROR = "hook.error"
STATE_LOST = "server.state_lost"
"""A lease's job state vanished while the lease was held: the server lost its data
(a restart without persistence, a failover to a replica that had not received it).
Work finished before the loss may run again; see docs/guarantees.md."""

SERVER_CHECK = "server.check"
"""A check of the server's settings (eviction, persistence, evicted keys...) at a
daemon's start and every few minutes: ERROR for a setting that voids the guarantees
(an evicting policy), WARNING for one that weakens them, DEBUG when all is well;
fields ``check``, ``status``, ``server``, ``value``, ``consequence``, ``fix``."""

ALL = (
    ACQUIRED, LOCKED, RENEWED, DONE, DONE_ELSEWHERE, FAILED, LOST, RELEASED, GAVE_UP,
    STOPPED, REDIS_UNAVAILABLE, REDIS_RETRY, HOOK_ERROR, STATE_LOST, PARKED, SERVER_CHECK,
    RESET,
    HELD_HERE,
)

# Logger names: one per product, under the ``lockworker`` logger.
WORKER = "lockworker.daemons.worker"
SERVE = "lockworker.daemons.serve"
SOURCES = "lockworker.daemons.sources"
LEADER = "lockworker.daemons.leader"
LOCK = "lockworker.lock"
SEMAPHORE = "lockworker.semaphore"
REDLOCK = "lockworker.redlock"
ONCE = "lockworker.once"
CLI = "lockworker.cli"
LOGGERS = (WORKER, SERVE, SOURCES, LEADER, LOCK, SEMAPHORE, REDLOCK, ONCE, CLI)

_DEBUG, _INFO, _WARNING, _ERROR = logging.DEBUG, logging.INFO, logging.WARNING, logging.ERROR
_is_configured = structlog.is_configured


Observer = Callable[[str, str, Mapping[str, Any]], None]
"""``observer(logger_name, event, fields)``: ``fields`` is the bound context merged with
the event's own fields (read-only)."""

_observers: tuple[Observer, ...] = ()
"""Every registered observer. Replaced, never mutated, so an event in flight iterates a
consistent tuple without a lock; its truth is the only cost an event pays with none."""
_observers_lock = threading.Lock()
_reported: list[Observer] = []
"""Observers whose failure was reported already: an observer that raises on every event
must not flood the log."""
_problems = logging.getLogger("lockworker")


def add_observer(observer: Observer) -> None:
    """Call ``observer(logger_name, event, fields)`` for every event lockworker emits
    from now on, in the emitting thread, at every level, whether or not logging or
    structlog shows it. Keep it fast and thread-safe: it runs inside the library's
    loops (and heartbeat threads). An exception it raises is caught and reported once
    on the ``lockworker`` logger; the library carries on. Adding one twice has no
    further effect."""
    global _observers  # noqa: PLW0603 - the one global the hot path reads
    with _observers_lock:
        if observer not in _observers:
            _observers = (*_observers, observer)


def remove_observer(observer: Observer) -> None:
    """Stop calling ``observer``; nothing happens if it was not registered."""
    global _observers  # noqa: PLW0603
    with _observers_lock:
        _observers = tuple(o for o in _observers if o != observer)
        _reported[:] = [o for o in _reported if o != observer]


def _notify(name: str, context: Mapping[str, Any], event: str, fields: Mapping[str, Any]) -> None:
    """Give every observer the event; one that raises is reported once and skipped."""
    merged = MappingProxyType({**context, **fields})
    for observer in _observers:
        try:
            observer(name, event, merged)
        except Exception:
            if observer not in _reported:
                _reported.append(observer)
                _problems.error(
                    "event observer %r raised on %s (reported once; lockworker goes on)",
                    observer, event, exc_info=True,
                )


class EventLog(Protocol):
    """What lockworker calls on a logger: structlog's bound-logger interface, in part."""

    def bind(self, **context: Any) -> Any: ...
    def debug(self, event: str, **fields: Any) -> Any: ...
    def info(self, event: str, **fields: Any) -> Any: ...
    def warning(self, event: str, **fields: Any) -> Any: ...
    def error(self, event: str, **fields: Any) -> Any: ...


class EventLogger:
    """A structlog-style bound logger that decides at each call where the event goes.

    Cheap when the level is off: with structlog not configured, a debug event costs
    one flag test and ``Logger.isEnabledFor`` (cached by ``logging``).
    """

    __slots__ = ("_bound", "_context", "_proxy", "_std", "name")

    def __init__(self, name: str) -> None:
        self.name = name
        self._std = logging.getLogger(name)
        # A lazy proxy reads structlog's configuration when it is used, not now.
        self._proxy: Any = structlog.get_logger(name)
        self._context: dict[str, Any] = {}
        self._bound: tuple[Any, ...] | None = None

    def bind(self, **context: Any) -> EventLogger:
        """A logger with ``context`` added to this one's (sharing its loggers)."""
        bound = EventLogger.__new__(EventLogger)
        bound.name, bound._std, bound._proxy = self.name, self._std, self._proxy
        bound._context = {**self._context, **context}
        bound._bound = None
        return bound

    def debug(self, event: str, **fields: Any) -> None:
        self._event(_DEBUG, "debug", event, fields)

    def info(self, event: str, **fields: Any) -> None:
        self._event(_INFO, "info", event, fields)

    def warning(self, event: str, **fields: Any) -> None:
        self._event(_WARNING, "warning", event, fields)

    def error(self, event: str, **fields: Any) -> None:
        self._event(_ERROR, "error", event, fields)

    def exception(self, event: str, **fields: Any) -> None:
        """An error event with the exception being handled."""
        fields.setdefault("exc_info", True)
        self._event(_ERROR, "error", event, fields)

    def _event(self, level: int, method: str, event: str, fields: dict[str, Any]) -> None:
        """The one path of every level: observers, then structlog if configured, else
        ``logging`` if the level is enabled (one flag test and a cached level check
        when it is off)."""
        if _observers:
            _notify(self.name, self._context, event, fields)
        if _is_configured():
            getattr(self._structlog(), method)(event, **fields)
        elif self._std.isEnabledFor(level):
            self._emit(level, event, fields)

    def _structlog(self) -> Any:
        """A structlog logger bound to this context, built for the configuration in force.

        Rebuilt whenever ``structlog.configure`` changed the processors, wrapper class,
        logger factory or context class since; ``capture_logs`` edits the processor
        list in place, which a bound logger sees anyway.
        """
        config = structlog.get_config()
        procs, wrapper = config["processors"], config["wrapper_class"]
        factory, context_class = config["logger_factory"], config["context_class"]
        cached = self._bound
        if (
            cached is not None
            and cached[0] is procs
            and cached[1] is wrapper
            and cached[2] is factory
            and cached[3] is context_class
        ):
            return cached[4]
        log = self._proxy.bind(**self._context)
        self._bound = (procs, wrapper, factory, context_class, log)
        return log

    def _emit(self, level: int, event: str, fields: dict[str, Any]) -> None:
        """The record: message ``event key=value ...`` (formatted only if a handler
        shows it: :class:`Fields` is its argument), ``record.event``, and the fields
        as attributes."""
        extra = {**self._context, **fields}
        exc_info = extra.pop("exc_info", None)
        stack_info = bool(extra.pop("stack_info", False))
        args: tuple[Fields, ...] = (Fields(extra),) if extra else ()
        if not RESERVED.isdisjoint(extra):
            extra = {(f"{k}_" if k in RESERVED else k): v for k, v in extra.items()}
        # The name alone too, as structured handlers want it: structlog's ExtraAdder
        # makes it the ``event`` key, in place of the message with the fields it adds
        # anyway. (Fields leaves it out of the message.)
        extra["event"] = event
        # stacklevel 4: the record names the lockworker function that logged the event,
        # not this method or the level method that called it.
        self._std.log(
            level, template(event) if args else event, *args, exc_info=exc_info,
            stack_info=stack_info, extra=extra, stacklevel=4,
        )

    def __repr__(self) -> str:
        return f"<EventLogger {self.name} {self._context!r}>"


class Forwarding:
    """An application's own logger (``logger=``) as lockworker uses it: every call goes
    to it unchanged, and observers see the events too.

    Observers get the context lockworker bound (not whatever the application's logger
    carries of its own), like the events of an :class:`EventLogger`. Anything else
    asked of it is the application logger's answer.
    """

    __slots__ = ("_base", "_context", "name")

    def __init__(self, name: str, base: Any, context: dict[str, Any]) -> None:
        self.name = name
        self._base = base
        self._context = context

    def bind(self, **context: Any) -> Forwarding:
        """The application's logger bound to ``context``, still observed."""
        return Forwarding(self.name, self._base.bind(**context), {**self._context, **context})

    def debug(self, event: str, **fields: Any) -> Any:
        return self._forward("debug", self._context, event, fields)

    def info(self, event: str, **fields: Any) -> Any:
        return self._forward("info", self._context, event, fields)

    def warning(self, event: str, **fields: Any) -> Any:
        return self._forward("warning", self._context, event, fields)

    def error(self, event: str, **fields: Any) -> Any:
        return self._forward("error", self._context, event, fields)

    def exception(self, event: str, **fields: Any) -> Any:
        return self._forward("exception", {**self._context, "exc_info": True}, event, fields)

    def _forward(
        self, method: str, context: dict[str, Any], event: str, fields: dict[str, Any]
    ) -> Any:
        if _observers:
            _notify(self.name, context, event, fields)
        return getattr(self._base, method)(event, **fields)

    def __getattr__(self, attribute: str) -> Any:
        return getattr(self._base, attribute)

    def __repr__(self) -> str:
        return f"<Forwarding {self.name} to {self._base!r}>"


@cache
def _root(name: str) -> EventLogger:
    return EventLogger(name)


def logger(name: str, base: Any = None, **context: Any) -> EventLog:
    """The logger for ``name`` (one of :data:`LOGGERS`) bound to ``context``.

    ``base``, a structlog-style logger the application passed (``logger=``), is used
    instead when given: it is bound to ``context`` and gets every event, exactly as
    lockworker logs it; observers see those events too (:class:`Forwarding`).
    """
    if base is not None:
        return Forwarding(name, base.bind(**context), context)
    return _root(name).bind(**context)


def reset(log: EventLog, done: Redrive) -> None:
    """Log what a reset did (:data:`RESET`); nothing for a reset refused."""
    if not done.reset:
        return
    if done.stranded:
        log.warning(RESET, job_id=done.job_id, redriven=None, resubmit=done.resubmit())
    else:
        log.info(RESET, job_id=done.job_id, redriven=done.stream)


def describe(exc: BaseException) -> str:
    """An exception for a log field: its ``repr``, unless that drops the message (redis-py
    8's errors print as ``server:ResponseError``): then ``Type('message')``."""
    shown = repr(exc)
    message = str(exc)
    if message and message not in shown:
        return f"{type(exc).__name__}({message!r})"
    return shown


def renewed(renewal: Renewal, log: EventLog) -> bool:
    """True if ``renewal`` renewed the lease; a lease lost with the job's state (the
    server lost its data) is logged as :data:`STATE_LOST` on the way."""
    if renewal is Renewal.STATE_LOST:
        log.error(STATE_LOST, step="renew")
    return renewal is Renewal.RENEWED
