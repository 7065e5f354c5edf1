"""Before/after evaluation: base and trained model on a release's held-out tasks.

Both models play the release's `test` tasks through the rollout engine
(`rollout.collector.collect`, the embedded backend with `ModelConfig.path`, scripted user,
the same sampling for both), and each trajectory is judged by its task's primary verifier
(`verifiers.base.primary_verifier`: by default the composite verdict over the task's reward
basis — outcome, what the user was told, the policy's process). Reported per model: pass rate, mean score, terminations, tool
errors; and the difference trained − base.

Where the tasks come from: an `rl` release carries each task's JSON (`task` column); for
an `sft` or `sft_recovery` release the task ids of its rows are looked up in the `tasks` dataset named in
its lineage (`manifest.lineage.parents`).
"""

from __future__ import annotations

import json
import time
from collections import Counter
from pathlib import Path
from typing import Any

from data import store
from data.records import Sampling, Task, Trajectory, Verdict
from rollout.agent import AgentConfig
from rollout.backends import close_shared_models
from rollout.collector import ModelConfig, RolloutConfig, collect
from train.environments import as_task
from train.lineage import read_run, refresh_release_card
from verifiers.base import get_verifier, primary_verifier

# the whole verdict: outcome, what the user was told, and the policy's process (the eval has a user)
DEFAULT_VERIFIERS = ["composite"]


def release_tasks(release: Path | str, split: str = "test") -> list[Task]:
    """The tasks of a release's `split` (rl: from the `task` column; sft and sft_recovery: via
    lineage)."""
    from train.data import is_sft_kind, load_release

    manifest = store.read_manifest(release)
    ds = load_release(release, split)
    if manifest.kind == "rl":
        seen: dict[str, Task] = {}
        for value in ds["task"]:
            task = as_task(value)
            seen.setdefault(task.id, task)
        return list(seen.values())
    if is_sft_kind(manifest.kind):
        ids = list(dict.fromkeys(ds["task_id"]))
        for parent in _lineage_datasets(Path(release)):
            if store.read_manifest(parent, verify=False).kind == "tasks":
                by_id = {t.id: t for t in store.read_records(parent, "tasks")}
                missing = [i for i in ids if i not in by_id]
                if missing:
                    raise store.DatasetError(f"{parent} lacks {len(missing)} task(s) of {release}, e.g. {missing[0]}")
                return [by_id[i] for i in ids]
        raise store.DatasetError(f"{release}: no tasks dataset in its lineage; evaluate on the rl release instead")
    raise store.DatasetError(f"{release} is a {manifest.kind!r} dataset; evaluation needs an rl or sft release")


def _lineage_datasets(path: Path, depth: int = 3) -> list[Path]:
    """Committed datasets named in `path`'s lineage, breadth first, up to `depth` levels."""
    out: list[Path] = []
    frontier = [path]
    for _ in range(depth):
        nxt = []
        for p in frontier:
            for parent in store.read_manifest(p, verify=False).lineage.parents:
                q = Path(parent)
                if q not in out and (q / store.SUCCESS).exists():
                    out.append(q)
                    nxt.append(q)
        frontier = nxt
    return out


def judge(task: Task, trajectory: Trajectory, verifiers: list[str]) -> Verdict:
    return get_verifier(primary_verifier(task, verifiers)).verify(task, trajectory)


