"""Counterfactual branching: continue a stored trajectory from one of its steps with one
message substituted (the primitive C3-style counterfactual credit assignment needs,
methods.md §5).

The env is rebuilt by replaying the parent's actions up to the branch point on a fresh copy
of the task's initial state, under the parent's runtime contract; every replayed step must
reproduce the state hash the parent recorded, or `BranchError` is raised. Then the
substituted message takes the place of the parent's (an assistant turn is executed like a
model's; a user turn is answered by the model) and the episode runs to its end with the
given model and user. The new trajectory records `metadata["branch"] = {parent_id, at_step,
role, substituted}`; its `usage` counts the continuation's model calls only, and its
`error_counts` the error classes of the kept steps plus the continuation's.
"""

from __future__ import annotations

import copy
import json
from collections import Counter
from typing import Any

from data.records import Sampling, Task, ToolCall, Trajectory, content_hash
from envs.world import World
from rollout.agent import AgentConfig, Episode, Runtime
from rollout.model import ChatModel, ChatResponse, MalformedCall
from rollout.user import UserSimulator, termination_for


class BranchError(ValueError):
    """The branch cannot be made: a bad branch point or message, or a replay that does not
    reproduce the parent's recorded states."""


def branch_point(parent: Trajectory, at_step: int, role: str) -> tuple[int, int, int]:
    """(index in `parent.messages` of the message to substitute, number of steps kept, turn).

    `role="assistant"`: the assistant turn that made step `at_step` (which must be the first
    step of its turn) is replaced; the steps of earlier turns are kept. `role="user"`: the
    user's reply to the plain assistant message of step `at_step` is replaced; the steps up
    to and including `at_step` are kept.
    """
    if role not in ("assistant", "user"):
        raise BranchError(f"can substitute an assistant or a user message, not {role!r}")
    if not 0 <= at_step < len(parent.steps):
        raise BranchError(f"at_step {at_step} is outside the trajectory's {len(parent.steps)} steps")
    step = parent.steps[at_step]
    assistant_idx = [i for i, m in enumerate(parent.messages) if m.get("role") == "assistant"]
    if step.turn < 1 or step.turn > len(assistant_idx):
        raise BranchError(f"step {at_step} names turn {step.turn}, but the trajectory has "
                          f"{len(assistant_idx)} assistant messages")
    idx = assistant_idx[step.turn - 1]
    if role == "assistant":
        first = next(s.index for s in parent.steps if s.turn == step.turn)
        if first != at_step:
            raise BranchError(f"step {at_step} is not the first step of turn {step.turn}; "
                              f"branch the turn at step {first}")
        return idx, sum(s.turn < step.turn for s in parent.steps), step.turn
    if step.action is not None or step.error is not None:
        raise BranchError(f"step {at_step} is a tool call; a user turn follows only a plain assistant message")
    return idx + 1, at_step + 1, step.turn


def as_response(message: dict[str, Any]) -> ChatResponse:
    """An OpenAI-format assistant message as the `ChatResponse` that would have produced it."""
    calls: list[ToolCall] = []
    malformed: list[MalformedCall] = []
    for i, c in enumerate(message.get("tool_calls") or []):
        fn = c.get("function") or {}
        name, args = fn.get("name"), fn.get("arguments", {})
        if isinstance(args, str):
            try:
                args = json.loads(args) if args.strip() else {}
            except json.JSONDecodeError as exc:
                malformed.append(MalformedCall(error="bad_json", detail=str(exc), raw=args))
                continue
        if not isinstance(name, str) or not name:
            malformed.append(MalformedCall(error="missing_name", detail="a tool call without a name",
                                           raw=json.dumps(c)[:500]))
        elif not isinstance(args, dict):
            malformed.append(MalformedCall(error="arguments_not_object", detail="arguments must be an object",
                                           raw=json.dumps(c)[:500]))
        else:
            calls.append(ToolCall(name=name, arguments=args, id=c.get("id") or f"call_sub_{i}"))
    return ChatResponse(text=message.get("content") or "", tool_calls=calls, malformed=malformed,
                        finish_reason="tool_calls" if calls else "stop")


