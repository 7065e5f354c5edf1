"""The run shard by shard, over parts: what `trajforge run` does between synthesis and release.

Each shard of tasks is rolled out, verified and curated by its own task run, in whichever
process the task runner puts it (a thread, a Dask or Ray worker). Each writes its rows to a
part (`data.parts`) under `<out>/parts` (or `parts_url`, storage every worker reaches) and
returns a `PartRef`: a path, a row count and the shard's figures. The driver holds the tasks,
packed (`data.records.PackedTasks`, about 2 KB a task), and the refs, never a trajectory or a
verdict:

- `rollout_part`: the shard's trajectories, part `rollout/<rollout key>` (the part is the
  shard's cache: a resumed shard is not rolled out again; with `cache_dir` set, the shard
  cache there is read and written too, so runs into other folders share it);
- `verify_part`: their verdicts, part `verify/<verify key>`, cached the same way;
- `curate_part`: the curation of the shard's tasks (every strategy decides within a task's
  group; an rl budget is applied afterwards over all shards, `apply_rl_budget`), its release
  rows scrubbed and re-judged, and the shard's figures (`pipelines.figures.shard_figures`);
  parts `curate-sft/<key>` and `curate-rl/<key>`.

The `trajectories` and `verdicts` datasets are the sets of their parts (`write_dataset`,
which copies them: a committed version shares no storage with the parts, a cache); the curated datasets are the curate parts deduplicated and
decontaminated batch by batch (`write_curated`), so memory stays bounded by a shard and the
dedup index, whatever the run's size.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from data import parts, store
from data.cache import ShardCache
from data.parts import PartRef
from data.records import (
    TRAJECTORY_SCHEMA_VERSION,
    VERDICT_SCHEMA_VERSION,
    PackedTasks,
    Task,
    content_hash,
)
from data.schema import CODECS
from pipelines import figures, keys, stages
from pipelines.config import RunConfig

SCHEMA_VERSIONS = {"trajectories": TRAJECTORY_SCHEMA_VERSION, "verdicts": VERDICT_SCHEMA_VERSION}


def parts_dir(cfg: RunConfig, out: Path | str) -> Path | str:
    """Where the run's shards write their parts: `parts_url`, else `<out>/parts`."""
    return cfg.parts_url or Path(out) / "parts"


def shared_cache(cfg: RunConfig, out: Path) -> ShardCache:
    """The shard cache a shard also reads and writes besides its part: the one `cache_dir`
    names (shared beyond this `out`), or none. Under `<out>` the parts are the cache."""
    return stages.shard_cache(cfg, out) if cfg.cache_dir else ShardCache(Path(out) / "cache", enabled=False)


def rollout_part(tasks: list[Task], cfg: RunConfig, out: Path) -> PartRef:
    """The trajectories of a shard of tasks as a part (already there, from a shared shard
    cache, or rolled out now); `meta` holds their `stages.trajectory_stats`."""
    root, key = parts_dir(cfg, out), keys.rollout_key(cfg, tasks)
    if cfg.cache and (ref := parts.find(root, "rollout", key)) is not None:
        return ref
    trajectories, cached = stages.rollout_shard_cached(tasks, cfg, shared_cache(cfg, out), key)
    ref = parts.write_records(root, "rollout", key, "trajectories", trajectories, stages.trajectory_stats(trajectories))
    return replace(ref, cached=cached)


def verify_part(tasks: list[Task], rollout: PartRef, cfg: RunConfig, out: Path) -> PartRef:
    """The verdicts of a rollout part, by every configured verifier, as a part. Trajectories
    that ended on infrastructure failures are not judged: they are no one's behaviour."""
    trajectories = [t for t in parts.read_records(rollout, "trajectories") if not t.infra_failed]
    by_id = {t.id: t for t in tasks}
    root, key = parts_dir(cfg, out), keys.verify_key(cfg, by_id, trajectories)
    if cfg.cache and (ref := parts.find(root, "verify", key)) is not None:
        return ref
    verdicts, cached = stages.verify_shard_cached(by_id, trajectories, cfg, shared_cache(cfg, out), key)
    ref = parts.write_records(root, "verify", key, "verdicts", verdicts, stages.verdict_stats(verdicts))
    return replace(ref, cached=cached)


