"""What a source hands ``serve``: :class:`Delivery`, the :class:`Source` protocol, and
how a stream entry's fields become a job (shared by fan-out and group delivery)."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol


def _noop() -> None:
    """The ``resolved`` callback of sources that keep no position."""


@dataclass(frozen=True)
class Delivery:
    """One job handed out by a source."""

    job_id: str
    payload: Any
    resolved: Callable[[], None] = field(default=_noop, repr=False, compare=False)
    """Called by ``serve`` once the job is resolved for this process (not when stopped)."""


class Source(Protocol):
    """What ``serve`` needs of a source: deliveries until exhausted or ``stop`` is set."""

    def deliveries(self, stop: threading.Event) -> Iterator[Delivery]: ...


def job_of(fields: dict[str, str]) -> tuple[str, Any] | None:
    """The ``(job_id, payload)`` a stream entry's fields hold, or None if they hold no
    job (no ``job_id``, or a payload that is not JSON): a bad entry."""
    job_id = fields.get("job_id")
    try:
        payload = json.loads(fields.get("payload", "null"))
    except ValueError:
        return None
    return (job_id, payload) if job_id else None
