"""Test helpers: wait on conditions with deadlines, never on fixed sleeps."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
import shutil
import statistics
import subprocess
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any, TypeVar

import pytest

from lockworker.model.codec import Holder, LockValue
from lockworker.model.keys import JobKeys
from lockworker.model.presence import presence_keys
from lockworker.model.state import Grant
from lockworker.protocol import LockProtocol, presence
from lockworker.serving.delivery import Delivery

T = TypeVar("T")


def _checked(predicate: Callable[[], T], timeout: float, deadline: float) -> T | None:
    """``predicate()`` if truthy, None if not yet; fails once ``deadline`` passed."""
    value = predicate()
    if value:
        return value
    if time.monotonic() >= deadline:
        raise AssertionError(f"condition not met within {timeout}s: {predicate}")
    return None


def wait_for(predicate: Callable[[], T], timeout: float = 10.0, interval: float = 0.005) -> T:
    """Poll ``predicate`` until it returns a truthy value; fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while (value := _checked(predicate, timeout, deadline)) is None:
        time.sleep(interval)
    return value


async def until(predicate: Callable[[], T], timeout: float = 10.0) -> T:
    """:func:`wait_for` for a coroutine: polls without blocking the event loop."""
    deadline = time.monotonic() + timeout
    while (value := _checked(predicate, timeout, deadline)) is None:
        await asyncio.sleep(0.005)
    return value


def present(client: Any, namespace: str, owner: str) -> bool:
    """Whether ``owner``'s worker is registered in ``namespace`` (its presence). A backup
    started once the primary is registered defers to it from its first job; one started
    before relies on its start-up grace (``backup_delay``), which a test with a short
    delay on a loaded machine must not: it starts the backup once the primary is here."""
    found = presence.read(client, presence_keys(namespace))
    return any(r.member.owner == owner for r in found)


def in_thread(fn: Callable[[], Any]) -> tuple[threading.Thread, dict[str, Any]]:
    """Run ``fn`` in a daemon thread; its result (or exception) lands in the dict."""
    box: dict[str, Any] = {}

    def run() -> None:
        try:
            box["result"] = fn()
        except BaseException as exc:  # reported to the test, not lost in the thread
            box["error"] = exc

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, box


LEASE = 5000
RETENTION = 60_000


def who(owner: str) -> Holder:
    """The holder a test calls ``owner``: one run per label, so the same label re-enters."""
    return Holder(owner, hashlib.sha256(owner.encode()).hexdigest()[:16])


def grant(protocol: LockProtocol, keys: JobKeys, owner: str, max_attempts: int = 3,
          lease_ms: int = LEASE) -> Grant:
    """Acquire, asserting the lease was granted."""
    result = protocol.acquire(keys, who(owner), lease_ms, max_attempts, RETENTION)
    assert isinstance(result, Grant), result
    return result


def held(g: Grant, owner: str) -> LockValue:
    """The lock value ``owner`` holds after ``g``."""
    return who(owner).value(g.token, g.attempt)


def reap(procs: Iterable[subprocess.Popen[Any]]) -> None:
    """Kill what still runs of ``procs`` and wait for every one of them (test teardown)."""
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=10)


TIMEOUTS = (0.05, 0.2, 0.35) * 3
"""Each timeout three times: the server's tick (100 ms at its default hz) would make a
late answer late by about 50 ms on average, whatever the phase."""


def lateness(timeouts: Sequence[float]) -> list[float]:
    """How late plain timed waits of these lengths come back on this machine now: the
    scheduling delay that no timed acquire can beat."""
    late = []
    for timeout in timeouts:
        began = time.monotonic()
        threading.Event().wait(timeout)
        late.append(time.monotonic() - began - timeout)
    return late


NOISE = 0.0005
"""Seconds by which the median of timed acquires' lateness may exceed a plain timed
wait's: the two are measured at other moments of a busy machine."""


def assert_on_time(overshoots: list[float], baseline: list[float]) -> None:
    """Back by the deadline: typically no later than a plain timed wait comes back
    (the medians of ``overshoots`` and ``baseline``, so one return delayed by a loaded
    machine does not count), and never early by more than the way back from the
    server (a few ms: 20 ms at most). An acquire that waited until its deadline and
    then made its last round trips came back a few ms late every time: its median sat
    a millisecond or more above the baseline's, past the half millisecond allowed for
    the two medians' own noise on a loaded machine."""
    assert statistics.median(overshoots) <= max(0.0, statistics.median(baseline)) + NOISE, (
        sorted(overshoots), sorted(baseline))
    assert min(overshoots) >= -0.02, sorted(overshoots)


ROUNDS = 3
"""Rounds of timed acquires :func:`on_time` measures at most."""


