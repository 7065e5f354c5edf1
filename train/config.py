"""Configs of the training stages (CPU smoke defaults; see configs/train-gpu.yaml for a GPU run)."""

from __future__ import annotations

import dataclasses
import difflib
import functools
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from train.objectives import ObjectiveOptions


@functools.cache
def trl_config_fields(config: str) -> frozenset[str] | None:
    """The constructor fields of TRL's dataclass `config` ("SFTConfig", "GRPOConfig"); None
    when trl is not installed. Imports trl (and so transformers) on first use."""
    try:
        import trl

        cls = getattr(trl, config)
    except ImportError:
        return None
    return frozenset(f.name for f in dataclasses.fields(cls) if f.init)


def check_extra(extra: Mapping[str, Any], config: str) -> None:
    """Every key of a stage's `extra` is a field of TRL's `config`: a misspelled key is an
    error naming it (with the nearest field) when the config loads, not when training starts.
    No check when `extra` is empty or trl is not installed."""
    if not extra:
        return
    fields = trl_config_fields(config)
    if fields is None:
        return
    unknown = [k for k in extra if k not in fields]
    if unknown:
        hints = []
        for key in unknown:
            near = difflib.get_close_matches(str(key), sorted(fields), n=1)
            hints.append(f"{key!r}" + (f" (did you mean {near[0]!r}?)" if near else ""))
        raise ValueError(f"extra: not a field of TRL's {config}: {', '.join(hints)}")


class LaunchConfig(BaseModel):
    """How `train.launch.launch_commands` starts a stage on GPUs (`accelerate launch`, and
    `trl vllm-serve` for GRPO in vLLM server mode). Unused by an in-process CPU run."""

    model_config = ConfigDict(extra="forbid")

    num_processes: int = Field(1, ge=1)  # training processes (one per training GPU)
    mixed_precision: Literal["no", "bf16", "fp16"] = "bf16"
    accelerate_config: str | None = None  # an accelerate YAML (DeepSpeed/FSDP), passed as --config_file
    training_gpus: list[int] = Field(default_factory=list)  # CUDA_VISIBLE_DEVICES for training; [] = all
    vllm_gpus: list[int] = Field(default_factory=list)  # CUDA_VISIBLE_DEVICES for `trl vllm-serve` (server mode)


class TrainerStageConfig(BaseModel):
    """The settings every training stage passes to its TRL trainer (`trainer_args`); `extra`
    is checked against the stage's TRL config class (`trl_config`)."""

    model_config = ConfigDict(extra="forbid")
    trl_config: ClassVar[str]

    model: str = "embedded"  # "embedded" (the prepared SmolLM2 folder) or a model folder/name
    max_steps: int = 2
    per_device_train_batch_size: int = 2
    gradient_accumulation_steps: int = 1
    learning_rate: float
    save_steps: int | None = None  # checkpoints/checkpoint-N every N steps (None: final model only)
    save_total_limit: int | None = 2
    use_cpu: bool = True
    bf16: bool = True  # mixed precision (fp32 weights, bf16 autocast): ~2.3x faster than fp32 here
    gradient_checkpointing: bool = True  # TRL's default: less memory, ~30% more time
    seed: int = 0
    launch: LaunchConfig = Field(default_factory=LaunchConfig)
    extra: dict = Field(default_factory=dict)  # passed through to the TRL config (last, overriding)

    @field_validator("extra")
    @classmethod
    def _extra_fits_trl_config(cls, extra: dict) -> dict:
        check_extra(extra, cls.trl_config)
        return extra

    def trainer_args(self, out: Path) -> dict[str, Any]:
        """The TRL config keyword arguments every stage shares (checkpoints under `out`),
        without `extra`."""
        return {
            "output_dir": str(out / "checkpoints"),
            "max_steps": self.max_steps,
            "per_device_train_batch_size": self.per_device_train_batch_size,
            "gradient_accumulation_steps": self.gradient_accumulation_steps,
            "learning_rate": self.learning_rate,
            "use_cpu": self.use_cpu,
            "bf16": self.bf16,
            "gradient_checkpointing": self.gradient_checkpointing,
            "seed": self.seed,
            "logging_steps": 1,
            "save_strategy": "steps" if self.save_steps else "no",
            "save_steps": self.save_steps or 500,
            "save_total_limit": self.save_total_limit,
            "report_to": "none",
            "disable_tqdm": True,
        }


