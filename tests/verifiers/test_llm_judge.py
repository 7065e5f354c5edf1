"""The LLM judge: natural-language assertions judged by any chat model, alone or in the composite."""

from __future__ import annotations

from typing import Any

import pytest

from data.records import Sampling, Task
from tests.verifiers.variants import bare, with_verification
from verifiers.audit import audit, build_dialogue, build_trajectory
from verifiers.composite import CompositeVerifier
from verifiers.llm_judge import LLMJudgeVerifier, parse_judgement


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
    task = with_verification(bare(tasks[0]), nl_assertions=["The agent booked the flight.", "The agent was polite."])
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
