"""Does training on a release teach? Base and trained model judged side by side on the
release's held-out tasks, each figure with a bootstrap 95% interval.

Two evaluations (`evaluate_pair`):
- **next-action accuracy**, teacher-forced (`train.next_action`), on the reference
  dialogues of the held-out tasks (the `reference` trajectories of the `trajectories`
  dataset in the release's lineage);
- **episode pass rate**: each model plays the held-out tasks with the scripted user, greedy,
  judged by the composite verdict (`train.evaluate.evaluate_model`).

Intervals resample tasks (a task's turns or trials stay together); the difference trained −
base is a paired bootstrap over the same tasks. The result is written beside the run that
made the model (`eval-<release version>.json`) and the card of the release the run trained
on (and of the release it was cut from, for an arm) lists it (`train.lineage`).

`benchmark_pair` judges both on a benchmark's own tasks instead (τ²-bench's, by τ²'s
evaluator): the held-out tasks no template of ours wrote.

`arm_dataset` cuts an arm from an sft release: rows chosen by a rule (reference dialogues
only, or all), at most `rows` of them in a seeded order, committed as its own dataset whose
lineage names the release.
"""

from __future__ import annotations

import hashlib
import json
import random
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from data import store
from train.evaluate import EVAL_MAX_TOKENS
from train.next_action import Dialogue, next_action_accuracy

BOOTSTRAP_SAMPLES = 2000


def bootstrap_interval(values: Sequence[float], samples: int = BOOTSTRAP_SAMPLES, seed: int = 0,
                       level: float = 0.95) -> tuple[float, float]:
    """The percentile bootstrap interval of the mean of `values`."""
    if not values:
        raise ValueError("no values to bootstrap")
    rng = random.Random(seed)
    n = len(values)
    means = sorted(sum(values[rng.randrange(n)] for _ in range(n)) / n for _ in range(samples))
    lo = means[int((1 - level) / 2 * samples)]
    hi = means[min(samples - 1, int((1 + level) / 2 * samples))]
    return round(lo, 4), round(hi, 4)


def paired_difference(base: dict[str, float], trained: dict[str, float], seed: int = 0) -> dict[str, Any]:
    """Mean of trained − base over the tasks both have, with its paired bootstrap interval."""
    keys = sorted(set(base) & set(trained))
    if not keys:
        raise ValueError("no task was evaluated for both models")
    diffs = [trained[k] - base[k] for k in keys]
    lo, hi = bootstrap_interval(diffs, seed=seed)
    return {"mean": round(sum(diffs) / len(diffs), 4), "ci95": [lo, hi], "tasks": len(keys),
            "excludes_zero": lo > 0 or hi < 0}


def with_interval(per_task: dict[str, float], seed: int = 0) -> dict[str, Any]:
    """The mean over tasks of a per-task figure, with its bootstrap interval."""
    values = [per_task[k] for k in sorted(per_task)]
    return {"mean": round(sum(values) / len(values), 4), "ci95": list(bootstrap_interval(values, seed=seed)),
            "tasks": len(values)}


# -- what is held out --------------------------------------------------------------------------

def trajectories_dataset(release: Path) -> Path:
    from train.evaluate import _lineage_datasets

    for parent in _lineage_datasets(release, depth=4):
        if store.read_manifest(parent, verify=False).kind == "trajectories":
            return parent
    raise store.DatasetError(f"{release}: no trajectories dataset in its lineage (needed for reference dialogues)")


def heldout_dialogues(release: Path | str, task_ids: Sequence[str], split: str = "test") -> list[Dialogue]:
    """The reference dialogues of `task_ids` (one per task), in `task_ids`' order: an sft
    release's own `split` rows that are reference dialogues (what training renders), else
    the reference trajectories of the trajectories dataset in its lineage."""
    from train.data import decode_tools, is_sft_kind

    wanted = set(task_ids)
    found: dict[str, Dialogue] = {}
    if is_sft_kind(store.read_manifest(release, verify=False).kind):
        for row in store.read_table(release).to_pylist():
            if row["reference"] and row["split"] == split and row["task_id"] in wanted:
                found.setdefault(row["task_id"], Dialogue(row["task_id"], _plain(row["messages"]),
                                                          decode_tools(row["tools"])))
    else:
        for traj in store.iter_records(trajectories_dataset(Path(release)), "trajectories"):
            if traj.reference and traj.task_id in wanted and traj.task_id not in found:
                found[traj.task_id] = Dialogue(traj.task_id, traj.messages, traj.tools)
    return [found[t] for t in task_ids if t in found]