def _check_message(message: dict[str, Any], role: str) -> None:
    if not isinstance(message, dict) or message.get("role") != role:
        raise BranchError(f"the substituted message must be a dict with role {role!r}")
    content = message.get("content")
    if content is not None and not isinstance(content, str):
        raise BranchError("the substituted message's content must be a string")
    if role == "user" and not (content or "").strip():
        raise BranchError("a substituted user message needs text")
    if role == "assistant" and not (content or "").strip() and not message.get("tool_calls"):
        raise BranchError("a substituted assistant message needs text or tool calls")


async def replay_prefix(runtime: Runtime, parent: Trajectory, kept: int) -> None:
    """Replay the parent's first `kept` steps' actions, checking each recorded state hash."""
    for step in parent.steps[:kept]:
        if step.action is not None:
            await runtime.call(ToolCall(name=step.action.name, arguments=dict(step.action.arguments)))
        if step.state_hash is not None:
            got = await runtime.state_hash()
            if got != step.state_hash:
                raise BranchError(f"replaying step {step.index} gives state {got}, but the trajectory "
                                  f"recorded {step.state_hash}; the stored trajectory does not replay")


def branch_id(parent: Trajectory, at_step: int, message: dict[str, Any], model: str, sampling: Sampling) -> str:
    return "traj-" + content_hash(["branch", parent.id, at_step, message, model, sampling.model_dump()])


async def branch_episode(
    task: Task,
    world: World,
    parent: Trajectory,
    at_step: int,
    message: dict[str, Any],
    model: ChatModel,
    user: UserSimulator,
    sampling: Sampling | None = None,
    cfg: AgentConfig | None = None,
) -> Trajectory:
    """Continue `parent` from step `at_step` with `message` substituted (see the module
    docstring and `branch_point`). `sampling` defaults to the parent's; `cfg` defaults to
    the parent's runtime contract and must agree with it."""
    if parent.task_id != task.id:
        raise BranchError(f"trajectory {parent.id} is of task {parent.task_id}, not {task.id}")
    role = message.get("role") if isinstance(message, dict) else None
    _check_message(message, str(role))
    idx, kept, turn = branch_point(parent, at_step, str(role))
    persistent = bool(parent.metadata.get("persistent_state", True))
    max_calls = int(parent.metadata.get("max_tool_calls_per_turn", AgentConfig().max_tool_calls_per_turn))
    cfg = cfg or AgentConfig(persistent_state=persistent, max_tool_calls_per_turn=max_calls)
    if cfg.persistent_state != persistent:
        raise BranchError(f"the parent ran with persistent_state={persistent}; a branch must replay it the same way")
    sampling = sampling or parent.sampling
    runtime = await Runtime(world, task.initial_state, persistent).open()
    try:
        await replay_prefix(runtime, parent, kept)
        ep = Episode(task, model, user, sampling, cfg, runtime, list(parent.tools) or world.tool_schemas())
        ep.messages = copy.deepcopy(parent.messages[:idx])
        ep.steps = [s.model_copy(deep=True) for s in parent.steps[:kept]]
        ep.errors = Counter(s.error for s in ep.steps if s.error)
        ep.turn_tokens = [t.model_copy(deep=True) for t in parent.turn_tokens if t.message_index < idx]
        for key in ("strategy", "strategy_info"):
            if key in parent.metadata:
                ep.metadata[key] = copy.deepcopy(parent.metadata[key])
        ep.metadata["branch"] = {"parent_id": parent.id, "at_step": at_step, "role": role,
                                 "substituted": copy.deepcopy(message)}
        ep.turn = turn
        if role == "user":
            ep.messages.append({"role": "user", "content": message["content"]})
            ep.termination = termination_for(message["content"])
        resume = getattr(user, "resume", None)
        if callable(resume):  # the user simulator takes up the conversation so far
            resume(ep.messages)
        if role == "assistant":
            await ep.act(as_response(message), 0.0)
        await ep.run()
        final_hash = await runtime.state_hash()
    finally:
        await runtime.close()
    return ep.trajectory(branch_id(parent, at_step, message, model.name, sampling), parent.trial, final_hash)
