"""What a real server holds, sampled within a budget: estimates close to the truth on
50,000 keys, exact counts on a small server, ``lockworker status`` and its JSON, and
the memory checks against servers with a small ``maxmemory``."""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Iterator, Mapping
from typing import Any

import pytest
import redis

from lockworker.cli.main import main
from lockworker.daemons.sources import stream_keys
from lockworker.model.codec import StateValue
from lockworker.model.footprint import Kind, classify
from lockworker.model.keys import JobKeys
from lockworker.model.servercheck import Status
from lockworker.model.state import JobStatus
from lockworker.runtime import events, footprint, servercheck
from lockworker.testing import FakeClock, RedisServer

KEYS = 50_000
"""Jobs and cache keys filled: with a history for every tenth job, 55,000 keys."""
TOTAL = 55_000


def fill(client: redis.Redis, count: int, *, prefix: str = "") -> None:
    """``count`` keys in one pipeline after another: job states of three namespaces, a
    history for every tenth job, and a tenth of another application's cache keys."""
    pipe = client.pipeline(transaction=False)
    for i in range(count):
        if i % 10 == 9:
            pipe.set(f"{prefix}cache:{i}", "x" * 400)
            continue
        keys = JobKeys.of(f"{prefix}ns-{i % 3}", f"job-{i}")
        value = StateValue(JobStatus.DONE, 1, i + 1, "0123456789abcdef", "host-a")
        pipe.set(keys.state, value.encode(), px=3_600_000)
        if i % 10 == 0:
            pipe.rpush(keys.history, "lw2|1|1|run|1|2|failed|{}", "lw2|2|2|run|3|4|done|{}")
        if len(pipe) >= 5_000:
            pipe.execute()
    pipe.execute()


@pytest.fixture(scope="module")
def full() -> Iterator[RedisServer]:
    with RedisServer() as server:
        client = server.client()
        fill(client, KEYS)
        client.close()
        yield server


def truth(client: redis.Redis) -> tuple[Counter[tuple[str | None, Kind]], Counter[tuple[
        str | None, Kind]]]:
    """Every key's class, and every class's bytes (MEMORY USAGE of every key)."""
    keys = list(client.scan_iter(count=5_000))
    pipe = client.pipeline(transaction=False)
    for key in keys:
        pipe.memory_usage(key)
    counts: Counter[tuple[str | None, Kind]] = Counter()
    sizes: Counter[tuple[str | None, Kind]] = Counter()
    for key, used in zip(keys, pipe.execute(), strict=True):
        cls = classify(key.decode())
        counts[cls] += 1
        sizes[cls] += used
    return counts, sizes


def test_a_sample_of_fifty_thousand_keys_is_close_to_the_truth(full: RedisServer) -> None:
    client = full.client()
    counts, sizes = truth(client)
    started = time.monotonic()
    found = footprint.sample(client, keys=5_000)
    took = time.monotonic() - started
    client.close()
    assert not found.exact and 5_000 <= found.sampled < 6_000
    assert found.total_keys == sum(counts.values())
    assert found.used_memory and found.maxmemory == 0
    shares = {(s.namespace, s.kind): s for s in found.shares}
    assert set(shares) == set(counts)  # no class of this size missed: 3,000+ keys each
    for cls, share in shares.items():
        assert share.keys == pytest.approx(counts[cls], rel=0.25), cls
        assert share.bytes == pytest.approx(sizes[cls], rel=0.35), cls
    assert took < 0.5, took


def test_the_time_budget_is_honoured(full: RedisServer) -> None:
    client = full.client()
    started = time.monotonic()
    found = footprint.sample(client, keys=KEYS, budget=0.01)
    took = time.monotonic() - started
    client.close()
    # One SCAN call and one sizing batch are always made, so figures come back.
    assert 0 < found.sampled <= 15_000 and all(s.bytes is not None for s in found.shares)
    assert took < 0.25, took


