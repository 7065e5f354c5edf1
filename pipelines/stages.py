"""The pipeline's stages as plain Python: read datasets, call the layers, write datasets.

Prefect flows (`pipelines/flows.py`) wrap these functions and nothing more, so every
stage can also run, and be measured, without Prefect. Each stage writes a committed,
versioned dataset with lineage pointing at its inputs.
"""

from __future__ import annotations

import json
import os
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TypeVar

from curation.base import Selection, get_curator
from curation.release import rl_rows, sft_rows
from data import store
from data.cache import ShardCache
from data.card import render_card
from data.crash import crashpoint
from data.records import Task, Trajectory, Verdict, content_hash
from data.schema import RL_SCHEMA, SFT_SCHEMA
from envs.registry import get_world
from pipelines import keys
from pipelines.config import RunConfig
from rollout.agent import opening_messages, world_now
from rollout.collector import collect
from rollout.policies import ScriptedPolicy
from rollout.user import ScriptedUser
from synthesis.base import get_method
from verifiers.base import applies, get_verifier, primary_verifier

T = TypeVar("T")
RELEASES = ("sft", "rl")
SCHEMAS = {"sft": SFT_SCHEMA, "rl": RL_SCHEMA}


def datasets_dir(out: Path) -> Path:
    return Path(out) / "datasets"


def releases_dir(out: Path) -> Path:
    return Path(out) / "releases"


def shard_cache(cfg: RunConfig, out: Path) -> ShardCache:
    """The run's shard cache (`<out>/cache` unless `cache_dir` is set)."""
    return ShardCache(Path(cfg.cache_dir) if cfg.cache_dir else Path(out) / "cache", enabled=cfg.cache)


def lineage(cfg: RunConfig, parents: Sequence[Path | str], run_id: str = "") -> store.Lineage:
    return store.Lineage(config_hash=cfg.config_hash(), code_version=store.code_version(),
                         parents=[str(p) for p in parents], run_id=run_id)


def shards(items: Sequence[T], size: int) -> list[list[T]]:
    size = max(1, size)
    return [list(items[i : i + size]) for i in range(0, len(items), size)]


def _card(name: str, version: str, summary: str, schema: Any, rows: int, lin: store.Lineage, stats: dict) -> str:
    return render_card(name, version, summary, schema, rows, lin.model_dump(), stats)


# -- synthesis -------------------------------------------------------------------------

def synthesize(cfg: RunConfig, out: Path, run_id: str = "", cache: ShardCache | None = None) -> Path:
    """Synthesize tasks and write them as a `tasks` dataset (from the cache when unchanged)."""
    key = keys.synthesis_key(cfg) if cache else ""
    hit = cache.get_with_meta("synthesize", key, "tasks") if cache else None
    if hit is not None:
        tasks, stats = hit
        stats = {**stats, "cached": True}
    else:
        world = get_world(cfg.synthesis.world)
        result = get_method(cfg.synthesis.method)(cfg.synthesis, world)
        if not result.tasks:
            raise RuntimeError(f"synthesis produced no tasks (drops: {dict(result.drops)})")
        tasks = result.tasks
        stats = {**result.stats, "drops": dict(result.drops),
                 "splits": dict(Counter(t.split for t in result.tasks))}
        if cache:
            cache.put("synthesize", key, "tasks", tasks, meta=stats)
    lin = lineage(cfg, [], run_id)
    return store.write_records(datasets_dir(out), "tasks", "tasks", tasks, lin, stats=stats)


# -- rollout ---------------------------------------------------------------------------

def rollout_shard_cached(tasks: list[Task], cfg: RunConfig, cache: ShardCache) -> tuple[list[Trajectory], bool]:
    """`rollout_shard` through the shard cache: (trajectories, whether they came from it)."""
    key = keys.rollout_key(cfg, tasks)
    hit = cache.get("rollout", key, "trajectories")
    if hit is not None:
        return hit, True
    trajectories = rollout_shard(tasks, cfg)
    cache.put("rollout", key, "trajectories", trajectories)
    crashpoint("rollout.shard_done")
    return trajectories, False


def rollout_shard(tasks: list[Task], cfg: RunConfig) -> list[Trajectory]:
    """The policy's trials for a shard of tasks, plus gold reference trajectories."""
    trajectories = collect(tasks, cfg.rollout)
    if cfg.reference_trials:
        ref_cfg = cfg.rollout.model_copy(update={"trials": cfg.reference_trials})
        gold = collect(tasks, ref_cfg, model_for=lambda task: ScriptedPolicy(task, name="reference"))
        for t in gold:
            t.metadata["reference"] = True
        trajectories += gold
    return trajectories


