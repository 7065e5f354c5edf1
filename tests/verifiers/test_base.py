"""The verifier contract: the registry, the episode checks every execution verifier makes,
the verifier that decides curation, and verdicts shared between a run's verifiers."""

from __future__ import annotations

import pytest

from data.records import Task, Trajectory
from verifiers.base import VERIFIERS, applies, episode_checks, get_verifier, primary_verifier


def test_registered() -> None:
    assert {"communicate", "action_match", "llm_judge", "composite"} <= set(VERIFIERS.names())


def test_shard_verdicts_with_shared_components_equal_independent_verifiers(
        tasks: list[Task], monkeypatch: pytest.MonkeyPatch) -> None:
    """`verify_shard` lets the composite judge with the run's own verifier instances (each
    runs once per trajectory, `RecentVerdicts`): the verdicts are those of verifiers built
    apart, and a repeated verdict is a copy, not the same object."""
    from pipelines.config import RolloutConfig, RunConfig
    from pipelines.stages import verify_shard
    from rollout.collector import collect
    from verifiers.base import RecentVerdicts, applies, get_verifier
    from verifiers.policy import PolicyVerifier

    names = RunConfig().verifiers
    assert "composite" in names and "policy" in names and "state_equivalence" in names
    trajectories = collect(tasks, RolloutConfig.model_validate({"model": {"kind": "scripted", "noise": 0.4}, "trials": 3}))
    by_id = {t.id: t for t in tasks}
    checks: list[str] = []
    real_check = PolicyVerifier.check
    monkeypatch.setattr(PolicyVerifier, "check", lambda self, task, t: checks.append(t.id) or real_check(self, task, t))
    shared = verify_shard(by_id, trajectories, names)
    assert sorted(checks) == sorted(t.id for t in trajectories)  # once each, for the composite and `policy`
    monkeypatch.setattr(PolicyVerifier, "check", real_check)
    apart = [get_verifier(n) for n in names]
    alone = [v.verify(by_id[t.task_id], t) for t in trajectories for v in apart if applies(v, by_id[t.task_id])]
    assert [v.model_dump() for v in shared] == [v.model_dump() for v in alone]
    assert {v.passed for v in shared} == {True, False}

    once = RecentVerdicts(get_verifier("policy"), size=2)
    first = once.verify(tasks[0], trajectories[0])
    once.verify(tasks[1], trajectories[1])
    again = once.verify(tasks[0], trajectories[0])
    assert again == first and again is not first
    assert once.verify(tasks[1], trajectories[2]) != once.verify(tasks[1], trajectories[1])  # not a stale hit


def _episode(termination: str, final_state_hash: str | None = None) -> Trajectory:
    return Trajectory(id="t", task_id="k", trial=0, model="m", termination=termination,  # type: ignore[arg-type]
                      final_state_hash=final_state_hash)


def test_episode_checks(tasks: list[Task]) -> None:
    """Any ending but the agent or user stopping scores 0 when a clean one is required; a
    transfer is clean only where the task expects one; a replay that differs from the
    recorded state is reported."""
    change = tasks[0]
    transfer = change.model_copy(update={"verification": change.verification.model_copy(update={"outcome": "transfer"})})
    assert episode_checks(_episode("user_stop"), "h", 0.7, True, change) == (0.7, True, [])
    assert episode_checks(_episode("max_turns"), "h", 0.7, True) == (0.0, False, ["terminated by max_turns"])
    assert episode_checks(_episode("max_turns"), "h", 0.7, False) == (0.7, False, [])
    assert episode_checks(_episode("transfer"), "h", 1.0, True, change) == (
        0.0, False, ["transferred to a human, but the task can be done within the policy"])
    assert episode_checks(_episode("transfer"), "h", 1.0, True, transfer) == (1.0, True, [])
    score, clean, reasons = episode_checks(_episode("agent_stop"), "h", 1.0, True, transfer)
    assert (score, clean) == (0.0, False) and "never transferred" in reasons[0]
    assert episode_checks(_episode("agent_stop", "other"), "h", 1.0, True)[2] == [
        "replayed state differs from the state recorded during rollout"]


def test_primary_verifier_and_applies(tasks: list[Task], cg_tasks: list[Task]) -> None:
    task, cg = tasks[0], cg_tasks[0]
    assert primary_verifier(task, ["state_equivalence", "composite"]) == "composite"
    assert primary_verifier(cg, ["state_equivalence", "constraint_satisfaction"]) == "constraint_satisfaction"
    assert primary_verifier(cg, ["state_equivalence", "policy"]) == "state_equivalence"  # its own is not configured
    assert applies(get_verifier("constraint_satisfaction"), cg) and not applies(get_verifier("constraint_satisfaction"), task)
    assert applies(object(), task)  # a verifier without `applies_to` judges every task
    with pytest.raises(KeyError, match="unknown verifier 'nope'"):
        get_verifier("nope")
