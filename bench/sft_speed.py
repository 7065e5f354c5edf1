"""SFT seconds per step on the embedded SmolLM2-135M, earlier settings against the defaults,
on the same released rows in the same invocation (docs/training.md, "SFT speed").

The rows come from the tiny scripted pipeline run the training tests use (8 airline tasks,
scripted policy with noise 0.6, 3 trials; `sft` release: ~6 train rows of 3,000-3,800
tokens, ~2,400 of them before the first assistant turn) unless `--dataset` names a release.
Each arm runs in its own process (so its peak memory is its own) and trains `--steps`
optimizer steps of 2 rows each on the `train` split; the first step is warm-up, the
s/step figure is the mean of the others. Arms run interleaved (`--rounds`, order reversed
every other round).

Arms (the `sft:` settings that differ; all bf16 autocast, assistant-only loss):

- `baseline`: the first defaults: batch 2, no accumulation, gradient checkpointing, LM head
  over every position;
- `previous`: the defaults before the shared head: batch 1 × accumulation 2, no
  checkpointing, LM head only at the loss positions;
- `new`: `SFTStageConfig()` now: `previous` with a step's 2 rows in one batch that runs the
  head they share once (`train.shared_head`), the rows one at a time after it;
- full mode also: `no_checkpointing`, `batch1_accum2`, `loss_positions_head` (each one
  change on top of `baseline`) and `new_lora` (`new` with `lora: true`, r 8).

Per arm: s/step, tokens per step and per second, where a step's time goes (forward with the
loss, backward, optimizer, collation; measured around `compute_loss`,
`accelerator.backward`, the optimizer callbacks and the data collator), trainer build time
(templating, tokenisation and the checks), peak RSS.

    .venv/bin/python bench/sft_speed.py [--quick] [--dataset out/releases/sft/<V>] [--steps N] [--rounds N]

`--quick`: previous and new, 2 steps each, one round (about 5 minutes on 2 cores). The last
line printed is one JSON object of the figures.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

OLD_DEFAULTS: dict[str, Any] = {"per_device_train_batch_size": 2, "gradient_accumulation_steps": 1,
                                "gradient_checkpointing": True, "lm_head_loss_positions_only": False,
                                "shared_head": False}
ARMS: dict[str, dict[str, Any]] = {
    "baseline": OLD_DEFAULTS,
    "previous": {"per_device_train_batch_size": 1, "gradient_accumulation_steps": 2, "shared_head": False},
    "new": {},
    "no_checkpointing": {**OLD_DEFAULTS, "gradient_checkpointing": False},
    "batch1_accum2": {**OLD_DEFAULTS, "per_device_train_batch_size": 1, "gradient_accumulation_steps": 2},
    "loss_positions_head": {**OLD_DEFAULTS, "lm_head_loss_positions_only": True},
    "new_lora": {"lora": True},
}
QUICK_ARMS = ("previous", "new")


def make_release(root: Path) -> Path:
    """The `sft` release of the training tests' scripted pipeline run, written under `root`."""
    from pipelines import stages
    from pipelines.config import load_config

    cfg = load_config(None, {"rollout.model.kind": "scripted", "rollout.model.noise": 0.6,
                             "rollout.trials": 3, "synthesis.n_tasks": 8})
    return Path(stages.release(cfg, root, stages.curated_run(cfg, root)[2])["sft"])


