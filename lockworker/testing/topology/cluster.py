"""A Redis Cluster on loopback ports: nodes, slots, replicas, a master's crash."""

from __future__ import annotations

import atexit
import contextlib
import tempfile
from functools import partial
from typing import Any

import redis
from redis.cluster import ClusterNode, RedisCluster

from lockworker.errors import LockworkerError
from lockworker.testing.server import RedisServer, find_server_binary
from lockworker.testing.topology.common import (
    FAST_SYNC,
    HOST,
    NODE_TIMEOUT_MS,
    READY_TIMEOUT,
    SLOTS,
    TopologyError,
    command,
    free_cluster_port,
    in_sync,
    info,
    wait,
)


class Cluster:
    """A Redis Cluster of ``masters`` masters with ``replicas`` replicas each.

    ``nodes`` are :class:`RedisServer` objects (``port``, ``client()``, ``running``);
    node ``i * (1 + replicas)`` is the ``i``-th master at the start and the next
    ``replicas`` nodes are its replicas.
    """

    def __init__(self, masters: int = 3, replicas: int = 0, *, binary: str | None = None) -> None:
        if masters < 1 or replicas < 0:
            raise ValueError("a cluster needs at least one master and replicas >= 0")
        self.master_count = masters
        self.replica_count = replicas
        self.binary = binary or find_server_binary()
        self.nodes: list[RedisServer] = []
        self._dir: tempfile.TemporaryDirectory[str] | None = None
        self._served: dict[int, list[int]] = {}

    @property
    def url(self) -> str:
        """``redis://127.0.0.1:<port>`` of the first node (``RedisCluster.from_url``)."""
        return f"redis://{HOST}:{self.nodes[0].port}"

    @property
    def masters(self) -> list[RedisServer]:
        """The running nodes that serve slots now (roles change after a failover)."""
        return [n for n in self.nodes if n.running and self._role(n) == "master"]

    def _role(self, node: RedisServer) -> str:
        with contextlib.closing(node.client(socket_timeout=2.0)) as client:
            return str(info(client, "replication")["role"])

    def client(self, **kwargs: Any) -> RedisCluster:
        """A new cluster client, bootstrapped from every running node."""
        startup = [
            ClusterNode(HOST, n.port)  # type: ignore[no-untyped-call]
            for n in self.nodes if n.running
        ]
        return RedisCluster(startup_nodes=startup, **kwargs)

    def start(self, timeout: float = READY_TIMEOUT) -> Cluster:
        """Start the nodes, create the cluster and wait until every node says ok."""
        if self.nodes:
            return self
        self._dir = tempfile.TemporaryDirectory(prefix="lockworker-cluster-")
        atexit.register(self.stop)
        try:
            for _ in range(self.master_count * (1 + self.replica_count)):
                self.nodes.append(self._start_node(self._dir.name))
            self._create(timeout)
        except BaseException:
            self.stop()
            raise
        return self

    def _start_node(self, directory: str) -> RedisServer:
        for _ in range(5):
            port = free_cluster_port()
            node = RedisServer(self.binary, extra_args=(
                "--cluster-enabled", "yes",
                "--cluster-config-file", f"{directory}/nodes-{port}.conf",
                "--cluster-node-timeout", str(NODE_TIMEOUT_MS),
                *FAST_SYNC,
            ))
            with contextlib.suppress(LockworkerError):
                return node.start(port=port)
            node.close()  # taken between the check and the bind: another pair
        raise TopologyError(f"{self.binary} did not start as a cluster node")

    def _create(self, timeout: float) -> None:
        group = 1 + self.replica_count
        masters = self.nodes[::group]
        clients = [n.client(decode_responses=True) for n in self.nodes]
        try:
            ids = [str(command(c, "CLUSTER", "MYID")) for c in clients]
            bounds = [SLOTS * i // len(masters) for i in range(len(masters) + 1)]
            for i, node in enumerate(masters):
                client = clients[self.nodes.index(node)]
                _add_slots(client, bounds[i], bounds[i + 1] - 1)
                command(client, "CLUSTER", "SET-CONFIG-EPOCH", i + 1)
            for node in self.nodes[1:]:
                command(clients[0], "CLUSTER", "MEET", HOST, node.port)
            everyone = set(ids)
            for client in clients:
                wait("every node knows every other", partial(_knows, client, everyone), timeout)
            for index, client in enumerate(clients):
                if index % group:
                    command(client, "CLUSTER", "REPLICATE", ids[index - index % group])
            for index, client in enumerate(clients):
                wait("cluster_state:ok", partial(_cluster_ok, client, len(ids)), timeout)
                if index % group:
                    wait("replica in sync", partial(in_sync, client), timeout)
        finally:
            for client in clients:
                client.close()

    def node_of(self, key: str) -> RedisServer:
        """The node serving ``key``'s slot now, as a running node sees the cluster."""
        live = next(n for n in self.nodes if n.running)
        with contextlib.closing(live.client()) as client:
            slot = int(command(client, "CLUSTER", "KEYSLOT", key))
            for start, end, primary, *_ in command(client, "CLUSTER", "SLOTS"):
                if int(start) <= slot <= int(end):
                    return self._by_port(int(primary[1]))
        raise TopologyError(f"no node serves the slot of {key!r}")

    def replicas_of(self, master: RedisServer) -> list[RedisServer]:
        """The running replicas of ``master``, as it sees them."""
        with contextlib.closing(master.client(decode_responses=True)) as client:
            replication = info(client, "replication")
        ports = [int(v["port"]) for k, v in replication.items() if k.startswith("slave")]
        return [self._by_port(p) for p in ports]

    def _by_port(self, port: int) -> RedisServer:
        return next(n for n in self.nodes if n.port == port)

    def states(self) -> dict[int, str]:
        """``cluster_state`` (``ok`` or ``fail``) as each running node reports it."""
        states = {}
        for node in self.nodes:
            if node.running:
                with contextlib.closing(node.client(decode_responses=True)) as client:
                    states[node.port] = _cluster_info(client).get("cluster_state", "")
        return states

    def kill(self, node: RedisServer) -> None:
        """SIGKILL ``node`` (a crash: no goodbye to the other nodes)."""
        with contextlib.suppress(redis.RedisError), contextlib.closing(node.client()) as c:
            slots = command(c, "CLUSTER", "SLOTS")
            self._served[node.port] = [
                int(start) for start, _, primary, *_ in slots if int(primary[1]) == node.port
            ]
        node.kill()

    def wait_for_failover(self, killed: RedisServer, timeout: float = 20.0) -> RedisServer:
        """Wait until another node serves the slots the killed master served and every
        running node says ``cluster_state:ok``; return that node (the promoted replica)."""
        slots = self._served.get(killed.port)
        if not slots:
            raise TopologyError(f"node {killed.port} was not killed as a master by kill()")
        live = [n for n in self.nodes if n.running]

        def promoted() -> RedisServer | None:
            owner: set[int] = set()
            for node in live:
                with contextlib.closing(node.client(decode_responses=True)) as client:
                    if not _cluster_ok(client, len(self.nodes)):
                        return None
                    for start, end, primary, *_ in command(client, "CLUSTER", "SLOTS"):
                        if int(start) <= slots[0] <= int(end):
                            owner.add(int(primary[1]))
            if len(owner) != 1 or killed.port in owner:
                return None
            return self._by_port(owner.pop())

        return wait("a replica promoted in place of the killed master", promoted, timeout)

    def stop(self) -> None:
        """SIGKILL every node and remove the directory; safe to call twice."""
        nodes, self.nodes = self.nodes, []
        for node in nodes:
            node.kill()
            node.close()
        directory, self._dir = self._dir, None
        if directory is not None:
            directory.cleanup()

    def __enter__(self) -> Cluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _knows(client: redis.Redis, everyone: set[str]) -> bool:
    """True if ``client``'s node has finished its handshake with every node."""
    known = set()
    for line in str(command(client, "CLUSTER", "NODES")).splitlines():
        node_id, _addr, flags = line.split()[:3]
        if "handshake" not in flags and "noaddr" not in flags:
            known.add(node_id)
    return known >= everyone


def _add_slots(client: redis.Redis, first: int, last: int) -> None:
    """Give ``first..last`` to the node: ADDSLOTSRANGE, or ADDSLOTS before Redis 7."""
    try:
        command(client, "CLUSTER", "ADDSLOTSRANGE", first, last)
    except redis.ResponseError:
        command(client, "CLUSTER", "ADDSLOTS", *range(first, last + 1))


def _cluster_info(client: redis.Redis) -> dict[str, str]:
    info = str(command(client, "CLUSTER", "INFO"))
    return dict(line.split(":", 1) for line in info.split() if ":" in line)


def _cluster_ok(client: redis.Redis, count: int) -> bool:
    fields = _cluster_info(client)
    return fields.get("cluster_state") == "ok" and int(fields["cluster_known_nodes"]) >= count
