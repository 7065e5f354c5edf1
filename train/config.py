"""Configs of the training stages (CPU smoke defaults; see configs/ for a GPU run)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class SFTStageConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    model: str = "embedded"  # "embedded" (the prepared SmolLM2 folder) or a model folder/name
    max_steps: int = 2
    per_device_train_batch_size: int = 2
    gradient_accumulation_steps: int = 1
    learning_rate: float = 2e-5
    max_length: int = 4096
    assistant_only_loss: bool = True
    packing: bool = False
    lora: bool = False
    lora_r: int = 8
    eval_split: str = "test"
    use_cpu: bool = True
    bf16: bool = True  # mixed precision (fp32 weights, bf16 autocast): ~2.3x faster than fp32 here
    gradient_checkpointing: bool = True  # TRL's default: less memory, ~30% more time
    seed: int = 0
    extra: dict = Field(default_factory=dict)  # passed through to SFTConfig


class GRPOStageConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    model: str = "embedded"
    max_steps: int = 2
    per_device_train_batch_size: int = 2
    num_generations: int = 2
    max_completion_length: int = 48
    learning_rate: float = 1e-6
    temperature: float = 1.0
    beta: float = 0.0
    use_cpu: bool = True
    bf16: bool = True  # mixed precision (fp32 weights, bf16 autocast): ~2.3x faster than fp32 here
    gradient_checkpointing: bool = True  # TRL's default: less memory, ~30% more time
    seed: int = 0
    extra: dict = Field(default_factory=dict)  # passed through to GRPOConfig
