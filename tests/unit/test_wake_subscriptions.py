"""What a wake hub's reader makes of its pub/sub connection (pure logic): which
waiters a message wakes, and where a cluster's connection goes when its node fails."""

from __future__ import annotations

import threading
from dataclasses import dataclass

from lockworker.runtime.subscriptions import other_node, route


def confirmation(channel: str) -> dict[str, object]:
    return {"type": "subscribe", "channel": channel, "data": 1}


def test_a_first_confirmation_wakes_nobody_a_message_wakes_its_channel() -> None:
    confirmed = {"a": threading.Event(), "b": threading.Event()}
    waiters = {"a": [threading.Event()], "b": [threading.Event()]}
    route(confirmation("a"), confirmed, set(), waiters)
    assert confirmed["a"].is_set() and not waiters["a"][0].is_set()
    route({"type": "message", "channel": "b", "data": "done"}, confirmed, set(), waiters)
    assert waiters["b"][0].is_set() and not waiters["a"][0].is_set()


def test_a_channel_subscribed_again_wakes_its_waiters_to_re_read() -> None:
    """After a break the hub saw (the channel is to rejoin), and after a reconnect it
    did not see: redis-py subscribed anew by itself, and a second confirmation of a
    confirmed channel is the only trace of the messages dropped meanwhile."""
    confirmed = {"a": threading.Event(), "b": threading.Event()}
    waiters = {"a": [threading.Event()], "b": [threading.Event()]}
    rejoin = {"b"}
    route(confirmation("a"), confirmed, rejoin, waiters)
    route(confirmation("b"), confirmed, rejoin, waiters)
    assert waiters["b"][0].is_set() and rejoin == set()
    assert not waiters["a"][0].is_set()
    route(confirmation("a"), confirmed, rejoin, waiters)  # the reconnect's
    assert waiters["a"][0].is_set()


@dataclass
class Node:
    name: str
    server_type: str = "primary"


def test_the_next_master_after_the_failed_node_masters_before_replicas() -> None:
    a, a1, b, b1, c, c1 = (
        Node("a"), Node("a1", "replica"), Node("b"), Node("b1", "replica"),
        Node("c"), Node("c1", "replica"),
    )
    nodes = [a, a1, b, b1, c, c1]
    assert other_node(nodes, a) is b
    assert other_node(nodes, b) is c
    assert other_node(nodes, c) is a  # round the list
    assert other_node(nodes, a1) is b


def test_a_second_failure_moves_on_past_the_next_dead_node() -> None:
    nodes = [Node("a"), Node("b"), Node("c")]
    moved = other_node(nodes, nodes[0])
    assert moved is nodes[1]
    assert other_node(nodes, moved) is nodes[2]


def test_replicas_when_no_other_master_and_nothing_when_alone() -> None:
    a, a1 = Node("a"), Node("a1", "replica")
    assert other_node([a, a1], a) is a1
    assert other_node([a], a) is None
    assert other_node([], a) is None
    assert other_node([a, a1], Node("gone")) is a  # a node the client forgot