def rl_budget(cfg: RunConfig) -> int | None:
    """The curation strategy's rl budget, if it has one."""
    budget = cfg.curation_options.get("rl_budget")
    return int(budget) if budget is not None else None


def curate_part(tasks: list[Task], rollout: PartRef, verify: PartRef, cfg: RunConfig, out: Path) -> dict[str, PartRef]:
    """Curate one shard: its sft and rl rows (scrubbed, re-judged, with the hidden columns of
    `stages.HIDDEN`) as two parts; the sft part's `meta["figures"]` are the shard's figures.
    Under an rl budget every eligible task is kept here, with its sampling key."""
    key = content_hash([cfg.config_hash(), Path(rollout.path).stem, Path(verify.path).stem, store.code_version()],
                       length=32)
    root = parts_dir(cfg, out)
    found = {name: parts.find(root, f"curate-{name}", key) for name in stages.RELEASES}
    if all(found.values()):
        return {k: v for k, v in found.items() if v is not None}
    trajectories = [t for t in parts.read_records(rollout, "trajectories") if not t.infra_failed]
    verdicts = parts.read_records(verify, "verdicts")
    options = dict(cfg.curation_options)
    if options.get("rl_budget") is not None:
        options["rl_budget"] = None
    curator = stages.get_curator(cfg.curation, options)
    selection = curator.select(tasks, trajectories, figures.deciding_verdicts(cfg, tasks, verdicts))
    fig = figures.shard_figures(cfg, tasks, trajectories, verdicts, selection, graphs=figures.GRAPHS if cfg.report else 0)
    rows = stages.curated_rows(cfg, selection, tasks)
    out_refs: dict[str, PartRef] = {}
    for name in stages.RELEASES:
        meta: dict[str, Any] = {"scrub": rows[name].scrub, "replay": rows[name].replay}
        if name == "sft":
            meta["figures"] = fig
        out_refs[name] = parts.write_rows(root, f"curate-{name}", key, stages.PART_SCHEMAS[name], rows[name].rows, meta)
    return out_refs


def write_dataset(refs: Sequence[PartRef], kind: str, cfg: RunConfig, out: Path, parents: Sequence[Path],
                  run_id: str = "") -> Path:
    """Commit the parts of a stage (`trajectories` or `verdicts`) as one dataset version: the
    parts become its files, in shard order, and their `meta` adds up to its stats."""
    with store.DatasetWriter(stages.datasets_dir(out), kind, kind, CODECS[kind][0], SCHEMA_VERSIONS[kind]) as w:
        for ref in refs:
            w.adopt(ref)
        return w.commit(stages.lineage(cfg, parents, run_id), stats=parts.sum_stats(r.meta for r in refs),
                        reuse_identical=True)


def merged_figures(cfg: RunConfig, curated: Sequence[dict[str, PartRef]]) -> dict[str, Any]:
    """The run's figures from its curate parts, with the rl budget applied to the counts."""
    curator = stages.curator_for(cfg)
    fig = figures.merge([c["sft"].meta["figures"] for c in curated], getattr(curator, "MEANS", {}))
    budget = rl_budget(cfg)
    eligible = fig.get("rl", 0)
    if budget is not None:
        kept = min(budget, eligible)
        fig["rl"] = kept
        fig["curator"]["rl_selected"] = kept
        if isinstance(fig["curator"].get("config"), dict):
            fig["curator"]["config"]["rl_budget"] = budget
        if kept < eligible:
            fig["drops"]["rl:not_sampled"] = fig["drops"].get("rl:not_sampled", 0) + eligible - kept
    return fig


