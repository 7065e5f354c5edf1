"""COMMUNICATE: the facts the user must hear were said, in any spelling."""

from __future__ import annotations

import pytest

from data.records import Task
from tests.verifiers.variants import bare, facts, with_verification
from verifiers.audit import audit, build_trajectory
from verifiers.base import get_verifier


def test_communicate(tasks: list[Task]) -> None:
    task = with_verification(bare(tasks[0]), communicate=facts("1,234", "HAT012"))
    v = get_verifier("communicate")
    said = build_trajectory(
        task, task.reference_solution, text="Refunded 1234 dollars for flight hat012."
    )
    assert v.verify(task, said).passed
    half = build_trajectory(task, task.reference_solution, text="Refunded 1234 dollars.")
    verdict = v.verify(task, half)
    assert not verdict.passed and verdict.score == 0.5 and "HAT012" in verdict.reasons[0]
    assert v.applies_to(tasks[0])  # type: ignore[attr-defined]  # its dialogue states facts
    assert not v.applies_to(bare(tasks[0]))  # type: ignore[attr-defined]
    with pytest.raises(ValueError, match="any_of"):
        with_verification(tasks[0], communicate=[{"label": "HAT012", "any_of": "HAT012"}])
    report = audit([task], ["communicate", "composite"])  # composite adds COMMUNICATE for this task
    for a in report.verifiers.values():
        assert a.mutants["drop_communication"].killed == 1


def test_a_model_written_refusal_that_names_the_request_but_not_the_rule_fails() -> None:
    """A held-out episode a trained model played (`tests/fixtures/model_written/`, kept as it was): the order
    was not delivered, and the model refused with "I can't return ... from order #W…" and
    no reason. Words the user said anyway ("from", "order") do not state the rule
    "only from `delivered` orders"; the composite passed it before they were discounted."""
    import json
    from pathlib import Path

    from data.records import Trajectory
    from envs.dialogue_acts import states_rule

    case = json.loads((Path(__file__).parents[1] / "fixtures" / "model_written" / "refusal_without_the_rule.json").read_text())
    task, traj = Task.model_validate(case["task"]), Trajectory.model_validate(case["trajectory"])
    verdict = get_verifier("composite").verify(task, traj)
    parts = {name: c["passed"] for name, c in verdict.details["components"].items()}
    assert not verdict.passed and parts == {"DB": True, "COMMUNICATE": False, "POLICY": True}
    assert any("R06_DELIVERED_ONLY" in r for r in verdict.reasons)
    rule = ["only from `delivered` orders", "delivered"]
    user = " ".join(m["content"] for m in traj.messages if m["role"] == "user")
    # the rule in other words still counts, the user's words discounted or not
    assert states_rule("Returns are only accepted once an order has been delivered.", rule, context=user)
    assert not states_rule("I'm sorry, but I can't return it from order #W2443761.", rule, context=user)


def test_a_model_written_refusal_that_restates_the_policy_claims_no_change() -> None:
    """A held-out episode a trained model played (`tests/fixtures/model_written/`, kept as it
    was): a refusal with the wrong rule that then restates the refund policy ("The total is
    refunded to the order's original payment method…"). The restatement is no claim of a
    refund; the episode still fails, for the rule it did not state. With the right rule in
    its place, COMMUNICATE passes it (3.1 failed it as a claimed change)."""
    import json
    from pathlib import Path

    from data.records import Trajectory
    from envs.dialogue_acts import claims_change, without_policy
    from envs.registry import get_world

    case = json.loads((Path(__file__).parents[1] / "fixtures" / "model_written" /
                       "refusal_quoting_the_policy.json").read_text())
    task, traj = Task.model_validate(case["task"]), Trajectory.model_validate(case["trajectory"])
    verdict = get_verifier("communicate").verify(task, traj)
    assert not verdict.passed and verdict.reasons == [
        "never told the user the rule R06_DELIVERED_ONLY ('only from `delivered` orders')"]
    refusal = traj.messages[-2]["content"]
    assert refusal.startswith("I'm sorry, I can't return") and "The total is refunded" in refusal
    right = traj.model_copy(deep=True)
    right.messages[-2]["content"] = refusal.replace(
        "only `pending` orders can be cancelled (reason: \"no longer needed\" or \"ordered by mistake\")",
        "items can be returned only from `delivered` orders")
    assert get_verifier("communicate").verify(task, right).passed
    policy = get_world("retail").policy
    # the policy's words alone claim nothing; spoken of the user's own refund they are a claim
    assert without_policy("The total is refunded to the order's original payment method.", policy) == "The ."
    assert not claims_change("The total is refunded to the order's original payment method.", policy=policy)
    assert claims_change("Your total is refunded to the order's original payment method.", policy=policy)
    assert claims_change(refusal) and not claims_change(refusal, policy=policy)
    # a claim beside the policy's words is still one
    assert claims_change("The order is cancelled, and the total is refunded to the order's original payment method.",
                         policy=policy)
