"""The agent loop: one multi-turn, tool-calling episode of a task in its world.

Every failure short of a bug in the environment becomes part of the record: malformed
calls, unknown tools, bad arguments and rule violations are returned to the model as
tool observations and counted by error class; a backend that fails for good ends the
episode with `model_error`, a user simulator that fails with `user_error`. Nothing here
raises on model misbehaviour.

Runtime contract (recorded on every trajectory as `metadata["persistent_state"]` and
`metadata["max_tool_calls_per_turn"]`): with `persistent_state` (the default) the effects of
each tool call carry over to the next; without it every tool call runs against a fresh copy
of the task's initial state, so a step's `state_hash` and the trajectory's
`final_state_hash` are the state after that one call (a state verifier that replays all
writes in order will report that the replay differs). At most `max_tool_calls_per_turn`
calls of one assistant turn are run or reported, malformed ones included (well-formed calls
first, then malformed ones); the rest are counted as `too_many_calls` and get no tool
message. Error details returned to the model are capped (`envs.tools.clip`).

SQLite envs (with a `conn`) run on the event loop's thread, which their connection is bound
to; other envs (workspaces, whose commands may run for seconds) run in worker threads so
that episodes in flight overlap.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, Field

from data.records import Sampling, StateRef, Step, Task, ToolCall, Trajectory, TurnTokens, Usage
from envs.tools import MESSAGE_CHARS, clip
from envs.world import Observation, World
from rollout.model import ChatModel, ChatResponse, ModelError
from rollout.strategy import (
    STRATEGY_SECTION,
    EarlierTrial,
    StrategyConfig,
    act_sampling,
    clean_strategy,
    strategy_messages,
    strategy_sampling,
)
from rollout.user import UserError, UserSimulator, termination_for

SYSTEM_TEMPLATE = """You are a customer-service agent. Follow the policy below exactly.
Use the tools to look up and change records. Make one tool call at a time and wait for its
result. When you need information or confirmation from the user, or when the request is
done, reply to the user in plain text.

Current time: {now}

{policy}"""

TRANSFER_TOOL = "transfer_to_human_agents"

T = TypeVar("T")


class AgentConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    max_turns: int = 12  # model calls per episode
    max_tool_calls_per_turn: int = 4
    # runtime contract: False runs every tool call on a fresh copy of the initial state
    persistent_state: bool = True
    strategy: StrategyConfig = Field(default_factory=StrategyConfig)


def system_prompt(world: World, now: str) -> str:
    own = getattr(world, "system_prompt", None)  # a world may bring its own (workspace worlds)
    return own(now) if callable(own) else SYSTEM_TEMPLATE.format(now=now, policy=world.policy.strip())


def opening_messages(task: Task, world: World, env_now: str, user: UserSimulator,
                     first: str | None = None) -> list[dict[str, Any]]:
    """The system prompt and the user's first turn: the prompt every episode starts from."""
    return [
        {"role": "system", "content": system_prompt(world, env_now)},
        {"role": "user", "content": user.first_message() if first is None else first},
    ]


def runtime_contract(cfg: AgentConfig) -> dict[str, Any]:
    """The runtime contract recorded on every trajectory."""
    return {"persistent_state": cfg.persistent_state, "max_tool_calls_per_turn": cfg.max_tool_calls_per_turn}


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


