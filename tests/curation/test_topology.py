"""TopoCurate on hand-built rollouts whose graph, Φ, EBR, SH and recoveries are worked out
by hand in the comments; selection behaviour; zero-variance drops; graph pictures."""

from __future__ import annotations

import math
import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np
import pytest

from curation.base import get_curator
from curation.graphs import graph_svgs_for, pick_tasks_to_draw, task_graph_svg, write_task_graph
from curation.topology import (
    TopoConfig,
    TopologyCurator,
    build_index,
    sampling_keys,
    task_graph_nodes,
    task_topology,
    top_keys,
    trajectory_scores,
)
from data.records import StateRef, Step, Task, ToolCall, Trajectory, UserScenario, Verdict

# A turn: (tool, args, error, observation); tool None = a plain message to the user.
Turn = tuple[str | None, dict, str | None, str]
OK_U1: Turn = ("get_user", {"id": "u1"}, None, '{"user": "u1"}')
ERR_U2: Turn = ("get_user", {"id": "u2"}, "tool_error", '{"error": "not_found"}')
BOOK_F1: Turn = ("book", {"flight": "f1", "n": 2}, None, '{"booked": "f1"}')
BOOK_F2: Turn = ("book", {"flight": "f2", "n": 2}, None, '{"booked": "f2"}')
MSG: Turn = (None, {}, None, "")


def _task(name: str) -> Task:
    return Task(
        id=name,
        world="airline",
        method="test",
        instruction="do it",
        user=UserScenario(),
        initial_state=StateRef(world="airline", seed=0, scale=1, state_hash="h"),
        target_state_hash="t",
    )


def _traj(task: str, trial: int, turns: list[Turn], reference: bool = False) -> Trajectory:
    steps = [
        Step(
            index=i,
            turn=i,
            action=ToolCall(name=n, arguments=dict(a)) if n else None,
            error=e,
            observation=o,
        )
        for i, (n, a, e, o) in enumerate(turns)
    ]
    return Trajectory(
        id=f"{task}-{trial}{'-ref' if reference else ''}",
        task_id=task,
        trial=trial,
        model="m",
        steps=steps,
        metadata={"reference": True} if reference else {},
    )


def _verdict(t: Trajectory, passed: bool) -> Verdict:
    return Verdict(
        trajectory_id=t.id,
        task_id=t.task_id,
        verifier="state_equivalence",
        verifier_version="1",
        passed=passed,
        score=float(passed),
    )


def task_a() -> tuple[list[Trajectory], list[bool]]:
    """root ─ n1 get(u1) ─ n3 book(f1) ─ n5 msg        r0 ✓, r3 ✓ (same path)
                        └ n4 book(f2) ─ n6 msg        r1 ✗
            └ n2 get(u2)! ─ n7 get(u1) ─ n8 book(f1) ─ n9 msg   r2 ✓
    Φ: root 4/6, n1 3/5, n2 2/3, n3 3/4, n4 1/3, n7..n9 2/3.
    EBR: branching nodes root (0 of 2 failing) and n1 (n4 failing): 1/4.
    SH: successful action sequences {[u1,f1], [u2,u1,f1]} over 3 successes: 2/3.
    Recoveries: r2 has an error turn (n2) followed by a clean one: 1; r0 and r3: 0.
    Diversity: −log(s(leaf)/s(root)): r0, r3 −log(2/3); r2 −log(1/3).
    """
    trajs = [
        _traj("A", 0, [OK_U1, BOOK_F1, MSG]),
        _traj("A", 1, [OK_U1, BOOK_F2, MSG]),
        _traj("A", 2, [ERR_U2, OK_U1, BOOK_F1, MSG]),
        _traj("A", 3, [OK_U1, BOOK_F1, MSG]),
    ]
    return trajs, [True, False, True, True]


def _index(trajs: list[Trajectory], passed: list[bool]):  # noqa: ANN202
    return build_index(trajs, {t.id: p for t, p in zip(trajs, passed, strict=True)})


