"""GRPO on an `rl` release with TRL's `GRPOTrainer` and the dense state reward.

Single turn for now: each prompt (system + opening user turn, rendered with the row's tool
schemas) gets `num_generations` completions; `train.rewards.state_reward` parses their
`<tool_call>` blocks and replays the write calls against the row's task.

Why prompts are rendered here (TRL 1.16): `GRPOTrainer` renders conversational prompts
with its own `tools=` argument, a list of Python callables that it also *executes* in a
tool loop, for every row alike; a per-row `tools` column is only passed on to reward
functions. So `train.data.to_trl_prompts(ds, tokenizer)` renders each prompt to text with
the model's chat template and that row's tool schemas, and GRPO runs on plain-text prompts
(completions are text).

Seam for multi-turn training: pass `environment_factory=` to `GRPOTrainer` (a callable
returning an object with `reset(**row) -> str | None`, public tool methods with typed,
documented signatures, and optionally `get_reward`), built from the row's `task` over
`envs.registry.get_world(task.world).env(task.initial_state)`. TRL then renders the tool
schemas from those methods, runs the tool loop (`max_tool_calling_iterations`) and hands
the environments to reward functions as `environments=`. Prompts must then stay
conversational (`to_trl_prompts(ds)` without a tokenizer) and the reward read the
environment's final state rather than replaying parsed calls.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from data import store
from train.config import GRPOStageConfig
from train.data import load_release, release_files, to_trl_prompts
from train.rewards import state_reward
from train.sft import (
    METRICS_FILE,
    hub_offline,
    load_model,
    metrics_callback,
    resolve_model,
    save_final,
    step_logs,
    write_summary,
)


def grpo_steps(
    build_dataset: Callable[[Any], Any],
    reward_funcs: list[Callable[..., list[float]]],
    cfg: GRPOStageConfig,
    out_dir: Path | str,
) -> tuple[Any, Any, Any, Path, str]:
    """Run `cfg.max_steps` GRPO steps of `cfg.model` and save it to `out_dir/final`.

    `build_dataset(tokenizer)` returns a `datasets.Dataset` with a text `prompt` column (and
    any columns the reward functions read). Returns (trainer, train result, dataset, final
    model folder, model path). Shared by `run_grpo` and the self-play loop.
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    with hub_offline():
        from trl import GRPOConfig, GRPOTrainer

        model_path = resolve_model(cfg.model)
        model, tokenizer = load_model(model_path)
        train_ds = build_dataset(tokenizer)
        if len(train_ds) == 0:
            raise store.DatasetError("GRPO needs at least one prompt; the dataset is empty")
        args = GRPOConfig(**{
            "output_dir": str(out / "checkpoints"),
            "max_steps": cfg.max_steps,
            "per_device_train_batch_size": cfg.per_device_train_batch_size,
            "num_generations": cfg.num_generations,
            "max_completion_length": cfg.max_completion_length,
            "learning_rate": cfg.learning_rate,
            "temperature": cfg.temperature,
            "beta": cfg.beta,
            "use_cpu": cfg.use_cpu,
            "bf16": cfg.bf16,
            "gradient_checkpointing": cfg.gradient_checkpointing,
            "seed": cfg.seed,
            "logging_steps": 1,
            "save_strategy": "no",
            "report_to": "none",
            "disable_tqdm": True,
            **cfg.extra,
        })
        trainer = GRPOTrainer(model=model, reward_funcs=reward_funcs, args=args, train_dataset=train_ds,
                              processing_class=tokenizer, callbacks=[metrics_callback(out / METRICS_FILE)])
        result = trainer.train()
        final = save_final(trainer, tokenizer, out, lora=False)
    return trainer, result, train_ds, final, model_path


def run_grpo(dataset_path: Path | str, cfg: GRPOStageConfig, out_dir: Path | str) -> dict[str, Any]:
    """Train `cfg.model` with GRPO on the `train` split of a verified `rl` release.

    Writes `metrics.jsonl` (per step: `reward`, `reward_std`, `rewards/state_reward/mean`,
    `state/exact`, `state/malformed`, `loss`, completion lengths, ...),
    `train_summary.json` and the final model in `out_dir/final`; returns the summary.
    """
    out = Path(out_dir)
    started = time.monotonic()
    manifest, _ = release_files(dataset_path)
    if manifest.kind != "rl":
        raise store.DatasetError(f"{dataset_path} is a {manifest.kind!r} dataset, not an rl release")
    prompt_tokens: list[int] = []

    def build(tokenizer: Any) -> Any:
        ds = to_trl_prompts(load_release(dataset_path, "train"), tokenizer)
        if len(ds) == 0:
            raise store.DatasetError(f"{dataset_path}: the train split has no rows")
        prompt_tokens.extend(len(tokenizer(p, add_special_tokens=False)["input_ids"]) for p in ds["prompt"])
        return ds

    trainer, result, train_ds, final, model_path = grpo_steps(build, [state_reward], cfg, out)
    history = trainer.state.log_history
    return write_summary(out, {
        "stage": "grpo",
        "steps": trainer.state.global_step,
        "rewards": step_logs(history, "reward"),
        "reward_std": step_logs(history, "reward_std"),
        "losses": step_logs(history, "loss"),
        "exact": step_logs(history, "state/exact"),
        "train_runtime_s": result.metrics.get("train_runtime"),
        "seconds_per_step": round(result.metrics["train_runtime"] / max(trainer.state.global_step, 1), 3),
        "wall_s": round(time.monotonic() - started, 3),
        "dataset": {"path": str(dataset_path), "name": manifest.name, "version": manifest.version,
                    "rows": manifest.rows, "train_rows": len(train_ds),
                    "prompt_tokens_mean": round(sum(prompt_tokens) / len(prompt_tokens), 1),
                    "prompt_tokens_max": max(prompt_tokens)},
        "model": {"requested": cfg.model, "path": model_path},
        "config": cfg.model_dump(),
        "code_version": store.code_version(),
        "final_model": str(final),
        "metrics_file": str(out / METRICS_FILE),
    })