class Runtime:
    """A task's live env under the runtime contract (see the module docstring)."""

    def __init__(self, world: World, ref: StateRef, persistent: bool = True) -> None:
        self.world = world
        self.ref = ref
        self.persistent = persistent
        self.env: Any = None
        self.threaded = False
        self.used = False  # a tool call ran since the env was opened
        self._hasher: _StateHasher | None = None

    async def open(self) -> Runtime:
        if getattr(self.world, "kind", None) == "workspace":  # copies a folder: off the loop
            self.env = await asyncio.to_thread(self.world.env, self.ref)
        else:
            self.env = self.world.env(self.ref)
        self.threaded = not hasattr(self.env, "conn")  # SQLite connections stay on this thread
        self._hasher = _StateHasher(self.env)
        self.used = False
        return self

    async def _run(self, fn: Callable[[], T]) -> T:
        return await asyncio.to_thread(fn) if self.threaded else fn()

    async def call(self, call: ToolCall) -> Observation:
        if not self.persistent and self.used:  # stateless: a fresh copy of the initial state
            old, self.env = self.env, None
            await self._run(old.close)
            fresh = await self._run(lambda: self.world.env(self.ref))
            self.env, self._hasher = fresh, _StateHasher(fresh)
        self.used = True
        env = self.env
        return await self._run(lambda: env.call(call))

    async def state_hash(self) -> str:
        hasher = self._hasher
        assert hasher is not None, "the runtime is not open"
        return await self._run(hasher)

    def now(self) -> str:
        return env_now(self.env)

    async def close(self) -> None:
        if self.env is not None:
            env, self.env = self.env, None
            await self._run(env.close)


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


def assistant_message(text: str, calls: list[dict[str, Any]]) -> dict[str, Any]:
    msg: dict[str, Any] = {"role": "assistant", "content": text or ""}
    if calls:
        msg["tool_calls"] = calls
    return msg


def unusable_call_result(m: Any) -> tuple[str, str]:
    """(clipped detail, tool result) for a call the model wrote that cannot be run (a
    `MalformedCall`): the agent is told what was wrong and the call is not run."""
    detail = clip(m.detail, MESSAGE_CHARS)
    return detail, json.dumps({"error": m.error, "message": f"could not parse the tool call: {detail}"})


def turn_calls(turn: int, calls: list[Any], malformed: list[Any], cap: int
               ) -> tuple[list[Any], list[tuple[str, Any]], list[dict[str, Any]], int]:
    """One turn's calls as the agent loop takes them: at most `cap` (parsed ones first), the
    unusable ones with their ids, the wire form of both (an unusable one as
    `invalid_tool_call`), and how many were dropped over the cap."""
    kept = calls[:cap]
    bad_ones = malformed[: max(0, cap - len(kept))]
    dropped = len(calls) - len(kept) + len(malformed) - len(bad_ones)
    wire = [wire_call(c.id or f"call_{turn}_{i}", c.name, c.arguments) for i, c in enumerate(kept)]
    bad = [(f"call_{turn}_bad{i}", m) for i, m in enumerate(bad_ones)]
    wire += [wire_call(cid, "invalid_tool_call", m.raw or m.detail) for cid, m in bad]
    return kept, bad, wire, dropped


def wire_call(call_id: str, name: str, arguments: Any) -> dict[str, Any]:
    args = arguments if isinstance(arguments, str) else json.dumps(arguments, ensure_ascii=False)
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": args}}


def record_model_error(metadata: dict[str, Any], exc: BaseException) -> None:
    """The backend failure's message, reason and (remote backends) endpoint and attempts."""
    if isinstance(exc, ModelError):
        metadata["model_error"] = str(exc)[:500]
        metadata["model_error_reason"] = getattr(exc, "reason", "backend")
        if getattr(exc, "endpoint", None):
            metadata["model_error_endpoint"] = exc.endpoint
            metadata["model_error_attempts"] = exc.attempts
    else:  # a backend bug must not lose the episode (or the batch)
        metadata["model_error"] = f"{type(exc).__name__}: {exc}"[:500]
        metadata["model_error_reason"] = "backend"


