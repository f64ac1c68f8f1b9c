"""Test helpers: wait on conditions with deadlines, never on fixed sleeps."""

from __future__ import annotations

import hashlib
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

from lockworker.model.codec import Holder, LockValue
from lockworker.model.keys import JobKeys
from lockworker.model.state import Grant
from lockworker.protocol import LockProtocol

T = TypeVar("T")


def wait_for(predicate: Callable[[], T], timeout: float = 10.0, interval: float = 0.005) -> T:
    """Poll ``predicate`` until it returns a truthy value; fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"condition not met within {timeout}s: {predicate}")
        time.sleep(interval)


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