class SFTStageConfig(TrainerStageConfig):
    """SFT defaults chosen for speed on the CPU (docs/training.md, "SFT speed"; measured by
    bench/sft_speed.py): a step's rows run one at a time after the head they share (the
    system prompt and tool schemas, run once: `shared_head`; no padding between rows of
    3,000-4,400 tokens, one row's activations alive at a time), no gradient checkpointing
    (it recomputes every forward), and the LM head scored only at the positions that carry
    loss (`lm_head_loss_positions_only`). None of them changes the loss, the gradient or the
    rendered text: only how they are computed."""

    trl_config: ClassVar[str] = "SFTConfig"

    per_device_train_batch_size: int = 2  # rows per step; with shared_head they run one at a time
    gradient_accumulation_steps: int = 1
    # Rows of a batch that open with the same tokens run them once (train.shared_head);
    # False: TRL's step (the whole padded batch in one forward).
    shared_head: bool = True
    gradient_checkpointing: bool = False  # it runs every forward twice; one 3.8k-token row's activations fit
    # TRL 1.16's fused LM head projects every position through the 49k-token vocabulary
    # off Triton devices; True scores only the positions whose label is kept (the same loss).
    lm_head_loss_positions_only: bool = True
    learning_rate: float = 2e-5
    # Tokens a row keeps (TRL cuts the rest). None: the release's longest row, rounded up to 256 and at
    # most the model's positions, so no row loses its last turns; a set value that cuts rows is warned of.
    max_length: int | None = Field(None, gt=0)
    assistant_only_loss: bool = True
    # A chat template (file) with {% generation %} markers, for models whose own template
    # has none (see docs/training.md); None keeps the model's template.
    chat_template_path: str | None = None
    packing: bool = False
    lora: bool = False
    lora_r: int = 8
    lora_alpha: int | None = None  # default 2 * lora_r
    lora_target_modules: str | list[str] = "all-linear"
    eval_split: str = "test"
    eval_steps: int | None = None  # also evaluate every N steps (always once at the end)


class GRPOStageConfig(TrainerStageConfig):
    trl_config: ClassVar[str] = "GRPOConfig"

    num_generations: int = 2
    # Multi-turn: the budget covers the model's tokens *and* the tool results between them.
    # Too small a budget cuts every episode mid tool loop, which the verifier scores 0.
    # holds a reference conversation: its turns, tool results and user replies (seed-7 tasks:
    # p50 1,150-1,365 tokens, the longest 2,128, airline and retail)
    max_completion_length: int = 2560
    learning_rate: float = 1e-6
    temperature: float = 1.0
    beta: float = 0.0
    epsilon: float = 0.2  # PPO clip ε (ε_low; ε_high too unless epsilon_high is set)
    epsilon_high: float | None = None
    num_iterations: int = 1  # optimizer passes per generation batch (>1 makes clipping act)
    # Multi-turn (TRL's environment_factory): each row resets a fresh copy of its task's
    # world; the model calls the world's tools; the reward is the task's verifier.
    # False: single-turn, text completions scored by `train.rewards.state_reward`.
    multi_turn: bool = True
    # How the model reaches the user in a multi-turn episode. "text" (train.conversation): as
    # in the agent loop and every trajforge row, a turn without a tool call goes to the user,
    # whose reply opens the next turn, for up to `max_turns` model turns of `turn_tokens`.
    # "tool": TRL's own loop, where a plain answer ends the episode and the user is reached
    # through a `send_message_to_user` tool, for `max_tool_calling_iterations` rounds.
    user_channel: Literal["text", "tool"] = "text"
    max_turns: int = Field(12, ge=1)
    turn_tokens: int = Field(256, ge=1)
    max_tool_calling_iterations: int = 6
    verifiers: list[str] = Field(default_factory=lambda: ["composite"])  # the reward: the composite's dense score
    objective: ObjectiveOptions = Field(default_factory=ObjectiveOptions)  # methods.md §5 options
    # GPU generation with vLLM inside TRL: "colocate" (same GPUs) or "server" (`trl vllm-serve`).
    use_vllm: bool = False
    vllm_mode: Literal["colocate", "server"] = "colocate"
    vllm_server_host: str = "127.0.0.1"
    vllm_server_port: int = 8000
    vllm_gpu_memory_utilization: float = Field(0.3, gt=0, le=1)
    vllm_tensor_parallel_size: int = Field(1, ge=1)

    @model_validator(mode="after")
    def _check(self) -> GRPOStageConfig:
        if self.use_vllm and self.use_cpu:
            raise ValueError("use_vllm needs a GPU: set use_cpu: false")
        if self.num_generations < 2:
            raise ValueError("GRPO needs num_generations >= 2 (advantages are relative to the group)")
        return self