class Episode:
    """The mutable state of one episode and the loop that advances it. `run_episode` starts
    one from the task's opening; `rollout.branching` starts one from a stored prefix."""

    def __init__(self, task: Task, model: ChatModel, user: UserSimulator, sampling: Sampling,
                 cfg: AgentConfig, runtime: Runtime, tools: list[dict[str, Any]]) -> None:
        self.task = task
        self.model = model
        self.user = user
        self.sampling = sampling
        self.cfg = cfg
        self.runtime = runtime
        self.tools = tools
        self.messages: list[dict[str, Any]] = []
        self.steps: list[Step] = []
        self.errors: Counter[str] = Counter()
        self.usage = Usage()
        self.turn_tokens: list[TurnTokens] = []
        self.termination: str | None = None
        self.metadata: dict[str, Any] = runtime_contract(cfg)
        self.turn = 0

    def _model_failed(self, exc: BaseException) -> None:
        """End the episode on a model call that failed: `context_exhausted` when the
        conversation no longer fits the model's context (the episode's own length, like
        `max_turns`: judged, and deterministic, so retrying would fail again), else
        `model_error` (infrastructure: never data). The first is recorded as
        `metadata["context_exhausted"]` (what overflowed), the second with `record_model_error`."""
        if getattr(exc, "reason", None) == "context_length":
            self._context_exhausted(str(exc))
        else:
            record_model_error(self.metadata, exc)
            self.errors["model_error"] += 1
            self.termination = "model_error"

    def _context_exhausted(self, what: str) -> None:
        """End the episode on its own length: the conversation outgrew a model (`what`)."""
        self.metadata["context_exhausted"] = what[:500]
        self.errors["context_exhausted"] += 1
        self.termination = "context_exhausted"

    async def run(self) -> None:
        """Model turns until the episode ends."""
        while self.termination is None:
            if self.turn >= self.cfg.max_turns:
                self.termination = "max_turns"
                break
            self.turn += 1
            t0 = time.perf_counter()
            try:
                resp = await self.model.chat(self.messages, self.tools, self.sampling)
            except Exception as exc:  # ModelError, or a backend bug
                self._model_failed(exc)
                break
            latency = time.perf_counter() - t0
            self.usage.model_calls += 1
            self.usage.prompt_tokens += resp.prompt_tokens
            self.usage.completion_tokens += resp.completion_tokens
            await self.act(resp, latency)

    async def act(self, resp: ChatResponse, latency: float) -> None:
        """Apply one assistant turn: run its tool calls, or hand a plain message to the user."""
        turn = self.turn
        calls, bad, wire, dropped = turn_calls(turn, resp.tool_calls, resp.malformed, self.cfg.max_tool_calls_per_turn)
        if dropped:
            self.errors["too_many_calls"] += dropped
        self.messages.append(assistant_message(resp.text, wire))
        tokens = _turn_tokens(resp, turn, len(self.messages) - 1)
        if tokens is not None:
            self.turn_tokens.append(tokens)

        if not wire:  # a plain message to the user
            self.steps.append(Step(index=len(self.steps), turn=turn, observation="", latency_s=latency,
                                   state_hash=await self.runtime.state_hash()))
            await self.user_turn()
            return

        for call, w in zip(calls, wire, strict=False):
            action = ToolCall(name=call.name, arguments=call.arguments)
            obs = await self.runtime.call(action)
            if obs.error:
                self.errors[obs.error] += 1
            self.steps.append(Step(
                index=len(self.steps), turn=turn, action=action,
                observation=obs.content, error=obs.error, error_detail=obs.detail,
                state_hash=await self.runtime.state_hash(), latency_s=latency + obs.latency_s,
            ))
            self.messages.append({"role": "tool", "tool_call_id": w["id"], "name": call.name,
                                  "content": obs.content})
            if call.name == TRANSFER_TOOL and obs.ok:
                self.termination = "transfer"
        for cid, m in bad:
            self.errors[m.error] += 1
            detail, content = unusable_call_result(m)
            self.steps.append(Step(index=len(self.steps), turn=turn, observation=content, error=m.error,
                                   error_detail=detail, latency_s=latency))
            self.messages.append({"role": "tool", "tool_call_id": cid, "name": "invalid_tool_call",
                                  "content": content})

    async def user_turn(self) -> None:
        """The user's reply to the last assistant message (or the end of the episode)."""
        try:
            reply = await self.user.respond(self.messages)
        except UserError as exc:
            self.user_failed(exc)
            return
        self.messages.append({"role": "user", "content": reply})
        self.termination = termination_for(reply)

    def user_failed(self, exc: UserError) -> None:
        """End the episode on a user simulator that failed for good: `user_error`
        (infrastructure), except a conversation that outgrew the user's model after the agent
        spoke, which ends on its own length like the agent's (`context_exhausted`, judged)."""
        if exc.reason == "context_length" and self.turn > 0:
            self._context_exhausted(f"the user's model: {exc}")
            return
        self.errors["user_error"] += 1
        self.metadata["user_error"] = str(exc)[:500]
        self.metadata["user_error_reason"] = exc.reason
        self.termination = "user_error"

    async def plan(self, earlier: Sequence[EarlierTrial]) -> None:
        """Strategy-guided exploration: sample a strategy, put it in the system prompt and
        act at the low temperature from here on."""
        scfg = self.cfg.strategy
        names = [t.get("function", {}).get("name", "") for t in self.tools]
        prompt = strategy_messages(self.messages[0]["content"], self.messages[1]["content"], names,
                                   earlier, scfg)
        info: dict[str, Any] = {"temperature": scfg.temperature, "act_temperature": scfg.act_temperature,
                                "earlier_shown": min(len(earlier), scfg.max_reflections) if scfg.reflection else 0}
        try:
            resp = await self.model.chat(prompt, [], strategy_sampling(self.sampling, scfg))
        except Exception as exc:
            self._model_failed(exc)
            self.metadata["strategy"] = ""
            self.metadata["strategy_info"] = info
            return
        self.usage.model_calls += 1
        self.usage.prompt_tokens += resp.prompt_tokens
        self.usage.completion_tokens += resp.completion_tokens
        strategy = clean_strategy(resp.text)
        info.update(prompt_tokens=resp.prompt_tokens, completion_tokens=resp.completion_tokens)
        if strategy:
            self.messages[0] = {**self.messages[0],
                                "content": self.messages[0]["content"] + STRATEGY_SECTION.format(strategy=strategy)}
        else:
            info["error"] = "the strategy call returned no text"
        self.metadata["strategy"] = strategy
        self.metadata["strategy_info"] = info
        self.sampling = act_sampling(self.sampling, scfg)

    def trajectory(self, traj_id: str, trial: int, final_hash: str | None) -> Trajectory:
        info = getattr(self.user, "info", None)
        if callable(info):
            self.metadata["user"] = info()
        return Trajectory(
            id=traj_id, task_id=self.task.id, trial=trial, model=self.model.name, sampling=self.sampling,
            messages=self.messages, tools=self.tools, steps=self.steps, usage=self.usage,
            termination=self.termination or "agent_stop",  # type: ignore[arg-type]
            error_counts=dict(self.errors), final_state_hash=final_hash, metadata=self.metadata,
            turn_tokens=self.turn_tokens,
        )