def write_trajectories(trajectories: list[Trajectory], cfg: RunConfig, out: Path, parents: Sequence[Path],
                       run_id: str = "") -> Path:
    stats = {"trajectories": len(trajectories),
             "terminations": dict(Counter(t.termination for t in trajectories)),
             "error_counts": dict(sum((Counter(t.error_counts) for t in trajectories), Counter())),
             "model_calls": sum(t.usage.model_calls for t in trajectories),
             "completion_tokens": sum(t.usage.completion_tokens for t in trajectories)}
    return store.write_records(datasets_dir(out), "trajectories", "trajectories", trajectories,
                               lineage(cfg, parents, run_id), stats=stats)


# -- verification ----------------------------------------------------------------------

def verify_shard_cached(tasks: dict[str, Task], trajectories: list[Trajectory], verifier_names: list[str],
                        cache: ShardCache) -> tuple[list[Verdict], bool]:
    """`verify_shard` through the shard cache: (verdicts, whether they came from it)."""
    key = keys.verify_key(verifier_names, tasks, trajectories)
    hit = cache.get("verify", key, "verdicts")
    if hit is not None:
        return hit, True
    verdicts = verify_shard(tasks, trajectories, verifier_names)
    cache.put("verify", key, "verdicts", verdicts)
    crashpoint("verify.shard_done")
    return verdicts, False


def verify_shard(tasks: dict[str, Task], trajectories: list[Trajectory], verifier_names: list[str]) -> list[Verdict]:
    verifiers = [get_verifier(n) for n in verifier_names]
    return [v.verify(tasks[t.task_id], t) for t in trajectories for v in verifiers if applies(v, tasks[t.task_id])]


def write_verdicts(verdicts: list[Verdict], cfg: RunConfig, out: Path, parents: Sequence[Path], run_id: str = "") -> Path:
    stats = {"verdicts": len(verdicts), "passed": sum(v.passed for v in verdicts)}
    return store.write_records(datasets_dir(out), "verdicts", "verdicts", verdicts,
                               lineage(cfg, parents, run_id), stats=stats)


# -- curation and release ----------------------------------------------------------------

def curate(cfg: RunConfig, tasks: list[Task], trajectories: list[Trajectory], verdicts: list[Verdict]) -> Selection:
    primary = {t.id: primary_verifier(t, cfg.verifiers) for t in tasks}
    chosen = [v for v in verdicts if v.verifier == primary.get(v.task_id)]
    return get_curator(cfg.curation).select(tasks, trajectories, chosen)


def release_rows(selection: Selection, tasks: list[Task]) -> dict[str, list[dict[str, Any]]]:
    by_id = {t.id: t for t in tasks}
    prompts: dict[str, list[dict[str, Any]]] = {}
    tools: dict[str, list[dict[str, Any]]] = {}
    for pick in selection.rl:
        task = pick.task
        world = get_world(task.world)
        env = world.env(task.initial_state)
        prompts[task.id] = opening_messages(task, world, world_now(env.conn), ScriptedUser(task))
        env.close()
        tools[task.id] = world.tool_schemas()
    return {
        "sft": sft_rows(selection, {t: x.split for t, x in by_id.items()}, {t: x.method for t, x in by_id.items()},
                        {t: x.world for t, x in by_id.items()}),
        "rl": rl_rows(selection, prompts, tools),
    }


SUMMARIES = {
    "sft": "Verified multi-turn tool-use trajectories in TRL's conversational format (`messages` + `tools`), "
           "selected by trajforge's curation from rollouts that passed final-state verification.",
    "rl": "Tasks for reinforcement learning: the opening prompt, the tools, and the full task record "
          "(initial state recipe, target state hash and diff) that a reward function replays against.",
}


def write_curated(cfg: RunConfig, out: Path, selection: Selection, tasks: list[Task], parents: Sequence[Path],
                  run_id: str = "") -> dict[str, Path]:
    """Write the curated `sft` and `rl` rows as datasets (`datasets/curated_<name>`)."""
    rows = release_rows(selection, tasks)
    paths: dict[str, Path] = {}
    for name in RELEASES:
        stats = {**selection.stats, "drops": {k: v for k, v in selection.drops.items() if k.startswith(name + ":")},
                 "splits": dict(Counter(r["split"] for r in rows[name]))}
        with store.DatasetWriter(datasets_dir(out), f"curated_{name}", name, SCHEMAS[name], 1) as w:
            if rows[name]:
                w.write_rows(rows[name])
            paths[name] = w.commit(lineage(cfg, parents, run_id), stats=stats)
    return paths


