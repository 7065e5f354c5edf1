"""Reward functions for TRL's GRPOTrainer: the dense state reward backed by trajforge's
verifiers, and self-play's generator and solver rewards (Tool-R0). All read a completion's
tool calls the same way (`completion_calls`).

TRL calls a reward function as `f(prompts=..., completions=..., completion_ids=..., **columns)`
where every other dataset column (here `task`, `tools`, `task_id`) arrives as a list with
one entry per completion, plus `trainer_state`, `log_extra` and `log_metric`.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from data.records import Task, ToolCall
from data.self_play import Candidate, Generation, Judge, ParseError, Solve, Spec
from rollout.generation import (
    answer_calls,
    check_format,
    completion_text,
    is_placeholder,
    parse_generation,
    r_format,
    r_valid,
    solver_pass_rate,
)
from rollout.parsing import decode_native_tool_calls, message_text, parse_tool_calls
from verifiers.state import score_calls

Completion = str | list[dict[str, Any]]


@lru_cache(maxsize=512)
def _task(task_json: str) -> Task:
    return Task.model_validate_json(task_json)


def completion_calls(completion: Completion) -> tuple[list[ToolCall], int]:
    """The tool calls of one completion and the number of malformed ones.

    A completion is model text or a list of messages (TRL's conversational form). Text and
    message `content` are parsed for `<tool_call>` blocks (`rollout.parsing`); native
    `tool_calls` on assistant messages (as TRL's `parse_response` returns them, arguments
    a dict or a JSON string) are taken as they are.
    """
    if isinstance(completion, str):
        _, calls, malformed = parse_tool_calls(completion)
        return calls, len(malformed)
    calls: list[ToolCall] = []
    bad = 0
    for message in completion:
        if message.get("role", "assistant") != "assistant":
            continue
        content = message_text(message)
        if content:
            _, found, malformed = parse_tool_calls(content)
            calls += found
            bad += len(malformed)
        native, malformed = decode_native_tool_calls(message.get("tool_calls") or [])
        calls += native
        bad += len(malformed)
    return calls, bad


def state_reward(
    completions: Sequence[Completion], task: Sequence[str | Task | dict[str, Any]], **kwargs: Any
) -> list[float]:
    """Dense state reward (methods.md §1) of each completion against its row's task.

    The completion's tool calls are replayed with `verifiers.state.score_calls` on a fresh
    copy of the task's initial state (reads skipped): 1.0 when the final state equals the
    target, else the partial credit of the dense formula. A completion holding any malformed
    tool call scores 0.0. `task` is the rl release's column (JSON of a `Task`), one per
    completion. When TRL passes `log_metric`, the batch's exact-match and malformed rates
    are logged as `state/exact` and `state/malformed`.
    """
    if len(completions) != len(task):
        raise ValueError(f"{len(completions)} completions but {len(task)} tasks")
    rewards: list[float] = []
    exact = malformed = 0
    for completion, t in zip(completions, task, strict=True):
        calls, bad = completion_calls(completion)
        if bad:
            malformed += 1
            rewards.append(0.0)
            continue
        score = score_calls(_as_task(t), calls)
        exact += score.exact
        rewards.append(float(score.reward))
    log_metric: Callable[[str, float], None] | None = kwargs.get("log_metric")
    if log_metric is not None and rewards:
        log_metric("state/exact", exact / len(rewards))
        log_metric("state/malformed", malformed / len(rewards))
    return rewards


def _as_task(t: str | Task | dict[str, Any]) -> Task:
    if isinstance(t, Task):
        return t
    if isinstance(t, dict):
        return Task.model_validate(t)
    return _task(t)


# -- self-play (Tool-R0, methods.md §3): the generator's and the solver's rewards --------------
#
# Choices the method text leaves open (ours): r_valid and r_curr need a fully parsed
# generation (all tags well-formed, both JSON blocks valid), r_format alone gives partial
# credit; r_judge without a judge is 0 (no quality evidence, no credit); the solver reward is
# format (0–1) + accuracy (0–1), range [0, 2]; predicted calls are matched to gold calls
# greedily by pair score (ties: earlier gold, then earlier prediction), each used once, an
# unmatched gold call scoring 0; values are equal when JSON-equal, with ``2 == 2.0`` but
# ``True != 1``.

LOW_CUT = 1 / 8  # p̂ below this earns no difficulty reward
BAND = (0.25, 0.75)  # p̂ inside this band earns the full difficulty reward
SIGMA = 0.12




def r_diff(p_hat: float) -> float:
    """Band-pass difficulty reward: 0 below 1/8, 1 on [0.25, 0.75], a Gaussian (σ 0.12) outside."""
    if p_hat < LOW_CUT:
        return 0.0
    lo, hi = BAND
    if lo <= p_hat <= hi:
        return 1.0
    edge = lo if p_hat < lo else hi
    return math.exp(-((p_hat - edge) ** 2) / (2 * SIGMA**2))


def r_judge(score: float | None) -> float:
    """(s − 1)/4 for a 1–5 quality score (clipped to [1, 5]); 0 without a score."""
    if score is None:
        return 0.0
    return (min(5.0, max(1.0, float(score))) - 1.0) / 4.0


def r_curr(question: str | None, p_hat: float | None, judge_score: float | None) -> float:
    """0.5·r_diff(p̂) + 0.5·r_judge(s); 0 for a placeholder question (or no p̂ and no score)."""
    if is_placeholder(question):
        return 0.0
    return 0.5 * (r_diff(p_hat) if p_hat is not None else 0.0) + 0.5 * r_judge(judge_score)


@dataclass
class GeneratorScore:
    """The generator reward of one output and its parts."""

    r_format: float
    r_valid: float = 0.0
    r_curr: float = 0.0
    r_diff: float = 0.0
    r_judge: float = 0.0
    p_hat: float | None = None
    placeholder: bool = False

    @property
    def total(self) -> float:
        return self.r_format + self.r_valid + self.r_curr


def score_generation(text: str, solve: Solve | None = None, judge: Judge | None = None, k: int = 8,
                     spec: Spec | None = None) -> GeneratorScore:
    """r_format + r_valid + r_curr of one generator output.

    r_valid and r_curr need a fully parsed generation; p̂ comes from `k` answers of
    `solve` (sample them at T=0.7, as the method does), r_judge from `judge`.
    """
    fc = check_format(text)
    if is_placeholder(fc.question):
        return GeneratorScore(r_format=0.0, placeholder=True)
    score = GeneratorScore(r_format=r_format(fc))
    gen = parse_generation(text)
    if isinstance(gen, ParseError):
        return score
    score.r_valid = r_valid(gen)
    if solve is not None:
        cand = Candidate(spec=spec or _spec_of(gen), generation=gen)
        score.p_hat = solver_pass_rate(gen, solve(cand, k))
        score.r_diff = r_diff(score.p_hat)
    judge_score = judge(gen) if judge is not None else None
    score.r_judge = r_judge(judge_score)
    score.r_curr = r_curr(gen.question, score.p_hat, judge_score)
    return score


def _spec_of(gen: Generation, world: str = "") -> Spec:
    return Spec(world=world, n_calls=len(gen.calls), tools=[c.name for c in gen.calls], menu=gen.tools)


def generator_reward(completions: Sequence[Completion], *, solver: Solve | None = None, judge: Judge | None = None,
                     k: int = 8, spec: Sequence[str | dict[str, Any]] | None = None, **kwargs: Any) -> list[float]:
    """TRL reward: r_format + r_valid + r_curr of each generator completion.

    `solver(candidate, k)` returns k solver answers (bind it with `make_generator_reward`);
    an optional `spec` column (JSON or dict of `Spec`) is passed on to the solver. With
    TRL's `log_metric`, the batch means of the parts are logged under `gen/`.
    """
    if solver is None:
        raise ValueError("generator_reward needs a solver; bind one with make_generator_reward(solver)")
    scores = []
    for i, c in enumerate(completions):
        s = None
        if spec is not None:
            raw = spec[i]
            s = Spec.from_dict(json.loads(raw) if isinstance(raw, str) else raw)
        scores.append(score_generation(completion_text(c), solver, judge, k, s))
    log_metric: Callable[[str, float], None] | None = kwargs.get("log_metric")
    if log_metric is not None and scores:
        n = len(scores)
        for name in ("r_format", "r_valid", "r_curr", "r_diff"):
            log_metric(f"gen/{name}", sum(getattr(x, name) for x in scores) / n)
        log_metric("gen/placeholder", sum(x.placeholder for x in scores) / n)
    return [x.total for x in scores]


def make_generator_reward(solver: Solve, judge: Judge | None = None, k: int = 8) -> Callable[..., list[float]]:
    """`generator_reward` with its solver (and judge) bound, named for TRL's logs."""

    def reward(completions: Sequence[Completion], **kwargs: Any) -> list[float]:
        return generator_reward(completions, solver=solver, judge=judge, k=k, **kwargs)

    reward.__name__ = "generator_reward"
    return reward


_TOOL_BLOCK = re.compile(r"<tool_call>.*?</tool_call>", re.DOTALL)


def solver_format_score(completion: Completion) -> float:
    """0.3[a <tool_call>…</tool_call> block] + 0.3[it parses: no malformed call] + 0.4[≥ 1 call].

    Native `tool_calls` on assistant messages count as tagged, parsed calls.
    """
    calls, tagged, malformed = _solver_calls(completion)
    return 0.3 * tagged + 0.3 * (tagged and not malformed) + 0.4 * bool(calls)


def _solver_calls(completion: Completion) -> tuple[list[ToolCall], bool, int]:
    """(calls, whether the completion wrote a tagged or native call, malformed calls)."""
    calls, bad = completion_calls(completion)
    native = not isinstance(completion, str) and any(
        decode_native_tool_calls(m.get("tool_calls") or [])[0] for m in completion
        if m.get("role", "assistant") == "assistant")
    return calls, bool(_TOOL_BLOCK.search(completion_text(completion))) or native, bad


def _norm_value(v: Any) -> Any:
    """A value in a form where ``2 == 2.0`` but ``True != 1`` (booleans keep a type tag)."""
    if isinstance(v, bool):
        return ("bool", v)
    if v is None or isinstance(v, str):
        return v
    if isinstance(v, (int, float)):
        return float(v)
    if isinstance(v, list):
        return [_norm_value(x) for x in v]
    if isinstance(v, dict):
        return {k: _norm_value(x) for k, x in v.items()}
    return str(v)


def call_score(pred: ToolCall, gold: ToolCall) -> float:
    """0.2·[same name] + 0.3·F1(argument keys) + 0.5·(share of shared keys with equal values)."""
    pk, gk = set(pred.arguments), set(gold.arguments)
    if not pk and not gk:
        f1 = share = 1.0
    else:
        shared = pk & gk
        f1 = 2 * len(shared) / (len(pk) + len(gk))
        share = (sum(_norm_value(pred.arguments[x]) == _norm_value(gold.arguments[x]) for x in shared) / len(shared)
                 if shared else 0.0)
    return 0.2 * (pred.name == gold.name) + 0.3 * f1 + 0.5 * share


def solver_accuracy(pred: Sequence[ToolCall], gold: Sequence[ToolCall]) -> float:
    """Mean per-gold-call score (greedy one-to-one matching) × 1/(1 + 0.25·extra calls)."""
    if not gold:
        return 1.0 if not pred else 0.0
    pairs = sorted(((call_score(p, g), -gi, -pi, gi, pi) for gi, g in enumerate(gold) for pi, p in enumerate(pred)),
                   reverse=True)
    used_g: set[int] = set()
    used_p: set[int] = set()
    total = 0.0
    for score, _, _, gi, pi in pairs:
        if gi in used_g or pi in used_p:
            continue
        used_g.add(gi)
        used_p.add(pi)
        total += score
    extra = max(0, len(pred) - len(gold))
    return (total / len(gold)) / (1 + 0.25 * extra)


def gold_calls(value: str | Task | dict[str, Any] | Sequence[ToolCall | dict[str, Any]]) -> list[ToolCall]:
    """Gold calls from a column value: JSON or list of calls, one call, or a `Task` (its reference)."""
    if isinstance(value, str):
        value = json.loads(value)
    if isinstance(value, Task):
        return list(value.reference_solution)
    if isinstance(value, dict):
        if "reference_solution" in value:
            return [ToolCall.model_validate(c) for c in value["reference_solution"]]
        value = [value]
    return answer_calls(value)


def solver_reward(completions: Sequence[Completion], gold: Sequence[Any], **kwargs: Any) -> list[float]:
    """TRL reward: format (0–1) + accuracy (0–1) of each solver completion against its gold calls.

    `gold` is one column value per completion (see `gold_calls`). With `log_metric`, batch
    means are logged as `solver/format` and `solver/accuracy`.
    """
    if len(completions) != len(gold):
        raise ValueError(f"{len(completions)} completions but {len(gold)} gold answers")
    fmts, accs = [], []
    for c, g in zip(completions, gold, strict=True):
        calls, _, _ = _solver_calls(c)
        fmts.append(solver_format_score(c))
        accs.append(solver_accuracy(calls, gold_calls(g)))
    log_metric: Callable[[str, float], None] | None = kwargs.get("log_metric")
    if log_metric is not None and fmts:
        log_metric("solver/format", sum(fmts) / len(fmts))
        log_metric("solver/accuracy", sum(accs) / len(accs))
    return [f + a for f, a in zip(fmts, accs, strict=True)]
