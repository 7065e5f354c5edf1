"""The training entry point `python -m train.run` (`train.run`): a run config file's stage
section, validated, with `--max-steps` applied, handed to the stage's trainer."""

from __future__ import annotations

import json
import sys
import types
from pathlib import Path
from typing import Any

import pytest

from train.config import GRPOStageConfig, SFTStageConfig
from train.run import main, stage_config


def test_stage_config_reads_only_the_stages_section(tmp_path: Path) -> None:
    path = tmp_path / "run.yaml"
    path.write_text("sft:\n  max_steps: 7\n  learning_rate: 0.001\ngrpo:\n  num_generations: 4\n"
                    "synthesis:\n  n_tasks: 2\n")
    sft = stage_config("sft", path)
    assert isinstance(sft, SFTStageConfig) and sft.max_steps == 7 and sft.learning_rate == 0.001
    grpo = stage_config("grpo", path, max_steps=3)
    assert isinstance(grpo, GRPOStageConfig) and grpo.num_generations == 4 and grpo.max_steps == 3
    assert stage_config("sft", None).model_dump() == SFTStageConfig().model_dump()
    (tmp_path / "empty.yaml").write_text("")
    assert stage_config("grpo", tmp_path / "empty.yaml", max_steps=2).max_steps == 2
    (tmp_path / "list.yaml").write_text("- sft\n")
    with pytest.raises(ValueError, match="mapping"):
        stage_config("sft", tmp_path / "list.yaml")


def test_main_hands_the_config_to_the_stages_trainer(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    seen: list[tuple[Path, Any, Path]] = []

    def run_sft(dataset: Path, cfg: Any, out: Path) -> dict[str, Any]:
        seen.append((dataset, cfg, out))
        return {"stage": "sft", "steps": cfg.max_steps, "final_model": str(out / "final"), "losses": []}

    fake = types.ModuleType("train.sft")
    fake.run_sft = run_sft  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "train.sft", fake)  # no TRL: the trainer is this stand-in
    summary = main(["sft", "--dataset", str(tmp_path / "rel"), "--out", str(tmp_path / "o"), "--max-steps", "5"])
    [(dataset, cfg, out)] = seen
    assert dataset == tmp_path / "rel" and out == tmp_path / "o" and cfg.max_steps == 5
    assert summary["losses"] == []
    assert json.loads(capsys.readouterr().out) == {"stage": "sft", "steps": 5, "final_model": str(tmp_path / "o" / "final")}
    with pytest.raises(SystemExit):
        main(["dpo", "--dataset", "d", "--out", "o"])
