"""Verifier self-audit (gold passes, mutants fail), and the per-task verifiers it audits:
communicate, action match, LLM judge, composite by reward basis."""

from __future__ import annotations

from typing import Any

import pytest

from data.records import Fact, Sampling, Task, Trajectory, Verdict, Verification
from envs.registry import get_world
from synthesis.base import SynthesisConfig, get_method
from verifiers.audit import (
    WRITE_KINDS,
    VerifierAuditError,
    audit,
    build_dialogue,
    build_trajectory,
    mutants,
    replay_hash,
)
from verifiers.base import VERIFIERS, get_verifier
from verifiers.composite import CompositeVerifier
from verifiers.llm_judge import LLMJudgeVerifier, parse_judgement


@pytest.fixture(scope="module")
def cg_tasks() -> list[Task]:
    return get_method("constraint_guided")(
        SynthesisConfig(method="constraint_guided", n_tasks=4, seed=2), get_world("airline")
    ).tasks


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


def test_registered() -> None:
    assert {"communicate", "action_match", "llm_judge", "composite"} <= set(VERIFIERS.names())


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


def test_each_mutation_kind_is_built_and_changes_the_state(tasks: list[Task]) -> None:
    tools = get_world("airline").tools
    for task in tasks:
        kinds = {m.kind for m in mutants(task)}
        has_writes = any(tools[c.name].write for c in task.reference_solution)
        # A task whose right answer is to refuse (no gold write) can only get extra writes.
        assert kinds >= (set(WRITE_KINDS) if has_writes else {"extra_write"}), (
            task.metadata["boundary"],
            kinds,
        )
        gold, _ = replay_hash(task, task.reference_solution)
        assert gold == task.target_state_hash
        for m in mutants(task):
            if m.kind in ("drop_write", "change_argument", "stop_early", "extra_write"):
                assert replay_hash(task, m.calls)[0] != gold, (m.kind, m.note)


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


# -- communicate, action match, judge, composite ----------------------------------------------


def _facts(*values: str) -> list[Fact]:
    return [Fact(label=v, any_of=[v]) for v in values]


def _with(task: Task, **verification: Any) -> Task:
    block = Verification.model_validate({**task.verification.model_dump(), **verification})
    return task.model_copy(update={"verification": block})


def _bare(task: Task) -> Task:
    """`task` as if synthesized without a reference dialogue: no facts to tell, no basis of its
    own (its method's default decides)."""
    return _with(task, communicate=[], basis=[]).model_copy(update={"dialogue": []})


def test_communicate(tasks: list[Task]) -> None:
    task = _with(_bare(tasks[0]), communicate=_facts("1,234", "HAT012"))
    v = get_verifier("communicate")
    said = build_trajectory(
        task, task.reference_solution, text="Refunded 1234 dollars for flight hat012."
    )
    assert v.verify(task, said).passed
    half = build_trajectory(task, task.reference_solution, text="Refunded 1234 dollars.")
    verdict = v.verify(task, half)
    assert not verdict.passed and verdict.score == 0.5 and "HAT012" in verdict.reasons[0]
    assert v.applies_to(tasks[0])  # type: ignore[attr-defined]  # its dialogue states facts
    assert not v.applies_to(_bare(tasks[0]))  # type: ignore[attr-defined]
    with pytest.raises(ValueError, match="any_of"):
        _with(tasks[0], communicate=[{"label": "HAT012", "any_of": "HAT012"}])
    report = audit([task], ["communicate", "composite"])  # composite adds COMMUNICATE for this task
    for a in report.verifiers.values():
        assert a.mutants["drop_communication"].killed == 1


def test_action_match(tasks: list[Task]) -> None:
    v = get_verifier("action_match")
    task = tasks[0]
    assert v.verify(task, build_trajectory(task, task.reference_solution)).passed
    write = next(c for c in task.reference_solution if get_world("airline").tools[c.name].write)
    dropped = [c for c in task.reference_solution if c is not write]
    assert not v.verify(task, build_trajectory(task, dropped)).passed


def test_composite_by_reward_basis(tasks: list[Task], cg_tasks: list[Task]) -> None:
    c = CompositeVerifier()
    task = _bare(tasks[0])
    assert c.basis(task) == ["DB"] and c.basis(_bare(cg_tasks[0])) == ["CONSTRAINTS"]
    # a task with a reference dialogue names outcome, communication and process; its dialogue passes
    assert c.basis(tasks[0]) == ["DB", "COMMUNICATE", "POLICY"]
    assert c.basis(cg_tasks[0]) == ["CONSTRAINTS", "COMMUNICATE", "POLICY"]
    assert c.verify(tasks[0], build_dialogue(tasks[0], tasks[0].dialogue)).passed
    t2 = _with(task, basis=["db", "COMMUNICATE", "ACTION"], communicate=_facts("complete"))
    gold = build_trajectory(t2, t2.reference_solution)
    v = c.verify(t2, gold)
    assert v.passed and v.score == 1.0 and v.verifier == "composite" and v.verifier_version
    assert set(v.details["components"]) == {"DB", "COMMUNICATE", "ACTION"}
    assert v.details["components"]["DB"]["verifier"] == "state_equivalence"
    quiet = build_trajectory(t2, t2.reference_solution, text="Bye.")
    q = c.verify(t2, quiet)
    assert not q.passed and q.score == 0.0 and any(r.startswith("COMMUNICATE:") for r in q.reasons)
    cons = c.verify(_with(task, basis=["CONSTRAINTS"]), gold)
    assert not cons.passed and "cannot judge" in cons.reasons[0]
    with pytest.raises(ValueError, match="unknown reward basis"):
        c.verify(_with(task, basis=["DB", "VIBES"]), gold)


