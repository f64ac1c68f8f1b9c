"""The fault proxy itself: each mode does what the battery relies on."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from lockworker.testing import RedisServer

from .proxy import Proxy

pytestmark = pytest.mark.faults


@pytest.fixture
def proxy(redis_server: RedisServer) -> Iterator[Proxy]:
    with Proxy(redis_server.port) as p:
        yield p


def client_of(proxy: Proxy) -> redis.Redis:
    return redis.Redis(
        host="127.0.0.1", port=proxy.port, socket_timeout=0.3, socket_connect_timeout=0.3,
        retry=Retry(NoBackoff(), 0),
    )


def test_pass_forwards_both_ways(proxy: Proxy) -> None:
    client = client_of(proxy)
    assert client.ping()
    client.set("faults-proxy-key", "v")
    assert client.get("faults-proxy-key") == b"v"
    assert proxy.connections == 1


def test_blackhole_swallows_requests_until_pass_again(proxy: Proxy) -> None:
    client = client_of(proxy)
    assert client.ping()
    proxy.blackhole()
    with pytest.raises(redis.TimeoutError):
        client.ping()
    proxy.pass_through()
    assert client.ping()  # a new connection (the client dropped the timed-out one)


def test_close_drops_connections_and_refuses_new_ones(proxy: Proxy) -> None:
    client = client_of(proxy)
    assert client.ping()
    proxy.close_all()
    with pytest.raises(redis.ConnectionError):
        client.ping()
    # The proxy's threads notice the closed sockets on their own schedule.
    deadline = time.monotonic() + 5.0
    while proxy.connections and time.monotonic() < deadline:
        time.sleep(0.01)
    assert proxy.connections == 0
    proxy.pass_through()
    assert client.ping()


def test_delay_adds_latency_each_way(proxy: Proxy) -> None:
    client = client_of(proxy)
    assert client.ping()
    proxy.delay_by(100)
    begin = time.monotonic()
    assert client.ping()
    assert time.monotonic() - begin >= 0.2
    proxy.pass_through()
    begin = time.monotonic()
    assert client.ping()
    assert time.monotonic() - begin < 0.1


def test_connections_beyond_the_bound_are_closed(redis_server: RedisServer) -> None:
    with Proxy(redis_server.port, max_connections=1) as proxy:
        first, second = client_of(proxy), client_of(proxy)
        assert first.ping()
        with pytest.raises(redis.ConnectionError):
            second.ping()
        assert proxy.refused >= 1
