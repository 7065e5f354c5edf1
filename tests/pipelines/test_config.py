"""The run config (`pipelines.config`): a YAML file with `--set` overrides on top, sections
keeping their defaults, unknown settings refused."""

from __future__ import annotations

from pathlib import Path

import pytest

from pipelines.config import RunConfig, load_config


def test_config_yaml_and_overrides(tmp_path: Path) -> None:
    p = tmp_path / "c.yaml"
    p.write_text("synthesis:\n  n_tasks: 3\nrollout:\n  trials: 5\n")
    cfg = load_config(p, {"rollout.trials": 2})
    assert cfg.synthesis.n_tasks == 3 and cfg.rollout.trials == 2
    assert cfg.config_hash() != RunConfig().config_hash()
    # setting one field of a section keeps the section's other (factory) defaults
    sp = load_config(None, {"self_play.generator.max_completion_length": 7}).self_play.generator
    assert sp.max_completion_length == 7 and sp.max_steps == RunConfig().self_play.generator.max_steps == 1
    p.write_text("synthesis:\n  n_taks: 3\n")
    with pytest.raises(ValueError, match="n_taks"):
        load_config(p)
