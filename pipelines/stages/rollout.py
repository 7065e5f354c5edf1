"""The rollout stage: the policy's trials and the gold reference replays of a shard of tasks
(through the shard cache), the vLLM servers a run starts, the infrastructure-failure check,
the remote models' preflight, and the `trajectories` dataset."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from data import store
from data.cache import ShardCache
from data.records import Task, Trajectory
from pipelines import keys
from pipelines.config import RunConfig
from pipelines.stages.base import crashpoint, datasets_dir, lineage
from rollout.collector import ModelConfig, UserConfig, collect
from rollout.policies import ScriptedPolicy
from rollout.strategy import StrategyConfig


@contextmanager
def served_rollout(cfg: RunConfig) -> Iterator[RunConfig]:
    """The config to roll out with: as given, or, when `cfg.vllm` is set, pointed at vLLM
    servers started here (and stopped when the block ends)."""
    if cfg.vllm is None:
        yield cfg
        return
    from rollout.vllm_server import launch_replicas

    v = cfg.vllm
    with launch_replicas(v.server, v.replicas, v.gpus_per_replica, startup_timeout_s=v.startup_timeout_s) as servers:
        current = cfg.rollout.model
        options = dict(current.options) if current.kind == "openai" else {}
        model = ModelConfig(kind="openai", name=v.server.served_name(),
                            options={**options, "base_urls": [s.base_url for s in servers]})
        yield cfg.model_copy(update={"rollout": cfg.rollout.model_copy(update={"model": model}), "vllm": None})


def rollout_shard_cached(tasks: list[Task], cfg: RunConfig, cache: ShardCache,
                         key: str | None = None) -> tuple[list[Trajectory], bool]:
    """`rollout_shard` through the shard cache: (trajectories, whether they came from it).
    `key`: the shard's `keys.rollout_key`, when the caller has it."""
    key = key or keys.rollout_key(cfg, tasks)
    hit = cache.get("rollout", key, "trajectories")
    if hit is not None and not any(t.infra_failed for t in hit):
        return hit, True
    trajectories = rollout_shard(tasks, cfg)
    if not any(t.infra_failed for t in trajectories):  # a failed shard is rolled out again next run
        cache.put("rollout", key, "trajectories", trajectories)
    crashpoint("rollout.shard_done")
    return trajectories, False


# A reference replay plays the task's verified path to its end, whatever `agent.max_turns`
# allows the policy: this bounds only a replay that never ends.
REFERENCE_MAX_TURNS = 1_000


def rollout_shard(tasks: list[Task], cfg: RunConfig) -> list[Trajectory]:
    """The policy's trials for a shard of tasks, plus gold reference trajectories."""
    trajectories = collect(tasks, cfg.rollout)
    if cfg.reference_trials:
        # the gold path needs neither an LLM user nor an exploration strategy, nor a turn limit
        ref_cfg = cfg.rollout.model_copy(update={
            "trials": cfg.reference_trials, "user": UserConfig(),
            "agent": cfg.rollout.agent.model_copy(update={"strategy": StrategyConfig(),
                                                          "max_turns": REFERENCE_MAX_TURNS})})
        gold = collect(tasks, ref_cfg, model_for=lambda task: ScriptedPolicy(task, name="reference"))
        for t in gold:
            t.reference = True
        trajectories += gold
    return trajectories


def trajectory_stats(trajectories: Sequence[Trajectory]) -> dict[str, Any]:
    """The `trajectories` dataset's stats of some trajectories (they add up over shards).
    `model_calls` and tokens are the policy's (a reference replay calls no model);
    `infra_failed` counts policy trajectories that ended on infrastructure, and
    `all_infra_failed` says whether every policy trajectory of these did (a shard's
    figure: over shards it reads "some shard fully failed"); `incomplete` marks a part that
    must not be reused (`data.parts.find`)."""
    policy = [t for t in trajectories if not t.reference]
    failed = [t for t in policy if t.infra_failed]
    return {"trajectories": len(trajectories),
            "policy": len(policy),
            "terminations": dict(Counter(t.termination for t in trajectories)),
            "error_counts": dict(sum((Counter(t.error_counts) for t in trajectories), Counter())),
            "model_error_reasons": dict(Counter(t.metadata.get("model_error_reason", "backend")
                                                for t in trajectories if t.termination == "model_error")),
            "infra_failed": len(failed),
            "all_infra_failed": bool(policy) and len(failed) == len(policy),
            "incomplete": bool(failed),
            "infra_errors": sorted({str(t.metadata.get("model_error") or t.metadata.get("user_error"))[:200]
                                    for t in failed})[:3],
            "model_calls": sum(t.usage.model_calls for t in policy),
            "completion_tokens": sum(t.usage.completion_tokens for t in policy)}


class InfraFailureError(RuntimeError):
    """Too many trajectories ended on infrastructure failures: the run publishes nothing."""


def check_infra_failures(cfg: RunConfig, stats: dict[str, Any]) -> dict[str, Any]:
    """The run's infrastructure-failure figures from its rollout stats (summed over shards),
    raising `InfraFailureError` when any shard's policy trajectories all failed, or more than
    `failures.max_infra_failure_rate` of them did, unless `failures.allow_partial`."""
    policy, failed = int(stats.get("policy", 0)), int(stats.get("infra_failed", 0))
    rate = failed / policy if policy else 0.0
    figures = {"infra_failed": failed, "policy": policy, "infra_failure_rate": round(rate, 4),
               "reasons": dict(stats.get("model_error_reasons", {}))}
    too_many = bool(stats.get("all_infra_failed")) or rate > cfg.failures.max_infra_failure_rate
    if failed and too_many and not cfg.failures.allow_partial:
        why = ", ".join(f"{k}: {v}" for k, v in sorted(figures["reasons"].items())) or "user simulator"
        first = next(iter(stats.get("infra_errors") or []), "")
        raise InfraFailureError(
            f"{failed} of {policy} policy trajectories ended on infrastructure failures ({why})"
            f"{'; e.g. ' + first if first else ''}. Nothing was published or cached as done; fix the model "
            "server and rerun (--allow-partial publishes what succeeded)")
    return figures


def preflight(cfg: RunConfig) -> None:
    """Check every remote model the run will call (agent, LLM user, judge) before it starts
    (`rollout.preflight.check_model`); raises `PreflightError` with one line."""
    if not cfg.failures.preflight:
        return
    from rollout.preflight import check_model

    check_model(cfg.rollout.model, "rollout.model")
    if cfg.rollout.user.kind == "llm" and cfg.rollout.user.model is not None:
        check_model(cfg.rollout.user.model, "rollout.user.model")
    if cfg.judge is not None:
        check_model(cfg.judge, "judge")


def write_trajectories(trajectories: list[Trajectory], cfg: RunConfig, out: Path, parents: Sequence[Path],
                       run_id: str = "") -> Path:
    return store.write_records(datasets_dir(out), "trajectories", "trajectories", trajectories,
                               lineage(cfg, parents, run_id), stats=trajectory_stats(trajectories), reuse_identical=True)
