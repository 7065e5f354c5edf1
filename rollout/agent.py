"""The agent loop: one multi-turn, tool-calling episode of a task in its world.

Every failure short of a bug in the environment becomes part of the record: malformed
calls, unknown tools, bad arguments and rule violations are returned to the model as
tool observations and counted by error class; a backend that fails for good ends the
episode with `model_error`. Nothing here raises on model misbehaviour.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from typing import Any

from pydantic import BaseModel, ConfigDict

from data.records import Sampling, Step, Task, ToolCall, Trajectory, TurnTokens, Usage
from envs.world import World
from rollout.model import ChatModel, ModelError
from rollout.user import UserSimulator, termination_for

SYSTEM_TEMPLATE = """You are a customer-service agent. Follow the policy below exactly.
Use the tools to look up and change records. Make one tool call at a time and wait for its
result. When you need information or confirmation from the user, or when the request is
done, reply to the user in plain text.

Current time: {now}

{policy}"""

TRANSFER_TOOL = "transfer_to_human_agents"


class AgentConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    max_turns: int = 12  # model calls per episode
    max_tool_calls_per_turn: int = 4
    persistent_state: bool = True  # runtime contract recorded on each trajectory


def system_prompt(world: World, now: str) -> str:
    own = getattr(world, "system_prompt", None)  # a world may bring its own (workspace worlds)
    return own(now) if callable(own) else SYSTEM_TEMPLATE.format(now=now, policy=world.policy.strip())


def opening_messages(task: Task, world: World, env_now: str, user: UserSimulator) -> list[dict[str, Any]]:
    """The system prompt and the user's first turn: the prompt every episode starts from."""
    return [
        {"role": "system", "content": system_prompt(world, env_now)},
        {"role": "user", "content": user.first_message()},
    ]


class _StateHasher:
    """`env.state_hash()`, recomputed only when SQLite counted a row change since the last
    one (`total_changes` counts every insert, update and delete, triggers included; a
    rolled-back change still bumps it, so a stale hash is never reused)."""

    def __init__(self, env: Any) -> None:
        self.env = env
        self.changes = -1
        self.value = ""

    def __call__(self) -> str:
        changes = getattr(getattr(self.env, "conn", None), "total_changes", None)  # None: no database
        if changes is None or changes != self.changes:
            self.value = self.env.state_hash()
            self.changes = changes if changes is not None else -1
        return self.value


def _turn_tokens(resp: Any, turn: int, message_index: int) -> TurnTokens | None:
    """The turn's token-exact record, if the backend returned any token data."""
    fields = ("prompt_token_ids", "completion_token_ids", "completion_logprobs", "prompt_logprobs")
    if all(getattr(resp, f, None) is None for f in fields):
        return None
    return TurnTokens(turn=turn, message_index=message_index, finish_reason=resp.finish_reason,
                      **{f: getattr(resp, f) for f in fields})


def world_now(conn: Any) -> str:
    (now,) = conn.execute("SELECT value FROM meta WHERE key = 'now'").fetchone()
    return now


def env_now(env: Any) -> str:
    """The env's current time: its own clock if it has one, else its database's `meta.now`."""
    now = getattr(env, "now", None)
    return now() if callable(now) else world_now(env.conn)


def _assistant_message(text: str, calls: list[dict[str, Any]]) -> dict[str, Any]:
    msg: dict[str, Any] = {"role": "assistant", "content": text or ""}
    if calls:
        msg["tool_calls"] = calls
    return msg


def _wire_call(call_id: str, name: str, arguments: Any) -> dict[str, Any]:
    args = arguments if isinstance(arguments, str) else json.dumps(arguments, ensure_ascii=False)
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": args}}