def evaluate_model(tasks: list[Task], model_path: str | None, trials: int = 1, sampling: Sampling | None = None,
                   max_turns: int = 12, verifiers: list[str] | None = None, max_batch: int = 8) -> dict[str, Any]:
    """Roll out `tasks` with the embedded backend on `model_path` (None: the prepared base
    model) and judge each trajectory; returns pass rate, mean score and per-task results."""
    if not tasks:
        raise ValueError("no tasks to evaluate")
    names = list(verifiers or DEFAULT_VERIFIERS)
    if model_path is not None and not Path(model_path).expanduser().is_dir():
        raise FileNotFoundError(f"model folder {model_path} does not exist")
    cfg = RolloutConfig(
        model=ModelConfig(kind="embedded", options={
            "path": str(Path(model_path).expanduser()) if model_path else None, "max_batch": max_batch}),
        trials=trials, sampling=sampling or Sampling(temperature=0.0, max_tokens=128, seed=0),
        agent=AgentConfig(max_turns=max_turns))
    started = time.monotonic()
    try:
        trajectories = collect(tasks, cfg)
    finally:
        close_shared_models()
    by_id = {t.id: t for t in tasks}
    verdicts = [judge(by_id[t.task_id], t, names) for t in trajectories]
    per_task: dict[str, dict[str, Any]] = {}
    for traj, v in zip(trajectories, verdicts, strict=True):
        row = per_task.setdefault(traj.task_id, {"task_id": traj.task_id, "world": by_id[traj.task_id].world,
                                                 "verifier": v.verifier, "passed": 0, "trials": 0, "scores": []})
        row["passed"] += v.passed
        row["trials"] += 1
        row["scores"].append(round(v.score, 4))
    n = len(verdicts)
    return {
        "model": model_path or "embedded",
        "tasks": len(tasks), "trajectories": n,
        "pass_rate": round(sum(v.passed for v in verdicts) / n, 4),
        "mean_score": round(sum(v.score for v in verdicts) / n, 4),
        "terminations": dict(Counter(t.termination for t in trajectories)),
        "tool_calls_per_episode": round(sum(len(t.actions()) for t in trajectories) / n, 3),
        "tool_errors": dict(sum((Counter(t.error_counts) for t in trajectories), Counter())),
        "wall_s": round(time.monotonic() - started, 2),
        "per_task": list(per_task.values()),
    }


def compare(release: Path | str, model: str, base: str = "embedded", split: str = "test", trials: int = 1,
            sampling: Sampling | None = None, max_turns: int = 12, verifiers: list[str] | None = None,
            max_tasks: int | None = None) -> dict[str, Any]:
    """Evaluate `base` (`"embedded"` or a folder) and `model` (a folder) on the same tasks.

    When `model` is a run's `final/` folder, the result is also written to the run folder
    as `eval-<release version>.json` (lineage: which release the model was judged on), and
    the card of the release the run trained on lists it (`train.lineage`).
    """
    for folder in (model, base):
        if folder != "embedded" and not Path(folder).expanduser().is_dir():
            raise FileNotFoundError(f"model folder {folder} does not exist")
    manifest = store.read_manifest(release)
    tasks = release_tasks(release, split)
    if max_tasks is not None:
        tasks = tasks[:max_tasks]
    if not tasks:
        raise store.DatasetError(f"{release}: the {split!r} split has no tasks")
    kwargs: dict[str, Any] = {"trials": trials, "sampling": sampling, "max_turns": max_turns, "verifiers": verifiers}
    before = evaluate_model(tasks, None if base == "embedded" else base, **kwargs)
    after = evaluate_model(tasks, model, **kwargs)
    result = {
        "release": {"path": str(release), "name": manifest.name, "kind": manifest.kind, "version": manifest.version},
        "split": split, "tasks": len(tasks), "trials": trials,
        "base": before, "trained": after,
        "delta": {"pass_rate": round(after["pass_rate"] - before["pass_rate"], 4),
                  "mean_score": round(after["mean_score"] - before["mean_score"], 4)},
        "code_version": store.code_version(),
    }
    run_dir = Path(model).expanduser().parent
    if (run_dir / "run.json").is_file():
        (run_dir / f"eval-{manifest.version}.json").write_text(json.dumps(result, indent=2) + "\n")
        result["written_to"] = str(run_dir / f"eval-{manifest.version}.json")
        trained_on = read_run(run_dir).get("release", {}).get("path")
        if trained_on:  # the card of the release the model was trained on shows this result
            refresh_release_card(trained_on, [run_dir.parent])
    return result
