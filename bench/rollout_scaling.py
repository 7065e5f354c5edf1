"""Trajectories per second against concurrency, with a fake OpenAI-compatible server (in
another process) that takes 200 ms per call: does the rollout engine scale linearly
while the server is the bottleneck? Target: >= 90% of ideal linear scaling up to 256.

Two arms, both on one event loop in this process:

- `client`: conversations through `OpenAICompatibleModel` (4 model turns each, the
  history growing as in a real episode: system prompt, airline tool schemas, tool
  results), i.e. the rollout engine's client side. `scaling_efficiency_min` is its figure.
- `agent_loop`: the full agent loop on airline tasks (`rollout.agent.run_episode`),
  which adds the environment's CPU work (building the SQLite state, running tools, state
  hashes: ~6 ms per episode here); reported too, since that work caps one process.

Efficiency at concurrency c = throughput(c) / (c x throughput(1)), the baseline measured
at concurrency 1 in the same run.

    .venv/bin/python bench/rollout_scaling.py [--quick]

The last line printed is one JSON object of the figures.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fake_endpoint import lean_server  # noqa: E402

from data.records import Sampling, Task  # noqa: E402
from envs.registry import get_world  # noqa: E402
from rollout.agent import AgentConfig, opening_messages, run_episode, world_now  # noqa: E402
from rollout.collector import trial_sampling  # noqa: E402
from rollout.openai_client import OpenAICompatibleModel  # noqa: E402
from rollout.user import ScriptedUser  # noqa: E402
from synthesis.base import SynthesisConfig, get_method  # noqa: E402

DELAY_MS = 200
LEVELS = [1, 16, 64, 256]


async def _conversation(
    model: OpenAICompatibleModel,
    opening: list[dict[str, Any]],
    tools: list[dict[str, Any]],
    sampling: Sampling,
) -> int:
    messages = list(opening)
    for turn in range(1, 7):
        resp = await model.chat(messages, tools, sampling)
        calls = [
            {
                "id": c.id or f"call_{turn}",
                "type": "function",
                "function": {"name": c.name, "arguments": json.dumps(c.arguments)},
            }
            for c in resp.tool_calls
        ]
        messages.append(
            {"role": "assistant", "content": resp.text, **({"tool_calls": calls} if calls else {})}
        )
        for c in calls:
            messages.append(
                {
                    "role": "tool",
                    "tool_call_id": c["id"],
                    "name": c["function"]["name"],
                    "content": json.dumps({"result": 5}),
                }
            )
        if not calls:
            if resp.text.startswith("Goodbye"):
                return turn
            messages.append({"role": "user", "content": "Yes, please go ahead."})
    return 6


async def _level(
    arm: str, model: OpenAICompatibleModel, tasks: list[Task], concurrency: int, episodes: int
) -> dict[str, Any]:
    world = get_world("airline")
    tools = world.tool_schemas()
    sem = asyncio.Semaphore(concurrency)
    base = Sampling(temperature=0.0, max_tokens=64, seed=0)
    openings: dict[str, list[dict[str, Any]]] = {}
    for task in tasks:
        env = world.env(task.initial_state)
        openings[task.id] = opening_messages(task, world, world_now(env.conn), ScriptedUser(task))
        env.close()

    async def one(i: int) -> int:
        task, trial = tasks[i % len(tasks)], i // len(tasks)
        sampling = trial_sampling(base, trial)
        async with sem:
            if arm == "client":
                return await _conversation(model, openings[task.id], tools, sampling)
            traj = await run_episode(
                task, world, model, ScriptedUser(task), sampling, trial, AgentConfig()
            )
            if traj.termination == "model_error":
                raise RuntimeError(traj.metadata)
            return traj.usage.model_calls

    cpu0, t0 = time.process_time(), time.perf_counter()
    turns = await asyncio.gather(*[one(i) for i in range(episodes)])
    wall, cpu = time.perf_counter() - t0, time.process_time() - cpu0
    return {
        "arm": arm,
        "concurrency": concurrency,
        "episodes": episodes,
        "turns": sum(turns),
        "wall_s": round(wall, 3),
        "trajectories_per_s": round(episodes / wall, 3),
        "cpu_ms_per_turn": round(cpu / sum(turns) * 1000, 3),
    }


async def _measure(
    url: str, tasks: list[Task], per_level: int, waves: int
) -> dict[str, list[dict[str, Any]]]:
    model = OpenAICompatibleModel(
        base_url=url, model="fake-model", timeout_s=30, max_in_flight=max(LEVELS)
    )
    out: dict[str, list[dict[str, Any]]] = {}
    try:
        top = max(LEVELS)  # warm up: imports, and the connections a steady state keeps open
        await _level("client", model, tasks, top, top)
        for arm in ("client", "agent_loop"):
            rows = []
            for c in LEVELS:
                episodes = max(2, per_level // 4) if c == 1 else max(per_level, waves * c)
                rows.append(await _level(arm, model, tasks, c, episodes))
                print(rows[-1], file=sys.stderr)
            base = rows[0]["trajectories_per_s"]
            for r in rows:
                r["efficiency"] = round(r["trajectories_per_s"] / (r["concurrency"] * base), 3)
            out[arm] = rows
    finally:
        await model.aclose()
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="fewer episodes per level")
    args = ap.parse_args()
    per_level, waves = (16, 3) if args.quick else (64, 6)  # waves: episodes per concurrency slot
    tasks = get_method("logic_driven")(
        SynthesisConfig(n_tasks=8, seed=1), get_world("airline")
    ).tasks
    with lean_server(
        "--delay-ms",
        str(DELAY_MS),
        "--calls",
        "2",
        "--tool",
        "calculate",
        "--tool-args",
        json.dumps({"expression": "2 + 3"}),
    ) as url:
        out = asyncio.run(_measure(url, tasks, per_level, waves))
    client, loop = out["client"], out["agent_loop"]
    figures = {
        "bench": "rollout_scaling",
        "quick": args.quick,
        "server_delay_ms": DELAY_MS,
        "scaling_efficiency_min": min(r["efficiency"] for r in client),
        "target": 0.9,
        "meets_target": min(r["efficiency"] for r in client) >= 0.9,
        "client_trajectories_per_s": {r["concurrency"]: r["trajectories_per_s"] for r in client},
        "client_efficiency": {r["concurrency"]: r["efficiency"] for r in client},
        "agent_loop_efficiency_min": min(r["efficiency"] for r in loop),
        "agent_loop_trajectories_per_s": {r["concurrency"]: r["trajectories_per_s"] for r in loop},
        "agent_loop_efficiency": {r["concurrency"]: r["efficiency"] for r in loop},
        "agent_loop_cpu_ms_per_turn": {r["concurrency"]: r["cpu_ms_per_turn"] for r in loop},
    }
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
