"""Collect trajectories: k trials per task, many episodes in flight on one event loop."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from data.records import Sampling, Task, Trajectory
from envs.registry import get_world
from rollout.agent import AgentConfig, run_episode, runtime_contract
from rollout.backends import ModelConfig, ModelFor, build
from rollout.model import ChatModel
from rollout.strategy import EarlierTrial, describe_outcome
from rollout.user import LLMUser, ScriptedUser, UserSimulator


class UserConfig(BaseModel):
    """Who plays the user: the deterministic `scripted` user, or an `llm` user
    (`rollout.user.LLMUser`) served by `model` (None: the agent's configured model)."""

    model_config = ConfigDict(extra="forbid")

    kind: Literal["scripted", "llm"] = "scripted"
    model: ModelConfig | None = None
    sampling: Sampling = Field(default_factory=lambda: Sampling(temperature=0.7, max_tokens=128, seed=0))
    max_turns: int = Field(10, ge=1)  # user replies before the user ends the conversation
    retries: int = Field(1, ge=0)  # new samples after an unusable reply

    @model_validator(mode="after")
    def _served_by_a_model(self) -> UserConfig:
        if self.model is not None and self.model.kind == "scripted":
            raise ValueError("rollout.user.model cannot be 'scripted' (scripted policies play agents, "
                             "not users); use user.kind=scripted for the scripted user")
        return self


class RolloutConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    model: ModelConfig = Field(default_factory=ModelConfig)
    trials: int = Field(2, ge=1)
    concurrency: int = Field(8, ge=1)
    sampling: Sampling = Field(default_factory=lambda: Sampling(temperature=0.7, max_tokens=128, seed=0))
    agent: AgentConfig = Field(default_factory=AgentConfig)
    user: UserConfig = Field(default_factory=UserConfig)

    @model_validator(mode="after")
    def _llm_user_has_a_model(self) -> RolloutConfig:
        if self.user.kind == "llm" and self.user.model is None and self.model.kind == "scripted":
            raise ValueError("rollout.user.kind=llm needs a model: the agent's model is scripted, so set "
                             "rollout.user.model (kind embedded or openai)")
        return self

    def user_model(self) -> ModelConfig:
        """The model that plays an LLM user."""
        return self.user.model or self.model


log = logging.getLogger(__name__)


def build_model_for(cfg: ModelConfig) -> tuple[ModelFor, ChatModel | None]:
    """A function from task to model, and a model to close after this collection (if any);
    see `rollout.backends` for the backends and their options."""
    built = build(cfg)
    return built.model_for, built.owned


def trial_sampling(base: Sampling, trial: int) -> Sampling:
    """Each trial gets its own seed so trials differ and reruns repeat."""
    return base.model_copy(update={"seed": (base.seed or 0) * 1000 + trial})


Outcome = Callable[[Task, Trajectory], str | None]


def make_user(task: Task, cfg: RolloutConfig, trial: int, user_model: ChatModel | None) -> UserSimulator:
    """The configured user simulator for one trial of `task`."""
    if cfg.user.kind == "scripted":
        return ScriptedUser(task)
    if user_model is None:
        raise ValueError("rollout.user.kind=llm but no model serves the user")
    return LLMUser(task, user_model, trial_sampling(cfg.user.sampling, trial),
                   max_turns=cfg.user.max_turns, retries=cfg.user.retries)


async def collect_async(tasks: list[Task], model_for: ModelFor, cfg: RolloutConfig,
                        user_model_for: ModelFor | None = None,
                        outcome: Outcome | None = None) -> list[Trajectory]:
    """Every trial of every task, `cfg.concurrency` episodes in flight. With strategy
    reflection on, the trials of one task run in order (each sees the earlier ones'
    strategies and `outcome`s, by default `describe_outcome`); tasks still overlap."""
    sem = asyncio.Semaphore(max(1, cfg.concurrency))
    describe = outcome or (lambda task, traj: describe_outcome(traj))

    async def one(task: Task, trial: int, earlier: list[EarlierTrial]) -> Trajectory:
        async with sem:
            sampling = trial_sampling(cfg.sampling, trial)
            model = model_for(task)
            try:
                world = get_world(task.world)
                user = make_user(task, cfg, trial, user_model_for(task) if user_model_for else None)
                return await run_episode(task, world, model, user, sampling, trial, cfg.agent, earlier)
            except Exception as exc:  # one broken episode must not take the others with it
                log.exception("episode %s trial %d failed", task.id, trial)
                return Trajectory(
                    id=Trajectory.make_id(task.id, trial, model.name, sampling), task_id=task.id,
                    trial=trial, model=model.name, sampling=sampling, termination="env_error",
                    error_counts={"env_error": 1},
                    metadata={**runtime_contract(cfg.agent), "env_error": f"{type(exc).__name__}: {exc}"[:500]},
                )

    strategy = cfg.agent.strategy
    if not (strategy.enabled and strategy.reflection):
        jobs = [one(t, k, []) for t in tasks for k in range(cfg.trials)]
        return list(await asyncio.gather(*jobs))

    async def in_order(task: Task) -> list[Trajectory]:
        out: list[Trajectory] = []
        earlier: list[EarlierTrial] = []
        for k in range(cfg.trials):
            traj = await one(task, k, list(earlier))
            out.append(traj)
            earlier.append(EarlierTrial(str(traj.metadata.get("strategy") or ""), describe(task, traj)))
        return out

    per_task = await asyncio.gather(*(in_order(t) for t in tasks))
    return [traj for trajs in per_task for traj in trajs]


def collect(tasks: list[Task], cfg: RolloutConfig, model_for: ModelFor | None = None,
            user_model_for: ModelFor | None = None, outcome: Outcome | None = None) -> list[Trajectory]:
    """Run every task `cfg.trials` times and return the trajectories (task order kept).

    `model_for` overrides the agent's configured model; `user_model_for` the LLM user's
    (default: built from `cfg.user.model`, or the agent's configured model when that is None);
    `outcome` describes a finished trial for strategy reflection."""

    async def main() -> list[Trajectory]:
        owned: list[ChatModel] = []
        fn = model_for
        configured: ModelFor | None = None
        if fn is None:
            fn, agent_owned = build_model_for(cfg.model)
            configured = fn
            owned += [agent_owned] if agent_owned is not None else []
        user_fn = user_model_for
        if user_fn is None and cfg.user.kind == "llm":
            if cfg.user.model is None and configured is not None:
                user_fn = configured  # the agent's own model serves the user too
            else:
                user_fn, user_owned = build_model_for(cfg.user_model())
                owned += [user_owned] if user_owned is not None else []
        try:
            return await collect_async(tasks, fn, cfg, user_fn, outcome)
        finally:
            for m in owned:
                await m.aclose()

    return asyncio.run(main())
