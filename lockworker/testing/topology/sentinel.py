"""A master, its replicas and the sentinels that fail it over, on loopback ports."""

from __future__ import annotations

import atexit
import contextlib
import subprocess
import tempfile
from functools import partial
from pathlib import Path
from typing import Any

import redis
from redis.sentinel import Sentinel

from lockworker.testing.server import RedisServer, find_server_binary, free_port
from lockworker.testing.topology.common import (
    DOWN_AFTER_MS,
    FAILOVER_TIMEOUT_MS,
    FAST_SYNC,
    HOST,
    READY_TIMEOUT,
    command,
    in_sync,
    info,
    wait,
)


class SentinelGroup:
    """A master, ``replicas`` replicas and ``sentinels`` sentinels watching it as
    ``master_name`` (quorum 2, down after 1 s)."""

    def __init__(
        self, replicas: int = 2, sentinels: int = 3, master_name: str = "lockworker", *,
        binary: str | None = None,
    ) -> None:
        if replicas < 1 or sentinels < 2:
            raise ValueError("a failover needs a replica and at least two sentinels")
        self.replica_count = replicas
        self.sentinel_count = sentinels
        self.master_name = master_name
        self.binary = binary or find_server_binary()
        self.servers: list[RedisServer] = []
        """The master first, then the replicas, as started (roles change in a failover)."""
        self.sentinel_ports: list[int] = []
        self._sentinels: list[subprocess.Popen[bytes]] = []
        self._dir: tempfile.TemporaryDirectory[str] | None = None

    def start(self, timeout: float = READY_TIMEOUT) -> SentinelGroup:
        """Start everything; wait until each sentinel knows every replica and sentinel."""
        if self.servers:
            return self
        self._dir = tempfile.TemporaryDirectory(prefix="lockworker-sentinel-")
        atexit.register(self.stop)
        try:
            self.servers.append(RedisServer(self.binary, extra_args=FAST_SYNC).start())
            master = self.servers[0].port
            for _ in range(self.replica_count):
                replica = RedisServer(
                    self.binary, extra_args=(*FAST_SYNC, "--replicaof", HOST, str(master))
                )
                self.servers.append(replica.start())
            for server in self.servers[1:]:
                with contextlib.closing(server.client(decode_responses=True)) as client:
                    wait("replica in sync", partial(in_sync, client), timeout)
            for _ in range(self.sentinel_count):
                self._start_sentinel(self._dir.name, master)
            for port in self.sentinel_ports:
                wait("sentinel sees the group", partial(self._sees_all, port), timeout)
        except BaseException:
            self.stop()
            raise
        return self

    def _start_sentinel(self, directory: str, master: int) -> None:
        port = free_port()
        name = self.master_name
        conf = Path(directory) / f"sentinel-{port}.conf"
        conf.write_text(
            f"port {port}\nbind {HOST}\ndir {directory}\nlogfile sentinel-{port}.log\n"
            f"sentinel monitor {name} {HOST} {master} 2\n"
            f"sentinel down-after-milliseconds {name} {DOWN_AFTER_MS}\n"
            f"sentinel failover-timeout {name} {FAILOVER_TIMEOUT_MS}\n"
            f"sentinel parallel-syncs {name} 1\n"
        )
        process = subprocess.Popen(
            [self.binary, str(conf), "--sentinel"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=directory,
        )
        self._sentinels.append(process)
        self.sentinel_ports.append(port)

    def _sees_all(self, port: int) -> bool:
        with contextlib.closing(redis.Redis(HOST, port, decode_responses=True)) as client:
            state = command(client, "SENTINEL", "MASTER", self.master_name)
        fields = dict(zip(state[::2], state[1::2], strict=True)) if isinstance(state, list) \
            else dict(state)
        return (
            int(fields["num-slaves"]) >= self.replica_count
            and int(fields["num-other-sentinels"]) >= self.sentinel_count - 1
        )

    @property
    def sentinels(self) -> list[tuple[str, int]]:
        """The sentinels' addresses, for ``redis.sentinel.Sentinel``."""
        return [(HOST, port) for port in self.sentinel_ports]

    def sentinel_client(self, **kwargs: Any) -> Sentinel:
        """``redis.sentinel.Sentinel`` over every sentinel; ``kwargs`` go to the
        connections (``socket_timeout`` defaults to 2 s, ``decode_responses``...)."""
        options = {"socket_timeout": 2.0, **kwargs}
        return Sentinel(self.sentinels, **options)  # type: ignore[no-untyped-call]

    def master_client(self, **kwargs: Any) -> redis.Redis:
        """A client of whichever server the sentinels name the master (after a failover
        too): ``Sentinel(...).master_for(master_name)``."""
        sentinel = self.sentinel_client(**kwargs)
        client: redis.Redis = sentinel.master_for(self.master_name)  # type: ignore[no-untyped-call]
        return client

    def master_address(self) -> tuple[str, int] | None:
        """The master's address if every running sentinel names the same one now."""
        named = set()
        for port in self.sentinel_ports:
            with contextlib.closing(redis.Redis(HOST, port, socket_timeout=2.0)) as client:
                host, master = command(
                    client, "SENTINEL", "GET-MASTER-ADDR-BY-NAME", self.master_name
                )
            named.add((host.decode() if isinstance(host, bytes) else str(host), int(master)))
        return named.pop() if len(named) == 1 else None

    def master(self) -> RedisServer:
        """The server every sentinel names the master now (waits for them to agree)."""
        address = wait("the sentinels agree on a master", self.master_address, READY_TIMEOUT)
        return next(s for s in self.servers if s.port == address[1])

    def kill_master(self) -> tuple[str, int]:
        """SIGKILL the current master; return its address."""
        server = self.master()
        server.kill()
        return HOST, server.port

    def wait_for_failover(self, timeout: float = 30.0) -> tuple[str, int]:
        """Wait until every sentinel names the same running server master, and that
        server says it is one; return its address."""

        def promoted() -> tuple[str, int] | None:
            address = self.master_address()
            server = next((s for s in self.servers if address and s.port == address[1]), None)
            if server is None or not server.running:
                return None
            with contextlib.closing(server.client(decode_responses=True)) as client:
                return address if info(client, "replication")["role"] == "master" else None

        return wait("a replica promoted by the sentinels", promoted, timeout)

    def stop(self) -> None:
        """SIGKILL every server and sentinel, remove the directory; safe to call twice."""
        processes, self._sentinels = self._sentinels, []
        for process in processes:
            process.kill()
            process.wait()
        servers, self.servers = self.servers, []
        for server in servers:
            server.kill()
            server.close()
        directory, self._dir = self._dir, None
        if directory is not None:
            directory.cleanup()

    def __enter__(self) -> SentinelGroup:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
