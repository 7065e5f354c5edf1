"""State verifier: the gold path passes; each single mutation of it fails; partial progress
earns a dense reward."""

from __future__ import annotations

import pytest

from data.records import Step, Task, ToolCall, Trajectory
from verifiers.base import get_verifier
from verifiers.state import StateVerifier, dense_reward, score_calls


def traj(task: Task, calls: list[ToolCall], termination: str = "user_stop") -> Trajectory:
    steps = [Step(index=i, turn=i + 1, action=c) for i, c in enumerate(calls)]
    return Trajectory(id=f"t-{len(calls)}", task_id=task.id, trial=0, model="test", steps=steps,
                      termination=termination)  # type: ignore[arg-type]


def writes(task: Task) -> list[ToolCall]:
    from envs.registry import get_world

    tools = get_world(task.world).tools
    return [c for c in task.reference_solution if tools[c.name].write]


def test_gold_passes(tasks: list[Task]) -> None:
    v = get_verifier("state_equivalence")
    for task in tasks:
        verdict = v.verify(task, traj(task, task.reference_solution))
        assert verdict.passed and verdict.score == 1.0, (task.metadata, verdict.reasons)
        assert verdict.verifier == "state_equivalence" and verdict.verifier_version


def _mutants(task: Task) -> dict[str, list[ToolCall]]:
    gold = task.reference_solution
    w = writes(task)
    out: dict[str, list[ToolCall]] = {}
    if w:
        out["drop_a_write"] = [c for c in gold if c is not w[-1]]
        first = w[0]
        key = next(k for k in ("passengers", "total_bags", "cabin", "reservation_id") if k in first.arguments)
        changed = dict(first.arguments)
        changed[key] = {"passengers": lambda x: 3 - x if x in (1, 2) else 1, "total_bags": lambda x: max(x - 1, 0),
                        "cabin": lambda x: "business", "reservation_id": lambda x: x}[key](changed[key])
        if changed != first.arguments:
            out["change_an_argument"] = [ToolCall(name=c.name, arguments=changed) if c is first else c for c in gold]
    user = task.user.known_info["user_id"]
    out["extra_write"] = [*gold, ToolCall(name="cancel_reservation", arguments={"reservation_id": _any_active(task, user)})]
    return out


def _any_active(task: Task, user: str) -> str:
    from envs.registry import get_world

    conn = get_world(task.world).build_state(task.initial_state.seed, task.initial_state.scale, task.initial_state.patches)
    rows = conn.execute("SELECT reservation_id, cabin, insurance FROM reservations r JOIN flights f USING (flight_id) "
                        "WHERE r.status='active' AND f.status='scheduled' AND (cabin='business' OR insurance=1 "
                        "OR created_at > '2026-05-09 12:00:00') ORDER BY reservation_id").fetchall()
    return rows[0][0]


def test_each_mutation_fails(tasks: list[Task]) -> None:
    v = StateVerifier()
    checked = 0
    for task in tasks:
        for name, calls in _mutants(task).items():
            verdict = v.verify(task, traj(task, calls))
            assert not verdict.passed, (name, task.metadata["boundary"])
            assert verdict.score < 1.0
            checked += 1
    assert checked >= 2 * len(tasks)


def test_unclean_termination_scores_zero(tasks: list[Task]) -> None:
    task = tasks[0]
    verdict = StateVerifier().verify(task, traj(task, task.reference_solution, termination="max_turns"))
    assert not verdict.passed and verdict.score == 0.0 and "max_turns" in verdict.reasons[-1]


def test_dense_reward_formula() -> None:
    assert dense_reward(True, 0, 5, 3) == 1.0
    assert dense_reward(False, 2, 4, 0) == pytest.approx(0.25)
    assert dense_reward(False, 4, 4, 1) == pytest.approx(0.25)
    assert dense_reward(False, 0, 0, 0) == 0.0


def test_partial_progress_earns_partial_reward(tasks: list[Task]) -> None:
    task = next(t for t in tasks if len(writes(t)) >= 1 and t.target_diff)
    none = score_calls(task, [])
    assert not none.exact and none.reward < 1.0
    gold = score_calls(task, task.reference_solution)
    assert gold.exact and gold.extra_writes == 0 and gold.cells_matched == gold.cells_in_target
