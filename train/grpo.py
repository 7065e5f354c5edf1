"""GRPO on an `rl` release with TRL's `GRPOTrainer`: multi-turn in the task's world (default)
or single-turn on text completions.

**Multi-turn** (`multi_turn: true`): each row resets a fresh copy of its task's world; the
model calls the world's tools and talks with the task's user; the reward is
`train.environments.verifier_reward`, the verdict of the task's verifier on the conversation
(the composite's dense score by default). How the model reaches the user (`user_channel`):

- `text` (default, `train.conversation.ConversationRollout` as TRL's `rollout_func`): as in
  the agent loop and every trajforge row, a turn without a tool call goes to the user and
  their reply opens the next turn, until the user ends the conversation, `max_turns` model
  turns or the completion budget. Tool results and user turns carry no loss (`env_mask`).
- `tool` (TRL's `environment_factory`, `train.environments`): TRL's loop runs the tool
  calls until the model answers in plain text, which ends the episode; the user is reached
  through a `send_message_to_user` tool. A model SFT-ed on trajforge's rows does not use
  that tool, so it gets no reward signal here (docs/training.md).

**Single-turn** (`multi_turn: false`): each prompt is rendered to text with the row's tool
schemas (`train.data.to_trl_prompts`), and `train.rewards.state_reward` replays the
completion's parsed tool calls.

The methods.md §5 options (`objective:`) are applied by `train.objectives.trainer_class`.
A run writes `metrics.jsonl`, `train_summary.json`, `run.json` (lineage), `curves.csv` /
`curves.png`, `final/`, with `save_steps` `checkpoints/checkpoint-N/`, and with the text
channel `episodes.jsonl` (every judged episode: step, task, how it ended, verdict, conversation).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from data import store
from train.config import GRPOStageConfig
from train.curves import write_curves
from train.data import load_release, release_files, to_trl_env_prompts, to_trl_prompts
from train.lineage import write_run_record
from train.objectives import trainer_class
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

EPISODES_FILE = "episodes.jsonl"  # text channel: each judged episode (train.conversation.ConversationRollout.keep)
CURVE_KEYS = ["reward", "reward_std", "verifier/passed", "state/exact", "loss", "entropy",
              "frac_reward_zero_std", "tools/call_frequency", "completions/mean_length"]


def grpo_args(cfg: GRPOStageConfig, out: Path) -> dict[str, Any]:
    """The `GRPOConfig` keyword arguments of a stage config (`extra` last, overriding)."""
    args: dict[str, Any] = {
        **cfg.trainer_args(out),
        "num_generations": cfg.num_generations,
        "max_completion_length": cfg.max_completion_length,
        "temperature": cfg.temperature,
        "beta": cfg.beta,
        "epsilon": cfg.epsilon,
        "epsilon_high": cfg.epsilon_high,
        "num_iterations": cfg.num_iterations,
    }
    if cfg.multi_turn and cfg.user_channel == "tool":
        args["max_tool_calling_iterations"] = cfg.max_tool_calling_iterations
    if cfg.use_vllm:
        args.update({"use_vllm": True, "vllm_mode": cfg.vllm_mode,
                     "vllm_gpu_memory_utilization": cfg.vllm_gpu_memory_utilization,
                     "vllm_tensor_parallel_size": cfg.vllm_tensor_parallel_size})
        if cfg.vllm_mode == "server":
            args.update({"vllm_server_host": cfg.vllm_server_host, "vllm_server_port": cfg.vllm_server_port})
    return {**args, **cfg.extra}


def grpo_steps(
    build_dataset: Callable[[Any], Any],
    reward_funcs: list[Callable[..., list[float]]],
    cfg: GRPOStageConfig,
    out_dir: Path | str,
    environment_factory: Any = None,
    callbacks: list[Any] | None = None,
    rollout_func: Any = None,
) -> tuple[Any, Any, Any, Path, str]:
    """Run `cfg.max_steps` GRPO steps of `cfg.model` and save it to `out_dir/final`.

    `build_dataset(tokenizer)` returns a `datasets.Dataset` with a `prompt` column (and any
    columns the reward functions or environments read). A `rollout_func`
    (`train.conversation.ConversationRollout`) plays the episodes instead of TRL's
    generation; it sees the batch's rows through `exposing_rows`. Returns (trainer, train result,
    dataset, final model folder, model path). Shared by `run_grpo` and the self-play loop.
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    with hub_offline():
        from trl import GRPOConfig

        model_path = resolve_model(cfg.model)
        model, tokenizer = load_model(model_path)
        train_ds = build_dataset(tokenizer)
        if len(train_ds) == 0:
            raise store.DatasetError("GRPO needs at least one prompt; the dataset is empty")
        args = GRPOConfig(**grpo_args(cfg, out))
        cls = trainer_class(cfg.objective)
        extra: dict[str, Any] = {"environment_factory": environment_factory}
        if rollout_func is not None:
            from train.conversation import exposing_rows

            cls, extra = exposing_rows(cls), {**extra, "rollout_func": rollout_func}
        trainer = cls(
            model=model, reward_funcs=reward_funcs, args=args, train_dataset=train_ds, processing_class=tokenizer,
            callbacks=[metrics_callback(out / METRICS_FILE), *(callbacks or [])], **extra)
        result = trainer.train()
        final = save_final(trainer, tokenizer, out, lora=False)
    return trainer, result, train_ds, final, model_path