def apply_rl_budget(cfg: RunConfig, curated: Sequence[dict[str, PartRef]]) -> set[tuple[int, int]] | None:
    """Which rl rows (shard, row) the budget keeps: the `budget` largest sampling keys over
    all shards (`curation.topology.top_keys`), read one column at a time; None when every
    eligible row is kept."""
    budget = rl_budget(cfg)
    total = sum(c["rl"].rows for c in curated)
    if budget is None or budget >= total:
        return None
    import numpy as np

    from curation.topology import top_keys

    where: list[tuple[int, int]] = []  # (shard, row within the shard) of each key
    values: list[float] = []
    for i, c in enumerate(curated):
        row = 0
        for batch in parts.iter_batches(c["rl"], columns=["_rl_key"]):
            for k in batch.column("_rl_key").to_pylist():
                where.append((i, row))
                values.append(float("-inf") if k is None else float(k))
                row += 1
    return {where[j] for j in top_keys(np.asarray(values), budget).tolist()}


def _rows(name: str, curated: Sequence[dict[str, PartRef]], keep: set[tuple[int, int]] | None) -> Iterator[list[dict]]:
    """The curate parts' rows of `name`, batch by batch in shard order; under an rl budget
    only the rows `keep` names, their reason saying they were sampled."""
    from curation.topology import SAMPLED

    for i, c in enumerate(curated):
        row = 0
        for batch in parts.iter_batches(c[name]):
            rows = batch.to_pylist()
            if name == "rl" and keep is not None:
                picked = []
                for r in rows:
                    if (i, row) in keep:
                        reason = str(r["selection_reason"])
                        if reason.startswith("mixed_outcomes"):  # the shard kept every eligible task
                            r["selection_reason"] = SAMPLED + reason[len("mixed_outcomes"):]
                        picked.append(r)
                    row += 1
                rows = picked
            yield rows


def write_curated(cfg: RunConfig, out: Path, curated: Sequence[dict[str, PartRef]], fig: dict[str, Any],
                  parents: Sequence[Path], run_id: str = "") -> dict[str, Path]:
    """The curated `sft` and `rl` datasets from the curate parts (`stages.finish_curated`):
    rl budget, dedup and decontamination over batches; then the curate parts are removed."""
    keep = apply_rl_budget(cfg, curated)
    paths = {}
    for name in stages.RELEASES:
        reports = [stages.CuratedRows([], c[name].meta.get("scrub", {}), c[name].meta.get("replay", {})) for c in curated]
        paths[name] = stages.finish_curated(cfg, out, name, _rows(name, curated, keep), reports, fig.get("curator", {}),
                                            fig.get("drops", {}), parents, run_id)
    for c in curated:
        for ref in c.values():
            parts.remove(ref)
    return paths


def graph_svgs(cfg: RunConfig, fig: dict[str, Any], task_shards: Sequence[Sequence[Task]],
               rollouts: Sequence[PartRef], verifies: Sequence[PartRef]) -> dict[str, str]:
    """The report's task graphs: the run's best candidates (`fig["graphs"]`), drawn from the
    trajectories and verdicts of their shards only."""
    from curation.graphs import graph_svgs_for

    wanted = {c[0] for c in fig.get("graphs", [])}
    if not wanted:
        return {}
    trajectories, verdicts = [], []
    for shard, rref, vref in zip(task_shards, rollouts, verifies, strict=True):
        ids = shard.ids if isinstance(shard, PackedTasks) else [t.id for t in shard]
        if wanted & set(ids):
            trajectories += [t for t in parts.read_records(rref, "trajectories") if t.task_id in wanted]
            verdicts += figures.deciding_verdicts(cfg, [t for t in shard if t.id in wanted],
                                                  [v for v in parts.read_records(vref, "verdicts") if v.task_id in wanted])
    return graph_svgs_for(trajectories, verdicts, n=len(wanted))
