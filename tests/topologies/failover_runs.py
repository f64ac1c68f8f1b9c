"""What the failover tests share: hooks that record every run, and the run's verdicts."""

from __future__ import annotations

import collections
import itertools
import threading
from collections.abc import Callable, MutableMapping
from typing import Any

import lockworker

GATE_TIMEOUT = 30.0


class Runs:
    """Every start of ``on_acquired``: job id -> the fencing tokens its hooks saw, in
    the order the hooks started.

    With ``gate_after`` set, the runs after the first ``gate_after`` hold in their hook
    until :meth:`open` (or a deadline): the test crashes a server while every slot of
    every worker holds a job, so the crash falls mid-run whatever the machine's speed.
    """

    def __init__(self, gate_after: int | None = None) -> None:
        self.mutex = threading.Lock()
        self.tokens: dict[str, list[int]] = collections.defaultdict(list)
        self.payloads: dict[str, Any] = {}
        self.started = 0
        self.held = 0
        self.gate_after = gate_after
        self._gate = threading.Event()

    def hook(self, job: lockworker.Job) -> None:
        with self.mutex:
            self.tokens[job.id].append(job.token)
            self.payloads[job.id] = job.payload
            self.started += 1
            hold = self.gate_after is not None and self.started > self.gate_after
            self.held += hold
        if hold and self._gate.wait(GATE_TIMEOUT):
            with self.mutex:
                self.held -= 1

    def open(self) -> None:
        self._gate.set()

    def holding(self, count: int) -> Callable[[], bool]:
        """A wait_for predicate: ``count`` hooks hold at the gate."""
        return lambda: self.held >= count

    def ran_twice(self) -> list[str]:
        with self.mutex:
            return sorted(job for job, tokens in self.tokens.items() if len(tokens) > 1)

    def went_backwards(self) -> list[str]:
        """Job ids whose hooks saw a token not above the one seen before."""
        with self.mutex:
            return sorted(
                job for job, tokens in self.tokens.items()
                if any(later <= earlier for earlier, later in itertools.pairwise(tokens))
            )


def retried_errors(logged: list[MutableMapping[str, Any]]) -> collections.Counter[str]:
    """The kinds of Redis errors the workers retried and reported (``redis.retry``)."""
    return collections.Counter(
        str(e.get("error", "")).split(":", 1)[0] for e in logged if e["event"] == "redis.retry"
    )


def serve_in_thread(
    worker: lockworker.Worker, source: Any, concurrency: int
) -> tuple[threading.Thread, list[BaseException]]:
    """``worker.serve(source)`` in a thread; what it raised lands in the list."""
    raised: list[BaseException] = []

    def run() -> None:
        try:
            worker.serve(source, concurrency=concurrency)
        except BaseException as exc:  # reported to the test
            raised.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, raised