def _plain(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Release messages as plain OpenAI messages (no null fields, arguments as objects)."""
    from train.data import clean_messages

    return clean_messages(messages, decode_arguments=True)


# -- base against trained ---------------------------------------------------------------------

def episode_rates(result: dict[str, Any]) -> dict[str, float]:
    return {r["task_id"]: r["passed"] / r["trials"] for r in result["per_task"]}


def turn_rates(result: dict[str, Any]) -> dict[str, float]:
    return {k: v["right"] / v["turns"] for k, v in result["per_task"].items()}


def evaluate_pair(release: Path | str, model: str, base: str = "embedded", split: str = "test",
                  trials: int = 1, max_turns: int = 12, max_tasks: int | None = None, episodes: bool = True,
                  next_action: bool = True, base_result: dict[str, Any] | None = None,
                  max_dialogues: int | None = None, max_tokens: int = EVAL_MAX_TOKENS) -> dict[str, Any]:
    """`base` and `model` (folders; "embedded": the prepared base model) on the held-out
    tasks of `release`'s `split`: next-action accuracy and episode pass rate, each with its
    interval and the paired difference. `max_tasks` caps the tasks played as episodes,
    `max_dialogues` the reference dialogues scored (default: the same tasks), `max_tokens`
    an episode turn's tokens (greedy). `base_result`
    (an earlier result with the same settings) saves evaluating the base again. Written
    beside the run that made `model`, when it is one (`eval-<release version>.json`), with
    each side's judged episodes (`episodes-<release version>-<base|trained>.jsonl`,
    `train.evaluate.read_episodes`)."""
    from train.evaluate import check_model_folder, episodes_file, evaluate_model, greedy
    from train.lineage import keep_beside_run

    if not (episodes or next_action):
        raise ValueError("nothing to evaluate: enable episodes or next_action")
    for folder in (model, base):
        check_model_folder(folder)
    manifest = store.read_manifest(release)
    tasks, scored = held_out_selection(release, split, max_tasks, max_dialogues)
    dialogues = heldout_dialogues(release, [t.id for t in scored], split) if next_action else []

    run_dir = Path(model).expanduser().parent
    beside = (run_dir / "run.json").is_file()  # a run's model: the result and the episodes are kept beside it

    def judged(folder: str, side: str) -> dict[str, Any]:
        out: dict[str, Any] = {"model": folder, "weights": model_weights(folder)}
        if next_action and dialogues:
            na = next_action_accuracy(None if folder == "embedded" else folder, dialogues)
            na.pop("turn_results")
            out["next_action"] = {**na, "interval": with_interval(turn_rates(na))}
        if episodes:
            keep = episodes_file(run_dir, manifest.version, side) if beside else None
            ep = evaluate_model(tasks, None if folder == "embedded" else folder, trials=trials, max_turns=max_turns,
                                sampling=greedy(max_tokens), keep=keep)
            out["episodes"] = {**ep, "interval": with_interval(episode_rates(ep))}
        return out

    started = time.monotonic()
    before = base_result if base_result is not None else judged(base, "base")
    after = judged(model, "trained")
    delta: dict[str, Any] = {}
    if "next_action" in after and "next_action" in before:
        delta["next_action"] = paired_difference(turn_rates(before["next_action"]), turn_rates(after["next_action"]))
    if "episodes" in after and "episodes" in before:
        delta["pass_rate"] = paired_difference(episode_rates(before["episodes"]), episode_rates(after["episodes"]))
    result = {
        "release": {"path": str(release), "name": manifest.name, "kind": manifest.kind, "version": manifest.version},
        "split": split, "tasks": len(tasks), "dialogues": len(dialogues), "trials": trials, "max_turns": max_turns,
        "settings": eval_settings(split, trials, max_turns, max_tasks, max_dialogues, episodes, next_action, max_tokens),
        "task_ids": [t.id for t in tasks], "dialogue_ids": [t.id for t in scored],
        "base": before, "trained": after, "delta": delta, "wall_s": round(time.monotonic() - started, 2),
        "code_version": store.code_version(),
    }
    if beside:
        result = keep_beside_run(result, run_dir, f"eval-{manifest.version}.json")
    return result


def held_out_selection(release: Path | str, split: str, max_tasks: int | None,
                       max_dialogues: int | None) -> tuple[list[Any], list[Any]]:
    """The held-out tasks `evaluate_pair` plays as episodes and those whose reference dialogues
    it scores: each capped with every world taken in turn (`spread_over_worlds`)."""
    from train.evaluate import release_tasks, spread_over_worlds

    held = release_tasks(release, split)
    if not held:
        raise store.DatasetError(f"{release}: the {split!r} split has no tasks")
    tasks = spread_over_worlds(held, max_tasks or None)
    return tasks, (spread_over_worlds(held, max_dialogues) if max_dialogues else tasks)


def eval_settings(split: str = "test", trials: int = 1, max_turns: int = 12, max_tasks: int | None = None,
                  max_dialogues: int | None = None, episodes: bool = True, next_action: bool = True,
                  max_tokens: int = EVAL_MAX_TOKENS) -> dict[str, Any]:
    """`evaluate_pair`'s settings (its defaults), as its result records them, with the
    verifiers' versions when episodes are judged (`verifiers.base.verdict_versions`: an
    evaluation judged by other checks is not read back)."""
    from verifiers.base import verdict_versions

    return {"split": split, "trials": trials, "max_turns": max_turns, "max_tasks": max_tasks,
            "max_dialogues": max_dialogues, "episodes": episodes, "next_action": next_action,
            "max_tokens": max_tokens, **({"verdicts": verdict_versions()} if episodes else {})}


def model_weights(folder: str) -> str:
    """What an evaluation records of the weights it judged: "embedded" (the prepared base) or
    the folder's weights digest (`rollout.prepare.weights_digest`: a retrained folder differs)."""
    from rollout.prepare import weights_digest

    return "embedded" if folder == "embedded" else weights_digest(Path(folder).expanduser())


