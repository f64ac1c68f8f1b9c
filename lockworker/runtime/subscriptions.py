"""What a wake hub's reader makes of its pub/sub connection: which waiters a message
wakes, and what listens after the connection failed.

Shared by the reader thread (:mod:`lockworker.runtime.wake`) and the asyncio reader
task (:mod:`lockworker.aio.wake`), so both follow one set of rules:

- A wake message wakes its channel's waiters.
- A subscription confirmed wakes its waiters to re-read when it was subscribed again:
  after a break the hub saw (the channel was marked to rejoin), and also when the
  channel was confirmed already. redis-py reconnects a pub/sub connection by itself
  at times (a cluster client that re-reads its slot map marks every connection of
  its nodes' pools to reconnect, the pub/sub's too): it then drops what it had not
  read yet and subscribes anew, and the second confirmation is the only trace of it.
- After a failure, :func:`replacement` says what listens from now on.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from typing import Any, Protocol

import redis

from lockworker.protocol import text

_log = logging.getLogger("lockworker.runtime.wake")


class KeepsMessage:
    """A waiter's event that also keeps the last wake message it was set by (see
    :func:`route`), so the waiter can act on what it says (a failure's due time)
    without asking Redis; mixed into the thread's and the loop's event alike."""

    message: str | None = None

    def heard(self, message: str) -> None:
        self.message = message

    def take(self) -> str | None:
        """The last message heard since the last take, and forget it."""
        message, self.message = self.message, None
        return message


class Settable(Protocol):
    def set(self) -> None: ...

    def is_set(self) -> bool: ...


def route(
    message: dict[str, Any], confirmed: Mapping[str, Settable], rejoin: set[str],
    waiters: Mapping[str, Iterable[Settable]],
) -> None:
    """Act on one pub/sub message: a confirmed subscription (its waiters re-read if it
    was subscribed again), or a wake message (its waiters wake)."""
    kind = message.get("type")
    channel = text(message.get("channel"))
    if kind == "subscribe":
        done = confirmed.get(channel)
        again = done is not None and done.is_set()
        if done is not None:
            done.set()
        if again or channel in rejoin:
            rejoin.discard(channel)
            for event in waiters.get(channel, ()):
                event.set()
    elif kind == "message":
        data = text(message.get("data"))
        for event in waiters.get(channel, ()):
            heard = getattr(event, "heard", None)  # a waiter's event keeps the message
            if heard is not None:
                heard(data)
            event.set()


def replacement(client: Any, pubsub: Any, exc: Exception) -> Any | None:
    """The pub/sub to listen with after ``pubsub`` failed with ``exc`` (None: keep it),
    for the reader thread and the asyncio reader task alike.

    A connection error on one server or through Sentinel keeps it: redis-py reconnects
    (to the master Sentinel names now) and subscribes again. On a cluster it would
    reconnect to the same node, maybe a master that died for good (its replica serves
    its slots now): a new one listens on another node instead. Any node will do, as a
    cluster forwards every PUBLISH to every node. Any other error gets a new one
    (logged): the old one's state can no longer be trusted."""
    if not isinstance(exc, (redis.ConnectionError, redis.TimeoutError, OSError)):
        _log.warning("wake.reader_reset", extra={"error": repr(exc)})
        return client.pubsub()
    get_node = getattr(pubsub, "get_pubsub_node", None)
    failed = None if get_node is None else get_node()
    node = None if failed is None else other_node(client.get_nodes(), failed)
    return None if node is None else client.pubsub(node=node)


def other_node(nodes: list[Any], failed: Any) -> Any | None:
    """The node to listen on instead of ``failed``: the first master after it in ``nodes``
    (a cluster client's), else any other; the next failure moves on past a dead one."""
    names = [node.name for node in nodes]
    start = names.index(failed.name) + 1 if failed.name in names else 0
    others = [n for n in nodes[start:] + nodes[:start] if n.name != failed.name]
    masters = [n for n in others if getattr(n, "server_type", None) == "primary"]
    return (masters or others or [None])[0]