def test_a_small_server_is_counted_exactly() -> None:
    with RedisServer() as server:
        client = server.client(decode_responses=True)
        fill(client, 300, prefix="a:{b}%")
        client.xadd(stream_keys("jobs").extra("entries"), {"job_id": "1", "payload": "{}"})
        found = footprint.sample(client)
        client.close()
    assert found.exact and found.sampled == found.total_keys == 270 + 30 + 30 + 1
    shares = {(s.namespace, s.kind): s.keys for s in found.shares}
    assert shares[("a:{b}%ns-0", Kind.JOB_STATE)] == 90
    assert shares[("a:{b}%ns-0", Kind.JOB_HISTORY)] == 10
    assert shares[(None, Kind.OTHER)] == 30
    assert shares[("streams", Kind.STREAM_ENTRIES)] == 1


def test_status_shows_keys_and_bytes_per_namespace_by_kind(
    full: RedisServer, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["status", "--redis", full.url, "--namespace", "ns-1", "--limit", "1"]) == 0
    out = capsys.readouterr().out
    section = out[out.index("server memory: "):]
    assert "(no maxmemory), 55,000 keys" in section.splitlines()[0]
    assert "ns-1       job states" in section and "ns-1       job histories" in section
    assert "ns-0" not in section  # only the namespace asked for
    assert "estimates from a sample of" in section and "of 55,000 keys" in section
    assert main(["status", "--redis", full.url, "--json"]) == 0
    memory = json.loads(capsys.readouterr().out)["memory"]
    assert memory["total_keys"] == TOTAL and not memory["exact"]
    kinds = {(s["namespace"], s["kind"]) for s in memory["shares"]}
    assert ("ns-2", "job_state") in kinds and (None, "other") in kinds


@pytest.fixture
def small() -> Iterator[RedisServer]:
    with RedisServer(extra_args=("--maxmemory", "4mb", "--maxmemory-policy",
                                 "noeviction")) as server:
        yield server


def filled_past(client: redis.Redis, share: float) -> None:
    """Write 10 KiB values until ``used_memory`` passes ``share`` of ``maxmemory``."""
    limit = int(client.config_get("maxmemory")["maxmemory"])
    i = 0
    while int(client.info("memory")["used_memory"]) < share * limit:
        client.set(f"blob:{i}", "x" * 10_240)
        i += 1


def test_check_warns_past_eighty_percent_of_maxmemory(
    small: RedisServer, capsys: pytest.CaptureFixture[str]
) -> None:
    client = small.client(decode_responses=True)
    by_check = {f.check: f for f in servercheck.settings_findings(client)}
    assert by_check["memory"].status is Status.OK and "of 4.0 MiB maxmemory" in by_check[
        "memory"].value
    filled_past(client, 0.85)
    client.close()
    assert main(["check", "--redis", small.url, "--clock-interval", "0.2", "--json"]) == 0
    found = {c["check"]: c for c in json.loads(capsys.readouterr().out)["checks"]}
    assert found["memory"]["status"] == "warning" and found["memory"]["measure"] > 0.8
    assert "of 4.0 MiB maxmemory (8" in found["memory"]["value"]
    assert "lockworker status" in found["memory"]["fix"]
    assert found["memory_growth"]["status"] == "ok"  # nothing written meanwhile


def test_a_daemons_recheck_warns_when_a_day_at_the_rate_keys_grow_would_not_fit(
    small: RedisServer,
) -> None:
    client = small.client(decode_responses=True)
    clock = FakeClock()
    seen: list[tuple[str, str]] = []

    def observer(_name: str, event: str, fields: Mapping[str, Any]) -> None:
        if event == events.SERVER_CHECK:
            seen.append((fields["check"], fields["status"]))

    watch = servercheck.Watch(client, events.logger(events.WORKER), clock)
    events.add_observer(observer)
    try:
        first = {f.check for f in watch.check()}
        assert "memory" in first and "memory_growth" not in first  # one reading: no rate
        fill(client, 1_000)  # 1,100 keys in 5 minutes: 316,800 a day, far past 4 MiB
        clock.advance(servercheck.RECHECK_EVERY)
        growth = next(f for f in watch.check() if f.check == "memory_growth")
        assert growth.status is Status.WARNING, growth
        assert "+1100 keys in 300 s" in growth.value and "over 4.0 MiB maxmemory" in growth.value
        clock.advance(servercheck.RECHECK_EVERY)
        calm = next(f for f in watch.check() if f.check == "memory_growth")
        assert calm.status is Status.OK and "+0 keys" in calm.value
    finally:
        events.remove_observer(observer)
        client.close()
    assert ("memory_growth", "warning") in seen