def evaluation_before(release: Path | str, model: str, base: str, args: dict[str, Any]) -> dict[str, Any] | None:
    """An `evaluate_pair` result kept beside `model`'s run whose recorded settings are those of
    `evaluate_pair(release, model, base=base, **args)` (`eval_settings(**args)`, the verifiers'
    versions included), the same held-out tasks and dialogues (their ids: content hashes), base and
    model, the model's weights unchanged since (a model trained again in the same folder is
    judged again), or None: a rerun reads it back. The one kept for `release`'s version is
    looked at first; one kept for another version of the same held-out rows (a rerun whose
    config changed publishes the same rows as a new version) is as good."""
    settings = eval_settings(**args)
    run_dir = Path(model).expanduser().parent
    own = run_dir / f"eval-{store.read_manifest(release, verify=False).version}.json"
    candidates = [own] + sorted((p for p in run_dir.glob("eval-*.json") if p != own), reverse=True)
    tasks = scored = None
    for path in candidates:
        if not path.is_file():
            continue
        kept = json.loads(path.read_text())
        same = (kept.get("settings") == settings and kept.get("base", {}).get("model") == base
                and kept.get("trained", {}).get("model") == model
                and kept.get("trained", {}).get("weights") == model_weights(model))
        if not same:
            continue
        if tasks is None:
            tasks, scored = held_out_selection(release, settings["split"], settings["max_tasks"],
                                               settings["max_dialogues"])
        if kept.get("task_ids") == [t.id for t in tasks] and kept.get("dialogue_ids") == [t.id for t in scored]:
            return kept
    return None


def benchmark_rates(result: dict[str, Any]) -> dict[str, float]:
    """A benchmark result's (`train.evaluate.evaluate_benchmark`) share of trials each task passed."""
    return {r["task_id"]: r["passed"] / r["trials"] for r in result["per_task"]}


