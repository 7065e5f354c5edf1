"""Self-play rewards (methods.md §3, `train.rewards`) on hand-computed cases and the
benchmark's stubs (`bench.self_play_stubs`). The self-play modules have their own files in
tests/synthesis/self_play/, the generator output's parsing and validity tests/rollout/test_generation.py."""

from __future__ import annotations

import json
import math
import random
from typing import Any

import pytest

from bench.self_play_stubs import (
    StubSolver,
    bandpass_curve,
    expected_r_diff,
)
from data.records import ToolCall
from data.self_play import Candidate, Spec
from rollout.generation import solver_pass_rate
from tests.rollout.generation_samples import (
    QUESTION,
    TOOLS,
    generator_text,
    sample_generation,
)
from train.rewards import (
    call_score,
    generator_reward,
    make_generator_reward,
    r_curr,
    r_diff,
    r_judge,
    score_generation,
    solver_accuracy,
    solver_format_score,
    solver_reward,
)

# --------------------------------------------------------------------------- r_diff, r_judge, r_curr


@pytest.mark.parametrize(("p", "expected"), [
    (0.0, 0.0),
    (0.12, 0.0),  # below 1/8
    (1 / 8, math.exp(-(0.125**2) / (2 * 0.12**2))),  # 0.5813: the Gaussian from edge 0.25
    (0.2, math.exp(-(0.05**2) / 0.0288)),
    (0.25, 1.0), (0.5, 1.0), (0.75, 1.0),
    (0.9, math.exp(-(0.15**2) / 0.0288)),  # 0.4578
    (1.0, math.exp(-(0.25**2) / 0.0288)),  # 0.1142
])
def test_r_diff_band_pass(p: float, expected: float) -> None:
    assert r_diff(p) == pytest.approx(expected)


def test_r_diff_hand_values() -> None:
    assert r_diff(1 / 8) == pytest.approx(0.58127, abs=1e-5)
    assert r_diff(0.9) == pytest.approx(0.45783, abs=1e-5)
    assert r_diff(1.0) == pytest.approx(0.11416, abs=1e-5)


def test_r_judge_and_r_curr() -> None:
    assert [r_judge(s) for s in (1, 2, 3, 4, 5)] == [0.0, 0.25, 0.5, 0.75, 1.0]
    assert r_judge(7) == 1.0 and r_judge(0) == 0.0 and r_judge(None) == 0.0
    assert r_curr(QUESTION, 0.5, 3) == pytest.approx(0.5 * 1.0 + 0.5 * 0.5)
    assert r_curr(QUESTION, 1.0, None) == pytest.approx(0.5 * r_diff(1.0))
    assert r_curr("TODO", 0.5, 5) == 0.0


# --------------------------------------------------------------------------- generator reward


def _fixed_solver(n_right: int) -> Any:
    def solve(c: Candidate, k: int) -> list[list[ToolCall]]:
        return [list(c.generation.calls) if i < n_right else [] for i in range(k)]

    return solve


def test_score_generation_and_trl_reward() -> None:
    good = generator_text()
    s = score_generation(good, _fixed_solver(4), judge=lambda g: 5, k=8)
    assert (s.r_format, s.r_valid, s.p_hat, s.r_diff, s.r_judge, s.r_curr) == (1.0, 1.0, 0.5, 1.0, 1.0, 1.0)
    assert s.total == 3.0
    reward = make_generator_reward(_fixed_solver(8), k=8)
    assert reward.__name__ == "generator_reward"
    logged: dict[str, float] = {}
    out = reward([good, generator_text(question="TODO"), generator_text(gold="oops"),
                  [{"role": "assistant", "content": good}]], log_metric=logged.__setitem__)
    full = 1.0 + 1.0 + 0.5 * r_diff(1.0)  # no judge: r_judge = 0
    assert out == pytest.approx([full, 0.0, 2 / 3, full])
    assert logged["gen/placeholder"] == 0.25
    with pytest.raises(ValueError):
        generator_reward([good])
    spec = Spec("airline", 1, ["update_baggage"], TOOLS).to_dict()
    seen: list[Spec] = []
    generator_reward([good], solver=lambda c, k: seen.append(c.spec) or [], spec=[json.dumps(spec)])
    assert seen[0].world == "airline"


# --------------------------------------------------------------------------- solver reward


