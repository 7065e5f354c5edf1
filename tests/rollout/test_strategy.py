"""`rollout.strategy`: the strategy call's prompt (with reflection over earlier trials), its
samplings, the cleaned strategy and the outcome of a trial as reflection shows it. The agent
loop's use of them is in test_agent_runtime.py."""

from __future__ import annotations

import asyncio

from data.records import Sampling, Task, Trajectory
from envs.world import World
from rollout.agent import AgentConfig, run_episode
from rollout.policies import ScriptedPolicy
from rollout.strategy import (
    MAX_STRATEGY_CHARS,
    REFLECTION_INTRO,
    EarlierTrial,
    StrategyConfig,
    act_sampling,
    clean_strategy,
    describe_outcome,
    strategy_messages,
    strategy_sampling,
)
from rollout.user import ScriptedUser


def test_describe_outcome(airline: World, tasks: list[Task]) -> None:
    t = asyncio.run(run_episode(tasks[0], airline, ScriptedPolicy(tasks[0]), ScriptedUser(tasks[0]),
                                Sampling(temperature=0.7, seed=1), 0, AgentConfig()))
    calls = len(tasks[0].reference_solution)  # the dialogue's calls, each answered without error
    assert calls == 5 and describe_outcome(t) == f"ended by user_stop after {calls} tool calls, no errors."


def test_describe_outcome_counts_errors() -> None:
    t = Trajectory(id="t", task_id="x", trial=0, model="m", sampling=Sampling(), termination="max_turns",
                   error_counts={"bad_json": 2, "unknown_tool": 1})
    assert describe_outcome(t) == "ended by max_turns after 0 tool calls, 3 errors (bad_json, unknown_tool)."


def test_strategy_messages_without_reflection() -> None:
    cfg = StrategyConfig(enabled=True)
    msgs = strategy_messages("You are an agent.", "Cancel my trip.", ["get_user", "cancel"],
                             [EarlierTrial("Plan A")], cfg)
    assert [m["role"] for m in msgs] == ["system", "user"] and msgs[1]["content"] == "Cancel my trip."
    assert msgs[0]["content"].startswith("You are an agent.\n\nBefore you act, plan.")
    assert msgs[0]["content"].endswith("Tools you can use: get_user, cancel")
    assert "Plan A" not in msgs[0]["content"]  # reflection is off
    assert "(none)" in strategy_messages("S", "U", [], [], cfg)[0]["content"]


def test_reflection_shows_the_latest_earlier_trials() -> None:
    cfg = StrategyConfig(enabled=True, reflection=True, max_reflections=2)
    earlier = [EarlierTrial("Plan A", "failed"), EarlierTrial("", None), EarlierTrial("Plan C", "ok")]
    text = strategy_messages("S", "U", ["t"], earlier, cfg)[0]["content"]
    assert REFLECTION_INTRO.split("\n")[0] in text and "Plan A" not in text
    assert "1. (no strategy)\n2. Plan C Outcome: ok" in text
    none = StrategyConfig(enabled=True, reflection=True, max_reflections=0)
    assert "Earlier attempts" not in strategy_messages("S", "U", ["t"], earlier, none)[0]["content"]


def test_samplings_and_cleaning() -> None:
    cfg = StrategyConfig(enabled=True, temperature=1.3, max_tokens=40, act_temperature=0.1)
    base = Sampling(temperature=0.7, max_tokens=256, seed=5)
    plan, act = strategy_sampling(base, cfg), act_sampling(base, cfg)
    assert (plan.temperature, plan.max_tokens, plan.seed) == (1.3, 40, 5)
    assert (act.temperature, act.max_tokens, act.seed) == (0.1, 256, 5)
    assert clean_strategy("  <strategy> Look up, then act. </strategy>\n") == "Look up, then act."
    assert len(clean_strategy("x" * 5000)) == MAX_STRATEGY_CHARS
