"""Command lines that start a training stage on GPUs.

`launch_commands` turns a stage config into the processes to start, without starting
them (so they can be checked without a GPU):

- GRPO with `use_vllm: true, vllm_mode: server`: first `trl vllm-serve --model M ...` on
  `launch.vllm_gpus`, then `accelerate launch ... -m train.run grpo ...` on
  `launch.training_gpus` (TRL's trainer talks to the server at host:port);
- GRPO in `colocate` mode, and SFT: `accelerate launch ... -m train.run <stage> ...` only
  (vLLM shares the training GPUs, `vllm_gpu_memory_utilization` of their memory).

`train.run` is a plain entry point (no Prefect: every accelerate process runs it).
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field
from pathlib import Path

from train.config import GRPOStageConfig, SFTStageConfig
from train.sft import resolve_model


@dataclass
class Command:
    """One process to start: `env` (extra environment variables) and `argv`."""

    argv: list[str]
    env: dict[str, str] = field(default_factory=dict)
    role: str = "train"  # "vllm-server" or "train"

    def shell(self) -> str:
        prefix = " ".join(f"{k}={shlex.quote(v)}" for k, v in sorted(self.env.items()))
        return (prefix + " " if prefix else "") + shlex.join(self.argv)


def _gpus(ids: list[int]) -> dict[str, str]:
    return {"CUDA_VISIBLE_DEVICES": ",".join(str(i) for i in ids)} if ids else {}


def launch_commands(stage: str, cfg: SFTStageConfig | GRPOStageConfig, dataset: Path | str, out: Path | str,
                    config_file: Path | str | None = None) -> list[Command]:
    """The processes (in start order) that run `stage` on GPUs; see the module docstring."""
    if stage not in ("sft", "grpo"):
        raise ValueError(f"unknown stage {stage!r}; use sft or grpo")
    if stage == "grpo" and not isinstance(cfg, GRPOStageConfig):
        raise TypeError("grpo needs a GRPOStageConfig")
    if stage == "sft" and not isinstance(cfg, SFTStageConfig):
        raise TypeError("sft needs an SFTStageConfig")
    if cfg.use_cpu:
        raise ValueError(f"{stage}.use_cpu is true: a GPU launch needs use_cpu: false")
    launch = cfg.launch
    commands: list[Command] = []
    server = isinstance(cfg, GRPOStageConfig) and cfg.use_vllm and cfg.vllm_mode == "server"
    if server:
        assert isinstance(cfg, GRPOStageConfig)
        if not launch.vllm_gpus:
            raise ValueError("vllm_mode: server needs launch.vllm_gpus (the GPUs of `trl vllm-serve`)")
        if set(launch.vllm_gpus) & set(launch.training_gpus):
            raise ValueError("launch.vllm_gpus and launch.training_gpus overlap")
        if cfg.vllm_tensor_parallel_size > len(launch.vllm_gpus):
            raise ValueError("vllm_tensor_parallel_size exceeds the number of launch.vllm_gpus")
        commands.append(Command(role="vllm-server", env=_gpus(launch.vllm_gpus), argv=[
            "trl", "vllm-serve", "--model", resolve_model(cfg.model) if cfg.model != "embedded" else cfg.model,
            "--tensor_parallel_size", str(cfg.vllm_tensor_parallel_size),
            "--host", cfg.vllm_server_host, "--port", str(cfg.vllm_server_port),
            "--gpu_memory_utilization", str(cfg.vllm_gpu_memory_utilization),
            "--dtype", "bfloat16" if cfg.bf16 else "auto"]))
    if launch.training_gpus and launch.num_processes > len(launch.training_gpus):
        raise ValueError("launch.num_processes exceeds the number of launch.training_gpus")
    argv = ["accelerate", "launch", "--num_processes", str(launch.num_processes),
            "--mixed_precision", launch.mixed_precision]
    if launch.accelerate_config:
        argv += ["--config_file", launch.accelerate_config]
    argv += ["-m", "train.run", stage, "--dataset", str(dataset), "--out", str(out)]
    if config_file is not None:
        argv += ["--config", str(config_file)]
    commands.append(Command(argv=argv, env=_gpus(launch.training_gpus)))
    return commands


def main(argv: list[str] | None = None) -> list[Command]:
    """`python -m train.launch sft|grpo --config FILE --dataset PATH --out DIR`: print the lines."""
    import argparse

    from train.run import stage_config

    parser = argparse.ArgumentParser(prog="python -m train.launch", description="Print the GPU launch lines.")
    parser.add_argument("stage", choices=["sft", "grpo"])
    parser.add_argument("--config", required=True, type=Path)
    parser.add_argument("--dataset", required=True)
    parser.add_argument("--out", required=True)
    a = parser.parse_args(argv)
    commands = launch_commands(a.stage, stage_config(a.stage, a.config), a.dataset, a.out, a.config)
    for c in commands:
        print(("# start first, wait for it to listen:\n" if c.role == "vllm-server" else "") + c.shell())
    return commands


if __name__ == "__main__":
    main()
