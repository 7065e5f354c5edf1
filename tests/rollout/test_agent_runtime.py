"""Agent-loop features: strategy-guided exploration (temperatures, prompts, reflection over
earlier trials), the runtime contract (persistent vs stateless tool state, recorded on every
trajectory), and env calls off the event loop for workspace worlds only."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import pytest

from data.records import Sampling, Task, ToolCall, UserScenario
from envs.registry import get_world
from envs.world import Env, World
from rollout.agent import AgentConfig, run_episode
from rollout.collector import ModelConfig, RolloutConfig, collect
from rollout.model import ChatResponse
from rollout.policies import ScriptedPolicy
from rollout.strategy import STRATEGY_INSTRUCTIONS, StrategyConfig, describe_outcome
from rollout.user import ScriptedUser


class Planner:
    """Plays the agent: answers a strategy call (no tools offered) with a numbered strategy,
    otherwise follows the reference solution; records every request."""

    def __init__(self, task: Task | None = None, strategies: list[str] | None = None) -> None:
        self.name = "planner"
        self.policy = ScriptedPolicy(task) if task is not None else None
        self.strategies = list(strategies or [])
        self.seen: list[tuple[list[dict[str, Any]], list[dict[str, Any]], Sampling]] = []
        self.policies: dict[str, ScriptedPolicy] = {}

    async def chat(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]],
                   sampling: Sampling) -> ChatResponse:
        self.seen.append(([dict(m) for m in messages], tools, sampling))
        if not tools:
            n = sum(1 for _, t, _ in self.seen if not t)
            text = self.strategies.pop(0) if self.strategies else f"<strategy>Plan number {n}: look up, then act.</strategy>"
            return ChatResponse(text=text, prompt_tokens=50, completion_tokens=12)
        return await self.policy.chat(messages, tools, sampling) if self.policy else ChatResponse(text="Done.")

    async def aclose(self) -> None:
        return None


def episode(task: Task, world: World, model: Any, **cfg: Any):
    return asyncio.run(run_episode(task, world, model, ScriptedUser(task), Sampling(temperature=0.7, seed=1),
                                   0, AgentConfig(**cfg)))


# -- strategy-guided exploration ------------------------------------------------------------

def test_strategy_is_off_by_default(airline: World, tasks: list[Task]) -> None:
    model = Planner(tasks[0])
    t = episode(tasks[0], airline, model)
    assert all(tools for _, tools, _ in model.seen) and "strategy" not in t.metadata
    assert {s.temperature for _, _, s in model.seen} == {0.7}


def test_strategy_sampled_hot_then_actions_cold(airline: World, tasks: list[Task]) -> None:
    task = tasks[0]
    model = Planner(task)
    cfg = StrategyConfig(enabled=True, temperature=1.3, max_tokens=40, act_temperature=0.1)
    t = episode(task, airline, model, strategy=cfg)
    (plan_msgs, plan_tools, plan_s), *acts = model.seen
    assert plan_tools == [] and plan_s.temperature == 1.3 and plan_s.max_tokens == 40 and plan_s.seed == 1
    assert STRATEGY_INSTRUCTIONS.split("\n")[0] in plan_msgs[0]["content"]
    assert "get_user_details" in plan_msgs[0]["content"]  # the tool names are listed
    assert plan_msgs[1]["role"] == "user" and plan_msgs[1]["content"] == t.messages[1]["content"]
    assert "Earlier attempts" not in plan_msgs[0]["content"]
    assert acts and all(tools and s.temperature == 0.1 and s.max_tokens == 256 for _, tools, s in acts)
    strategy = "Plan number 1: look up, then act."
    assert t.metadata["strategy"] == strategy and t.metadata["strategy_info"]["temperature"] == 1.3
    assert all(strategy in msgs[0]["content"] for msgs, _, _ in acts)
    assert t.messages[0]["content"].endswith(strategy) and t.sampling.temperature == 0.1
    planned = [turn for turn in task.dialogue if turn.role == "assistant"]
    assert t.usage.model_calls == len(planned) + 1  # one per dialogue turn; the strategy call counts
    assert t.final_state_hash == task.target_state_hash


def test_empty_strategy_is_recorded(airline: World, tasks: list[Task]) -> None:
    t = episode(tasks[0], airline, Planner(tasks[0], strategies=["   "]), strategy=StrategyConfig(enabled=True))
    assert t.metadata["strategy"] == "" and "error" in t.metadata["strategy_info"]
    assert "Your strategy" not in t.messages[0]["content"]


def test_reflection_shows_earlier_trials(tasks: list[Task]) -> None:
    models: dict[str, Planner] = {}

    def model_for(task: Task) -> Planner:
        return models.setdefault(task.id, Planner(task))

    cfg = RolloutConfig(model=ModelConfig(kind="scripted"), trials=3, concurrency=8,
                        agent=AgentConfig(strategy=StrategyConfig(enabled=True, reflection=True, max_reflections=4)))
    trajs = collect(tasks[:2], cfg, model_for=model_for,
                    outcome=lambda task, traj: describe_outcome(traj) + f" [{traj.trial}]")
    assert [t.trial for t in trajs] == [0, 1, 2, 0, 1, 2] and [t.task_id for t in trajs[:3]] == [tasks[0].id] * 3
    for task in tasks[:2]:
        plans = [msgs[0]["content"] for msgs, tools, _ in models[task.id].seen if not tools]
        assert len(plans) == 3
        assert "Earlier attempts" not in plans[0]
        assert "1. Plan number 1" in plans[1] and "Outcome: ended by user_stop" in plans[1] and "[0]" in plans[1]
        assert "2. Plan number 2" in plans[2] and "[1]" in plans[2]
        ours = [t for t in trajs if t.task_id == task.id]
        assert [t.metadata["strategy"] for t in ours] == [f"Plan number {k}: look up, then act." for k in (1, 2, 3)]
        assert [t.metadata["strategy_info"]["earlier_shown"] for t in ours] == [0, 1, 2]


# -- the runtime contract ------------------------------------------------------------------

def test_stateless_runs_each_call_on_the_initial_state(airline: World, compound_bags: Task) -> None:
    task = compound_bags  # book and add bags
    writes = [c for c in task.reference_solution if airline.tools[c.name].write]
    assert len(writes) == 2
    persistent = episode(task, airline, ScriptedPolicy(task))
    stateless = episode(task, airline, ScriptedPolicy(task), persistent_state=False)
    assert persistent.final_state_hash == task.target_state_hash
    assert stateless.final_state_hash != task.target_state_hash
    assert stateless.error_counts == {} and [a.key() for a in stateless.actions()] == \
        [c.key() for c in task.reference_solution]

    def alone(call: ToolCall) -> str:  # the state after `call` on a fresh initial state
        with_env = airline.env(task.initial_state)
        try:
            assert with_env.call(call).ok
            return with_env.state_hash()
        finally:
            with_env.close()

    for step in stateless.steps:
        if step.action is not None:
            assert step.state_hash == alone(step.action)
    assert stateless.final_state_hash == alone(writes[-1])
    assert stateless.steps[0].state_hash == task.initial_state.state_hash  # a read changes nothing


def test_too_many_calls_per_turn_under_both_contracts(airline: World, tasks: list[Task]) -> None:
    calls = [ToolCall(name="calculate", arguments={"expression": f"{i}+1"}, id=f"c{i}") for i in range(3)]

    class Burst:
        name = "burst"

        async def chat(self, messages: list[dict[str, Any]], tools: Any, sampling: Any) -> ChatResponse:
            first = not any(m["role"] == "tool" for m in messages)
            return ChatResponse(tool_calls=calls) if first else ChatResponse(text="Done.")

    for persistent in (True, False):
        t = episode(tasks[0], airline, Burst(), max_tool_calls_per_turn=1, persistent_state=persistent)
        assert len(t.actions()) == 1 and t.error_counts == {"too_many_calls": 2}
        assert t.metadata["persistent_state"] is persistent


# -- env calls and the event loop ----------------------------------------------------------

def test_sqlite_env_calls_stay_on_the_loop_thread(airline: World, tasks: list[Task],
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    threads: set[int] = set()
    original = Env.call

    def recording(self: Env, call: ToolCall) -> Any:
        threads.add(threading.get_ident())
        return original(self, call)

    monkeypatch.setattr(Env, "call", recording)
    loop_thread: list[int] = []

    async def main() -> None:
        loop_thread.append(threading.get_ident())
        await run_episode(tasks[0], airline, ScriptedPolicy(tasks[0]), ScriptedUser(tasks[0]), Sampling(), 0)

    asyncio.run(main())
    assert threads == set(loop_thread)


bwrap = pytest.mark.skipif(
    (lambda: __import__("envs.sandbox.bwrap", fromlist=["x"]).bwrap_unusable())() is not None,
    reason="bubblewrap cannot start a sandbox here")


@bwrap
def test_slow_terminal_commands_of_two_episodes_overlap() -> None:
    from envs.workspace import recipe

    world = get_world("terminal")
    ref = world.state_ref(recipe({"notes.txt": "hello\n"}))
    task = Task(world="terminal", method="test", instruction="Wait for the build.", user=UserScenario(),
                initial_state=ref, target_state_hash=ref.state_hash).with_id()

    class Sleeper:
        name = "sleeper"

        async def chat(self, messages: list[dict[str, Any]], tools: Any, sampling: Any) -> ChatResponse:
            if any(m["role"] == "tool" for m in messages):
                return ChatResponse(text="Done.")
            return ChatResponse(tool_calls=[ToolCall(name="run_shell", arguments={"command": "sleep 2 && echo ok"})])

    async def both() -> list[Any]:
        return await asyncio.gather(*(run_episode(task, world, Sleeper(), ScriptedUser(task), Sampling(), k)
                                      for k in range(2)))

    t0 = time.perf_counter()
    trajs = asyncio.run(both())
    wall = time.perf_counter() - t0
    assert all(t.termination == "user_stop" and '"stdout": "ok\\n"' in t.steps[0].observation for t in trajs)
    assert all(t.steps[0].latency_s >= 2 for t in trajs)
    assert wall < 3.6, f"two 2-second commands took {wall:.1f}s: they ran one after the other"
