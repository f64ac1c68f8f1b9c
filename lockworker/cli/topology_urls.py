"""Redis Cluster and Sentinel URLs for the command line.

redis-py reads one server from a URL; a cluster or a Sentinel group is several. The
command accepts two more forms (docs/cli.md):

``redis+cluster://[user:password@]host:port[,host:port...][?option=value]``
    a Redis Cluster reached through any of its nodes (``rediss+cluster://`` for TLS);
``redis+sentinel://[user:password@]host:port[,host:port...]/<master>[/<db>]``
    the master that the Sentinels at those addresses name ``<master>``
    (``rediss+sentinel://`` for TLS to the master); ``?sentinel_password=`` if the
    Sentinels ask for one.

The password is the data nodes' (the cluster's, or the master's and replicas').
"""

from __future__ import annotations

import urllib.parse
from dataclasses import dataclass, field
from typing import Any

import redis
from redis.asyncio.cluster import ClusterNode as AsyncClusterNode
from redis.asyncio.cluster import RedisCluster as AsyncRedisCluster
from redis.asyncio.sentinel import Sentinel as AsyncSentinel
from redis.cluster import ClusterNode, RedisCluster
from redis.sentinel import Sentinel

CLUSTER_SCHEMES = ("redis+cluster", "rediss+cluster")
SENTINEL_SCHEMES = ("redis+sentinel", "rediss+sentinel")


@dataclass(frozen=True)
class Topology:
    """A parsed cluster or Sentinel URL."""

    kind: str
    """``cluster`` or ``sentinel``."""
    hosts: tuple[tuple[str, int], ...]
    tls: bool
    username: str | None = None
    password: str | None = None
    master: str = ""
    db: int = 0
    options: dict[str, str] = field(default_factory=dict)


def is_topology(url: str) -> bool:
    return url.partition("://")[0].lower() in CLUSTER_SCHEMES + SENTINEL_SCHEMES


def parse(url: str) -> Topology:
    """The hosts, credentials and master of a cluster or Sentinel URL; ValueError
    saying what is wrong (in words that never contain the password)."""
    scheme, _, rest = url.partition("://")
    scheme = scheme.lower()
    if scheme not in CLUSTER_SCHEMES + SENTINEL_SCHEMES:
        raise ValueError(f"unknown scheme {scheme!r}")
    rest, _, query = rest.partition("?")
    userinfo, at, location = rest.rpartition("@")
    username = password = None
    if at:
        user, colon, secret = userinfo.partition(":")
        username = urllib.parse.unquote(user) or None
        password = urllib.parse.unquote(secret) if colon else None
    netloc, _, path = location.partition("/")
    hosts = tuple(_host(part) for part in netloc.split(","))
    options = {k: v[-1] for k, v in urllib.parse.parse_qs(query).items()}
    kind = "cluster" if scheme in CLUSTER_SCHEMES else "sentinel"
    master, db = "", 0
    if kind == "sentinel":
        parts = [urllib.parse.unquote(p) for p in path.split("/") if p]
        if not parts:
            raise ValueError("a Sentinel URL names the master: .../<master>[/<db>]")
        master = parts[0]
        if len(parts) > 2 or (len(parts) == 2 and not parts[1].isdigit()):
            raise ValueError("after the master only a database number may follow")
        db = int(parts[1]) if len(parts) == 2 else 0
    elif path.strip("/"):
        raise ValueError("a cluster has no database number (only database 0)")
    unknown = set(options) - {"sentinel_password"}
    if unknown:
        raise ValueError(f"unknown option {sorted(unknown)[0]!r}")
    return Topology(kind, hosts, scheme.startswith("rediss"), username, password,
                    master, db, options)


def _host(text: str) -> tuple[str, int]:
    host, colon, port = text.rpartition(":")
    if not colon or not host:
        raise ValueError(f"every address needs host:port, got {text!r}")
    if not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"port must be a number from 1 to 65535, got {port!r}")
    return host.strip("[]"), int(port)


def client(topology: Topology, **kwargs: Any) -> redis.Redis:
    """A client of the cluster, or of the Sentinels' master (``kwargs``: timeouts,
    ``decode_responses``), typed as the ``redis.Redis`` interface lockworker uses."""
    auth: dict[str, Any] = {"username": topology.username, "password": topology.password}
    if topology.kind == "cluster":
        nodes = [
            ClusterNode(host, port)  # type: ignore[no-untyped-call]
            for host, port in topology.hosts
        ]
        cluster = RedisCluster(startup_nodes=nodes, ssl=topology.tls, **auth, **kwargs)
        return cluster  # type: ignore[return-value]
    master: redis.Redis = _master(Sentinel, topology, kwargs)
    return master


def async_client(topology: Topology, **kwargs: Any) -> Any:
    """A ``redis.asyncio`` client of the cluster, or of the Sentinels' master
    (``kwargs`` as for :func:`client`), for the asyncio daemons. Unlike the sync
    cluster client it connects nothing until its first command."""
    if topology.kind == "cluster":
        nodes = [AsyncClusterNode(host, port) for host, port in topology.hosts]
        return AsyncRedisCluster(
            startup_nodes=nodes, ssl=topology.tls, username=topology.username,
            password=topology.password, **kwargs,
        )
    return _master(AsyncSentinel, topology, kwargs)


def _master(sentinel_class: Any, topology: Topology, kwargs: dict[str, Any]) -> Any:
    """The master of a Sentinel URL through ``sentinel_class`` (sync or asyncio: the two
    take the same arguments)."""
    sentinel_kwargs = {
        k: v for k, v in kwargs.items() if k in ("socket_timeout", "socket_connect_timeout")
    }
    if "sentinel_password" in topology.options:
        sentinel_kwargs["password"] = topology.options["sentinel_password"]
    sentinel = sentinel_class(list(topology.hosts), sentinel_kwargs=sentinel_kwargs, **kwargs)
    return sentinel.master_for(
        topology.master, db=topology.db, ssl=topology.tls,
        username=topology.username, password=topology.password, **kwargs,
    )


async def aclose(client: Any) -> None:
    """Close an asyncio client and, for a Sentinel's master, the Sentinels' own clients:
    left open, they are closed only when collected, after the event loop has closed
    (redis-py 5 prints ``RuntimeError: Event loop is closed`` for each)."""
    await client.aclose()
    manager = getattr(getattr(client, "connection_pool", None), "sentinel_manager", None)
    for sentinel in getattr(manager, "sentinels", ()):
        await sentinel.aclose()
