"""Re-verification: stored trajectories re-scored by another verifier (version), diffed."""

from __future__ import annotations

import pytest

from data.records import Fact, Task, Trajectory, Verdict
from verifiers.audit import build_trajectory, mutants
from verifiers.base import get_verifier
from verifiers.reverify import reverify
from verifiers.state import StateVerifier


class LenientState(StateVerifier):
    """A new version of the state verifier that no longer zeroes unclean terminations."""

    version = "1.1.0"

    def __init__(self) -> None:
        super().__init__(require_clean_termination=False)


def _stored(tasks: list[Task]) -> list[Trajectory]:
    out = []
    for task in tasks:
        out.append(build_trajectory(task, task.reference_solution))
        out += [
            build_trajectory(task, m.calls, name=f"m{i}") for i, m in enumerate(mutants(task)[:2])
        ]
    return out


def test_same_verifier_changes_nothing(tasks: list[Task]) -> None:
    trajs = _stored(tasks)
    old = [
        get_verifier("state_equivalence").verify(by, t)
        for t in trajs
        for by in tasks
        if by.id == t.task_id
    ]
    result = reverify(tasks, trajs, old, "state_equivalence")
    tot = result.diff.totals()
    assert len(result.verdicts) == len(trajs) == tot["compared"]
    assert tot["pass_to_fail"] == tot["fail_to_pass"] == 0 and tot["mean_score_delta"] == 0.0
    assert (
        tot["old_pass_rate"]
        == tot["new_pass_rate"]
        == pytest.approx(len(tasks) / len(trajs), abs=1e-4)
    )
    assert not result.diff.changes


def test_new_version_flips_are_counted_per_task(tasks: list[Task]) -> None:
    gold = [build_trajectory(t, t.reference_solution) for t in tasks]
    cut = [g.model_copy(update={"termination": "max_turns", "id": g.id + "-cut"}) for g in gold[:3]]
    trajs = [*gold, *cut]
    by_id = {t.id: t for t in tasks}
    old = [StateVerifier().verify(by_id[t.task_id], t) for t in trajs]
    assert [v.passed for v in old[-3:]] == [False] * 3
    result = reverify(tasks, trajs, old, LenientState())
    d = result.diff
    assert (
        d.against == "state_equivalence"
        and d.against_versions == ["1.0.0"]
        and d.version == "1.1.0"
    )
    tot = d.totals()
    assert tot["fail_to_pass"] == 3 and tot["pass_to_fail"] == 0 and tot["tasks_with_flips"] == 3
    assert {c.trajectory_id for c in d.changes} == {c.id for c in cut}
    assert all(c.old_score == 0.0 and c.new_score == 1.0 for c in d.changes)
    for task in tasks[:3]:
        assert d.tasks[task.id].fail_to_pass == 1 and d.tasks[
            task.id
        ].mean_score_delta == pytest.approx(0.5)
    assert all(v.verifier_version == "1.1.0" for v in result.verdicts)
    table = d.table()
    assert table.count("\n") == 2 + 3 and "**all**" in table and "+0.5000" in table


def test_another_verifier_against_the_old_one(tasks: list[Task]) -> None:
    """Composite DB+COMMUNICATE against state equivalence: silent gold paths now fail."""
    tasks2 = [
        t.model_copy(update={"verification": t.verification.model_copy(
            update={"communicate": [Fact(label="reference number", any_of=["reference number"])]})})
        for t in tasks
    ]
    trajs = [build_trajectory(t, t.reference_solution, text="All done.") for t in tasks2]
    old = [
        get_verifier("state_equivalence").verify(t, x) for t, x in zip(tasks2, trajs, strict=True)
    ]
    result = reverify(tasks2, trajs, old, "composite", against="state_equivalence")
    tot = result.diff.totals()
    assert tot["pass_to_fail"] == len(tasks2) and tot["new_pass_rate"] == 0.0
    assert result.diff.changes[0].new_reasons[0].startswith("COMMUNICATE:")


def test_bad_inputs(tasks: list[Task]) -> None:
    traj = build_trajectory(tasks[0], tasks[0].reference_solution)
    v = get_verifier("state_equivalence").verify(tasks[0], traj)
    with pytest.raises(ValueError, match="two old"):
        reverify(tasks, [traj], [v, v], "state_equivalence")
    with pytest.raises(ValueError, match="needs a model"):
        reverify(tasks, [traj], [], "llm_judge")
    orphan = traj.model_copy(update={"task_id": "task-unknown"})
    result = reverify(tasks, [traj, orphan], [], "state_equivalence")
    assert result.diff.unknown_task == 1 and result.diff.missing_old == 1
    assert reverify(tasks, [traj], [], "constraint_satisfaction").diff.not_applicable == 1
    assert isinstance(result.verdicts[0], Verdict)


def test_tasks_made_before_dialogues_are_judged_as_today(tasks: list[Task]) -> None:
    """An old task (no dialogue, no facts, no basis of its own) passed anything that reached
    its state; upgraded, it needs the conversation too, and a no-change task with nothing to
    tell is not released any more."""
    from envs.registry import get_world
    from synthesis.dialogue import upgrade

    world = get_world("airline")
    today = next(t for t in tasks if any(world.tools[c.name].write for c in t.reference_solution))
    old = today.model_copy(update={"dialogue": [], "verification": today.verification.model_copy(
        update={"communicate": [], "basis": []})})
    silent = build_trajectory(old, old.reference_solution, text="Your request is complete.")
    composite = get_verifier("composite")
    assert composite.verify(old, silent).passed  # the old judgement: the state matched
    new, why = upgrade(world, old)
    assert why == "" and new.id == old.id and new.dialogue and new.verification.communicate
    verdict = composite.verify(new, silent)
    assert not verdict.passed and any(r.startswith("POLICY:") for r in verdict.reasons)
    assert any(r.startswith("COMMUNICATE:") for r in verdict.reasons)
    assert composite.verify(new, build_trajectory(new, [])).passed is False
    assert upgrade(world, new) == (new, "current")
    # a no-change task with nothing to tell: its trajectories fail, unjudged, with the reason
    nothing = old.model_copy(update={"reference_solution": [c for c in old.reference_solution
                                                            if not world.tools[c.name].write],
                                     "target_state_hash": old.initial_state.state_hash})
    assert upgrade(world, nothing) == (nothing, "nothing_to_tell")
    quiet = build_trajectory(nothing, [], text="Done.")
    result = reverify([nothing], [quiet], [], composite, unreleasable={nothing.id: "nothing_to_tell"})
    assert result.diff.not_released == 1 and not result.verdicts[0].passed
    assert result.verdicts[0].reasons == ["task not released any more: nothing_to_tell"]
