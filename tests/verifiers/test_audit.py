"""Verifier self-audit: gold passes, mutants fail; a blind verifier blocks the release; a task
whose gold fails is excluded."""

from __future__ import annotations

import pytest

from data.records import Task, Trajectory, Verdict
from verifiers.audit import WRITE_KINDS, VerifierAuditError, audit, build_trajectory, replay_hash
from verifiers.base import get_verifier


class AlwaysPass:
    name = "always_pass"
    version = "0.0.1"

    def verify(self, task: Task, trajectory: Trajectory) -> Verdict:
        return Verdict(
            trajectory_id=trajectory.id,
            task_id=task.id,
            verifier=self.name,
            verifier_version=self.version,
            passed=True,
            score=1.0,
        )


class IgnoresExtras(AlwaysPass):
    """Passes when every gold write was made: blind to extra writes (a plausible bug)."""

    name = "ignores_extras"
    audit_kinds = WRITE_KINDS

    def verify(self, task: Task, trajectory: Trajectory) -> Verdict:
        v = get_verifier("action_match").verify(task, trajectory)
        return v.model_copy(update={"verifier": self.name, "verifier_version": self.version})


def test_sound_verifiers_pass_their_audit(tasks: list[Task], cg_tasks: list[Task]) -> None:
    report = audit(
        [*tasks, *cg_tasks], ["state_equivalence", "constraint_satisfaction", "composite"]
    )
    assert not report.excluded_tasks
    for name, a in report.verifiers.items():
        assert a.tasks_audited == (
            len(cg_tasks) if name == "constraint_satisfaction" else len(tasks) + len(cg_tasks)
        )
        assert a.gold_pass_rate == 1.0
        for kind in WRITE_KINDS:
            s = a.mutants[kind]
            assert s.generated > 0 and s.survived == 0 and s.kill_rate == 1.0, (name, kind, s)
    card = report.card()
    assert card["verifiers"]["state_equivalence"]["mutant_kill_rate"]["drop_write"] == 1.0
    assert report.kept(tasks) == tasks


def test_equivalent_mutants_are_not_counted(tasks: list[Task]) -> None:
    """A repeated booking is refused by a rule (R11): same final state, not a verifier failure."""
    task = next(t for t in tasks if any(c.name == "book_reservation" for c in t.reference_solution))
    write = next(c for c in task.reference_solution if c.name == "book_reservation")
    calls = [*task.reference_solution, write]
    assert replay_hash(task, calls)[0] == task.target_state_hash
    traj = build_trajectory(task, calls, name="repeat")
    assert (
        get_verifier("state_equivalence").verify(task, traj).passed
    )  # any path to the target passes
    report = audit([task], ["state_equivalence", IgnoresExtras()], raise_on_failure=False)
    assert not report.excluded_tasks.get(task.id, [""])[0].startswith("state_equivalence")


def test_a_blind_verifier_blocks_the_release(tasks: list[Task]) -> None:
    with pytest.raises(
        VerifierAuditError, match=r"(?s)release is blocked.*ignores_extras 0\.0\.1: failed on"
    ) as err:
        audit(tasks, [IgnoresExtras()], max_failure_rate=0.1)
    assert "mutant_survived:extra_write" in str(err.value)
    report = audit(tasks, [IgnoresExtras()], raise_on_failure=False)
    a = report.verifiers["ignores_extras"]
    assert a.mutants["extra_write"].survived > 0 and a.mutants["drop_write"].kill_rate == 1.0
    assert set(a.excluded) == {t.id for t in tasks} and report.kept(tasks) == []
    assert report.exclusion_counts()["mutant_survived:extra_write"] == len(tasks)
    always = audit(tasks, [AlwaysPass()], raise_on_failure=False, max_failure_rate=1.0)
    assert (
        always.verifiers["always_pass"].mutants["drop_write"].kill_rate == 0.0
    )  # always_pass kills nothing
    assert not always.failing_verifiers()  # a 100% threshold lets anything through


def test_a_task_whose_gold_fails_is_excluded(tasks: list[Task]) -> None:
    broken = tasks[0].model_copy(update={"target_state_hash": "0" * 64, "id": "task-broken"})
    report = audit([broken, *tasks[1:]], ["state_equivalence"], max_failure_rate=0.5)
    assert list(report.excluded_tasks) == ["task-broken"]
    assert report.excluded_tasks["task-broken"][0].startswith("state_equivalence:gold_failed:")
    assert report.verifiers["state_equivalence"].gold_pass_rate == round(
        (len(tasks) - 1) / len(tasks), 4
    )
    assert [t.id for t in report.kept([broken, *tasks[1:]])] == [t.id for t in tasks[1:]]
    with pytest.raises(VerifierAuditError, match="state_equivalence"):
        audit([broken, *tasks[1:]], ["state_equivalence"], max_failure_rate=0.1)
