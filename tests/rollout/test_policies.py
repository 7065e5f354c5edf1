"""`rollout.policies`: the scripted policy plays a task's reference dialogue turn by turn (or
its reference calls one per turn), picks up where a conversation stands, and with noise makes
seeded, typical model mistakes."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from data.records import Sampling, Task
from rollout.model import ChatResponse
from rollout.policies import ScriptedPolicy


def _chat(policy: ScriptedPolicy, messages: list[dict[str, Any]], seed: int = 1) -> ChatResponse:
    return asyncio.run(policy.chat(messages, [], Sampling(seed=seed)))


def _assistant(resp: ChatResponse) -> dict[str, Any]:
    """The response as the agent loop records it."""
    return {"role": "assistant", "content": resp.text, "tool_calls": [
        {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": json.dumps(c.arguments)}}
        for c in resp.tool_calls]}


def _opening(task: Task) -> list[dict[str, Any]]:
    return [{"role": "system", "content": "policy"}, {"role": "user", "content": task.instruction}]


def test_dialogue_turns_are_played_in_order(tasks: list[Task]) -> None:
    task = tasks[0]
    planned = [t for t in task.dialogue if t.role == "assistant"]
    policy = ScriptedPolicy(task)
    messages = _opening(task)
    for pos, turn in enumerate(planned):
        resp = _chat(policy, messages)
        assert resp.text == turn.content and [(c.name, c.arguments) for c in resp.tool_calls] == \
            [(c.name, c.arguments) for c in turn.tool_calls]
        assert [c.id for c in resp.tool_calls] == [f"call_{pos}_{i}" for i in range(len(turn.tool_calls))]
        messages.append(_assistant(resp))
        messages.append({"role": "assistant", "content": "an off-plan message is passed over"})
    assert _chat(policy, messages).text == "Is there anything else I can help you with?"


def test_without_a_dialogue_the_reference_calls_are_made_one_per_turn(tasks: list[Task]) -> None:
    task = tasks[0].model_copy(update={"dialogue": []})
    plan = task.reference_solution
    policy = ScriptedPolicy(task)
    messages = _opening(task)
    first = _chat(policy, messages)
    assert [(c.name, c.arguments, c.id) for c in first.tool_calls] == [(plan[0].name, plan[0].arguments, "call_0")]
    messages += [_assistant(first), {"role": "tool", "tool_call_id": "call_0", "content": '{"error": "x"}'}]
    for step, call in enumerate(plan):  # a failed call is not progress: the first step comes again
        resp = _chat(policy, messages)
        assert [(c.name, c.arguments) for c in resp.tool_calls] == [(call.name, call.arguments)]
        assert resp.tool_calls[0].id == f"call_{step + 1}"  # numbered over every call so far
        messages += [_assistant(resp), {"role": "tool", "tool_call_id": resp.tool_calls[0].id, "content": "ok"}]
    assert _chat(policy, messages) == ChatResponse(text="Your request is complete.", completion_tokens=6)


def test_noise_makes_seeded_typical_mistakes(tasks: list[Task]) -> None:
    task = tasks[0].model_copy(update={"dialogue": []})
    call = task.reference_solution[0]
    kinds = set()
    for seed in range(40):
        resp = _chat(ScriptedPolicy(task, noise=1.0), _opening(task), seed=seed)
        assert resp == _chat(ScriptedPolicy(task, noise=1.0), _opening(task), seed=seed)  # seeded
        if resp.malformed:
            assert [m.error for m in resp.malformed] == ["bad_json"] and not resp.tool_calls
            kinds.add("malformed")
        elif resp.tool_calls and resp.tool_calls[0].name == call.name + "_v2":
            kinds.add("unknown_tool")
        elif resp.tool_calls:
            assert resp.tool_calls[0].name == call.name and resp.tool_calls[0].arguments != call.arguments
            kinds.add("wrong_argument")
        else:
            assert resp.text and not resp.tool_calls
            kinds.add("stop_early")
    assert kinds == {"malformed", "unknown_tool", "wrong_argument", "stop_early"}
    assert ScriptedPolicy(task, noise=0.5).name == "scripted:noise=0.5" and ScriptedPolicy(task).name == "scripted"


def test_a_planned_call_refused_again_is_not_retried(tasks: list[Task]) -> None:
    """After the world refuses the planned call twice, the policy transfers (once) where the
    world has the transfer tool, then ends; without one it ends."""
    task = tasks[0].model_copy(update={"dialogue": []})
    refused = {"role": "tool", "content": '{"error": "rule_violation", "code": "R1", "message": "no"}'}
    messages = _opening(task)
    for _ in range(2):
        resp = _chat(ScriptedPolicy(task), messages)
        assert resp.tool_calls[0].name == task.reference_solution[0].name
        messages += [_assistant(resp), {**refused, "tool_call_id": resp.tool_calls[0].id}]
    transfer = [{"type": "function", "function": {"name": "transfer_to_human_agents", "parameters": {}}}]
    resp = asyncio.run(ScriptedPolicy(task).chat(messages, transfer, Sampling(seed=1)))
    assert [c.name for c in resp.tool_calls] == ["transfer_to_human_agents"]
    messages += [_assistant(resp), {"role": "tool", "tool_call_id": resp.tool_calls[0].id, "content": "Transferred"}]
    after = asyncio.run(ScriptedPolicy(task).chat(messages, transfer, Sampling(seed=1)))
    assert after.text and not after.tool_calls
    assert not _chat(ScriptedPolicy(task), messages[:6]).tool_calls  # no transfer tool: it ends