def test_quotient_graph_by_hand() -> None:
    trajs, passed = task_a()
    ix = _index(trajs, passed)
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
    topo = task_topology(ix)
    assert topo.ebr[0] == pytest.approx(1 / 4)
    assert topo.sh[0] == pytest.approx(2 / 3)
    assert (topo.policy_trials[0], topo.policy_passes[0]) == (4, 3)
    sc = trajectory_scores(ix, TopoConfig())
    assert list(sc.recoveries) == [0, 0, 1, 0]
    assert list(sc.efficiency) == pytest.approx([1.0, 0.0, 0.75, 1.0])
    assert list(sc.diversity) == pytest.approx(
        [-math.log(2 / 3), 0.0, -math.log(1 / 3), -math.log(2 / 3)]
    )
    d = -math.log(2 / 3) / -math.log(1 / 3)
    assert sc.weight[0] == pytest.approx((0 + 1 + d) / 3)
    assert sc.weight[2] == pytest.approx((1 + 0.75 + 1) / 3)


def test_node_key_is_canonical() -> None:
    """Argument order and JSON whitespace do not split a node; a different result does."""
    a = _traj("K", 0, [("f", {"x": 1, "y": 2}, None, '{"a": 1, "b": 2}')])
    b = _traj("K", 1, [("f", {"y": 2, "x": 1}, None, '{"b":2,"a":1}')])
    c = _traj("K", 2, [("f", {"x": 1, "y": 2}, None, '{"a": 1, "b": 3}')])
    ix = _index([a, b, c], [True, True, False])
    assert ix.traj_leaf[0] == ix.traj_leaf[1] != ix.traj_leaf[2]
    assert ix.node_key(int(ix.traj_leaf[0])) != ix.node_key(int(ix.traj_leaf[2]))
    assert ix.node_key(int(ix.traj_leaf[0])) == _index([b], [True]).node_key(
        1
    )  # stable content key
    exact = build_index([a, b], {a.id: True, b.id: True}, normalize="exact")
    assert exact.traj_leaf[0] != exact.traj_leaf[1]


def test_phi_drop_counts_as_setback() -> None:
    """root ─ a ─ b ✓✓ / a ─ c ─ e ✓ / a ─ c ─ f ✗✗.  Φ(a) = 4/7, Φ(c) = 2/5: a drop of 0.171,
    so with δ = 0.1 the success through c─e recovers once; with δ = 0.2 it does not.
    EBR: a (0 of 2 failing), c (f failing) → 1/4; SH: {[a,b], [a,c,e]} / 3 = 2/3."""
    t = [
        ("a", {}, None, "1"),
        ("b", {}, None, "2"),
        ("c", {}, None, "3"),
        ("e", {}, None, "4"),
        ("f", {}, None, "5"),
    ]
    a, b, c, e, f = t
    trajs = [
        _traj("E", 0, [a, b]),
        _traj("E", 1, [a, b]),
        _traj("E", 2, [a, c, e]),
        _traj("E", 3, [a, c, f]),
        _traj("E", 4, [a, c, f]),
    ]
    ix = _index(trajs, [True, True, True, False, False])
    assert list(trajectory_scores(ix, TopoConfig(delta=0.1)).recoveries) == [0, 0, 1, 0, 0]
    assert list(trajectory_scores(ix, TopoConfig(delta=0.2)).recoveries) == [0, 0, 0, 0, 0]
    topo = task_topology(ix)
    assert topo.ebr[0] == pytest.approx(1 / 4) and topo.sh[0] == pytest.approx(2 / 3)