def test_solver_format_score() -> None:
    ok = '<tool_call>{"name": "a", "arguments": {}}</tool_call>'
    assert solver_format_score(ok) == pytest.approx(1.0)
    assert solver_format_score('<tool_call>{"name": "a", "arguments": </tool_call>') == pytest.approx(0.3)
    assert solver_format_score(ok + '<tool_call>{"name": </tool_call>') == pytest.approx(0.7)  # tag + call
    assert solver_format_score('{"name": "a", "arguments": {}}') == pytest.approx(0.4)  # untagged call
    assert solver_format_score("I cannot help.") == 0.0
    native = [{"role": "assistant", "content": "", "tool_calls": [{"function": {"name": "a", "arguments": "{}"}}]}]
    assert solver_format_score(native) == pytest.approx(1.0)


def test_solver_accuracy_hand_computed() -> None:
    a = ToolCall(name="get_user_details", arguments={"user_id": "u1"})
    b = ToolCall(name="update_baggage", arguments={"reservation_id": "R1", "total_bags": 2})
    b_wrong = ToolCall(name="update_baggage", arguments={"reservation_id": "R1", "total_bags": 3})
    c = ToolCall(name="calculate", arguments={})
    assert call_score(b_wrong, b) == pytest.approx(0.2 + 0.3 + 0.5 * 0.5)  # 0.75
    # name wrong, keys {user_id} vs {user_id, x}: F1 = 2/3, shared value equal
    assert call_score(ToolCall(name="get_usr", arguments={"user_id": "u1"}),
                      ToolCall(name="get_user_details", arguments={"user_id": "u1", "x": 1})) == pytest.approx(0.7)
    assert call_score(c, c) == 1.0
    assert call_score(ToolCall(name="update_baggage", arguments={"total_bags": 2.0, "reservation_id": "R1"}), b) == 1.0
    flag = ToolCall(name="book", arguments={"insurance": True})
    assert call_score(ToolCall(name="book", arguments={"insurance": 1}), flag) == pytest.approx(0.5)  # True != 1
    # out of order, one wrong value and one extra call: mean(1, 0.75) / (1 + 0.25)
    assert solver_accuracy([b_wrong, a, c], [a, b]) == pytest.approx(0.875 / 1.25)
    assert solver_accuracy([a, b], [a, b]) == 1.0
    assert solver_accuracy([a], [a, b]) == pytest.approx(0.5)  # an unmatched gold call scores 0
    assert solver_accuracy([a, a, a], [a]) == pytest.approx(1 / 1.5)
    assert solver_accuracy([], [a]) == 0.0


def test_solver_reward_trl() -> None:
    gold = [{"name": "get_user_details", "arguments": {"user_id": "u1"}},
            {"name": "update_baggage", "arguments": {"reservation_id": "R1", "total_bags": 2}}]
    calls = [{"name": "update_baggage", "arguments": {"reservation_id": "R1", "total_bags": 3}},
             {"name": "get_user_details", "arguments": {"user_id": "u1"}}, {"name": "calculate", "arguments": {}}]
    text = "".join(f"<tool_call>{json.dumps(c)}</tool_call>" for c in calls)
    logged: dict[str, float] = {}
    out = solver_reward([text, "no calls", text], [json.dumps(gold), gold, {"reference_solution": gold}],
                        log_metric=logged.__setitem__)
    assert out == pytest.approx([1.0 + 0.7, 0.0, 1.7])
    assert logged["solver/format"] == pytest.approx(2 / 3)
    with pytest.raises(ValueError):
        solver_reward([text], [])


# --------------------------------------------------------------------------- benchmark tools


def test_bandpass_curve_follows_expectation() -> None:
    curve = bandpass_curve([0.0, 0.5, 1.0], n_candidates=400, k=8, rng=random.Random(0))
    assert curve[0] == [0.0, 0.0]
    assert curve[2] == pytest.approx([1.0, r_diff(1.0)])
    assert curve[1][1] == pytest.approx(expected_r_diff(0.5, 8), abs=0.05)
    assert expected_r_diff(0.5, 8) > expected_r_diff(0.1, 8) and expected_r_diff(0.5, 8) > expected_r_diff(0.95, 8)


def test_stub_solver_and_perturbation() -> None:
    gen = sample_generation()
    answers = StubSolver(0.0, random.Random(1))(gen, 20)
    assert solver_pass_rate(gen, answers) == 0.0
    assert solver_pass_rate(gen, StubSolver(1.0, random.Random(1))(gen, 5)) == 1.0
