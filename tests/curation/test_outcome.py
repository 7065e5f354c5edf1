"""Outcome curation: pass rates, SFT dedup by action sequence, RL task selection."""

from __future__ import annotations

from curation.base import get_curator
from curation.outcome import pass_rates
from data.records import Step, Task, ToolCall, Trajectory, Verdict


def _t(task: str, trial: int, actions: list[str], reference: bool = False) -> Trajectory:
    steps = [Step(index=i, turn=i, action=ToolCall(name=a)) for i, a in enumerate(actions)]
    return Trajectory(id=f"{task}-{trial}-{reference}", task_id=task, trial=trial, model="m", steps=steps,
                      metadata={"reference": True} if reference else {})


def _v(t: Trajectory, passed: bool) -> Verdict:
    return Verdict(trajectory_id=t.id, task_id=t.task_id, verifier="state_equivalence", verifier_version="1",
                   passed=passed, score=float(passed))


def test_selection(tasks: list[Task]) -> None:
    a, b, c = tasks[0].id, tasks[1].id, tasks[2].id
    trajs = [
        _t(a, 0, ["x", "y"]), _t(a, 1, ["x", "y"]), _t(a, 2, ["y"]),  # two identical passing runs
        _t(b, 0, ["x"]), _t(b, 1, ["x"]),  # always passes
        _t(c, 0, ["z"]), _t(c, 1, ["z"]), _t(c, 0, ["g"], reference=True),  # policy never passes
    ]
    passed = [True, True, False, True, True, False, False, True]
    verdicts = [_v(t, p) for t, p in zip(trajs, passed, strict=True)]
    sel = get_curator("outcome").select(tasks[:3], trajs, verdicts)
    sft_ids = {t.id for t, _ in sel.sft}
    assert sft_ids == {trajs[0].id, trajs[3].id, trajs[7].id}
    assert sel.drops["sft:duplicate_actions"] == 2  # a's second run, b's second run
    assert sel.drops["sft:failed_verification"] == 3
    rl = {p.task.id: p for p in sel.rl}
    assert set(rl) == {a, c}
    assert rl[a].reason == "mixed_outcomes" and abs(rl[a].pass_rate - 2 / 3) < 1e-9
    assert rl[c].reason == "explorer_solved_unsolved_by_policy" and rl[c].n_trials == 2  # reference excluded
    assert sel.drops["rl:always_solved"] == 1
    assert sel.stats["policy_pass_rate"] == round(4 / 7, 4)


def test_pass_rates() -> None:
    t = [_t("k", i, []) for i in range(4)]
    rates = pass_rates([_v(x, i % 2 == 0) for i, x in enumerate(t)])
    assert rates["k"].trials == 4 and rates["k"].pass_rate == 0.5