def run_grpo(dataset_path: Path | str, cfg: GRPOStageConfig, out_dir: Path | str,
             callbacks: list[Any] | None = None) -> dict[str, Any]:
    """Train `cfg.model` with GRPO on the `train` split of a verified `rl` release.

    Writes `metrics.jsonl` (per step: `reward`, `reward_std`, `frac_reward_zero_std`,
    `loss`, `entropy`, completion lengths; multi-turn: `rewards/verifier_reward/mean`,
    `verifier/passed`, `verifier/tool_calls`, `tools/call_frequency`; single-turn:
    `rewards/state_reward/mean`, `state/exact`, `state/malformed`), `train_summary.json`,
    `run.json`, curves and the final model in `out_dir/final`; returns the summary.
    """
    out = Path(out_dir)
    started = time.monotonic()
    manifest, _ = release_files(dataset_path)
    if manifest.kind != "rl":
        raise store.DatasetError(f"{dataset_path} is a {manifest.kind!r} dataset, not an rl release")
    write_run_record(out, "grpo", dataset_path, manifest, cfg.model_dump())
    try:
        summary = _train_grpo(dataset_path, manifest, cfg, out, started, callbacks)
    except BaseException as exc:
        write_run_record(out, "grpo", dataset_path, manifest, cfg.model_dump(), status="failed",
                         error=f"{type(exc).__name__}: {exc}"[:1000])
        raise
    rewards = summary["rewards"]
    write_run_record(out, "grpo", dataset_path, manifest, cfg.model_dump(), status="done", steps=summary["steps"],
                     final_reward=rewards[-1]["reward"] if rewards else None, final_model=summary["final_model"],
                     wall_s=summary["wall_s"])
    return summary


def _train_grpo(dataset_path: Path | str, manifest: store.Manifest, cfg: GRPOStageConfig, out: Path,
                started: float, callbacks: list[Any] | None) -> dict[str, Any]:
    prompt_tokens: list[int] = []
    factory = rollout = None
    if cfg.multi_turn:
        from train.environments import (
            check_release_versions,
            environment_factories,
            verifier_reward,
        )

        ds = to_trl_env_prompts(load_release(dataset_path, "train"))
        if len(ds) == 0:
            raise store.DatasetError(f"{dataset_path}: the train split has no rows")
        check_release_versions(ds, cfg.verifiers)  # every row, before a step is spent
        worlds = sorted(set(ds["environment"]))
        if cfg.user_channel == "text":
            from train.conversation import ConversationRollout

            rollout = ConversationRollout(worlds, cfg.verifiers, cfg.max_turns, cfg.turn_tokens,
                                          record=out / EPISODES_FILE)
        else:
            factory = environment_factories(worlds, cfg.verifiers)
        reward_funcs: list[Callable[..., list[float]]] = [verifier_reward]

        def build(tokenizer: Any) -> Any:
            return ds
    else:
        reward_funcs = [state_reward]

        def build(tokenizer: Any) -> Any:
            rows = to_trl_prompts(load_release(dataset_path, "train"), tokenizer)
            if len(rows) == 0:
                raise store.DatasetError(f"{dataset_path}: the train split has no rows")
            prompt_tokens.extend(len(tokenizer(p, add_special_tokens=False)["input_ids"]) for p in rows["prompt"])
            return rows

    trainer, result, train_ds, final, model_path = grpo_steps(build, reward_funcs, cfg, out, factory, callbacks, rollout)
    history = trainer.state.log_history
    curves = write_curves(out, CURVE_KEYS, f"GRPO ({'multi-turn' if cfg.multi_turn else 'single-turn'})")
    dataset: dict[str, Any] = {"path": str(dataset_path), "name": manifest.name, "version": manifest.version,
                               "rows": manifest.rows, "train_rows": len(train_ds)}
    if prompt_tokens:
        dataset.update(prompt_tokens_mean=round(sum(prompt_tokens) / len(prompt_tokens), 1),
                       prompt_tokens_max=max(prompt_tokens))
    if cfg.multi_turn:
        dataset["worlds"] = sorted(set(train_ds["environment"]))
    return write_summary(out, {
        "stage": "grpo",
        "multi_turn": cfg.multi_turn,
        "user_channel": cfg.user_channel if cfg.multi_turn else None,
        "steps": trainer.state.global_step,
        "rewards": step_logs(history, "reward"),
        "reward_std": step_logs(history, "reward_std"),
        "losses": step_logs(history, "loss"),
        "exact": step_logs(history, "verifier/passed" if cfg.multi_turn else "state/exact"),
        "tool_calls": step_logs(history, "verifier/tool_calls") if cfg.multi_turn else [],
        "train_runtime_s": result.metrics.get("train_runtime"),
        "seconds_per_step": round(result.metrics["train_runtime"] / max(trainer.state.global_step, 1), 3),
        "wall_s": round(time.monotonic() - started, 3),
        "dataset": dataset,
        "model": {"requested": cfg.model, "path": model_path},
    }, cfg, final, curves)