def latest_release(out: Path, name: str) -> Path | None:
    """The `name` release that `releases/LATEST.json` points at (a complete published set),
    else the newest committed version (releases written before pointers existed)."""
    pointer = store.read_pointer(releases_dir(out))
    if pointer and name in pointer.get("releases", {}):
        return Path(pointer["releases"][name])
    return store.latest(releases_dir(out), name)


def release(cfg: RunConfig, out: Path, curated: dict[str, Path], run_id: str = "") -> dict[str, Path]:
    """Publish curated datasets as one release set: same rows, a dataset card, lineage
    (the curated inputs and the previous release), `_SUCCESS`, then `releases/LATEST.json`.

    Each dataset is staged and renamed into place, and the pointer moves only once the whole
    set is committed, so a reader following the pointer sees a complete release or the
    previous one. A publish killed half-way is finished by the next run with the same
    content: its intent (`.pending.json`: content fingerprint → version) is picked up and
    the datasets already committed under that version are kept, not written twice.
    """
    root = releases_dir(out)
    root.mkdir(parents=True, exist_ok=True)
    manifests = {name: store.read_manifest(src) for name, src in curated.items()}
    fingerprint = content_hash({"config": cfg.config_hash(),
                                     "data": {n: [f.sha256 for f in m.files] for n, m in sorted(manifests.items())}},
                                    length=32)
    pending = root / ".pending.json"
    intent = json.loads(pending.read_text()) if pending.exists() else {}
    version = intent["version"] if intent.get("fingerprint") == fingerprint else store.new_version()
    _atomic_json(pending, {"fingerprint": fingerprint, "version": version, "run_id": run_id})
    previous = store.read_pointer(root)
    paths: dict[str, Path] = {}
    for name, src in curated.items():
        target = root / name / version
        if (target / store.SUCCESS).exists():  # committed before an interruption
            paths[name] = target
            continue
        manifest = manifests[name]
        table = store.read_table(src, verify=False)
        parents = [str(src), *manifest.lineage.parents]
        if previous and name in previous.get("releases", {}):
            parents.append(previous["releases"][name])
        lin = lineage(cfg, parents, run_id)
        with store.DatasetWriter(root, name, name, SCHEMAS[name], 1, version) as w:
            if table.num_rows:
                w.write_table(table)
            card = _card(name, version, SUMMARIES[name], SCHEMAS[name], table.num_rows, lin, manifest.stats)
            paths[name] = w.commit(lin, card=card, stats=manifest.stats)
        crashpoint("release.dataset_done")
    store.write_pointer(root, {
        "version": version, "releases": {k: str(v) for k, v in paths.items()},
        "parent": previous.get("version") if previous else None, "fingerprint": fingerprint,
        "run_id": run_id, "config_hash": cfg.config_hash(), "code_version": store.code_version(),
    })
    pending.unlink(missing_ok=True)
    if cfg.publish_to:
        from data.remote import publish

        for path in paths.values():
            publish(path, cfg.publish_to)
    return paths


def _atomic_json(path: Path, payload: dict[str, Any]) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(payload))
    os.replace(tmp, path)


def summary(tasks: list[Task], trajectories: list[Trajectory], verdicts: list[Verdict],
            releases: dict[str, Path], selection: Selection) -> dict[str, Any]:
    policy = [t for t in trajectories if not t.metadata.get("reference")]
    ids = {t.id for t in policy}
    pv = [v for v in verdicts if v.trajectory_id in ids]
    return {
        "tasks": len(tasks),
        "trajectories": len(policy),
        "reference_trajectories": len(trajectories) - len(policy),
        "policy_pass_rate": round(sum(v.passed for v in pv) / len(pv), 4) if pv else 0.0,
        "mean_score": round(sum(v.score for v in pv) / len(pv), 4) if pv else 0.0,
        "sft_rows": len(selection.sft),
        "rl_rows": len(selection.rl),
        "releases": {k: str(v) for k, v in releases.items()},
    }


def dumps(obj: Any) -> str:
    return json.dumps(obj, indent=2, default=str)