def run_arm(arm: str, dataset: Path, steps: int) -> dict[str, Any]:
    """Train `steps` steps with the arm's settings (in this process) and time them."""
    import torch
    from transformers import TrainerCallback

    from train.config import SFTStageConfig
    from train.sft import build_sft_trainer, hub_offline

    cfg = SFTStageConfig(max_steps=steps, eval_split="none", **ARMS[arm])
    timers: dict[str, float] = {"forward": 0.0, "backward": 0.0, "optimizer": 0.0, "collate": 0.0}
    marks: dict[str, float] = {}
    step_s: list[float] = []
    step_parts: list[dict[str, float]] = []

    def timed(name: str, fn: Any) -> Any:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            t = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                timers[name] += time.perf_counter() - t
        return wrapper

    class StepClock(TrainerCallback):
        def on_step_begin(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
            marks["step"] = time.perf_counter()
            for k in timers:
                timers[k] = 0.0

        def on_pre_optimizer_step(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
            marks["opt"] = time.perf_counter()

        def on_optimizer_step(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
            timers["optimizer"] += time.perf_counter() - marks["opt"]

        def on_step_end(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
            step_s.append(time.perf_counter() - marks["step"])
            step_parts.append(dict(timers))

    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp, hub_offline():
        trainer, facts = build_sft_trainer(dataset, cfg, tmp, callbacks=[StepClock()])
        built_s = time.perf_counter() - started
        trainer.compute_loss = timed("forward", trainer.compute_loss)
        trainer.accelerator.backward = timed("backward", trainer.accelerator.backward)
        trainer.data_collator = timed("collate", trainer.data_collator)
        trainer.train()
    measured = step_s[1:] or step_s
    parts = {k: round(statistics.mean(p[k] for p in step_parts[1:] or step_parts), 2) for k in timers}
    tokens = facts["train_tokens"]
    rows_per_step = cfg.per_device_train_batch_size * cfg.gradient_accumulation_steps
    tokens_per_step = tokens["tokens"] / tokens["rows"] * rows_per_step
    s_per_step = statistics.mean(measured)
    return {
        "arm": arm, "settings": ARMS[arm], "steps": len(step_s), "rows_per_step": rows_per_step,
        "s_per_step": round(s_per_step, 2), "step_s": [round(s, 2) for s in step_s],
        "breakdown_s": {**parts, "other": round(s_per_step - sum(parts.values()), 2)},
        "tokens_per_step": round(tokens_per_step), "tokens_per_s": round(tokens_per_step / s_per_step, 1),
        "build_s": round(built_s, 2), "peak_rss_gb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20, 2),
        "torch_threads": torch.get_num_threads(),
    }


def row_figures(dataset: Path) -> dict[str, Any]:
    """Tokens per train row (before the first assistant turn, in total, in the loss)."""
    from rollout.embedded import hub_offline
    from train.data import load_release, to_trl_sft
    from train.release_card import row_lengths
    from train.sft import load_tokenizer, resolve_model

    with hub_offline():
        tok = load_tokenizer(resolve_model("embedded"))
    ds = to_trl_sft(load_release(dataset, "train"), tok)
    pairs = [row_lengths(tok, row, "sft") for row in ds]
    loss = []
    for row in ds:
        out = tok.apply_chat_template(row["messages"], tools=row["tools"], tokenize=True, return_dict=True,
                                      return_assistant_tokens_mask=True)
        loss.append(sum(out["assistant_masks"]))
    totals = [t for _, t in pairs]
    return {"rows": len(pairs), "tokens_mean": round(statistics.mean(totals)), "tokens_min": min(totals),
            "tokens_max": max(totals), "before_first_assistant_mean": round(statistics.mean(b for b, _ in pairs)),
            "loss_tokens_mean": round(statistics.mean(loss)),
            "loss_share": round(sum(loss) / sum(totals), 3)}


def child(arm: str, dataset: Path, steps: int) -> dict[str, Any]:
    """`run_arm` in a fresh process (its own peak memory, no state from other arms)."""
    proc = subprocess.run([sys.executable, __file__, "--arm", arm, "--dataset", str(dataset), "--steps", str(steps)],
                          capture_output=True, text=True, check=False, env={**os.environ, "PYTHONWARNINGS": "ignore"})
    if proc.returncode != 0:
        raise RuntimeError(f"arm {arm} failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="previous and new, 2 steps, 1 round")
    ap.add_argument("--dataset", type=Path, help="an sft release (default: made by the scripted pipeline)")
    ap.add_argument("--steps", type=int, help="optimizer steps per arm (default 2 quick, 3 full)")
    ap.add_argument("--rounds", type=int, help="interleaved rounds (default 1 quick, 2 full)")
    ap.add_argument("--arms", nargs="+", choices=sorted(ARMS), help="arms to run (default: by mode)")
    ap.add_argument("--arm", choices=sorted(ARMS), help=argparse.SUPPRESS)  # child process
    args = ap.parse_args()
    steps = args.steps or (2 if args.quick else 3)
    if args.arm:
        print(json.dumps(run_arm(args.arm, args.dataset, steps)))
        return
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        dataset = args.dataset or make_release(Path(tmp))
        rows = row_figures(dataset)
        arms = args.arms or (list(QUICK_ARMS) if args.quick else list(ARMS))
        runs: dict[str, list[dict[str, Any]]] = {a: [] for a in arms}
        for r in range(args.rounds or (1 if args.quick else 2)):
            for arm in arms if r % 2 == 0 else arms[::-1]:
                res = child(arm, dataset, steps)
                runs[arm].append(res)
                print(f"round {r + 1} {arm}: {res['s_per_step']} s/step {res['breakdown_s']} "
                      f"peak {res['peak_rss_gb']} GB", flush=True)
    arms_out = {}
    for arm, results in runs.items():
        arms_out[arm] = {**results[-1], "s_per_step": round(statistics.mean(x["s_per_step"] for x in results), 2),
                         "s_per_step_rounds": [x["s_per_step"] for x in results]}
    figures: dict[str, Any] = {"bench": "sft_speed", "quick": args.quick, "model": "embedded SmolLM2-135M-Instruct",
                               "cpu_count": os.cpu_count(), "steps_per_arm": steps, "rows": rows, "arms": arms_out,
                               "wall_s": round(time.perf_counter() - started, 1)}
    if "baseline" in arms_out and "new" in arms_out:
        figures["speedup_new_vs_baseline"] = round(arms_out["baseline"]["s_per_step"] / arms_out["new"]["s_per_step"], 2)
    if "previous" in arms_out and "new" in arms_out:
        figures["speedup_new_vs_previous"] = round(arms_out["previous"]["s_per_step"] / arms_out["new"]["s_per_step"], 2)
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