def benchmark_pair(benchmark: str, model: str, base: str = "embedded", split: str = "test",
                   max_tasks: int | None = None, max_turns: int = 30,
                   base_result: dict[str, Any] | None = None) -> dict[str, Any]:
    """`base` and `model` (folders; "embedded": the prepared base model) on a benchmark's own
    tasks of `split` (``tau2:<domain>``: τ²-bench's tasks, judged by τ²'s evaluator), greedy,
    with the scripted user: each model's pass rate with its interval, and the paired
    difference over the same tasks. The trained model's result is also kept beside its run
    (`train.evaluate.record_benchmark`), so its card lists it. `base_result` (the `base` of an
    earlier pair with the same settings) saves playing the base again."""
    from rollout.collector import ModelConfig
    from train.evaluate import evaluate_benchmark, record_benchmark

    def played(folder: str) -> dict[str, Any]:
        path = None if folder == "embedded" else str(Path(folder).expanduser())
        r = evaluate_benchmark(benchmark, ModelConfig(kind="embedded", options={"path": path}), split=split,
                               max_tasks=max_tasks, max_turns=max_turns)
        return {**r, "pass_rate": r["pass_hat_k"]["1"], "interval": with_interval(benchmark_rates(r))}

    before = base_result if base_result is not None else played(base)
    after = record_benchmark(played(model), model)
    pair = {"benchmark": benchmark, "split": split, "tasks": after["tasks"],
            "settings": {"base": base, "split": split, "max_tasks": max_tasks, "max_turns": max_turns},
            "base": before, "trained": after,
            "delta": paired_difference(benchmark_rates(before), benchmark_rates(after))}
    if "written_to" in after:  # beside the run: the pair too, for a rerun to read back (`pair_before`)
        pair_file(Path(after["written_to"])).write_text(json.dumps(pair, indent=2) + "\n")
    return pair


def pair_file(benchmark_result: Path) -> Path:
    """Where `benchmark_pair` keeps a pair beside the trained model's benchmark result."""
    return benchmark_result.with_name("pair-" + benchmark_result.name)


def pair_before(benchmark: str, model: str, base: str, split: str, max_tasks: int | None,
                max_turns: int) -> dict[str, Any] | None:
    """A `benchmark_pair` result kept beside `model`'s run with the same settings, or None."""
    from train.evaluate import benchmark_file

    path = pair_file(Path(model).expanduser().parent / benchmark_file(benchmark, split))
    if not path.is_file():
        return None
    pair = json.loads(path.read_text())
    want = {"base": base, "split": split, "max_tasks": max_tasks, "max_turns": max_turns}
    return pair if pair.get("settings") == want and pair.get("benchmark") == benchmark else None


# -- arms ---------------------------------------------------------------------------------------

def _order(key: str, seed: int) -> str:
    return hashlib.sha256(f"{seed}:{key}".encode()).hexdigest()


def arm_dataset(releases: Path | str | Sequence[Path | str], root: Path | str, arm: str, rows: int | None = None,
                seed: int = 0, keep: Callable[[dict[str, Any]], bool] | None = None,
                held_out: bool = False) -> Path:
    """Cut an arm from one or more sft releases (e.g. a run's `sft` and `sft_recovery`: its
    clean rows and the policy rollouts that recovered from a failed call, failed turns
    marked `train: false`): their `train`-split rows that `keep` accepts (all by default),
    at most `rows` of them in a seeded order by trajectory id (with `held_out`, also every
    non-train row, for an eval loss). Committed as dataset `arm-<arm>` under `root`, an
    `sft_recovery` dataset when any source is one; its lineage names the releases and its
    manifest's `stats` say the arm and the rows kept."""
    from data.schema import SFT_RECOVERY_SCHEMA, SFT_SCHEMA

    sources = [Path(releases)] if isinstance(releases, str | Path) else [Path(r) for r in releases]
    manifests = [store.read_manifest(r) for r in sources]
    recovery = any(m.kind == "sft_recovery" for m in manifests)
    pool = [row for r in sources for row in store.read_table(r).to_pylist()]  # JSON values as text
    train = [r for r in pool if r["split"] == "train" and (keep is None or keep(r))]
    train.sort(key=lambda r: _order(r["trajectory_id"], seed))
    chosen = train[:rows] if rows is not None else train
    held = [r for r in pool if r["split"] != "train"] if held_out else []
    writer = store.DatasetWriter(root, f"arm-{arm}", "sft_recovery" if recovery else "sft",
                                 SFT_RECOVERY_SCHEMA if recovery else SFT_SCHEMA, manifests[0].schema_version)
    writer.write_rows(chosen + held)
    names = ", ".join(f"`{m.name}` {m.version}" for m in manifests)
    card = (f"# arm {arm}\n\n{len(chosen)} training rows cut from {names} ({len(train)} eligible), seed {seed}; "
            f"{len(held)} held-out rows kept.\n")
    return writer.commit(store.Lineage(parents=[str(r.resolve()) for r in sources]), card=card,
                         stats={"arm": arm, "rows": len(chosen), "eligible": len(train), "seed": seed,
                                "policy_rows": sum(not r["reference"] for r in chosen),
                                "from": [{"name": m.name, "version": m.version} for m in manifests]})
