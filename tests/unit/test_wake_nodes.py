"""Where a cluster's wake-up connection goes when its node fails (pure logic)."""

from __future__ import annotations

from dataclasses import dataclass

from lockworker.runtime.wake import other_node


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
