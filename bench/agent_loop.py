"""Agent-loop features, measured: (1) terminal episodes whose commands take a second, run
concurrently with env calls in worker threads vs on the event loop (the baseline, how the
loop ran before); (2) the cost of a counterfactual branch (replay the prefix, check its
hashes, run the rest) vs a fresh episode; (3) the stateless runtime's cost vs the
persistent one. Scripted models throughout, so the figures are the loop's own.

    .venv/bin/python bench/agent_loop.py [--quick]

The last line printed is one JSON object of the figures.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from data.records import Sampling, Task, ToolCall, UserScenario  # noqa: E402
from envs.registry import get_world  # noqa: E402
from rollout import agent  # noqa: E402
from rollout.agent import AgentConfig, run_episode  # noqa: E402
from rollout.branching import branch_episode  # noqa: E402
from rollout.model import ChatResponse  # noqa: E402
from rollout.policies import ScriptedPolicy  # noqa: E402
from rollout.user import ScriptedUser  # noqa: E402
from synthesis.base import SynthesisConfig, get_method  # noqa: E402

QUESTION = {"role": "assistant", "content": "Shall I go on?"}


class _Sleeper:
    name = "sleeper"

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds

    async def chat(self, messages: list[dict[str, Any]], tools: Any, sampling: Any) -> ChatResponse:
        if any(m["role"] == "tool" for m in messages):
            return ChatResponse(text="Done.")
        return ChatResponse(tool_calls=[ToolCall(name="run_shell", arguments={"command": f"sleep {self.seconds}"})])


async def _terminal_wall(task: Task, n: int, seconds: float, inline: bool) -> float:
    world = get_world("terminal")
    original = agent.Runtime.open

    async def blocking_open(self: agent.Runtime) -> agent.Runtime:
        out = await original(self)
        self.threaded = False  # the baseline: every env call on the loop thread
        return out

    if inline:
        agent.Runtime.open = blocking_open  # type: ignore[method-assign]
    try:
        t0 = time.perf_counter()
        await asyncio.gather(*(run_episode(task, world, _Sleeper(seconds), ScriptedUser(task), Sampling(), k)
                               for k in range(n)))
        return time.perf_counter() - t0
    finally:
        agent.Runtime.open = original  # type: ignore[method-assign]


def terminal_overlap(n: int, seconds: float) -> dict[str, Any]:
    from envs.sandbox.bwrap import bwrap_unusable
    from envs.workspace import recipe

    if bwrap_unusable() is not None:
        return {"skipped": "bubblewrap cannot start a sandbox here"}
    world = get_world("terminal")
    ref = world.state_ref(recipe({"notes.txt": "hello\n"}))
    task = Task(world="terminal", method="bench", instruction="wait", user=UserScenario(),
                initial_state=ref, target_state_hash=ref.state_hash).with_id()
    threaded = asyncio.run(_terminal_wall(task, n, seconds, inline=False))
    inline = asyncio.run(_terminal_wall(task, n, seconds, inline=True))
    return {"episodes": n, "command_s": seconds, "wall_s_threads": round(threaded, 2),
            "wall_s_baseline_inline": round(inline, 2), "speedup": round(inline / threaded, 1)}


def _ms(fn: Any, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return round(statistics.median(times) * 1000, 2)


def branching_and_runtime(tasks: list[Task], repeats: int) -> dict[str, Any]:
    world = get_world("airline")
    rows: dict[str, list[float]] = {"fresh_episode_ms": [], "branch_ms": [], "stateless_episode_ms": []}
    for task in tasks:
        def fresh(persistent: bool = True, task: Task = task) -> Any:
            return asyncio.run(run_episode(task, world, ScriptedPolicy(task), ScriptedUser(task), Sampling(seed=1),
                                           0, AgentConfig(persistent_state=persistent)))

        parent = fresh()
        at = len(parent.steps) // 2
        while parent.steps[at].action is None or any(s.turn == parent.steps[at].turn for s in parent.steps[:at]):
            at -= 1
        def branch(task: Task = task, parent: Any = parent, at: int = at) -> Any:
            return asyncio.run(branch_episode(task, world, parent, at, QUESTION, ScriptedPolicy(task),
                                              ScriptedUser(task)))

        rows["fresh_episode_ms"].append(_ms(fresh, repeats))
        rows["branch_ms"].append(_ms(branch, repeats))
        rows["stateless_episode_ms"].append(_ms(lambda: fresh(False), repeats))
    out = {k: round(statistics.median(v), 2) for k, v in rows.items()}
    out["branch_vs_fresh"] = round(out["branch_ms"] / out["fresh_episode_ms"], 2)
    out["stateless_vs_persistent"] = round(out["stateless_episode_ms"] / out["fresh_episode_ms"], 2)
    out["tasks"] = len(tasks)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer episodes and repeats (about a minute)")
    args = parser.parse_args()
    n, seconds, repeats, n_tasks = (4, 1.0, 3, 4) if args.quick else (8, 2.0, 7, 7)
    tasks = get_method("logic_driven")(SynthesisConfig(n_tasks=n_tasks, seed=11), get_world("airline")).tasks
    figures = {"bench": "agent_loop", "quick": args.quick,
               "terminal_overlap": terminal_overlap(n, seconds),
               "airline": branching_and_runtime(tasks, repeats)}
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
