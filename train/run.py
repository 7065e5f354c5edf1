"""`python -m train.run sft|grpo --dataset PATH --out DIR [--config FILE] [--max-steps N]`.

The entry point that `accelerate launch` starts in every process (see `train.launch`):
plain Python, no Prefect. `--config` is a run config YAML; only its `sft:` or `grpo:`
section is read (validated as `SFTStageConfig` / `GRPOStageConfig`).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import yaml

from train.config import GRPOStageConfig, SFTStageConfig


def stage_config(stage: str, config_file: Path | str | None,
                 max_steps: int | None = None) -> SFTStageConfig | GRPOStageConfig:
    """The `stage` section of a run config file (defaults when no file), validated."""
    data: dict[str, Any] = {}
    if config_file is not None:
        loaded = yaml.safe_load(Path(config_file).read_text()) or {}
        if not isinstance(loaded, dict):
            raise ValueError(f"{config_file}: a config file must hold a mapping at the top level")
        data = loaded.get(stage) or {}
    if max_steps is not None:
        data = {**data, "max_steps": max_steps}
    return SFTStageConfig.model_validate(data) if stage == "sft" else GRPOStageConfig.model_validate(data)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(prog="python -m train.run", description=__doc__.splitlines()[0])
    parser.add_argument("stage", choices=["sft", "grpo"])
    parser.add_argument("--dataset", required=True, type=Path)
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--config", type=Path)
    parser.add_argument("--max-steps", type=int)
    a = parser.parse_args(argv)
    cfg = stage_config(a.stage, a.config, a.max_steps)
    if a.stage == "sft":
        from train.sft import run_sft

        summary = run_sft(a.dataset, cfg, a.out)  # type: ignore[arg-type]
    else:
        from train.grpo import run_grpo

        summary = run_grpo(a.dataset, cfg, a.out)  # type: ignore[arg-type]
    print(json.dumps({k: summary[k] for k in ("stage", "steps", "final_model")}))
    return summary


if __name__ == "__main__":
    main()
