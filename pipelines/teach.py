"""From data to a judged model in one flow run: the run (synthesize → roll out → verify →
curate → release), SFT on its `sft` release, the base and the SFT model judged on the
release's held-out tasks (`train.value.evaluate_pair`: next-action accuracy and episode
pass rate with intervals) and, with `teach.benchmarks`, on a benchmark's own test tasks
(`train.value.benchmark_pair`: τ²-bench's, by τ²'s evaluator), then optionally GRPO from the
SFT model on the `rl` release and its judgement. The release card's "Training runs" section gets every result.

Cached and resumable like `trajforge run`: the run stage reuses its shards; a training
stage whose run folder (named by a key of the release, the stage config and the code
version) already finished is not trained again, and an evaluation already written beside
its model is read back. Each stage is a task run of the flow run.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from prefect import flow, get_run_logger, task
from prefect.cache_policies import NO_CACHE

from data import store
from pipelines.config import RunConfig
from pipelines.reaper import on_running_hooks
from train.lineage import read_run


def stage_key(release: Path | str, config: dict[str, Any]) -> str:
    """A training stage's identity: the release (name, version, file checksums), the stage
    config and the code version."""
    manifest = store.read_manifest(release, verify=False)
    payload = {"release": [manifest.name, manifest.version, sorted(f.sha256 for f in manifest.files)],
               "config": config, "code": store.code_version()}
    return hashlib.sha256(json.dumps(payload, sort_keys=True, default=str).encode()).hexdigest()[:12]


def _finished(run_dir: Path) -> dict[str, Any] | None:
    try:
        record = read_run(run_dir)
    except (OSError, json.JSONDecodeError):
        return None
    return record if record.get("status") == "done" and (run_dir / "final").is_dir() else None


@task(name="sft", task_run_name="sft", cache_policy=NO_CACHE)
def sft_task(cfg: RunConfig, release: str, out: Path) -> str:
    """SFT on `release` (skipped when the same stage already finished); the model folder."""
    from train.sft import run_sft

    run_dir = out / "train" / f"sft-{stage_key(release, cfg.sft.model_dump(mode='json'))}"
    if _finished(run_dir) is None:
        run_sft(release, cfg.sft, run_dir)
    else:
        get_run_logger().info("sft: %s already trained", run_dir)
    return str(run_dir / "final")


@task(name="grpo", task_run_name="grpo", cache_policy=NO_CACHE)
def grpo_task(cfg: RunConfig, release: str, model: str, out: Path) -> str:
    """GRPO from `model` on the rl `release` (skipped when already done); the model folder."""
    from train.grpo import run_grpo

    stage = cfg.grpo.model_copy(update={"model": model})
    run_dir = out / "train" / f"grpo-{stage_key(release, stage.model_dump(mode='json'))}"
    if _finished(run_dir) is None:
        run_grpo(release, stage, run_dir)
    else:
        get_run_logger().info("grpo: %s already trained", run_dir)
    return str(run_dir / "final")


def _eval_args(cfg: RunConfig) -> dict[str, Any]:
    """`evaluate_pair`'s arguments from `teach:` (also what `evaluation_before` matches on)."""
    t = cfg.teach
    return {"split": t.eval_split, "trials": t.eval_trials, "max_turns": t.eval_max_turns,
            "max_tasks": t.eval_max_tasks, "max_dialogues": t.eval_max_dialogues, "episodes": t.episodes,
            "next_action": t.next_action, "max_tokens": t.eval_max_tokens}


@task(name="evaluate", task_run_name="evaluate-{label}", cache_policy=NO_CACHE)
def evaluate_task(cfg: RunConfig, release: str, model: str, base: str, label: str) -> dict[str, Any]:
    """Base and `model` on `release`'s held-out tasks (`train.value.evaluate_pair`); an
    evaluation with the same settings already written beside the model is read back."""
    from train.value import evaluate_pair, evaluation_before

    args = _eval_args(cfg)
    return evaluation_before(release, model, base, args) or evaluate_pair(release, model, base=base, **args)


@task(name="benchmark", task_run_name="benchmark-{label}-{benchmark}", cache_policy=NO_CACHE)
def benchmark_task(cfg: RunConfig, benchmark: str, model: str, base: str, label: str) -> dict[str, Any]:
    """Base and `model` on a benchmark's own test tasks (`train.value.benchmark_pair`); a pair
    with the same settings already kept beside the model is read back."""
    from train.value import benchmark_pair, pair_before

    t = cfg.teach
    settings = {"split": t.eval_split, "max_tasks": t.benchmark_max_tasks, "max_turns": t.eval_max_turns}
    return (pair_before(benchmark, model, base, **settings)
            or benchmark_pair(benchmark, model, base=base, **settings))


def _judged(cfg: RunConfig, release: str, model: str, label: str) -> dict[str, Any]:
    """A model's headline against the base: the held-out tasks of `release`, then each
    benchmark of `teach.benchmarks`."""
    out = _headline(model, evaluate_task(cfg, release, model, cfg.sft.model, label))
    for name in cfg.teach.benchmarks:
        pair = benchmark_task(cfg, name, model, cfg.sft.model, label)
        out.setdefault("benchmarks", {})[name] = {
            "tasks": pair["tasks"], "base": pair["base"]["pass_rate"], "trained": pair["trained"]["pass_rate"],
            "delta": pair["delta"]["mean"], "ci95": pair["delta"]["ci95"]}
    return out


@flow(name="trajforge-teach", flow_run_name="{config[name]}-teach", on_running=on_running_hooks())
def teach_flow(config: dict[str, Any], out: str) -> dict[str, Any]:
    """The run, then SFT → evaluate (→ GRPO → evaluate); returns the run's summary with a
    `training` block: each model and its figures against the base."""
    from pipelines import flows

    cfg, root = RunConfig.model_validate(config), Path(out)
    summary = flows.execute(flows.run_flow, cfg, out)
    releases = summary["releases"]
    training: dict[str, Any] = {}
    if cfg.teach.sft:
        sft_model = sft_task(cfg, releases["sft"], root)
        training["sft"] = _judged(cfg, releases["sft"], sft_model, "sft")
        if cfg.teach.grpo:
            grpo_model = grpo_task(cfg, releases["rl"], sft_model, root)
            training["grpo"] = _judged(cfg, releases["sft"], grpo_model, "grpo")
    return {**summary, "training": training}


def _headline(model: str, result: dict[str, Any]) -> dict[str, Any]:
    """A model's figures against the base: next-action accuracy and pass rate, each base →
    trained with the paired difference's interval."""
    out: dict[str, Any] = {"model": model, "tasks": result["tasks"], "eval": result.get("written_to")}
    for key, part, figure in (("next_action", "next_action", "accuracy"), ("pass_rate", "episodes", "pass_rate")):
        if key in result["delta"]:
            out[key] = {"base": result["base"][part][figure], "trained": result["trained"][part][figure],
                        "delta": result["delta"][key]["mean"], "ci95": result["delta"][key]["ci95"]}
    return out
