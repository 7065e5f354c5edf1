"""Cache keys for shards of work: a hash of every input that determines a shard's output.

A key never contains a run id, a time or a path to an output folder, so an identical rerun
finds every shard done, and changing one input (config, task content, model or sampling,
prompt template, tool schemas, verifier version) changes exactly the keys of the shards
whose output it can change.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from data.records import Task, Trajectory, content_hash
from envs.registry import world_version
from pipelines.config import RunConfig
from rollout import agent, strategy, user
from rollout.collector import ModelConfig, RolloutConfig
from rollout.prepare import weights_digest
from verifiers.base import VERIFIERS, second_judges

KEY_VERSION = 1  # bump when what a stage computes changes in a way its inputs do not show

def prompt_version(model: ModelConfig) -> str:
    """The agent's system prompt template plus the chat template the model renders with."""
    parts: dict[str, Any] = {"system": agent.SYSTEM_TEMPLATE}
    if model.kind == "embedded":
        from rollout.prepare import folder_template

        path = getattr(model.backend_options(), "path", None)
        parts["chat_template"] = folder_template(Path(path) if path else None)
    return content_hash(parts)


def model_identity(model: ModelConfig) -> dict[str, Any]:
    """What decides the model's answers: its kind, name and the options that are not
    transport (each backend's `TRANSPORT`), plus a digest of local weights it loads."""
    opts = model.backend_options()
    ident: dict[str, Any] = {"kind": model.kind, "name": model.name,
                             "options": opts.identity() if opts is not None else {}}
    path = getattr(opts, "path", None)
    if path and Path(path).expanduser().is_dir():
        ident["weights"] = weights_digest(Path(path).expanduser())
    return ident


def user_identity(r: RolloutConfig) -> dict[str, Any]:
    """What decides the user simulator's replies: its kind, and for an LLM user the model
    that plays it, its sampling and limits, and its prompt templates."""
    if r.user.kind == "scripted":
        return {"kind": "scripted", "v": 1}
    served = r.user_model()
    return {**r.user.model_dump(mode="json", exclude={"model"}), "model": model_identity(served),
            "prompt": content_hash([user.USER_SYSTEM_TEMPLATE, user.AGENT_GREETING, user.RETRY_NOTE]),
            "chat_template": prompt_version(served)}


def agent_identity(r: RolloutConfig) -> dict[str, Any]:
    """The agent's configuration, plus the strategy prompts when strategies are on."""
    ident: dict[str, Any] = r.agent.model_dump(mode="json")
    if r.agent.strategy.enabled:
        ident["strategy_prompt"] = content_hash([strategy.STRATEGY_INSTRUCTIONS, strategy.REFLECTION_INTRO,
                                                 strategy.STRATEGY_SECTION])
    return ident


def synthesis_key(cfg: RunConfig) -> str:
    sources = [cfg.synthesis, *cfg.synthesis_mix]
    return content_hash({"stage": "synthesize", "v": KEY_VERSION,
                         "sources": [s.model_dump(mode="json") for s in sources],
                         "worlds": {s.world: world_version(s.world) for s in sources}}, length=32)


def rollout_key(cfg: RunConfig, shard: Sequence[Task]) -> str:
    r = cfg.rollout
    worlds = sorted({t.world for t in shard})
    return content_hash({
        "stage": "rollout", "v": KEY_VERSION,
        "tasks": [content_hash(t.model_dump(mode="json"), length=32) for t in shard],
        "model": model_identity(r.model), "sampling": r.sampling.model_dump(mode="json"),
        "trials": r.trials, "agent": agent_identity(r), "user": user_identity(r),
        "reference_trials": cfg.reference_trials, "prompt": prompt_version(r.model),
        "worlds": {w: world_version(w) for w in worlds},
    }, length=32)


def verifier_identity(cfg: RunConfig) -> dict[str, Any]:
    """What decides the verdicts besides the records: each verifier's version and options,
    and the judge model when one is configured."""
    ident: dict[str, Any] = {n: {"version": VERIFIERS.get(n).version, "options": cfg.verifier_options.get(n, {})}
                             for n in cfg.verifiers}
    if cfg.judge is not None:
        ident["judge"] = model_identity(cfg.judge)
    return ident


def verify_key(cfg: RunConfig, tasks: dict[str, Task], shard: Sequence[Trajectory]) -> str:
    task_ids = sorted({t.task_id for t in shard})
    seconds = second_judges([tasks[i] for i in task_ids], cfg.verifiers)  # τ²'s evaluator on τ² tasks
    return content_hash({
        "stage": "verify", "v": KEY_VERSION, "verifiers": verifier_identity(cfg),
        **({"second_judges": {n: VERIFIERS.get(n).version for n in seconds}} if seconds else {}),
        "tasks": [content_hash(tasks[i].model_dump(mode="json"), length=32) for i in task_ids],
        "trajectories": [content_hash(t.model_dump(mode="json"), length=32) for t in shard],
    }, length=32)
