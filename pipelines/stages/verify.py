"""The verification stage: every verifier's verdict on a shard's trajectories (through the
shard cache), the `verdicts` dataset, and re-verification of stored trajectories.

Second judges (`SECOND_JUDGES`) are verifiers a run adds on its own for the tasks they apply
to: τ²-bench's evaluator (`tau2`, `verifiers.tau2_reward`) for tasks of τ² worlds when the
``tau2`` extra is installed. They are not in `RunConfig.verifiers`, so they never decide a
trajectory (`primary_verifier` picks from the configured ones), are not self-audited and
re-judge no scrubbed row; their verdicts sit beside the deciding one in the `verdicts` dataset
and the card's agreement table compares the two (`pipelines.figures.agreement`). Naming one
in `verifiers` makes it an ordinary configured verifier instead.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from data import store
from data.cache import ShardCache
from data.records import Task, Trajectory, Verdict
from data.schema import (
    CODECS,
)
from envs.registry import get_world
from pipelines import keys
from pipelines.config import RunConfig
from pipelines.stages.base import crashpoint, datasets_dir, lineage
from rollout.backends import build_model
from rollout.collector import ModelConfig
from verifiers.base import (  # noqa: F401
    SECOND_JUDGES,
    VERIFIERS,
    applies,
    get_verifier,
    second_judges,
    share_components,
)


def verdict_stats(verdicts: Sequence[Verdict]) -> dict[str, Any]:
    return {"verdicts": len(verdicts), "passed": sum(v.passed for v in verdicts)}


def verify_shard_cached(tasks: dict[str, Task], trajectories: list[Trajectory], cfg: RunConfig,
                        cache: ShardCache, key: str | None = None) -> tuple[list[Verdict], bool]:
    """`verify_shard` with the run's verifiers and the second judges that apply
    (`second_judges`) through the shard cache: (verdicts, whether they came from it). `key`:
    the shard's `keys.verify_key`, when the caller has it. A cached shard without a second
    judge's verdicts (judged before it applied) gets them now."""
    key = key or keys.verify_key(cfg, tasks, trajectories)
    extra = second_judges({t.task_id: tasks[t.task_id] for t in trajectories}.values(), cfg.verifiers)
    hit = cache.get("verify", key, "verdicts")
    if hit is not None:
        missing = [n for n in extra if not any(v.verifier == n for v in hit)]
        if not missing:
            return hit, True
        verdicts = hit + verify_shard(tasks, trajectories, missing, cfg.verifier_options)
    else:
        verdicts = verify_shard(tasks, trajectories, [*cfg.verifiers, *extra], cfg.verifier_options, cfg.judge)
    cache.put("verify", key, "verdicts", verdicts)
    crashpoint("verify.shard_done")
    return verdicts, False


def verify_shard(tasks: dict[str, Task], trajectories: list[Trajectory], verifier_names: list[str],
                 options: dict[str, dict[str, Any]] | None = None, judge: ModelConfig | None = None) -> list[Verdict]:
    """Every verifier's verdict on every trajectory of a task it applies to. Verifiers are
    built with their `options`; those that take a model get one built from `judge`."""
    options = options or {}
    model, owned = (None, False)
    if judge is not None and any(getattr(VERIFIERS.get(n), "takes_model", False)
                                 or getattr(VERIFIERS.get(n), "needs_model", False) for n in verifier_names):
        model, owned = build_model(judge)
    # a composite judges with the run's own instances: each runs once per trajectory
    verifiers = share_components([get_verifier(n, options.get(n), model=model) for n in verifier_names], options)
    try:
        return [v.verify(tasks[t.task_id], t) for t in trajectories for v in verifiers if applies(v, tasks[t.task_id])]
    finally:
        if owned:
            for v in verifiers:
                close = getattr(v, "close", None)
                if callable(close):
                    close()


def write_verdicts(verdicts: list[Verdict], cfg: RunConfig, out: Path, parents: Sequence[Path], run_id: str = "") -> Path:
    return store.write_records(datasets_dir(out), "verdicts", "verdicts", verdicts,
                               lineage(cfg, parents, run_id), stats=verdict_stats(verdicts), reuse_identical=True)


def find_verdicts_for(out: Path, trajectories_path: Path) -> Path | None:
    """The newest committed verdicts dataset whose lineage names `trajectories_path`."""
    for version in reversed(store.versions(datasets_dir(out), "verdicts")):
        path = datasets_dir(out) / "verdicts" / version
        if str(trajectories_path) in store.read_manifest(path, verify=False).lineage.parents:
            return path
    return None


def reverify(cfg: RunConfig, out: Path, trajectories_path: Path, verifier: str, against: str | None = None,
             tasks_path: Path | None = None, verdicts_path: Path | None = None,
             run_id: str = "", upgrade_tasks: bool = False) -> tuple[Path, Any]:
    """Re-score stored trajectories with `verifier` (its current version) without any model,
    write the new verdicts as a dataset (with `diff.md`/`diff.json` of flips per task), and
    return its path and the diff. Tasks and old verdicts are found from lineage if not given.

    `upgrade_tasks`: tasks made before reference dialogues are judged as today's synthesis
    would make them (`synthesis.dialogue.upgrade`: facts to tell, expected outcome, reward
    basis); a trajectory of a task that today would not be released (a no-change task with
    nothing to tell) gets a failing verdict that says so. The counts go to the diff."""
    from verifiers.reverify import reverify as rescore

    trajectories_path = Path(trajectories_path)
    if tasks_path is None:
        parents = [Path(p) for p in store.read_manifest(trajectories_path).lineage.parents]
        tasks_path = next((p for p in parents if p.parent.name == "tasks"), None)
        if tasks_path is None:
            raise FileNotFoundError(f"{trajectories_path}: its lineage names no tasks dataset; pass --tasks")
    verdicts_path = verdicts_path or find_verdicts_for(out, trajectories_path)
    old = store.read_records(verdicts_path, "verdicts") if verdicts_path else []
    tasks = store.read_records(tasks_path, "tasks")
    trajectories = store.read_records(trajectories_path, "trajectories")
    unreleasable: dict[str, str] = {}
    upgraded = 0
    if upgrade_tasks:
        from synthesis.dialogue import upgrade

        rebuilt: set[str] = set()  # tasks whose world changed since: their recorded states are the old world's
        for i, task in enumerate(tasks):
            new, why = upgrade(get_world(task.world), task)
            upgraded += not why
            if why and why != "current":
                unreleasable[task.id] = why
            if new.initial_state.state_hash != task.initial_state.state_hash:
                rebuilt.add(task.id)
            tasks[i] = new
        trajectories = [t.model_copy(update={"final_state_hash": None}) if t.task_id in rebuilt else t
                        for t in trajectories]
    result = rescore(tasks, trajectories, old, verifier, against=against, unreleasable=unreleasable)
    result.diff.tasks_upgraded = upgraded
    totals = result.diff.totals()
    parents = [trajectories_path, tasks_path, *([verdicts_path] if verdicts_path else [])]
    with store.DatasetWriter(datasets_dir(out), "verdicts", "verdicts", CODECS["verdicts"][0], 1) as w:
        to_row = CODECS["verdicts"][1]
        if result.verdicts:
            w.write_rows([to_row(v) for v in result.verdicts])
        path = w.commit(lineage(cfg, parents, run_id), stats={"reverify": totals},
                        extra_files={"diff.md": result.diff.table() + "\n",
                                     "diff.json": result.diff.model_dump_json(indent=2)})
    return path, result.diff
