"""Collect trajectories: k trials per task, many episodes in flight on one event loop."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from data.records import Sampling, Task, Trajectory
from envs.registry import get_world
from rollout.agent import AgentConfig, run_episode
from rollout.model import ChatModel
from rollout.user import ScriptedUser


class ModelConfig(BaseModel):
    """Which backend serves the agent. `embedded` is the CPU default."""

    model_config = ConfigDict(extra="forbid")

    kind: Literal["embedded", "openai", "scripted"] = "embedded"
    name: str = "SmolLM2-135M-Instruct"  # model name for openai; label otherwise
    path: str | None = None  # embedded: a model folder (e.g. a trained checkpoint); default the prepared one
    base_url: str = "http://127.0.0.1:8000/v1"
    api_key_env: str = "OPENAI_API_KEY"
    timeout_s: float = 60.0
    max_batch: int = 8
    noise: float = 0.0  # scripted policies only


class RolloutConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    model: ModelConfig = Field(default_factory=ModelConfig)
    trials: int = 2
    concurrency: int = 8
    sampling: Sampling = Field(default_factory=lambda: Sampling(temperature=0.7, max_tokens=128, seed=0))
    agent: AgentConfig = Field(default_factory=AgentConfig)


ModelFor = Callable[[Task], ChatModel]


_SHARED: dict[str, ChatModel] = {}
_SHARED_LOCK = threading.Lock()


def build_model_for(cfg: ModelConfig) -> tuple[ModelFor, ChatModel | None]:
    """A function from task to model, and a model to close after this collection (if any).

    The embedded model is loaded once per process and shared by every collection (its
    worker thread serves any event loop); an OpenAI client is bound to one event loop, so
    each collection gets its own.
    """
    if cfg.kind == "scripted":
        from rollout.policies import ScriptedPolicy

        return (lambda task: ScriptedPolicy(task, noise=cfg.noise)), None
    if cfg.kind == "openai":
        import os

        from rollout.openai_client import OpenAICompatibleModel

        client = OpenAICompatibleModel(
            base_url=cfg.base_url, model=cfg.name, api_key=os.environ.get(cfg.api_key_env, "EMPTY"),
            timeout_s=cfg.timeout_s,
        )
        return (lambda task: client), client
    key = cfg.model_dump_json()
    with _SHARED_LOCK:
        if key not in _SHARED:
            from rollout.embedded import EmbeddedModel

            model_dir = Path(cfg.path).expanduser() if cfg.path else None
            _SHARED[key] = EmbeddedModel(model_dir=model_dir, max_batch=cfg.max_batch)
        shared = _SHARED[key]
    return (lambda task: shared), None


def close_shared_models() -> None:
    """Stop the worker threads of process-wide models (call at the end of a run)."""
    import asyncio as _asyncio

    for model in list(_SHARED.values()):
        _asyncio.run(model.aclose())
    _SHARED.clear()


def trial_sampling(base: Sampling, trial: int) -> Sampling:
    """Each trial gets its own seed so trials differ and reruns repeat."""
    return base.model_copy(update={"seed": (base.seed or 0) * 1000 + trial})


async def collect_async(tasks: list[Task], model_for: ModelFor, cfg: RolloutConfig) -> list[Trajectory]:
    sem = asyncio.Semaphore(max(1, cfg.concurrency))

    async def one(task: Task, trial: int) -> Trajectory:
        async with sem:
            world = get_world(task.world)
            return await run_episode(task, world, model_for(task), ScriptedUser(task),
                                     trial_sampling(cfg.sampling, trial), trial, cfg.agent)

    jobs = [one(t, k) for t in tasks for k in range(cfg.trials)]
    return list(await asyncio.gather(*jobs))


def collect(tasks: list[Task], cfg: RolloutConfig, model_for: ModelFor | None = None) -> list[Trajectory]:
    """Run every task `cfg.trials` times and return the trajectories (task order kept)."""

    async def main() -> list[Trajectory]:
        owned = None
        fn = model_for
        if fn is None:
            fn, owned = build_model_for(cfg.model)
        try:
            return await collect_async(tasks, fn, cfg)
        finally:
            if owned is not None:
                await owned.aclose()

    return asyncio.run(main())
