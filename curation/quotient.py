"""The quotient graph of TopoCurate (methods.md §4): the k rollouts of a task merged into one
graph, for `curation.topology` to score and `curation.graphs` to draw.

Two turns are the same node when they have the same parent node, tool name, canonical
arguments and observation signature (error class plus the normalised result and the state
hash after the turn). Because the parent is part of the key, the graph is a prefix tree (a
DAG whose nodes are equivalent histories). Keys are interned to integers in one pass over
the steps; everything else is numpy over flat arrays, so 100k trajectories index in seconds.

Per node v: visits n(v), successes s(v) and the success potential **(ours)**
Φ(v) = (s(v) + 1) / (n(v) + 2).
"""

from __future__ import annotations

import gc
import json
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from data.records import Trajectory, content_hash

MESSAGE = "<message>"  # a turn with no tool call (a reply to the user)
MALFORMED = "<malformed>"  # a tool call that did not parse


@dataclass
class QuotientIndex:
    """The quotient graphs of all tasks as flat arrays (one root node per task).

    Trajectories are indexed in the order given; steps are contiguous per trajectory.
    """

    task_ids: list[str]  # task index -> task id
    traj_ids: list[str]
    traj_task: np.ndarray  # int, per trajectory
    traj_passed: np.ndarray  # bool
    traj_reference: np.ndarray  # bool
    traj_len: np.ndarray  # int: turns
    traj_leaf: np.ndarray  # int: node the trajectory ends at (its task's root if it has no turns)
    traj_actions: np.ndarray  # int: id of its tool-call sequence (distinct per task)
    step_traj: np.ndarray  # int, per step
    step_node: np.ndarray  # int, per step
    node_parent: np.ndarray  # int, -1 for roots
    node_task: np.ndarray  # int
    node_depth: np.ndarray  # int
    node_error: np.ndarray  # bool
    node_turn: np.ndarray  # int: index into `turns` (-1 for roots)
    turns: list[
        tuple[str, str, str, str, str]
    ]  # (tool, canonical args, error, observation, state hash)
    visits: np.ndarray = field(default_factory=lambda: np.zeros(0))
    successes: np.ndarray = field(default_factory=lambda: np.zeros(0))
    phi: np.ndarray = field(default_factory=lambda: np.zeros(0))

    @property
    def n_nodes(self) -> int:
        return len(self.node_parent)

    def node_key(self, node: int) -> str:
        """The node's content key as methods.md §4 writes it: hash(parent key, tool, canonical
        args, observation signature); a root's key is its task id. Computed on demand."""
        chain = []
        while node >= 0:
            chain.append(node)
            node = int(self.node_parent[node])
        key = "root:" + self.task_ids[int(self.node_task[chain[-1]])]
        for v in reversed(chain[:-1]):
            tool, args, err, obs, state = self.turns[int(self.node_turn[v])]
            key = content_hash([key, tool, args, [err, content_hash(obs), state]])
        return key


def _normaliser(mode: str) -> Any:
    if mode == "exact":
        return lambda text: text
    ws = " ".join

    def norm(text: str) -> str:
        try:
            return json.dumps(
                json.loads(text), sort_keys=True, separators=(",", ":"), ensure_ascii=False
            )
        except (ValueError, TypeError):
            return ws(text.split())

    return norm


def build_index(
    trajectories: list[Trajectory], passed: dict[str, bool], normalize: str = "json"
) -> QuotientIndex:
    """Merge the trajectories of each task into its quotient graph and count Φ.

    `passed` maps trajectory id to its verdict; every trajectory must have one.
    """
    was_enabled = gc.isenabled()
    gc.disable()  # the loop allocates millions of small tuples: no collector passes meanwhile
    try:
        return _build_index(trajectories, passed, normalize)
    finally:
        if was_enabled:
            gc.enable()


