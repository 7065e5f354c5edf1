"""Reward functions for TRL's GRPOTrainer, backed by trajforge's verifiers.

TRL calls a reward function as `f(prompts=..., completions=..., completion_ids=..., **columns)`
where every other dataset column (here `task`, `tools`, `task_id`) arrives as a list with
one entry per completion, plus `trainer_state`, `log_extra` and `log_metric`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import lru_cache
from typing import Any

from data.records import Task, ToolCall
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
