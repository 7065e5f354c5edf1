"""The curation stage: the curator's selection, its `sft`, `sft_recovery` and `rl` rows
(scrubbed and re-judged per shard), and the curated datasets (`datasets/curated_<name>`)
written from them after release-wide hygiene."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa

from curation.base import Selection, get_curator
from curation.release import rl_rows, sft_configs, trained_failures
from data import parts, store
from data.records import Task, Trajectory, Verdict
from data.schema import RELEASE_SCHEMA_VERSION, SFT_KINDS
from envs.registry import get_world, world_version
from pipelines.config import RunConfig
from pipelines.figures import deciding_verdicts
from pipelines.stages.base import RELEASES, SCHEMAS, datasets_dir, lineage
from pipelines.stages.hygiene import ReleaseHygiene, TrainVsTest, scrub_and_judge
from rollout.agent import env_now, opening_messages
from rollout.user import ScriptedUser
from train.environments import user_tool_schema
from verifiers.base import get_verifier, primary_verifier


def curate(cfg: RunConfig, tasks: list[Task], trajectories: list[Trajectory], verdicts: list[Verdict]) -> Selection:
    return curator_for(cfg).select(tasks, trajectories, deciding_verdicts(cfg, tasks, verdicts))


def curator_for(cfg: RunConfig) -> Any:
    """The configured curation strategy, built with its `curation_options`."""
    return get_curator(cfg.curation, cfg.curation_options)


def release_rows(selection: Selection, tasks: list[Task],
                 verifiers: Sequence[str] | None = None) -> dict[str, list[dict[str, Any]]]:
    """The `sft`, `sft_recovery` and `rl` rows of a selection (`curation.release.sft_configs`:
    a conversation with a failed assistant turn goes to `sft_recovery`, that turn marked
    ``train: false``). `verifiers` (default: the config's default
    list) decide each rl row's `verifier` and its version: the composite when configured
    (the whole verdict is the reward: TRL's loop has the scripted user in it,
    `train.environments`), else the task's primary verifier among them. An rl row's prompt
    is the system prompt and the user's first message, as every rollout's."""
    names = list(verifiers or RunConfig().verifiers) or ["composite"]
    by_id = {t.id: t for t in tasks}
    prompts: dict[str, list[dict[str, Any]]] = {}
    tools: dict[str, list[dict[str, Any]]] = {}
    environments: dict[str, dict[str, Any]] = {}
    for pick in selection.rl:
        task = pick.task
        world = get_world(task.world)
        env = world.env(task.initial_state)
        prompts[task.id] = opening_messages(task, world, env_now(env), ScriptedUser(task))
        env.close()
        tools[task.id] = [*world.tool_schemas(), user_tool_schema()]  # the user answers through a tool
        verifier = primary_verifier(task, names)
        environments[task.id] = {
            "world_version": world_version(task.world), "verifier": verifier,
            "verifier_version": get_verifier(verifier).version,
            "write_tools": [n for n, spec in getattr(world, "tools", {}).items() if getattr(spec, "write", False)],
        }
    sft = sft_configs(selection, {t: x.split for t, x in by_id.items()}, {t: x.method for t, x in by_id.items()},
                      {t: x.world for t, x in by_id.items()})
    return {**sft, "rl": rl_rows(selection, prompts, tools, environments)}


# Columns a shard's curated rows carry until the finished dataset is written: each sft row's
# data-quality counts (`curation.quality.row_quality`, JSON; both sft configs) and each rl
# pick's sampling key.
HIDDEN = {"sft": [("_quality", pa.string())], "sft_recovery": [("_quality", pa.string())],
          "rl": [("_rl_key", pa.float64())]}
PART_SCHEMAS = {name: pa.schema([*SCHEMAS[name], *HIDDEN[name]]) for name in RELEASES}


@dataclass
class CuratedRows:
    """One shard's rows of a release kind, scrubbed and re-judged (not yet deduplicated),
    with the hidden columns (`HIDDEN`), and the scrub and replay reports (plain dicts)."""

    rows: list[dict[str, Any]]
    scrub: dict[str, Any]
    replay: dict[str, Any]


def curated_rows(cfg: RunConfig, selection: Selection, tasks: Sequence[Task]) -> dict[str, CuratedRows]:
    """The rows of each release config of a selection with each row's hygiene that needs no other row:
    scrubbing, and the re-judging of the rows scrubbing changed (`clean_rows` does the rest)."""
    from curation.quality import row_quality

    by_id = {t.id: t for t in tasks}
    rows = release_rows(selection, list(tasks), cfg.verifiers)
    trajectories = {t.id: t for t, _ in selection.sft}
    for r in (r for name in SFT_KINDS for r in rows[name]):
        r["_quality"] = json.dumps(row_quality(trajectories[r["trajectory_id"]], by_id.get(r["task_id"])))
    keys_of = {pick.task.id: pick.key for pick in selection.rl}
    for r in rows["rl"]:
        r["_rl_key"] = keys_of.get(r["task_id"])
    out: dict[str, CuratedRows] = {}
    for name in RELEASES:
        if not cfg.hygiene.enabled:
            out[name] = CuratedRows(rows[name], {}, {})
            continue
        judged, report, replayed = scrub_and_judge(cfg, name, rows[name], by_id, selection)
        out[name] = CuratedRows(judged, report.model_dump(), replayed.model_dump())
    return out


def write_curated(cfg: RunConfig, out: Path, selection: Selection, tasks: list[Task], parents: Sequence[Path],
                  run_id: str = "") -> dict[str, Path]:
    """Write the curated rows of each release config as datasets (`datasets/curated_<name>`)."""
    rows = curated_rows(cfg, selection, tasks)
    return {name: finish_curated(cfg, out, name, [rows[name].rows], [rows[name]], selection.stats, selection.drops,
                                 parents, run_id) for name in RELEASES}


def finish_curated(cfg: RunConfig, out: Path, name: str, batches: Iterable[list[dict[str, Any]]],
                   shards: Sequence[CuratedRows], selection_stats: dict[str, Any], drops: dict[str, int],
                   parents: Sequence[Path], run_id: str = "") -> Path:
    """Deduplicate and decontaminate a release kind's curated rows, given batch by batch (the
    shards' parts in order), and write them as `datasets/curated_<name>` in bounded row
    groups: memory holds one batch, the dedup index (`curation.hygiene.Deduper`) and the
    data-quality counts, never the release. `shards` hold the shards' scrub and replay
    reports (their rows are not read). An sft config's stats also count its reference rows,
    its data quality and `trained_failures` (rows whose failed turn carries loss: 0)."""
    from curation.quality import quality_figures
    from data.parts import sum_stats

    hygiene = ReleaseHygiene(cfg, out, name) if cfg.hygiene.enabled else None
    splits: Counter[str] = Counter()
    reference_rows = failures = 0
    quality: list[dict[str, Any]] = []
    test_items = TrainVsTest()
    schema = SCHEMAS[name]
    with store.DatasetWriter(datasets_dir(out), f"curated_{name}", name, schema, RELEASE_SCHEMA_VERSION) as w:
        with w.part() as part:
            for batch in batches:
                kept = hygiene.filter(batch) if hygiene else list(batch)
                if name in SFT_KINDS:
                    failures += trained_failures(kept)
                for r in kept:
                    splits[r["split"]] += 1
                    reference_rows += bool(r.get("reference"))
                    if (q := r.pop("_quality", None)) is not None:
                        quality.append(json.loads(q) if isinstance(q, str) else q)
                        if len(quality) >= 1000:
                            quality[:] = [sum_stats(quality)]
                    r.pop("_rl_key", None)
                    test_items.see(r)
                part.write_rows(kept)
        if hygiene:
            card = hygiene.card(sum_stats(s.scrub for s in shards), sum_stats(s.replay for s in shards))
            card["train_vs_test"] = test_items.check(parts.iter_batches(w.staging / w.files[-1].path))
        else:
            card = {"enabled": False}
        stats = {**selection_stats, "drops": {k: v for k, v in drops.items() if k.startswith(name + ":")},
                 "splits": dict(splits), "hygiene": card}
        if name in SFT_KINDS:
            stats["reference_rows"] = reference_rows
            stats["trained_failures"] = failures
            stats["data_quality"] = quality_figures(sum_stats(quality))
            if (rp := card.get("replay", {})).get("checked"):
                stats["data_quality"]["scrubbed_rows_pass_rate"] = round(rp["passed"] / rp["checked"], 4)
        return w.commit(lineage(cfg, parents, run_id), stats=stats, reuse_identical=True)
