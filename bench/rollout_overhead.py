"""CPU cost of our rollout orchestration per LLM turn, against a zero-latency fake
OpenAI-compatible server in another process, at concurrency 1, 16, 64 and 256.

Each episode is the real agent loop (`rollout.agent.run_episode`) on airline tasks with the
scripted user and `OpenAICompatibleModel`; the server calls the `calculate` tool twice,
asks "Anything else?", then says goodbye (4 model turns per episode). The client
process's CPU time is split into the environment's share (building the world state,
running tools, hashing state: timed around those calls) and the rest, which is the
orchestration: request building, HTTP, JSON, parsing, routing, the agent loop.
Target: orchestration <= 1 ms of CPU per turn. Baseline in the same run: the same loop
through the `openai` SDK's `AsyncOpenAI` (how the client worked before).

    .venv/bin/python bench/rollout_overhead.py [--quick]

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
from rollout.agent import AgentConfig, run_episode  # noqa: E402
from rollout.collector import trial_sampling  # noqa: E402
from rollout.model import ChatResponse  # noqa: E402
from rollout.openai_client import OpenAICompatibleModel, to_openai_messages  # noqa: E402
from rollout.parsing import decode_native_tool_calls, parse_tool_calls  # noqa: E402
from rollout.user import ScriptedUser  # noqa: E402
from synthesis.base import SynthesisConfig, get_method  # noqa: E402

ENV_CPU = [0.0]


class _TimedEnv:
    """An `Env` whose work is added to ENV_CPU."""

    def __init__(self, env: Any) -> None:
        self._env = env
        self.conn = env.conn

    def _timed(self, fn: Any, *a: Any) -> Any:
        t = time.process_time()
        try:
            return fn(*a)
        finally:
            ENV_CPU[0] += time.process_time() - t

    def call(self, call: Any) -> Any:
        return self._timed(self._env.call, call)

    def state_hash(self) -> str:
        return self._timed(self._env.state_hash)

    def close(self) -> None:
        self._timed(self._env.close)


class _TimedWorld:
    def __init__(self, world: Any) -> None:
        self._world = world

    def __getattr__(self, name: str) -> Any:
        return getattr(self._world, name)

    def env(self, ref: Any) -> _TimedEnv:
        t = time.process_time()
        env = self._world.env(ref)
        ENV_CPU[0] += time.process_time() - t
        return _TimedEnv(env)


class SdkModel:
    """The baseline: the `openai` SDK's AsyncOpenAI, converted the same way."""

    def __init__(self, base_url: str) -> None:
        from openai import AsyncOpenAI

        self.name = "openai:fake-model"
        self._client = AsyncOpenAI(base_url=base_url, api_key="EMPTY", max_retries=0, timeout=30)

    async def chat(
        self, messages: list[dict[str, Any]], tools: list[dict[str, Any]], sampling: Sampling
    ) -> ChatResponse:
        completion = await self._client.chat.completions.create(
            model="fake-model",
            messages=to_openai_messages(messages),
            tools=tools,
            temperature=sampling.temperature,
            top_p=sampling.top_p,
            max_tokens=sampling.max_tokens,
        )
        data = completion.to_dict(warnings=False)
        message = data["choices"][0]["message"]
        if message.get("tool_calls"):
            calls, bad = decode_native_tool_calls(message["tool_calls"])
            text = message.get("content") or ""
        else:
            text, calls, bad = parse_tool_calls(message.get("content") or "")
        usage = data.get("usage") or {}
        return ChatResponse(
            text=text,
            tool_calls=calls,
            malformed=bad,
            prompt_tokens=usage.get("prompt_tokens", 0),
            completion_tokens=usage.get("completion_tokens", 0),
        )

    async def aclose(self) -> None:
        await self._client.close()


async def _run(tasks: list[Task], model: Any, concurrency: int, episodes: int) -> dict[str, Any]:
    world = _TimedWorld(get_world("airline"))
    sem = asyncio.Semaphore(concurrency)
    base = Sampling(temperature=0.0, max_tokens=64, seed=0)
    cfg = AgentConfig()

    async def one(i: int) -> Any:
        task = tasks[i % len(tasks)]
        trial = i // len(tasks)
        async with sem:
            return await run_episode(
                task,
                world,
                model,
                ScriptedUser(task),  # type: ignore[arg-type]
                trial_sampling(base, trial),
                trial,
                cfg,
            )

    ENV_CPU[0] = 0.0
    cpu0, wall0 = time.process_time(), time.perf_counter()
    trajs = await asyncio.gather(*[one(i) for i in range(episodes)])
    cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
    turns = sum(t.usage.model_calls for t in trajs)
    failed = sum(t.termination == "model_error" for t in trajs)
    if failed:
        raise RuntimeError(f"{failed} episodes failed: {trajs[0].metadata}")
    return {
        "concurrency": concurrency,
        "episodes": episodes,
        "turns": turns,
        "cpu_ms_per_turn": round((cpu - ENV_CPU[0]) / turns * 1000, 3),
        "env_cpu_ms_per_turn": round(ENV_CPU[0] / turns * 1000, 3),
        "total_cpu_ms_per_turn": round(cpu / turns * 1000, 3),
        "turns_per_s": round(turns / wall, 1),
    }


async def _measure(
    url: str, tasks: list[Task], levels: list[int], per_level: int, baseline_levels: list[int]
) -> dict[str, Any]:
    ours = OpenAICompatibleModel(
        base_url=url, model="fake-model", timeout_s=30, max_in_flight=max(levels)
    )
    sdk = SdkModel(url)
    try:
        await _run(tasks, ours, 16, 32)  # warm up: imports, connections, caches
        await _run(tasks, sdk, 16, 32)
        results = [await _run(tasks, ours, c, max(per_level, 2 * c)) for c in levels]
        baseline = [await _run(tasks, sdk, c, max(per_level, 2 * c)) for c in baseline_levels]
    finally:
        await ours.aclose()
        await sdk.aclose()
    return {"ours": results, "baseline_openai_sdk": baseline}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="fewer episodes per level")
    args = ap.parse_args()
    per_level = 64 if args.quick else 256
    levels = [1, 16, 64, 256]
    baseline_levels = [1, 64]
    tasks = get_method("logic_driven")(
        SynthesisConfig(n_tasks=8, seed=1), get_world("airline")
    ).tasks
    with lean_server(
        "--calls", "2", "--tool", "calculate", "--tool-args", json.dumps({"expression": "2 + 3"})
    ) as url:
        out = asyncio.run(_measure(url, tasks, levels, per_level, baseline_levels))
    ours, base = out["ours"], out["baseline_openai_sdk"]
    for row in ours + base:
        print(row, file=sys.stderr)
    worst = max(r["cpu_ms_per_turn"] for r in ours)
    base_by_c = {r["concurrency"]: r["cpu_ms_per_turn"] for r in base}
    ours_by_c = {r["concurrency"]: r["cpu_ms_per_turn"] for r in ours}
    figures = {
        "bench": "rollout_overhead",
        "quick": args.quick,
        "cpu_ms_per_turn_max": worst,
        "target_ms": 1.0,
        "meets_target": worst <= 1.0,
        "cpu_ms_per_turn": ours_by_c,
        "env_cpu_ms_per_turn": {r["concurrency"]: r["env_cpu_ms_per_turn"] for r in ours},
        "turns_per_s": {r["concurrency"]: r["turns_per_s"] for r in ours},
        "baseline_sdk_cpu_ms_per_turn": base_by_c,
        "speedup_vs_sdk": {c: round(base_by_c[c] / ours_by_c[c], 1) for c in base_by_c},
    }
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
