"""Real Redis Cluster and Sentinel topologies on loopback ports, for tests.

Built from the same server binary as :class:`~lockworker.testing.server.RedisServer`
(:func:`~lockworker.testing.server.find_server_binary`); nothing else is needed: no
``redis-cli --cluster``, no container.

- :class:`Cluster`: ``masters * (1 + replicas)`` nodes started with
  ``--cluster-enabled yes``, the 16384 slots split evenly among the masters with
  ``CLUSTER ADDSLOTSRANGE``, joined with ``CLUSTER MEET``, replicas attached with
  ``CLUSTER REPLICATE``; ready once every node knows every other and says
  ``cluster_state:ok``.
- :class:`SentinelGroup`: a master, replicas (``--replicaof``) and sentinels
  (``<binary> sentinel.conf --sentinel``) monitoring it with a quorum of 2; ready once
  every sentinel knows every replica and every other sentinel.

Both are context managers; :meth:`stop` SIGKILLs every process and removes the
temporary directories, and runs at interpreter exit if nobody called it. Nodes have a
one second failure timeout (``cluster-node-timeout``, ``down-after-milliseconds``), so a
killed master is replaced within a few seconds.
"""

from __future__ import annotations

from lockworker.testing.topology.cluster import Cluster
from lockworker.testing.topology.common import TopologyError, free_cluster_port
from lockworker.testing.topology.sentinel import SentinelGroup

__all__ = ["Cluster", "SentinelGroup", "TopologyError", "free_cluster_port"]
