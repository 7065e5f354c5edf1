"""The run configuration: one pydantic model composed of each layer's own config,
loadable from YAML. Its hash is the lineage's `config_hash`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field

from data.records import content_hash
from rollout.collector import RolloutConfig
from synthesis.base import SynthesisConfig
from train.config import GRPOStageConfig, SFTStageConfig


class RunConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = "airline-default"
    synthesis: SynthesisConfig = Field(default_factory=SynthesisConfig)
    rollout: RolloutConfig = Field(default_factory=RolloutConfig)
    reference_trials: int = 1  # gold trajectories per task from the verified reference path
    # Every configured verifier judges the tasks it applies to; the task's primary one
    # (verifiers.base.primary_verifier) decides curation.
    verifiers: list[str] = Field(default_factory=lambda: ["state_equivalence", "constraint_satisfaction"])
    curation: str = "outcome"
    shard_size: int = 4  # tasks per Prefect task
    sft: SFTStageConfig = Field(default_factory=SFTStageConfig)
    grpo: GRPOStageConfig = Field(default_factory=GRPOStageConfig)

    def config_hash(self) -> str:
        return content_hash(self.model_dump(mode="json"))


def load_config(path: Path | str | None, overrides: dict[str, Any] | None = None) -> RunConfig:
    """Read a YAML config (or the defaults) and apply dotted overrides like {"rollout.trials": 4}."""
    data: dict[str, Any] = {}
    if path is not None:
        text = Path(path).read_text()
        data = yaml.safe_load(text) or {}
        if not isinstance(data, dict):
            raise ValueError(f"{path}: a config file must hold a mapping at the top level")
    for dotted, value in (overrides or {}).items():
        node = data
        *parents, leaf = dotted.split(".")
        for p in parents:
            node = node.setdefault(p, {})
        node[leaf] = value
    return RunConfig.model_validate(data)