async def run_episode(
    task: Task,
    world: World,
    model: ChatModel,
    user: UserSimulator,
    sampling: Sampling,
    trial: int,
    cfg: AgentConfig | None = None,
) -> Trajectory:
    """Run one episode and return its trajectory (always; failures are recorded in it)."""
    cfg = cfg or AgentConfig()
    env = world.env(task.initial_state)
    state_hash = _StateHasher(env)
    tools = world.tool_schemas()
    messages = opening_messages(task, world, env_now(env), user)
    steps: list[Step] = []
    errors: Counter[str] = Counter()
    usage = Usage()
    turn_tokens: list[TurnTokens] = []
    termination: str | None = None
    metadata: dict[str, Any] = {"persistent_state": cfg.persistent_state,
                                "max_tool_calls_per_turn": cfg.max_tool_calls_per_turn}
    turn = 0
    try:
        while termination is None:
            if turn >= cfg.max_turns:
                termination = "max_turns"
                break
            turn += 1
            t0 = time.perf_counter()
            try:
                resp = await model.chat(messages, tools, sampling)
            except ModelError as exc:
                errors["model_error"] += 1
                metadata["model_error"] = str(exc)[:500]
                metadata["model_error_reason"] = getattr(exc, "reason", "backend")
                if getattr(exc, "endpoint", None):
                    metadata["model_error_endpoint"] = exc.endpoint
                    metadata["model_error_attempts"] = exc.attempts
                termination = "model_error"
                break
            except Exception as exc:  # a backend bug must not lose the episode (or the batch)
                errors["model_error"] += 1
                metadata["model_error"] = f"{type(exc).__name__}: {exc}"[:500]
                metadata["model_error_reason"] = "backend"
                termination = "model_error"
                break
            latency = time.perf_counter() - t0
            usage.model_calls += 1
            usage.prompt_tokens += resp.prompt_tokens
            usage.completion_tokens += resp.completion_tokens

            calls = resp.tool_calls[: cfg.max_tool_calls_per_turn]
            if len(resp.tool_calls) > len(calls):
                errors["too_many_calls"] += len(resp.tool_calls) - len(calls)
            wire = [_wire_call(c.id or f"call_{turn}_{i}", c.name, c.arguments) for i, c in enumerate(calls)]
            bad = [(f"call_{turn}_bad{i}", m) for i, m in enumerate(resp.malformed)]
            wire += [_wire_call(cid, "invalid_tool_call", m.raw or m.detail) for cid, m in bad]
            messages.append(_assistant_message(resp.text, wire))
            tokens = _turn_tokens(resp, turn, len(messages) - 1)
            if tokens is not None:
                turn_tokens.append(tokens)

            if not wire:  # a plain message to the user
                steps.append(Step(index=len(steps), turn=turn, observation="", latency_s=latency,
                                  state_hash=state_hash()))
                reply = await user.respond(messages)
                messages.append({"role": "user", "content": reply})
                termination = termination_for(reply)
                continue

            for call, w in zip(calls, wire, strict=False):
                obs = env.call(ToolCall(name=call.name, arguments=call.arguments))
                if obs.error:
                    errors[obs.error] += 1
                steps.append(Step(
                    index=len(steps), turn=turn, action=ToolCall(name=call.name, arguments=call.arguments),
                    observation=obs.content, error=obs.error, error_detail=obs.detail,
                    state_hash=state_hash(), latency_s=latency + obs.latency_s,
                ))
                messages.append({"role": "tool", "tool_call_id": w["id"], "name": call.name, "content": obs.content})
                if call.name == TRANSFER_TOOL and obs.ok:
                    termination = "transfer"
            for cid, m in bad:
                errors[m.error] += 1
                content = json.dumps({"error": m.error, "message": f"could not parse the tool call: {m.detail}"})
                steps.append(Step(index=len(steps), turn=turn, observation=content, error=m.error,
                                  error_detail=m.detail, latency_s=latency))
                messages.append({"role": "tool", "tool_call_id": cid, "name": "invalid_tool_call", "content": content})
        final_hash = state_hash()
    finally:
        env.close()
    return Trajectory(
        id=Trajectory.make_id(task.id, trial, model.name, sampling),
        task_id=task.id,
        trial=trial,
        model=model.name,
        sampling=sampling,
        messages=messages,
        tools=tools,
        steps=steps,
        usage=usage,
        termination=termination,  # type: ignore[arg-type]
        error_counts=dict(errors),
        final_state_hash=final_hash,
        metadata=metadata,
        turn_tokens=turn_tokens,
    )
