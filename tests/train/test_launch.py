"""GPU launch lines (`train.launch`): the shipped GPU config gives a vLLM server line and an
`accelerate launch` line into `train.run`; bad GPU setups are refused."""

from __future__ import annotations

import pytest

from tests.paths import ROOT
from train.config import GRPOStageConfig, LaunchConfig, SFTStageConfig


def test_gpu_config_validates_and_produces_launch_lines() -> None:
    from pipelines.config import load_config
    from train.launch import launch_commands

    path = ROOT / "configs" / "train-gpu.yaml"
    cfg = load_config(path)
    assert cfg.grpo.use_vllm and not cfg.grpo.use_cpu and cfg.grpo.bf16 and cfg.grpo.model != "embedded"
    server, train = launch_commands("grpo", cfg.grpo, "out/releases/rl/V", "out/train/grpo-X", path)
    assert server.role == "vllm-server" and server.argv[:4] == ["trl", "vllm-serve", "--model", cfg.grpo.model]
    assert server.env["CUDA_VISIBLE_DEVICES"] == ",".join(map(str, cfg.grpo.launch.vllm_gpus))
    assert train.argv[:2] == ["accelerate", "launch"] and "--num_processes" in train.argv
    i = train.argv.index("-m")
    assert train.argv[i:i + 3] == ["-m", "train.run", "grpo"] and str(path) in train.argv
    assert str(cfg.grpo.vllm_server_port) in server.argv
    assert "CUDA_VISIBLE_DEVICES=" in train.shell() and train.shell().count("accelerate launch") == 1
    [sft] = launch_commands("sft", cfg.sft, "out/releases/sft/V", "out/train/sft-X", path)
    assert sft.argv[sft.argv.index("-m") + 2] == "sft" and "--mixed_precision" in sft.argv
    # the entry point reads the same file's section
    from train.run import stage_config

    assert stage_config("grpo", path, max_steps=3).model_dump() == cfg.grpo.model_copy(
        update={"max_steps": 3}).model_dump()


def test_launch_lines_refuse_bad_setups() -> None:
    from train.launch import launch_commands

    with pytest.raises(ValueError, match="use_cpu"):
        launch_commands("sft", SFTStageConfig(), "d", "o")
    with pytest.raises(ValueError, match="GPU"):
        GRPOStageConfig(use_vllm=True)
    server = dict(use_cpu=False, use_vllm=True, vllm_mode="server")
    with pytest.raises(ValueError, match="vllm_gpus"):
        launch_commands("grpo", GRPOStageConfig(**server), "d", "o")
    with pytest.raises(ValueError, match="overlap"):
        launch_commands("grpo", GRPOStageConfig(**server, launch=LaunchConfig(vllm_gpus=[0], training_gpus=[0])),
                        "d", "o")
    colocate = launch_commands("grpo", GRPOStageConfig(use_cpu=False, use_vllm=True), "d", "o")
    assert [c.role for c in colocate] == ["train"]
    with pytest.raises(ValueError, match="stage"):
        launch_commands("dpo", SFTStageConfig(use_cpu=False), "d", "o")