def test_selection_and_drops() -> None:
    a_trajs, a_pass = task_a()
    b_trajs = [_traj("B", 0, [OK_U1, MSG]), _traj("B", 1, [OK_U1, MSG])]  # always passes
    c_trajs = [_traj("C", 0, [ERR_U2, MSG]), _traj("C", 1, [MSG])]  # never passes ...
    c_ref = _traj("C", 0, [OK_U1, BOOK_F1, MSG], reference=True)  # ... but the gold path does
    unverified = _traj("A", 9, [OK_U1])
    trajs = [*a_trajs, *b_trajs, *c_trajs, c_ref, unverified]
    passed = [*a_pass, True, True, False, False, True]
    verdicts = [_verdict(t, p) for t, p in zip(trajs, passed, strict=False)]
    tasks = [_task(n) for n in "ABCD"]  # D has no rollouts
    curator = get_curator("topology")
    assert isinstance(curator, TopologyCurator)
    sel = curator.select(tasks, trajs, verdicts)
    picked = [t.id for t, _ in sel.sft]
    assert picked == [
        "A-0",
        "A-2",
        "B-0",
        "C-0-ref",
    ]  # A's duplicate path A-3 and failure A-1 dropped
    assert sel.drops["sft:unverified"] == 1
    assert sel.drops["sft:failed_verification"] == 3
    assert sel.drops["sft:duplicate_path"] == 2  # A-3, B-1
    assert [p.task.id for p in sel.rl] == ["A"]
    pick = sel.rl[0]
    assert pick.pass_rate == pytest.approx(0.75) and pick.n_trials == 4
    assert (
        pick.reason.startswith("mixed_outcomes")
        and "ebr=0.25" in pick.reason
        and "sh=0.67" in pick.reason
    )
    assert sel.drops["rl:zero_variance_all_passed"] == 1
    assert sel.drops["rl:zero_variance_all_failed"] == 1  # the reference does not count for RL
    assert sel.drops["rl:no_rollouts"] == 1
    reasons = curator.result.sft_reasons
    assert set(reasons) == set(picked)
    # A-0 is A's cleanest passing row (no failed call), kept whatever its weight; the recovery
    # path takes the other place by weight; C's only passing row is its reference
    assert reasons["A-2"].startswith("top_weight:recovery") and reasons["A-0"].startswith("cleanest:policy")
    assert reasons["C-0-ref"].startswith("cleanest:reference") and sel.sft_reasons == reasons
    assert sel.stats["rl_selected"] == 1 and sel.stats["sft_selected"] == 4
    assert sel.stats["policy_pass_rate"] == round(5 / 8, 4)


def test_top_k_per_task_and_min_weight() -> None:
    trajs, passed = task_a()
    verdicts = [_verdict(t, p) for t, p in zip(trajs, passed, strict=True)]
    # one place: the cleanest passing row, though the recovery path weighs more
    sel = TopologyCurator(TopoConfig(sft_per_task=1)).select([_task("A")], trajs, verdicts)
    assert [t.id for t, _ in sel.sft] == ["A-0"] and sel.drops["sft:below_task_top_k"] == 1
    two = TopologyCurator(TopoConfig(sft_per_task=2)).select([_task("A")], trajs, verdicts)
    assert [t.id for t, _ in two.sft] == ["A-0", "A-2"]
    assert two.sft_reasons["A-2"].startswith("top_weight:recovery")
    sel = TopologyCurator(TopoConfig(w_recovery=0, w_diversity=0, sft_per_task=2)).select(
        [_task("A")], trajs, verdicts
    )
    assert [t.id for t, _ in sel.sft] == ["A-0", "A-2"]
    # the weight bar drops other rows, never the cleanest one
    sel = TopologyCurator(TopoConfig(min_weight=0.9)).select([_task("A")], trajs, verdicts)
    assert [t.id for t, _ in sel.sft] == ["A-0", "A-2"] and sel.drops["sft:below_min_weight"] == 0
    sel = TopologyCurator(TopoConfig(min_weight=0.95)).select([_task("A")], trajs, verdicts)
    assert [t.id for t, _ in sel.sft] == ["A-0"] and sel.drops["sft:below_min_weight"] == 1


