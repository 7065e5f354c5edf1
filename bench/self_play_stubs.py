"""Stand-ins for the small-scale checks of self-play (methods.md §3), used by
`bench/method_checks.py` and the tests: a stub solver that answers right with probability
q, the band-pass curve it gives, and planted hallucinations for the grounding check."""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from typing import Any

from data.records import ToolCall
from data.self_play import Candidate, Generation, Spec
from rollout.generation import gold_calls_of, solver_pass_rate, validity, value_in_question
from train.rewards import r_diff


def perturb_calls(calls: Sequence[ToolCall], rng: random.Random) -> list[ToolCall]:
    """A copy of `calls` that differs from them: one argument value changed (or, for a call
    without arguments, its tool name)."""
    out = [ToolCall(name=c.name, arguments=dict(c.arguments)) for c in calls]
    if not out:
        return [ToolCall(name="noop", arguments={})]
    c = rng.choice(out)
    if not c.arguments:
        c.name += "_x"
        return out
    key = rng.choice(sorted(c.arguments))
    v = c.arguments[key]
    if isinstance(v, bool):
        c.arguments[key] = not v
    elif isinstance(v, (int, float)):
        c.arguments[key] = v + rng.randint(1, 9)
    else:
        c.arguments[key] = f"{v}_x"
    return out


class StubSolver:
    """Benchmark tool, not a solver: each of k answers is the gold calls with probability q,
    else `perturb_calls` of them. A `Solve`, so it plugs into rewards and the filter."""

    def __init__(self, q: float, rng: random.Random) -> None:
        self.q = q
        self.rng = rng

    def __call__(self, candidate: Candidate | Generation, k: int) -> list[list[ToolCall]]:
        gold = gold_calls_of(candidate)
        return [[ToolCall(name=c.name, arguments=dict(c.arguments)) for c in gold] if self.rng.random() < self.q
                else perturb_calls(gold, self.rng) for _ in range(k)]


def expected_r_diff(q: float, k: int = 8) -> float:
    """E[r_diff(X/k)] for X ~ Binomial(k, q): the band-pass curve a q-solver should trace."""
    return sum(math.comb(k, x) * q**x * (1 - q) ** (k - x) * r_diff(x / k) for x in range(k + 1))


def bandpass_curve(qs: Sequence[float], n_candidates: int, k: int = 8, rng: random.Random | None = None
                   ) -> list[list[float]]:
    """[q, mean r_diff] per q: `n_candidates` synthetic one-call candidates, each solved k
    times by a `StubSolver(q)`."""
    rng = rng or random.Random(0)
    schema = {"type": "function", "function": {"name": "lookup", "description": "Look up a record.", "parameters": {
        "type": "object", "properties": {"record_id": {"type": "string"}}, "required": ["record_id"]}}}
    cands = [Candidate(spec=Spec("synthetic", 1, ["lookup"], [schema]), generation=Generation(
        question=f"Please look up record rec{i:05d}.", tools=[schema],
        calls=[ToolCall(name="lookup", arguments={"record_id": f"rec{i:05d}"})])) for i in range(n_candidates)]
    curve = []
    for q in qs:
        solver = StubSolver(q, rng)
        values = [r_diff(solver_pass_rate(c, solver(c, k))) for c in cands]
        curve.append([q, sum(values) / len(values) if values else 0.0])
    return curve


def plant_hallucination(gen: Generation, rng: random.Random) -> Generation:
    """A copy of `gen` with one gold argument value replaced by a plausible invented one that
    the question does not state (digits and letters resampled, e.g. mia_li_1003 → mia_li_7361)."""
    paths = [(i, k) for i, c in enumerate(gen.calls) for k, v in c.arguments.items()
             if not isinstance(v, bool) and v is not None and not isinstance(v, (list, dict))]
    if not paths:
        raise ValueError("no argument value to replace")
    i, key = rng.choice(paths)
    value = gen.calls[i].arguments[key]
    for attempt in range(100):
        if isinstance(value, (int, float)):
            new: Any = value + rng.randint(10 + attempt, 999)
        else:
            new = "".join(rng.choice("0123456789") if ch.isdigit() else
                          rng.choice("ABCDEFGHJKLMNPQRSTUVWXYZ") if ch.isupper() else ch for ch in str(value))
            if new == str(value):
                new = f"{value}_{rng.randrange(10**6)}"
        if not value_in_question(new, gen.question):
            break
    calls = [ToolCall(name=c.name, arguments=dict(c.arguments)) for c in gen.calls]
    calls[i].arguments[key] = new
    return Generation(question=gen.question, tools=gen.tools, calls=calls)


def grounding_rejection_rate(generations: Sequence[Generation]) -> float:
    """Share of generations the grounding rule rejects (some gold value not in the question)."""
    if not generations:
        return 0.0
    return sum(not validity(g).grounded for g in generations) / len(generations)
