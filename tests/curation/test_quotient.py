"""The quotient graph of TopoCurate: rollouts of a task merged into a prefix tree of
equivalent histories, with visits, successes and Φ per node."""

from __future__ import annotations

import pytest

from curation.quotient import MALFORMED, MESSAGE, build_index, task_graph_nodes
from tests.curation.rollouts import MSG, index, task_a, traj


def test_quotient_graph_by_hand() -> None:
    """Task A's nodes, visits, successes and Φ (`task_a`'s docstring)."""
    trajs, passed = task_a()
    ix = index(trajs, passed)
    assert ix.n_nodes == 10  # root + n1..n9
    listed = task_graph_nodes(ix, "A")
    nodes = {(n["depth"], n["tool"], n["args"], n["error"]): n for n in listed}
    root = nodes[(0, "<start>", "", "")]
    n1 = nodes[(1, "get_user", '{"id":"u1"}', "")]
    n2 = nodes[(1, "get_user", '{"id":"u2"}', "tool_error")]
    n4 = nodes[(2, "book", '{"flight":"f2","n":2}', "")]
    n7 = nodes[(2, "get_user", '{"id":"u1"}', "")]  # same call as n1, other parent: another node
    assert (root["visits"], root["successes"]) == (4, 3) and root["phi"] == pytest.approx(4 / 6)
    assert (n1["visits"], n1["successes"]) == (3, 2) and n1["phi"] == pytest.approx(3 / 5)
    assert n2["phi"] == pytest.approx(2 / 3) and n4["phi"] == pytest.approx(1 / 3)
    assert n7["parent"] == n2["id"] and n7["id"] != n1["id"]
    leaf_ends = sorted(tuple(n["ends"]) for n in listed if n["ends"])
    assert leaf_ends == [(False,), (True,), (True, True)]


def test_node_key_is_canonical() -> None:
    """Argument order and JSON whitespace do not split a node; a different result does."""
    a = traj("K", 0, [("f", {"x": 1, "y": 2}, None, '{"a": 1, "b": 2}')])
    b = traj("K", 1, [("f", {"y": 2, "x": 1}, None, '{"b":2,"a":1}')])
    c = traj("K", 2, [("f", {"x": 1, "y": 2}, None, '{"a": 1, "b": 3}')])
    ix = index([a, b, c], [True, True, False])
    assert ix.traj_leaf[0] == ix.traj_leaf[1] != ix.traj_leaf[2]
    assert ix.node_key(int(ix.traj_leaf[0])) != ix.node_key(int(ix.traj_leaf[2]))
    assert ix.node_key(int(ix.traj_leaf[0])) == index([b], [True]).node_key(
        1
    )  # stable content key
    exact = build_index([a, b], {a.id: True, b.id: True}, normalize="exact")
    assert exact.traj_leaf[0] != exact.traj_leaf[1]


def test_replies_unparsed_calls_and_empty_rollouts() -> None:
    """A reply to the user and a call that did not parse are nodes of their own; a rollout
    with no turns ends at its task's root; a task not in the index is a KeyError."""
    empty, talk = traj("M", 0, []), traj("M", 1, [MSG])
    unparsed = traj("M", 2, [(None, {}, "bad_json", "")])
    ix = index([empty, talk, unparsed], [False, True, False])
    nodes = {n["tool"]: n for n in task_graph_nodes(ix, "M")}
    assert set(nodes) == {"<start>", MESSAGE, MALFORMED} and nodes[MALFORMED]["error"] == "bad_json"
    root = nodes["<start>"]
    assert list(ix.traj_len) == [0, 1, 1] and int(ix.traj_leaf[0]) == root["id"]
    assert (root["visits"], root["successes"], root["ends"]) == (3, 1, [False])
    assert root["phi"] == pytest.approx(2 / 5) and nodes[MESSAGE]["phi"] == pytest.approx(2 / 3)
    assert ix.traj_actions[0] == ix.traj_actions[1] != ix.traj_actions[2]  # a reply is no action
    with pytest.raises(KeyError, match="not in the index"):
        task_graph_nodes(ix, "nope")