def test_the_reference_wins_among_duplicates_and_over_noisy_rows() -> None:
    gold = _traj("A", 0, [OK_U1, BOOK_F1, MSG], reference=True)
    same = _traj("A", 1, [OK_U1, BOOK_F1, MSG])  # the same path as the reference
    noisy = _traj("A", 2, [ERR_U2, OK_U1, BOOK_F1, MSG])
    trajs = [same, noisy, gold]
    verdicts = [_verdict(t, True) for t in trajs]
    for curator in (TopologyCurator(TopoConfig(sft_per_task=1)), get_curator("outcome")):
        sel = curator.select([_task("A")], trajs, verdicts)
        kept = [t.id for t, _ in sel.sft]
        assert kept[0] == gold.id and same.id not in kept, (curator.name, kept)
        assert sel.sft_reasons[gold.id]
    # the outcome curator keeps the recovery row too: its failed call makes it no duplicate
    assert noisy.id in [t.id for t, _ in get_curator("outcome").select([_task("A")], trajs, verdicts).sft]


def test_rl_budget_samples_in_proportion_to_ebr_sh() -> None:
    # the curator's sampler: keys from each item's id and the seed, the largest kept
    counts = np.zeros(3)
    for seed in range(4000):
        keys = sampling_keys(np.array([1.0, 0.0, 3.0]), ["a", "b", "c"], seed)
        counts[top_keys(keys, 1)[0]] += 1
    assert counts[1] == 0
    assert counts[2] / counts.sum() == pytest.approx(0.75, abs=0.03)
    # an item's key does not depend on its position (shards keep the largest keys over all)
    keys = sampling_keys(np.array([1.0, 2.0]), ["a", "c"], 5)
    assert keys[1] == sampling_keys(np.array([0.5, 2.0, 1.0]), ["x", "c", "a"], 5)[1]
    # budgeted selection drops the rest with a counted reason
    trajs, passed = task_a()
    e = [_traj("E", i, [ERR_U2, OK_U1, MSG] if i % 2 else [OK_U1, MSG]) for i in range(4)]
    all_t = trajs + e
    verdicts = [
        _verdict(t, p) for t, p in zip(all_t, passed + [True, False, True, False], strict=True)
    ]
    sel = TopologyCurator(TopoConfig(rl_budget=1)).select([_task("A"), _task("E")], all_t, verdicts)
    assert len(sel.rl) == 1 and sel.drops["rl:not_sampled"] == 1
    assert sel.rl[0].reason.startswith("sampled_by_ebr_sh")


def test_bad_config_and_missing_verdict() -> None:
    with pytest.raises(ValueError, match="sft_per_task"):
        TopoConfig(sft_per_task=0)
    with pytest.raises(ValueError, match="weights"):
        TopoConfig(w_recovery=0, w_efficiency=0, w_diversity=0)
    with pytest.raises(ValueError, match="no verdict"):
        build_index([_traj("A", 0, [OK_U1])], {})
    sel = get_curator("topology").select([_task("A")], [], [])
    assert sel.sft == [] and sel.rl == [] and sel.drops["rl:no_rollouts"] == 1


def test_graph_pictures(tmp_path: Path) -> None:
    trajs, passed = task_a()
    ix = _index(trajs, passed)
    svg_path = write_task_graph(ix, "A", tmp_path / "a.svg")
    png_path = write_task_graph(ix, "A", tmp_path / "a.png")
    root = ET.parse(svg_path).getroot()
    assert root.tag.endswith("svg")
    text = svg_path.read_text()
    assert "get_user" in text and "book" in text and "Φ=0.67" in text
    assert png_path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png_path.stat().st_size > 5000
    assert task_graph_svg(ix, "A").lstrip().startswith("<?xml")
    assert pick_tasks_to_draw(ix, 1) == ["A"]
    verdicts = [_verdict(t, p) for t, p in zip(trajs, passed, strict=True)]
    svgs = graph_svgs_for([*trajs, _traj("Z", 0, [OK_U1])], verdicts)  # Z has no verdict: left out
    assert list(svgs) == ["task A"] and "<svg" in svgs["task A"]
    with pytest.raises(ValueError, match=".svg or .png"):
        write_task_graph(ix, "A", tmp_path / "a.jpg")
    with pytest.raises(KeyError):
        write_task_graph(ix, "nope", tmp_path / "b.svg")
