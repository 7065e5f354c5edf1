"""The state reward of GRPO completions (`train.rewards`): gold calls score 1, partial or
wrong calls less, malformed calls 0; text and native tool calls are both read."""

from __future__ import annotations

import json
from typing import Any

import pytest

from data.records import Task, canonical_json
from envs.world import World
from train.rewards import completion_calls, state_reward


def _call_text(name: str, arguments: dict[str, Any]) -> str:
    return "<tool_call>" + json.dumps({"name": name, "arguments": arguments}) + "</tool_call>"


def _gold_text(task: Task) -> str:
    return "\n".join(_call_text(c.name, c.arguments) for c in task.reference_solution)


def _task_json(task: Task) -> str:
    return canonical_json(task.model_dump())  # what the rl release's `task` column holds


def test_state_reward_gold_completion_scores_one(tasks: list[Task], airline: World) -> None:
    texts = [_gold_text(t) for t in tasks]
    assert state_reward(texts, [_task_json(t) for t in tasks]) == [1.0] * len(tasks)
    # conversational completions with native tool calls (as TRL's parse_response returns them)
    conv = [[{"role": "assistant", "content": "", "tool_calls": [
        {"type": "function", "function": {"name": c.name, "arguments": c.arguments}} for c in t.reference_solution]}]
        for t in tasks]
    assert state_reward(conv, [t.model_dump() for t in tasks]) == [1.0] * len(tasks)
    # the calls inside message content count too; reads may be omitted (only writes replay)
    task = tasks[0]
    writes_only = [c for c in task.reference_solution if airline.tools[c.name].write]
    assert 0 < len(writes_only) < len(task.reference_solution)
    content = "Booking now.\n" + "\n".join(_call_text(c.name, c.arguments) for c in writes_only)
    assert state_reward([[{"role": "assistant", "content": content}]], [_task_json(task)]) == [1.0]


def test_state_reward_partial_wrong_and_malformed(tasks: list[Task]) -> None:
    task = next(t for t in tasks if len(t.reference_solution) >= 2)
    tj = _task_json(task)
    no_last = "\n".join(_call_text(c.name, c.arguments) for c in task.reference_solution[:-1])
    malformed = _gold_text(task) + '\n<tool_call>{"name": "cancel_reservation", "arguments": {</tool_call>'
    logged: dict[str, float] = {}
    rewards = state_reward(
        [no_last, "I cannot help with that.", malformed, '<tool_call>{"arguments": {}}</tool_call>'],
        [tj] * 4, log_metric=lambda k, v: logged.__setitem__(k, v),
    )
    assert rewards[0] < 1.0
    assert rewards[1:] == [0.0, 0.0, 0.0]
    assert logged == {"state/exact": 0.0, "state/malformed": 0.5}
    with pytest.raises(ValueError):
        state_reward(["x"], [tj, tj])


def test_state_reward_gives_partial_credit_for_a_wrong_argument(tasks: list[Task]) -> None:
    task = next(t for t in tasks if any(isinstance(v, int) and not isinstance(v, bool) and v > 0
                                        for c in t.reference_solution for v in c.arguments.values()))
    calls = []
    for c in task.reference_solution:
        args = dict(c.arguments)
        for k, v in args.items():
            if isinstance(v, int) and not isinstance(v, bool) and v > 0:
                args[k] = v - 1 if v > 1 else v + 1
        calls.append(_call_text(c.name, args))
    [reward] = state_reward(["\n".join(calls)], [_task_json(task)])
    assert 0.0 <= reward < 1.0


def test_completion_calls_reads_text_and_native_calls() -> None:
    calls, bad = completion_calls([{"role": "assistant", "content": _call_text("get_user", {"user_id": "u1"}),
                                    "tool_calls": [{"type": "function", "function": {
                                        "name": "add_bags", "arguments": '{"reservation_id": "R1", "bags": 2}'}}]},
                                   {"role": "user", "content": _call_text("ignored", {})}])
    assert [(c.name, c.arguments) for c in calls] == [("get_user", {"user_id": "u1"}),
                                                      ("add_bags", {"reservation_id": "R1", "bags": 2})]
    assert bad == 0
    _, bad = completion_calls([{"role": "assistant", "tool_calls": [{"function": {"name": "x", "arguments": "{"}}]}])
    assert bad == 1