def _build_index(
    trajectories: list[Trajectory], passed: dict[str, bool], normalize: str
) -> QuotientIndex:
    norm = _normaliser(normalize)
    dumps = json.JSONEncoder(
        sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str
    ).encode
    obs_memo: dict[str, str] = {}
    turn_ids: dict[tuple[str, str, str, str, str], int] = {}
    node_ids: dict[tuple[int, int], int] = {}
    act_ids: dict[tuple[str, str, str], int] = {}
    act_nodes: dict[tuple[int, int], int] = {}
    task_index: dict[str, int] = {}
    roots: list[int] = []
    node_parent: list[int] = []
    node_task: list[int] = []
    node_depth: list[int] = []
    node_error: list[bool] = []
    node_turn: list[int] = []
    n = len(trajectories)
    traj_task = np.empty(n, dtype=np.int64)
    traj_len = np.empty(n, dtype=np.int64)
    traj_leaf = np.empty(n, dtype=np.int64)
    traj_actions = np.empty(n, dtype=np.int64)
    traj_passed = np.empty(n, dtype=bool)
    traj_reference = np.empty(n, dtype=bool)
    step_node: list[int] = []
    for i, t in enumerate(trajectories):
        ti = task_index.get(t.task_id)
        if ti is None:
            ti = task_index[t.task_id] = len(task_index)
            roots.append(len(node_parent))
            node_parent.append(-1)
            node_task.append(ti)
            node_depth.append(0)
            node_error.append(False)
            node_turn.append(-1)
        try:
            traj_passed[i] = passed[t.id]
        except KeyError:
            raise ValueError(f"trajectory {t.id} has no verdict") from None
        traj_task[i] = ti
        traj_reference[i] = bool(t.reference)
        node = roots[ti]
        depth = 0
        anode = -1 - ti  # action-sequence trie: roots are negative task indices
        for s in t.steps:
            a = s.action
            if a is None:
                name = MALFORMED if s.error else MESSAGE
                args = ""
            else:
                name = a.name
                args = dumps(a.arguments)
            if a is not None or s.error:  # the action signature: calls, their errors, unparsed calls
                ak = (name, args, s.error or "")
                aid = act_ids.get(ak)
                if aid is None:
                    aid = act_ids[ak] = len(act_ids)
                nk = (anode, aid)
                nxt = act_nodes.get(nk)
                if nxt is None:
                    nxt = act_nodes[nk] = len(act_nodes)
                anode = nxt
            raw = s.observation
            obs = obs_memo.get(raw)
            if obs is None:
                obs = obs_memo[raw] = norm(raw)
            err = s.error or ""
            tk = (name, args, err, obs, s.state_hash or "")
            tid = turn_ids.get(tk)
            if tid is None:
                tid = turn_ids[tk] = len(turn_ids)
            key = (node, tid)
            child = node_ids.get(key)
            depth += 1
            if child is None:
                child = node_ids[key] = len(node_parent)
                node_parent.append(node)
                node_task.append(ti)
                node_depth.append(depth)
                node_error.append(bool(err))
                node_turn.append(tid)
            node = child
            step_node.append(node)
        traj_len[i] = depth
        traj_leaf[i] = node
        traj_actions[i] = anode
    lens = traj_len
    index = QuotientIndex(
        task_ids=list(task_index),
        traj_ids=[t.id for t in trajectories],
        traj_task=traj_task,
        traj_passed=traj_passed,
        traj_reference=traj_reference,
        traj_len=lens,
        traj_leaf=traj_leaf,
        traj_actions=traj_actions,
        step_traj=np.repeat(np.arange(n, dtype=np.int64), lens),
        step_node=np.asarray(step_node, dtype=np.int64),
        node_parent=np.asarray(node_parent, dtype=np.int64),
        node_task=np.asarray(node_task, dtype=np.int64),
        node_depth=np.asarray(node_depth, dtype=np.int64),
        node_error=np.asarray(node_error, dtype=bool),
        node_turn=np.asarray(node_turn, dtype=np.int64),
        turns=list(turn_ids),
    )
    _count(index, np.asarray(roots, dtype=np.int64))
    return index


def _count(ix: QuotientIndex, roots: np.ndarray) -> None:
    """Visits, successes and Φ of every node (each trajectory visits a node at most once)."""
    m = ix.n_nodes
    root_of_traj = roots[ix.traj_task]
    w = ix.traj_passed.astype(np.float64)
    visits = np.bincount(ix.step_node, minlength=m) + np.bincount(root_of_traj, minlength=m)
    succ = np.bincount(ix.step_node, weights=w[ix.step_traj], minlength=m) + np.bincount(
        root_of_traj, weights=w, minlength=m
    )
    ix.visits = visits.astype(np.int64)
    ix.successes = np.rint(succ).astype(np.int64)
    ix.phi = (ix.successes + 1.0) / (ix.visits + 2.0)


def task_graph_nodes(ix: QuotientIndex, task_id: str) -> list[dict[str, Any]]:
    """One task's quotient graph as plain node records (for pictures and reports)."""
    try:
        ti = ix.task_ids.index(task_id)
    except ValueError:
        raise KeyError(f"task {task_id!r} is not in the index") from None
    nodes = np.nonzero(ix.node_task == ti)[0]
    end_pass: dict[int, list[bool]] = {}
    for leaf, ok in zip(
        ix.traj_leaf[ix.traj_task == ti], ix.traj_passed[ix.traj_task == ti], strict=True
    ):
        end_pass.setdefault(int(leaf), []).append(bool(ok))
    out = []
    for v in nodes:
        turn = int(ix.node_turn[v])
        tool, args, err, _, _ = ix.turns[turn] if turn >= 0 else ("<start>", "", "", "", "")
        out.append(
            {
                "id": int(v),
                "parent": int(ix.node_parent[v]),
                "depth": int(ix.node_depth[v]),
                "tool": tool,
                "args": args,
                "error": err,
                "visits": int(ix.visits[v]),
                "successes": int(ix.successes[v]),
                "phi": float(ix.phi[v]),
                "ends": end_pass.get(int(v), []),
            }
        )
    return out
