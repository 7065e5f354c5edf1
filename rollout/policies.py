"""Scripted policies: `ChatModel`s that follow a task's reference solution, optionally
with noise. They make gold reference trajectories and drive fast, model-free tests."""

from __future__ import annotations

import json
import random
from typing import Any

from data.jsonish import maybe_json
from data.records import Sampling, Task, ToolCall, Turn
from rollout.model import ChatResponse, MalformedCall

TRANSFER_TOOL = "transfer_to_human_agents"


class ScriptedPolicy:
    """Plays the task's reference dialogue (`Task.dialogue`: its assistant turns in order,
    one per model turn), or for a task without one emits the reference calls one per model
    turn, then a closing message; a planned call the world refused as planned is retried once,
    then the policy stops (it transfers where the world can, else ends).

    With `noise > 0`, each turn may instead (seeded by `sampling.seed`) make a malformed
    call, call an unknown tool, change one argument, or stop early — the mistakes a real
    model makes, so that verifiers and curation see failures and recoveries.
    """

    def __init__(self, task: Task, noise: float = 0.0, name: str = "scripted") -> None:
        self.task = task
        self.noise = noise
        self.name = f"{name}:noise={noise}" if noise else name
        self._rngs: dict[int, random.Random] = {}  # one generator per conversation
        self._turns = [t for t in task.dialogue if t.role == "assistant"]

    async def chat(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]], sampling: Sampling) -> ChatResponse:
        if self._turns:
            return self._dialogue_turn(messages, sampling)
        done = [c for m in messages if m["role"] == "assistant" for c in m.get("tool_calls") or []]
        ok = [c for c, m in _with_results(messages) if m is not None and '"error"' not in (m.get("content") or "")]
        plan = self.task.reference_solution
        if any(c["function"]["name"] == TRANSFER_TOOL for c in done) and all(c.name != TRANSFER_TOOL for c in plan):
            return ChatResponse(text="A human agent will take it from here.", completion_tokens=8)  # it gave up
        step = len(ok) if len(ok) <= len(plan) else len(plan)
        key = f"{self.task.id}|{sampling.seed}|{messages[1].get('content') if len(messages) > 1 else ''}"
        rng = self._rngs.setdefault(id(messages), random.Random(key))
        if step >= len(plan):
            return ChatResponse(text="Your request is complete.", completion_tokens=6)
        call = plan[step]
        if _refused(call, messages):  # the world refuses the planned call itself: retrying cannot help
            return _give_up(call, tools, done)
        if self.noise and rng.random() < self.noise:
            return _mistake(call, rng, plan)
        return ChatResponse(
            tool_calls=[ToolCall(name=call.name, arguments=dict(call.arguments), id=f"call_{len(done)}")],
            completion_tokens=16,
        )

    def _dialogue_turn(self, messages: list[dict[str, Any]], sampling: Sampling) -> ChatResponse:
        key = f"{self.task.id}|{sampling.seed}|{messages[1].get('content') if len(messages) > 1 else ''}"
        rng = self._rngs.setdefault(id(messages), random.Random(key))
        pos = _next_turn(self._turns, messages)
        if pos >= len(self._turns):
            return ChatResponse(text="Is there anything else I can help you with?", completion_tokens=9)
        turn = self._turns[pos]
        if turn.tool_calls and self.noise and rng.random() < self.noise:
            return _mistake(turn.tool_calls[0], rng, self.task.reference_solution)  # the planned turn waits
        calls = [ToolCall(name=c.name, arguments=dict(c.arguments), id=f"call_{pos}_{i}")
                 for i, c in enumerate(turn.tool_calls)]
        return ChatResponse(text=turn.content, tool_calls=calls, completion_tokens=max(1, len(turn.content) // 4))

    async def aclose(self) -> None:
        return None


def _next_turn(turns: list[Turn], messages: list[dict[str, Any]]) -> int:
    """The first planned turn the conversation has not played yet. Planned turns are matched
    in order against the assistant messages so far (same text, same calls); a message that
    is not the next planned turn (a mistake, a substituted message in a branch, a resumed
    conversation's own words) is passed over, so the plan picks up where it stands."""
    pos = 0
    for m in messages:
        if m["role"] != "assistant" or pos >= len(turns):
            continue
        calls = [(c["function"]["name"], maybe_json(c["function"].get("arguments"))) for c in m.get("tool_calls") or []]
        turn = turns[pos]
        if (m.get("content") or "") == turn.content and calls == [(c.name, c.arguments) for c in turn.tool_calls]:
            pos += 1
    return pos


RETRIES = 1  # a planned call that came back an error is made once more, then the policy gives up


def _refused(call: ToolCall, messages: list[dict[str, Any]]) -> bool:
    """Whether `call`, exactly as planned, came back an error more than `RETRIES` times (a τ²
    gold call that τ²'s tool refuses at this state: it would be refused again)."""
    return sum(c["function"]["name"] == call.name and maybe_json(c["function"].get("arguments")) == call.arguments
               and m is not None and '"error"' in (m.get("content") or "")
               for c, m in _with_results(messages)) > RETRIES


def _give_up(call: ToolCall, tools: list[dict[str, Any]], done: list[dict[str, Any]]) -> ChatResponse:
    """Stop after a refused planned call: hand the user to a human agent where the world has
    the transfer tool (once), else say so and end."""
    names = {(t.get("function") or t).get("name") for t in tools}
    transferred = any(c["function"]["name"] == TRANSFER_TOOL for c in done)
    if TRANSFER_TOOL in names and not transferred:
        summary = f"The {call.name} step of the request was refused; the customer needs further help."
        return ChatResponse(tool_calls=[ToolCall(name=TRANSFER_TOOL, arguments={"summary": summary},
                                                 id=f"call_{len(done)}")], completion_tokens=16)
    return ChatResponse(text="I'm sorry, I cannot complete this request.", completion_tokens=9)


def _with_results(messages: list[dict[str, Any]]) -> list[tuple[dict[str, Any], dict[str, Any] | None]]:
    results = {m.get("tool_call_id"): m for m in messages if m["role"] == "tool"}
    return [(c, results.get(c.get("id"))) for m in messages if m["role"] == "assistant"
            for c in m.get("tool_calls") or []]


def _mistake(call: ToolCall, rng: random.Random, plan: list[ToolCall]) -> ChatResponse:
    kind = rng.choice(["malformed", "unknown_tool", "wrong_argument", "stop_early"])
    if kind == "malformed":
        raw = f'<tool_call>{{"name": "{call.name}", "arguments": {{"oops"</tool_call>'
        return ChatResponse(malformed=[MalformedCall(error="bad_json", detail="unterminated object", raw=raw)])
    if kind == "unknown_tool":
        return ChatResponse(tool_calls=[ToolCall(name=call.name + "_v2", arguments=dict(call.arguments), id="call_x")])
    if kind == "wrong_argument" and call.arguments:
        args = dict(call.arguments)
        key = rng.choice(sorted(args))
        value = args[key]
        args[key] = (value + 1) if isinstance(value, int) and not isinstance(value, bool) else (
            not value if isinstance(value, bool) else f"{value}X")
        return ChatResponse(tool_calls=[ToolCall(name=call.name, arguments=args, id="call_w")])
    return ChatResponse(text="I think that is everything I can do. " + json.dumps({"steps_left": len(plan)})[:0])