async def run_episode(
    task: Task,
    world: World,
    model: ChatModel,
    user: UserSimulator,
    sampling: Sampling,
    trial: int,
    cfg: AgentConfig | None = None,
    earlier: Sequence[EarlierTrial] = (),
) -> Trajectory:
    """Run one episode and return its trajectory (always; failures are recorded in it).

    `earlier`: strategies and outcomes of earlier trials of the task, shown to the strategy
    call when `cfg.strategy.reflection` is on."""
    cfg = cfg or AgentConfig()
    runtime = await Runtime(world, task.initial_state, cfg.persistent_state).open()
    try:
        ep = Episode(task, model, user, sampling, cfg, runtime, world.tool_schemas())
        opening = getattr(user, "opening", None)
        first: str | None = None
        if callable(opening):
            try:
                first = await opening()
            except UserError as exc:
                ep.user_failed(exc)
        ep.messages = opening_messages(task, world, runtime.now(), user, first)
        if ep.termination == "user_error":
            ep.messages = ep.messages[:1]  # no usable first message
        elif cfg.strategy.enabled:
            await ep.plan(earlier)
        await ep.run()
        final_hash = await runtime.state_hash()
        release = getattr(model, "release", None)  # a backend that caches turns frees them
        if callable(release):
            await release(ep.messages, ep.tools)
    finally:
        await runtime.close()
    return ep.trajectory(Trajectory.make_id(task.id, trial, model.name, sampling), trial, final_hash)
