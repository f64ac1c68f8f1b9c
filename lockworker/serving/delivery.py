"""What a source hands ``serve``: :class:`Delivery`, the :class:`Source` protocol, an
iterable as a source, a stream's keys, and how a stream entry's fields become a job
(shared by fan-out and group delivery, sync and asyncio)."""

from __future__ import annotations

import contextlib
import json
import math
import threading
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol

from lockworker.errors import InvalidConfig
from lockworker.model.keys import JobKeys, Space, check_name

STREAMS_NAMESPACE = "streams"


def stream_keys(stream: str) -> JobKeys:
    """The keys of ``stream`` (see :mod:`lockworker.daemons.sources`)."""
    return JobKeys(STREAMS_NAMESPACE, check_name(stream, "stream"), Space.STREAM)


def _noop() -> None:
    """The ``resolved`` callback of sources that keep no position."""


@dataclass(frozen=True)
class Delivery:
    """One job handed out by a source."""

    job_id: str
    payload: Any
    resolved: Callable[[], None] = field(default=_noop, repr=False, compare=False)
    """Called by ``serve`` once the job is resolved for this process (not when stopped)."""
    decoded: bool = field(default=False, repr=False, compare=False)
    """The payload was decoded from strict JSON text (a stream's entry,
    :func:`job_of`): it is already what every process sees, and ``process`` does not
    encode and decode it again (:func:`lockworker.model.codec.payload_view`)."""
    stream: str | None = field(default=None, repr=False, compare=False)
    """The stream the job was read from, if any: a job that gives up in this process
    keeps its payload there, so a reset can add it to this stream again
    (:mod:`lockworker.daemons.redrive`)."""
    entry: str | None = field(default=None, repr=False, compare=False)
    """The stream entry id of a fan-out reader's delivery (None otherwise): a backup
    settles it without a look once its namespace's progress covers it
    (:mod:`lockworker.serving.follow`)."""
    urgent: bool = field(default=False, repr=False, compare=False)
    """Read by a trailing backup because a holder handed a job over
    (:mod:`lockworker.serving.trail`): its deferrals look at it at once."""
    not_done: Callable[[], None] = field(default=_noop, repr=False, compare=False)
    """Called by ``serve`` before ``resolved`` when the job is resolved here otherwise
    than DONE (given up, or skipped as a job that cannot run): a fan-out reader
    records it with the position that passes it, so a backup following the progress
    never reports such a job as done."""


class Source(Protocol):
    """What ``serve`` needs of a source: deliveries until exhausted or ``stop`` is set."""

    def deliveries(self, stop: threading.Event) -> Iterator[Delivery]: ...


class IterableSource:
    """Any iterable of ``(job_id, payload)`` pairs, read lazily."""

    def __init__(self, items: Iterable[Any]) -> None:
        self.items = items

    def deliveries(self, stop: threading.Event) -> Iterator[Delivery]:
        for item in self.items:
            if stop.is_set():
                return
            if not isinstance(item, (tuple, list)) or len(item) != 2:
                raise InvalidConfig(
                    f"source items must be (job_id, payload) pairs, got {item!r}"
                )
            yield Delivery(item[0], item[1])


def as_source(source: object) -> Source:
    """``source`` if it is a :class:`Source`, else an iterable wrapped as one."""
    if hasattr(source, "deliveries"):
        return source
    if isinstance(source, (str, bytes, dict)) or not isinstance(source, Iterable):
        raise InvalidConfig(
            "source must be an iterable of (job_id, payload) pairs or a StreamSource, "
            f"got {type(source).__name__}"
        )
    return IterableSource(source)


Together = Callable[[], contextlib.AbstractContextManager[None]]
"""A source's ``resolving``: reports made inside it may be batched by the source."""


@contextlib.contextmanager
def together(
    resolving: Together | None, failed: Callable[[BaseException], None]
) -> Iterator[None]:
    """Reports made inside go inside the source's ``resolving()``, if it has one.

    ``resolving`` is the source's code, as ``resolved`` is: an error it raises on entry
    or on exit goes to ``failed`` (which stops the serving), never up through the thread
    or task making the reports, whose jobs would then never end. If entering fails, the
    reports are made all the same, one by one."""
    stack = contextlib.ExitStack()
    if resolving is not None:
        try:
            stack.enter_context(resolving())
        except BaseException as exc:
            failed(exc)
    try:
        yield
    finally:
        try:
            stack.close()
        except BaseException as exc:
            failed(exc)


def job_of(fields: dict[str, str]) -> tuple[str, Any] | None:
    """The ``(job_id, payload)`` a stream entry's fields hold, or None if they hold no
    job (no ``job_id``, or a payload that is not JSON): a bad entry."""
    job_id = fields.get("job_id")
    try:
        payload = _STRICT.decode(fields.get("payload", "null"))
    except ValueError:
        return None
    return (job_id, payload) if job_id else None


def _not_json(constant: str) -> Any:
    """``NaN`` and the infinities, which Python's reader takes but strict JSON (and so a
    payload, :func:`lockworker.model.codec.check_payload`) does not: a bad entry."""
    raise ValueError(f"{constant} is not JSON")


def _finite(number: str) -> float:
    """A JSON number as a float, refusing one too large for a float (``1e999`` would be
    infinity, which no payload may hold)."""
    value = float(number)
    if not math.isfinite(value):
        raise ValueError(f"{number} is out of a float's range")
    return value


_STRICT = json.JSONDecoder(parse_constant=_not_json, parse_float=_finite)
"""The one reader of every entry's payload: ``json.loads`` with these hooks would build
a decoder per entry, a third of the cost of reading a small payload."""