def on_time(measure: Callable[[], tuple[list[float], list[float]]]) -> None:
    """:func:`assert_on_time` of one of up to :data:`ROUNDS` rounds of ``measure()``
    (its overshoots and a baseline measured beside them): a pause of the machine in one
    round (a slow scheduler tick, a collection) does not fail the check, while an
    acquire that comes back late, or early, every time fails every round."""
    failures: list[str] = []
    for _ in range(ROUNDS):
        try:
            assert_on_time(*measure())
            return
        except AssertionError as exc:
            failures.append(str(exc))
    raise AssertionError(f"late or early in each of {ROUNDS} rounds: {failures}")


def sh(*cmd: str | Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    """Run ``cmd`` in a clean environment (no PYTHONPATH leading back to a source tree)
    and return what it printed; fail with its last output if it did not exit 0."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    out = subprocess.run(
        [str(c) for c in cmd], cwd=cwd, capture_output=True, text=True, timeout=120,
        check=False, env=env,
    )
    assert out.returncode == 0, f"{cmd}:\n{out.stdout[-2000:]}\n{out.stderr[-2000:]}"
    return out


CI_ENV = "LOCKWORKER_CI"
"""Set by ``.ci/run``: there, a test whose system tool is missing fails instead of skipping."""


def need_binary(name: str, package: str) -> str:
    """The path of the system tool ``name``; skips the test (saying which Debian
    ``package`` provides it) where it is not installed, but fails it under ``.ci/run``
    (``$LOCKWORKER_CI``), which installs it, so CI never passes by skipping."""
    found = shutil.which(name)
    if found:
        return found
    why = f"{name} is not installed (Debian: apt-get install {package})"
    if os.environ.get(CI_ENV):
        pytest.fail(f"{why}; ${CI_ENV} is set, so .ci/run should have installed it")
    pytest.skip(why)


class AtOnce:
    """Counts the hooks running at once, from any thread: ``most`` is the peak, what a
    concurrency bound is checked against."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.active = 0
        self.most = 0

    @contextlib.contextmanager
    def running(self) -> Iterator[None]:
        """Around a hook's body."""
        with self._lock:
            self.active += 1
            self.most = max(self.most, self.active)
        try:
            yield
        finally:
            with self._lock:
                self.active -= 1


class ReportFailed(RuntimeError):
    """A source's own bug: its report of a resolved job raises."""


class FailingReports:
    """A source of the user's own (:class:`lockworker.serving.delivery.Source`) whose
    reports fail where ``fails`` says: ``resolved`` of job-3, or its ``resolving()``
    (around reports made together) on entry or on exit."""

    FAILS = ("resolved", "resolving on entry", "resolving on exit")

    def __init__(self, fails: str, jobs: int = 8) -> None:
        assert fails in self.FAILS, fails
        self.fails = fails
        self.ids = [f"job-{i}" for i in range(jobs)]

    def delivery(self, job_id: str) -> Delivery:
        return Delivery(job_id, None, resolved=lambda: self.report(job_id))

    def report(self, job_id: str) -> None:
        if self.fails == "resolved" and job_id == "job-3":
            raise ReportFailed(f"cannot record {job_id}")

    @contextlib.contextmanager
    def resolving(self) -> Iterator[None]:
        if self.fails == "resolving on entry":
            raise ReportFailed("cannot begin a batch of reports")
        yield
        if self.fails == "resolving on exit":
            raise ReportFailed("cannot end a batch of reports")

    def deliveries(self, stop: threading.Event) -> Iterator[Delivery]:
        return iter([self.delivery(job_id) for job_id in self.ids])


SHARED_THREADS = frozenset({"lockworker-nudge", "lockworker-redlock"})
"""Threads one process keeps for all its objects, started by whichever test came first
(the Redlock pool's are checked idle instead)."""
LEFT_DEADLINE = 10.0
"""Seconds a test's threads get to end after it: generous, as they end in milliseconds
once the wake hubs are closed and no Redlock call is left."""


def leftovers(before: set[threading.Thread], deadline: float = LEFT_DEADLINE) -> list[str]:
    """What is still running of what a test started, once the wake hubs are closed and
    ``deadline`` seconds passed (at once when nothing is): thread names, and the
    Redlock calls not finished."""
    from lockworker.primitives import masters
    from lockworker.runtime import wake

    wake.close_all()
    end = time.monotonic() + deadline
    while True:
        threads = sorted(
            t.name for t in threading.enumerate()
            if t not in before and t.is_alive() and t.name not in SHARED_THREADS
        )
        calls = masters.pending()
        left = threads + ([f"{calls} Redlock call(s)"] if calls else [])
        if not left or time.monotonic() >= end:
            return left
        threading.Event().wait(0.01)
