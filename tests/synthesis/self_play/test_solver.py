"""`synthesis.self_play.solver`: the frozen solver as a `Solve` function (`chat_solver`),
one seeded sample per answer, feeding the generator reward."""

from __future__ import annotations

import json
from typing import Any

import pytest

from data.records import Sampling
from data.self_play import Candidate, Spec
from rollout.generation import solver_pass_rate
from rollout.model import ChatResponse
from rollout.parsing import parse_tool_calls
from synthesis.self_play import chat_solver
from tests.rollout.generation_samples import (
    GOLD,
    QUESTION,
    TOOLS,
    generator_text,
    sample_generation,
)
from train.rewards import (
    make_generator_reward,
    r_diff,
)


class _SolverModel:
    """Answers every question with the same tool calls (as a backend would parse them)."""

    name = "solver"

    def __init__(self, text: str) -> None:
        self.text = text
        self.seeds: list[int | None] = []

    async def chat(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]], sampling: Sampling
                   ) -> ChatResponse:
        assert messages[-1]["content"] == QUESTION and tools
        self.seeds.append(sampling.seed)
        rest, calls, malformed = parse_tool_calls(self.text)
        return ChatResponse(text=rest, tool_calls=calls, malformed=malformed)

    async def aclose(self) -> None:
        return None


def test_chat_solver_feeds_the_generator_reward() -> None:
    model = _SolverModel("<tool_call>" + json.dumps(GOLD[0]) + "</tool_call>")
    solve = chat_solver(model, temperature=0.7)
    cand = Candidate(Spec("airline", 1, ["update_baggage"], TOOLS), sample_generation())
    answers = solve(cand, 8)
    assert len(answers) == 8 and len(set(model.seeds)) == 8
    assert solver_pass_rate(cand, answers) == 1.0
    assert make_generator_reward(solve)([generator_text()]) == pytest.approx([2.0 + 0.5 * r_diff(1.0)])
