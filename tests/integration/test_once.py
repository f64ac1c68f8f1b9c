"""compute_once on a real server: one computation per stampede, wake-ups, takeover, errors."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
import redis
from helpers import wait_for

from lockworker import AcquireTimeout, InvalidConfig
from lockworker.primitives import compute_once
from lockworker.primitives.once import _OnceLock  # the lock a computing process holds
from lockworker.testing import capture_events


def test_computes_once_then_serves_the_cache(
    redis_client: redis.Redis, namespace: str
) -> None:
    calls: list[int] = []

    def fn() -> dict[str, Any]:
        calls.append(1)
        return {"rows": [1, 2, 3], "name": "report"}

    with capture_events() as logged:
        first = compute_once(redis_client, "k", fn, ttl=5.0, namespace=namespace)
    second = compute_once(redis_client, "k", fn, ttl=5.0, namespace=namespace)
    assert first == second == {"rows": [1, 2, 3], "name": "report"}
    assert len(calls) == 1
    assert "once.computed" in [e["event"] for e in logged]
    assert 0 < redis_client.pttl(f"lw:once:{namespace}:{{k}}:value") <= 5000


def test_stampede_runs_fn_once_and_wakes_waiters(redis_server: Any, namespace: str) -> None:
    """Eight callers at once: one computes; the seven others are woken by the result."""
    calls: list[float] = []
    release = threading.Event()
    results: list[Any] = []
    returned: list[float] = []
    record = threading.Lock()

    def fn() -> list[int]:
        calls.append(time.monotonic())
        assert release.wait(20)
        return [42]

    def caller() -> None:
        client = redis_server.client(decode_responses=True)
        value = compute_once(client, "hot", fn, ttl=30.0, lock_timeout=30.0,
                             namespace=namespace)
        with record:
            results.append(value)
            returned.append(time.monotonic())
        client.close()

    threads = [threading.Thread(target=caller) for _ in range(8)]
    for t in threads:
        t.start()
    probe = redis_server.client(decode_responses=True)
    wake = f"lw:once:{namespace}:{{hot}}:wake"
    # Everyone is either computing or subscribed and waiting (a server-side fact).
    wait_for(lambda: len(calls) == 1 and probe.pubsub_numsub(wake)[0][1] >= 8, timeout=15)
    stored = time.monotonic()
    release.set()
    for t in threads:
        t.join(30)
    assert len(calls) == 1
    assert results == [[42]] * 8
    # Woken by the message, long before the 30 s lock would have expired.
    assert max(returned) - stored < 5.0
    probe.close()


def test_errors_propagate_and_are_not_cached(redis_client: redis.Redis, namespace: str) -> None:
    def boom() -> int:
        raise ValueError("backend down")

    with pytest.raises(ValueError, match="backend down"):
        compute_once(redis_client, "k", boom, ttl=5.0, namespace=namespace)
    assert redis_client.get(f"lw:once:{namespace}:{{k}}:value") is None
    assert not redis_client.exists(f"lw:once:{namespace}:{{k}}:lock")
    assert compute_once(redis_client, "k", lambda: 7, ttl=5.0, namespace=namespace) == 7


def test_waiter_computes_when_the_computing_caller_fails(
    redis_server: Any, namespace: str
) -> None:
    started = threading.Event()
    fail = threading.Event()
    outcome: dict[str, Any] = {}

    def failing() -> int:
        started.set()
        assert fail.wait(20)
        raise RuntimeError("first caller failed")

    def first() -> None:
        client = redis_server.client(decode_responses=True)
        try:
            compute_once(client, "k", failing, ttl=5.0, namespace=namespace)
        except RuntimeError as exc:
            outcome["first"] = exc
        client.close()

    thread = threading.Thread(target=first)
    thread.start()
    assert started.wait(10)
    client = redis_server.client(decode_responses=True)
    second = threading.Thread(
        target=lambda: outcome.setdefault(
            "second", compute_once(client, "k", lambda: "mine", ttl=5.0, namespace=namespace)
        )
    )
    second.start()
    # Both are subscribed: the failing computer and the waiter behind it.
    wait_for(lambda: client.pubsub_numsub(f"lw:once:{namespace}:{{k}}:wake")[0][1] >= 2, timeout=10)
    fail.set()
    thread.join(20)
    second.join(20)
    assert isinstance(outcome["first"], RuntimeError)
    assert outcome["second"] == "mine"
    client.close()


def test_takes_over_when_the_computing_process_dies(
    redis_client: redis.Redis, namespace: str
) -> None:
    """A lock held and never released nor renewed (its process died) expires; we compute."""
    dead = _OnceLock(redis_client, "k", namespace=namespace, ttl=0.4)
    assert dead.acquire()
    started = time.monotonic()
    assert compute_once(redis_client, "k", lambda: 1, ttl=5.0, namespace=namespace) == 1
    assert 0.2 <= time.monotonic() - started < 4.0


def test_timeout_while_another_computes(redis_client: redis.Redis, namespace: str) -> None:
    holder = _OnceLock(redis_client, "k", namespace=namespace, ttl=10.0)
    assert holder.acquire()
    with pytest.raises(AcquireTimeout):
        compute_once(redis_client, "k", lambda: 1, ttl=5.0, timeout=0.2, namespace=namespace)
    holder.release()


class Upper:
    """A pluggable codec: strings stored upper-cased (to show it is used both ways)."""

    def encode(self, value: Any) -> str:
        return str(value).upper()

    def decode(self, raw: str | bytes) -> Any:
        return raw.decode() if isinstance(raw, bytes) else raw


def test_pluggable_codec_and_bytes_clients(redis_server: Any, namespace: str) -> None:
    raw_client = redis_server.client()  # bytes replies
    assert compute_once(raw_client, "c", lambda: "abc", ttl=5.0, codec=Upper(),
                        namespace=namespace) == "ABC"
    assert compute_once(raw_client, "j", lambda: {"a": 1}, ttl=5.0, namespace=namespace) == {
        "a": 1
    }
    assert compute_once(raw_client, "j", lambda: None, ttl=5.0, namespace=namespace) == {"a": 1}
    raw_client.close()


def test_unserialisable_value_is_an_error_not_cached(
    redis_client: redis.Redis, namespace: str
) -> None:
    with pytest.raises(TypeError, match="JSON"):
        compute_once(redis_client, "k", lambda: {1, 2}, ttl=5.0, namespace=namespace)
    assert redis_client.get(f"lw:once:{namespace}:{{k}}:value") is None


@pytest.mark.parametrize(
    ("kwargs", "error", "argument"),
    [
        ({"ttl": 0}, InvalidConfig, "ttl"),
        ({"ttl": 1, "lock_timeout": -1}, InvalidConfig, "lock_timeout"),
        ({"ttl": 1, "timeout": "x"}, InvalidConfig, "timeout"),
        ({"ttl": 1, "codec": object()}, TypeError, "codec"),
        ({"ttl": 1, "fn": 3}, TypeError, "fn"),
        ({"ttl": 1, "key": ""}, InvalidConfig, "key"),
    ],
)
def test_bad_arguments(
    redis_client: redis.Redis, kwargs: dict[str, Any], error: type[Exception], argument: str
) -> None:
    args: dict[str, Any] = {"key": "k", "fn": lambda: 1, **kwargs}
    with pytest.raises(error, match=argument):
        compute_once(redis_client, args.pop("key"), args.pop("fn"), **args)
