"""Does a release teach? Three curations of the same rollouts, the embedded model trained on
each at an equal number of rows and steps, and base and trained models judged on held-out
tasks.

    .venv/bin/python bench/train_value.py [--quick] [--out DIR] [--seed N]

1. One run through the real flow (`pipelines.flows.run_flow`): logic-driven tasks in two
   worlds (airline, retail), split by group with `--test-fraction` held out; the noisy
   scripted policy rolls out `--trials` episodes per task beside each task's reference
   dialogue; every trajectory is verified; outcome curation releases the sft rows. The same
   run again with topology curation (TopoCurate) reuses the cached rollouts and verdicts.
2. Arms, cut from those releases (`train.value.arm_dataset`), each with the same number of
   training rows (seeded order): the rows the steps take (steps × rows a step), or the
   smallest arm's count when that is fewer, so each arm is trained on once:
   - `reference`: the reference dialogues only;
   - `outcome`: outcome curation of reference + policy rollouts (the run's `sft` and
     `sft_recovery` rows: policy rollouts that pass reach training as recoveries, their
     failed turns carrying no loss);
   - `topology`: topology curation of the same rollouts (its `sft` and `sft_recovery`).
3. The embedded SmolLM2-135M is trained on each arm with the same SFT settings and steps
   (`--steps`, `--lr`; rows a step: the config's batch × accumulation), so each arm sees
   the same number of rows; the tokens each arm trained on are reported. `max_length` is
   set to the arms' longest row (`train.sft.fitted_max_length`): a truncated row would lose its
   last turns, which the held-out dialogues are scored on. `--quick` is a
   smoke run of every phase: 2 steps move no greedy pick of a 135M model.
4. The base model and each trained model on the held-out tasks (`train.value.evaluate_pair`;
   `--eval-tasks` and `--dialogues` take the two worlds' tasks in turn):
   next-action accuracy, teacher-forced, on their reference dialogues, and the episode pass
   rate with the scripted user and the composite verdict (greedy), each with a bootstrap
   95% interval and the paired difference to the base. With `--tau2-tasks N`, the base and
   the best arm also play N of τ²-bench's own test tasks (`--tau2` domain), judged by τ²'s
   evaluator (`train.value.benchmark_pair`): tasks no template of ours wrote.

A rerun with the same `--out` resumes: the run flow's stages come from its cache, and an
arm's SFT model and its evaluation are reused when their inputs (the arm's rows, the stage
config, the evaluation settings and held-out ids) are the same, so `--grpo-steps N` after
a full run only adds the GRPO phase. The release's config includes the training defaults,
so a rerun after they change publishes the same rows as a new version; the arms and their
evaluations still count as the same (their rows and held-out ids are).

The last line printed is one JSON object: the arms' figures, the best arm's gains over the
base with intervals, topology − outcome, and the wall time of each phase.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

# Measured on 2 quiet cores (stop 46): an SFT step of 2 whole rows ~40-55 s; a held-out
# dialogue's next-action ~15 s once its world's head is cached (the first of a world ~35 s);
# an episode of 12 turns ~50 s for a trained model and ~110 s for the base (it writes every
# turn to the 256-token limit), 8 in flight. --quick with 4 dialogues and 4-turn episodes
# took 1,156 s (data 29, train 284, eval 843); with one dialogue per world and 3-turn
# episodes, 902 s (eval 603, of it 49-147 s for two episodes: turns written to the 256-token
# limit), so --quick also gives an episode turn 128 tokens: 865 s (stop 47, beside short
# tests: data 29, train 376, eval 457; 14 min 25 s wall). The full run's 40 episodes a model
# are most of its time: about 3 hours of episodes for the base and three arms, beside ~70
# minutes of SFT (3 arms x 30 steps), 4-5 hours in all on this CPU.
QUICK = {"n_tasks": 16, "steps": 2, "eval_tasks": 2, "dialogues": 2, "max_turns": 3, "tau2_tasks": 0,
         "max_tokens": 128}
# max_turns: model calls an episode; the held-out reference dialogues make 5-9, so 12 leaves room.
# max_tokens unset: train.evaluate.EVAL_MAX_TOKENS (256), what every other evaluation uses.
# steps: 30 of 2 rows, 60 rows an arm: at 24 rows (12 steps) every arm scored below the base on
# next actions, at 60 each cleared +30 points (docs/training.md).
FULL = {"n_tasks": 60, "steps": 30, "eval_tasks": 40, "dialogues": 40, "max_turns": 12, "tau2_tasks": 10}


def run_config(n_tasks: int, seed: int, trials: int, test_fraction: float, curation: str) -> dict[str, Any]:
    """The run: `n_tasks` logic-driven tasks in each of airline and retail, the noisy
    scripted policy, `curation` deciding the sft rows."""
    def synthesis(world: str) -> dict[str, Any]:
        return {"world": world, "method": "logic_driven", "n_tasks": n_tasks, "seed": seed,
                "test_fraction": test_fraction}

    return {"name": f"train-value-{curation}", "synthesis": synthesis("airline"), "synthesis_mix": [synthesis("retail")],
            "rollout": {"model": {"kind": "scripted", "noise": 0.4}, "trials": trials}, "curation": curation,
            "report": False, "shard_size": 8}


def data_phase(n_tasks: int, seed: int, trials: int, test_fraction: float, out: Path) -> dict[str, dict[str, Path]]:
    """The run with each curation, through the real flow: its releases by curation. Each run
    has its own folder (its own `releases/`, so a rerun finds its release unchanged and
    keeps its version) and both share one shard cache (the topology run reuses the outcome
    run's rollouts and verdicts)."""
    from pipelines.flows import execute, run_flow

    published = {}
    for curation in ("outcome", "topology"):
        cfg = {**run_config(n_tasks, seed, trials, test_fraction, curation), "cache_dir": str((out / "cache").resolve())}
        paths = execute(run_flow, cfg, str(out / f"run-{curation}"))["releases"]
        published[curation] = {name: Path(paths[name]) for name in ("sft", "sft_recovery", "rl")}
    return published


def release_rows(*releases: Path) -> dict[str, int]:
    """Training rows of a run's sft releases (its `sft` and `sft_recovery`), reference
    dialogues among them, and held-out rows."""
    from data import store

    splits, refs = [], []
    for release in releases:
        table = store.read_table(release)
        splits += table.column("split").to_pylist()
        refs += table.column("reference").to_pylist()
    train = [r for s, r in zip(splits, refs, strict=True) if s == "train"]
    return {"train": len(train), "train_reference": sum(train), "train_policy": len(train) - sum(train),
            "held_out": len(splits) - len(train)}


def arm_lengths(arm: Path) -> list[int]:
    """Tokens of each of the arm's training rows as the embedded template renders them."""
    from data import store
    from train.data import load_release
    from train.release_card import embedded_tokenizer, rows_lengths

    kind = store.read_manifest(arm).kind
    return [total for _, total in rows_lengths(embedded_tokenizer(), list(load_release(arm, "train")), kind)]


def trained_before(run_dir: Path, arm: Path, stage: Any) -> str | None:
    """The final model of an earlier SFT run in `run_dir` on the same rows (the arm's files'
    checksums) with the same stage config, or None: a rerun of the bench resumes."""
    from data import store
    from train.lineage import read_run, release_ref

    try:
        run = read_run(run_dir)
    except FileNotFoundError:
        return None
    same = (run.get("status") == "done" and run.get("final_model")
            and run["release"]["sha256"] == release_ref(arm, store.read_manifest(arm))["sha256"]
            and run["config"] == json.loads(json.dumps(stage.model_dump())))
    return run["final_model"] if same else None


def run_grpo_phase(steps: int, lr: float, sft_release: Path, rl: Path, models: dict[str, str], results: dict[str, Any],
                   settings: dict[str, Any], out: Path, base_result: dict[str, Any] | None,
                   phases: dict[str, float]) -> dict[str, Any] | None:
    """GRPO from the best arm's model (by episode pass rate, then next-action accuracy) on
    `rl` (TopoCurate's rl release), `steps` steps with the verdict as the reward; the
    share of groups whose rewards varied (the ones that carry a gradient) and the held-out
    figures after it."""
    if steps <= 0:
        return None
    from pipelines.config import RunConfig
    from train.grpo import run_grpo
    from train.value import evaluate_pair

    t = time.monotonic()
    best = max(results, key=lambda k: (results[k]["trained"]["episodes"]["pass_rate"],
                                       results[k]["trained"]["next_action"]["accuracy"]))
    stage = RunConfig().grpo.model_copy(update={"model": models[best], "max_steps": steps, "learning_rate": lr})
    summary = run_grpo(rl, stage, out / "train" / f"grpo-{best}")
    lines = [json.loads(x) for x in (out / "train" / f"grpo-{best}" / "metrics.jsonl").read_text().splitlines()]
    zero = [x["frac_reward_zero_std"] for x in lines if "frac_reward_zero_std" in x]
    after = evaluate_pair(sft_release, summary["final_model"], base_result=base_result, **settings)
    phases["grpo_s"] = round(time.monotonic() - t, 1)
    return {"from_arm": best, "steps": summary["steps"], "learning_rate": lr, "rl_release": str(rl),
            "groups_with_reward_variance": round(1 - sum(zero) / len(zero), 4) if zero else None,
            "rewards": [round(r["reward"], 4) for r in summary["rewards"]],
            "pass_rate": after["trained"]["episodes"]["pass_rate"],
            "pass_rate_vs_sft": round(after["trained"]["episodes"]["pass_rate"]
                                      - results[best]["trained"]["episodes"]["pass_rate"], 4),
            "delta_pass_rate_vs_base": after["delta"]["pass_rate"],
            "next_action": after["trained"]["next_action"]["accuracy"]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="fewer tasks, steps and evaluated episodes (≤ 15 min)")
    ap.add_argument("--out", type=Path, default=Path("out/bench-train-value"))
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--trials", type=int, default=4)
    ap.add_argument("--test-fraction", type=float, default=0.4)
    ap.add_argument("--n-tasks", type=int, help="tasks per world")
    ap.add_argument("--steps", type=int, help="SFT steps per arm")
    ap.add_argument("--eval-tasks", type=int, help="held-out tasks played as episodes")
    ap.add_argument("--dialogues", type=int, help="held-out reference dialogues scored for next-action accuracy")
    ap.add_argument("--max-turns", type=int, help="model calls per evaluated episode")
    ap.add_argument("--max-tokens", type=int, help="tokens an evaluated episode turn may take (greedy)")
    ap.add_argument("--lr", type=float, default=1e-4, help="SFT learning rate of every arm")
    ap.add_argument("--grpo-steps", type=int, default=0,
                    help="then GRPO from the best arm's model on the rl release for N steps, judged again (0: none)")
    ap.add_argument("--tau2", default="airline", help="τ²-bench domain of --tau2-tasks")
    ap.add_argument("--tau2-tasks", type=int,
                    help="also play N of τ²-bench's own test tasks with the base and the best arm (0: none; full: 10)")
    ap.add_argument("--grpo-lr", type=float, default=1e-5, help="GRPO learning rate")
    args = ap.parse_args()
    size = dict(QUICK if args.quick else FULL)
    for key in ("n_tasks", "steps", "eval_tasks", "dialogues", "max_turns", "tau2_tasks", "max_tokens"):
        if getattr(args, key) is not None:
            size[key] = getattr(args, key)

    from pipelines.config import RunConfig
    from train.evaluate import EVAL_MAX_TOKENS, release_tasks
    from train.sft import fitted_max_length, model_context, resolve_model, run_sft
    from train.value import (
        arm_dataset,
        benchmark_pair,
        episode_rates,
        evaluate_pair,
        evaluation_before,
        pair_before,
        paired_difference,
        turn_rates,
    )
    size.setdefault("max_tokens", EVAL_MAX_TOKENS)

    out = args.out
    phases: dict[str, float] = {}
    started = time.monotonic()
    published = data_phase(size["n_tasks"], args.seed, args.trials, args.test_fraction, out)
    releases = {k: v["sft"] for k, v in published.items()}
    recoveries = {k: v["sft_recovery"] for k, v in published.items()}
    rl_releases = {k: v["rl"] for k, v in published.items()}
    phases["data_s"] = round(time.monotonic() - started, 1)
    rows = {k: release_rows(releases[k], recoveries[k]) for k in releases}
    stage = RunConfig().sft.model_copy(update={"max_steps": size["steps"], "eval_steps": None, "learning_rate": args.lr})
    per_step = stage.per_device_train_batch_size * stage.gradient_accumulation_steps
    # every arm is exactly the rows it trains on, once: the steps' rows, or fewer when a release is short
    n_rows = min(rows["outcome"]["train_reference"], rows["outcome"]["train"], rows["topology"]["train"],
                 size["steps"] * per_step)
    if n_rows < 2:
        raise SystemExit(f"too few training rows for the arms: {rows}")

    t = time.monotonic()
    arms_root = out / "arms"
    arms = {
        "reference": arm_dataset(releases["outcome"], arms_root, "reference", n_rows, args.seed,
                                 keep=lambda r: bool(r["reference"])),
        "outcome": arm_dataset([releases["outcome"], recoveries["outcome"]], arms_root, "outcome", n_rows, args.seed),
        "topology": arm_dataset([releases["topology"], recoveries["topology"]], arms_root, "topology", n_rows,
                                args.seed),
    }
    lengths = {name: arm_lengths(path) for name, path in arms.items()}  # whole rows, tokenized once
    # one max_length for every arm, cutting no row of any (what the stage's unset default fits per arm)
    longest = fitted_max_length(max(n for ns in lengths.values() for n in ns), model_context(resolve_model(stage.model)))
    stage = stage.model_copy(update={"max_length": longest})
    models, train_s = {}, {}
    for name, path in arms.items():
        run_dir = out / "train" / f"sft-{name}"
        models[name] = trained_before(run_dir, path, stage) or run_sft(path, stage, run_dir)["final_model"]
        summary = json.loads((run_dir / "train_summary.json").read_text())  # also a reused run's
        train_s[name] = summary["wall_s"]
    phases["train_s"] = round(time.monotonic() - t, 1)

    t = time.monotonic()
    settings = {"max_tasks": size["eval_tasks"], "max_turns": size["max_turns"], "max_dialogues": size["dialogues"],
                "max_tokens": size["max_tokens"]}
    base_result = None
    results = {}
    for name, model in models.items():
        r = (evaluation_before(releases["outcome"], model, "embedded", settings)
             or evaluate_pair(releases["outcome"], model, base_result=base_result, **settings))
        base_result = r["base"]
        results[name] = r
    phases["eval_s"] = round(time.monotonic() - t, 1)

    tau2 = None
    if size["tau2_tasks"] > 0:  # τ²-bench's own test tasks: held out from everything trajforge wrote
        t = time.monotonic()
        best_arm = max(results, key=lambda k: (results[k]["trained"]["next_action"]["accuracy"],
                                               results[k]["trained"]["episodes"]["pass_rate"]))
        name, tau2_settings = f"tau2:{args.tau2}", {"max_tasks": size["tau2_tasks"], "max_turns": size["max_turns"]}
        pair = (pair_before(name, models[best_arm], "embedded", "test", **tau2_settings)
                or benchmark_pair(name, models[best_arm], **tau2_settings))
        tau2 = {"benchmark": pair["benchmark"], "arm": best_arm, "tasks": pair["tasks"],
                "base_pass_rate": pair["base"]["pass_rate"], "base_ci95": pair["base"]["interval"]["ci95"],
                "trained_pass_rate": pair["trained"]["pass_rate"], "trained_ci95": pair["trained"]["interval"]["ci95"],
                "base_mean_reward": pair["base"]["mean_reward"], "trained_mean_reward": pair["trained"]["mean_reward"],
                "delta": pair["delta"]}
        phases["tau2_s"] = round(time.monotonic() - t, 1)

    grpo = run_grpo_phase(args.grpo_steps, args.grpo_lr, releases["outcome"], rl_releases["topology"], models, results, settings,
                          out, base_result, phases)

    def figures(r: dict[str, Any]) -> dict[str, Any]:
        tr = r["trained"]
        return {"next_action": tr["next_action"]["accuracy"], "next_action_ci95": tr["next_action"]["interval"]["ci95"],
                "call_accuracy": tr["next_action"]["call_accuracy"], "reply_accuracy": tr["next_action"]["reply_accuracy"],
                "pass_rate": tr["episodes"]["pass_rate"], "pass_rate_ci95": tr["episodes"]["interval"]["ci95"],
                "delta_next_action": r["delta"]["next_action"], "delta_pass_rate": r["delta"]["pass_rate"]}

    arm_figures = {name: {"rows": n_rows, "steps": size["steps"], "tokens": sum(lengths[name]),
                          "train_s": train_s[name], **figures(results[name])} for name in arms}
    base = base_result or {}
    best = max(arm_figures, key=lambda k: (arm_figures[k]["next_action"], arm_figures[k]["pass_rate"]))
    topo, outc = results["topology"]["trained"], results["outcome"]["trained"]
    topo_vs_outcome = {  # paired over the same held-out tasks
        "next_action": paired_difference(turn_rates(outc["next_action"]), turn_rates(topo["next_action"])),
        "pass_rate": paired_difference(episode_rates(outc["episodes"]), episode_rates(topo["episodes"]))}
    print(json.dumps({
        "bench": "train_value", "quick": args.quick, "seed": args.seed, "size": size,
        "held_out_tasks": len(release_tasks(releases["outcome"], "test")),
        "evaluated": {k: v for k, v in results["reference"].items() if k in ("tasks", "dialogues")},
        "release_rows": rows,
        "base": {"next_action": base["next_action"]["accuracy"], "next_action_ci95": base["next_action"]["interval"]["ci95"],
                 "call_accuracy": base["next_action"]["call_accuracy"],
                 "reply_accuracy": base["next_action"]["reply_accuracy"],
                 "pass_rate": base["episodes"]["pass_rate"], "pass_rate_ci95": base["episodes"]["interval"]["ci95"]},
        "arms": arm_figures, "best_arm": best,
        "best_vs_base": {"next_action_points": round(100 * arm_figures[best]["delta_next_action"]["mean"], 1),
                         "next_action_ci95": arm_figures[best]["delta_next_action"]["ci95"],
                         "pass_rate_points": round(100 * arm_figures[best]["delta_pass_rate"]["mean"], 1),
                         "pass_rate_ci95": arm_figures[best]["delta_pass_rate"]["ci95"]},
        "topology_minus_outcome": topo_vs_outcome, "tau2": tau2, "grpo": grpo,
        "phases": phases, "wall_s": round(time.monotonic() - started, 1),
    }))


if __name__ == "__main__":
    main()