class FakeJudge:
    """A judge model double: replies with a fixed text and records what it was asked."""

    name = "fake-judge"

    def __init__(self, text: str) -> None:
        self.text = text
        self.asked: list[list[dict[str, Any]]] = []

    async def chat(
        self, messages: list[dict[str, Any]], tools: list[dict[str, Any]], sampling: Sampling
    ) -> Any:
        self.asked.append(messages)
        return type("Reply", (), {"text": self.text})()


def test_llm_judge_through_any_chat_model(tasks: list[Task]) -> None:
    task = _with(_bare(tasks[0]), nl_assertions=["The agent booked the flight.", "The agent was polite."])
    traj = build_trajectory(task, task.reference_solution)
    judge = FakeJudge(
        'Sure. {"results": [{"id": 1, "met": true}, {"id": 2, "met": false, "reason": "curt"}]}'
    )
    v = LLMJudgeVerifier(judge)
    verdict = v.verify(task, traj)
    assert (
        not verdict.passed
        and verdict.score == 0.5
        and verdict.details["judge_model"] == "fake-judge"
    )
    assert (
        "The agent was polite." in judge.asked[0][1]["content"]
        and "book_reservation" in judge.asked[0][1]["content"]
    )
    assert LLMJudgeVerifier(FakeJudge("1: yes\n2. TRUE")).verify(task, traj).passed
    unreadable = LLMJudgeVerifier(FakeJudge("I think so.")).verify(task, traj)
    assert not unreadable.passed and "could not be read" in unreadable.reasons[0]
    assert parse_judgement('{"results": [{"id": 1, "met": true}]}', 2) is None
    with pytest.raises(RuntimeError, match="has no model"):
        LLMJudgeVerifier().verify(task, traj)
    composite = CompositeVerifier(
        model=FakeJudge('{"results": [{"id": 1, "met": true}, {"id": 2, "met": true}]}')
    )
    assert composite.basis(task) == ["DB", "NL_ASSERTION"] and composite.verify(task, traj).passed
    # a synthesized task names its own basis; with a judge its outcome assertions are judged too
    own = tasks[0]
    assert own.verification.basis and own.verification.nl_assertions
    assert CompositeVerifier().basis(own) == ["DB", "COMMUNICATE", "POLICY"]
    assert composite.basis(own) == ["DB", "COMMUNICATE", "POLICY", "NL_ASSERTION"]
    refusing = CompositeVerifier(model=FakeJudge('{"results": [{"id": 1, "met": false, "reason": "no"}]}'))
    gold = refusing.verify(own, build_dialogue(own, own.dialogue))
    assert not gold.passed and any(r.startswith("NL_ASSERTION:") for r in gold.reasons)
    assert "llm_judge" in audit([task], [v]).skipped_verifiers


def test_dialogue_alternatives_extra_reads_and_other_identity() -> None:
    """A retail customer identified by name and zip code instead of email, and reads made
    again, are good conversations: the composite passes them and the audit holds it to them.
    The same name-and-zip answer with the email lookup kept (an email never said) fails."""
    from verifiers.audit import dialogue_alternatives

    task = get_method("logic_driven")(SynthesisConfig(world="retail", n_tasks=1, seed=0),
                                      get_world("retail")).tasks[0]
    alts = {kind: turns for kind, _, turns in dialogue_alternatives(task)}
    assert {"extra_reads", "other_identity"} <= set(alts)
    c = CompositeVerifier()
    for kind in ("extra_reads", "other_identity"):
        assert c.verify(task, build_dialogue(task, alts[kind], kind)).passed, kind
    other = alts["other_identity"]
    calls = [x.name for t in other for x in t.tool_calls]
    assert "find_customer_by_name_zip" in calls and "find_customer_by_email" not in calls
    gold_lookup = next(t for t in task.dialogue if any(x.name == "find_customer_by_email" for x in t.tool_calls))
    wrong = [gold_lookup if any(x.name == "find_customer_by_name_zip" for x in t.tool_calls) else t for t in other]
    verdict = c.verify(task, build_dialogue(task, wrong, "unsaid-email"))
    assert not verdict.passed and any("identity" in r for r in verdict.reasons)
    a = audit([task], ["composite"]).verifiers["composite"]
    assert a.alternatives["other_identity"].passed == 1 and a.alternatives["extra_reads"].passed == 1
    # a world with one way to identify gets no other identity
    airline = get_method("logic_driven")(SynthesisConfig(n_tasks=1, seed=0), get_world("airline")).tasks[0]
    assert "other_identity" not in {k for k, _, _ in dialogue_alternatives(airline)}
    assert other[2].role == "user" and all(str(task.user.known_info[k]) in other[2].content
                                           for k in ("name", "zip code"))
