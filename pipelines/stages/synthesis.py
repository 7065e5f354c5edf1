"""The synthesis stage, range by range: each source's tasks are synthesized in seed ranges
(`seed_ranges`), each range a shard that any worker can run (`synthesize_range`: its tasks
and their verifier self-audit, written as a part, the range's cache); once every range is
done the driver decides the train/test split on the tasks' keys and writes the kept tasks
as a `tasks` dataset (`finish`).

A source of `n_tasks` up to `synthesis_shard_tasks` (default 50) is one range with the
source's own seed, which is exactly what one call of its method made before ranges existed.
A larger source is cut into ranges of that many tasks, range k seeded `seed + k * stride`
(`stride` = 4 × range + 8, more seeds than a range of the seeded methods can use, so ranges
draw disjoint seeds). A method that keeps its tasks' splits (an import from a fixed pool,
τ²'s) is always one range. What a range makes depends on the config and the range only, so
the tasks are the same however the ranges are packed into task runs and wherever they run.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, NamedTuple

from data import parts, store
from data.cache import ShardCache
from data.parts import PartRef
from data.records import Task, content_hash
from data.schema import CODECS
from envs.registry import get_world
from pipelines import keys
from pipelines.config import RunConfig
from pipelines.stages.base import crashpoint, datasets_dir, lineage, shard_cache
from synthesis.base import METHODS, SynthesisConfig, canonical_method, get_method
from verifiers.base import get_verifier

RANGE_TASKS = 50  # tasks per seed range unless `synthesis_shard_tasks` says otherwise


class SeedRange(NamedTuple):
    """One shard of synthesis: `n_tasks` tasks of source `source` (0: `synthesis`, then
    `synthesis_mix`) from seed `seed`, the `index`-th range of that source."""

    source: int
    index: int
    seed: int
    n_tasks: int


def sources(cfg: RunConfig) -> list[SynthesisConfig]:
    return [cfg.synthesis, *cfg.synthesis_mix]


def seed_ranges(cfg: RunConfig) -> list[SeedRange]:
    """Every source's seed ranges, in source order (see the module docstring)."""
    per = cfg.synthesis_shard_tasks or RANGE_TASKS
    out: list[SeedRange] = []
    for i, s in enumerate(sources(cfg)):
        if s.n_tasks <= per or METHODS.attr(canonical_method(s.method), "keeps_splits"):
            out.append(SeedRange(i, 0, s.seed, s.n_tasks))
            continue
        stride = 4 * per + 8
        out += [SeedRange(i, k, s.seed + k * stride, min(per, s.n_tasks - k * per))
                for k in range(-(-s.n_tasks // per))]
    return out


def pack(ranges: Sequence[SeedRange], n_shards: int | None) -> list[list[SeedRange]]:
    """`ranges` in at most `n_shards` consecutive groups of near-equal size (None: one each)."""
    n = len(ranges) if n_shards is None else max(1, min(n_shards, len(ranges)))
    size, extra = divmod(len(ranges), n) if n else (0, 0)
    out, at = [], 0
    for i in range(n):
        k = size + (i < extra)
        out.append(list(ranges[at:at + k]))
        at += k
    return out


def range_key(cfg: RunConfig, r: SeedRange) -> str:
    """What decides a range's part: its source's settings, its seed and size, the world's
    version, and (for the self-audit) the audit settings and the verifiers' versions."""
    s = sources(cfg)[r.source]
    return content_hash({"stage": "synthesize-range", "v": keys.KEY_VERSION,
                         "source": s.model_dump(mode="json"), "seed": r.seed, "n_tasks": r.n_tasks,
                         "world": keys.world_version(s.world),
                         "audit": cfg.audit.model_dump(mode="json") if cfg.audit.enabled else None,
                         "verifiers": keys.verifier_identity(cfg) if cfg.audit.enabled else None}, length=32)


def synthesize_range(cfg: RunConfig, r: SeedRange, out: Path, cache: ShardCache | None = None) -> PartRef:
    """The tasks of one seed range as a part (already there, from `cache`, or made now): every
    task the method made, and in `meta` the range's `stats` and its self-audit (`audit`,
    the report's fields; None when the audit is off). Kept or not is decided by `finish`."""
    root, key = cfg.parts_url or Path(out) / "parts", range_key(cfg, r)  # `sharded.parts_dir` (it imports stages)
    if cfg.cache and (ref := parts.find(root, "synthesize", key)) is not None:
        return ref
    hit = cache.get_with_meta("synthesize", key, "tasks") if cache is not None else None
    if hit is not None:
        tasks, meta = hit
    else:
        source = sources(cfg)[r.source].model_copy(update={"n_tasks": r.n_tasks, "seed": r.seed})
        result = get_method(source.method)(source, get_world(source.world))
        tasks = result.tasks
        stats = {**result.stats, "tasks": len(tasks), "drops": dict(result.drops)}
        report = audit_report(cfg, tasks)
        meta = {"stats": stats, "audit": report.model_dump(mode="json") if report is not None else None}
        if cache is not None:
            cache.put("synthesize", key, "tasks", tasks, meta=meta)
    ref = parts.write_records(root, "synthesize", key, "tasks", tasks, meta)
    crashpoint("synthesize.range_done")
    return ref


def audit_report(cfg: RunConfig, tasks: list[Task]) -> Any:
    """The verifier self-audit of `tasks` (`verifiers.audit.AuditReport`, not raised on), or
    None when the audit is off."""
    if not cfg.audit.enabled:
        return None
    from verifiers.audit import audit

    # built without a model: those that need one (the judge) are reported as skipped
    verifiers = [get_verifier(n, cfg.verifier_options.get(n)) for n in cfg.verifiers]
    return audit(tasks, verifiers, max_failure_rate=cfg.audit.max_failure_rate, max_per_kind=cfg.audit.max_per_kind,
                 options=cfg.verifier_options, raise_on_failure=False)


def merge_reports(reports: Sequence[dict[str, Any]]) -> Any:
    """The audit reports of several ranges as one (`AuditReport`): what one audit of all their
    tasks, in range order, reports."""
    from verifiers.audit import AuditReport

    merged = AuditReport.model_validate(reports[0])
    for raw in reports[1:]:
        rep = AuditReport.model_validate(raw)
        merged.tasks += rep.tasks
        for name, a in rep.verifiers.items():
            if name not in merged.verifiers:
                merged.verifiers[name] = a
                continue
            m = merged.verifiers[name]
            m.tasks_audited += a.tasks_audited
            m.gold_passed += a.gold_passed
            for field in ("mutants", "alternatives"):
                mine, theirs = getattr(m, field), getattr(a, field)
                for kind, stats in theirs.items():
                    if kind not in mine:
                        mine[kind] = stats.model_copy()
                        continue
                    for f in type(stats).model_fields:
                        setattr(mine[kind], f, getattr(mine[kind], f) + getattr(stats, f))
            m.excluded.update(a.excluded)
            m.survivors = (m.survivors + a.survivors)[:5]  # `audit`'s max_examples
        for tid, reasons in rep.excluded_tasks.items():
            merged.excluded_tasks.setdefault(tid, []).extend(reasons)
        merged.skipped_verifiers.update(rep.skipped_verifiers)
        merged.unaudited_tasks.update(rep.unaudited_tasks)
    return merged


def _merge_stats(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    """Two ranges' stats as one: numbers add, dicts merge key by key, lists of names become
    their sorted union; a `yield` is recomputed from `emitted` / `attempted`."""
    out = dict(a)
    for k, v in b.items():
        mine = out.get(k)
        if k not in out:
            out[k] = v
        elif isinstance(v, bool) or isinstance(mine, bool):
            out[k] = bool(mine) or bool(v)
        elif isinstance(v, int | float) and isinstance(mine, int | float):
            out[k] = mine + v
        elif isinstance(v, dict) and isinstance(mine, dict):
            out[k] = _merge_stats(mine, v)
        elif isinstance(v, list) and isinstance(mine, list):
            out[k] = sorted({*map(str, mine), *map(str, v)})
    if "yield" in out and out.get("attempted"):
        out["yield"] = round(out.get("emitted", 0) / out["attempted"], 3)
    return out


def _digest(text: str | None) -> str | None:
    return None if text is None else hashlib.blake2b(text.encode(), digest_size=16).hexdigest() if text else ""


def _task_batches(refs: Sequence[PartRef]) -> Iterator[Task]:
    for ref in refs:
        yield from parts.read_records(ref, "tasks")


def finish(cfg: RunConfig, out: Path, ranges: Sequence[SeedRange], refs: Sequence[PartRef], run_id: str = "") -> Path:
    """The `tasks` dataset from the ranges' parts: per source, duplicates across its ranges
    dropped (the first kept), the split decided on the tasks' keys (`synthesis.splits.sides`,
    over every task the source made, as one call of its method would) unless the method keeps
    its own, the self-audit's exclusions left out, and the stats merged. Raises when a source
    made no task, and `VerifierAuditError` when a verifier failed its audit too often."""
    from synthesis.splits import sides as split_sides
    from synthesis.splits import split_figures, split_keys

    srcs = sources(cfg)
    by_source: dict[int, list[PartRef]] = {}
    for r, ref in zip(ranges, refs, strict=True):
        by_source.setdefault(r.source, []).append(ref)
    stats: dict[str, Any] = {}
    side: dict[int, dict[str, str]] = {}  # source -> task id -> split
    drop: dict[int, set[int]] = {}  # source -> positions of duplicates across its ranges
    splits: Counter[str] = Counter()
    worlds: Counter[str] = Counter()
    all_ids: list[str] = []
    for i, s in enumerate(srcs):
        src_refs = by_source.get(i, [])
        src_stats: dict[str, Any] = {}
        for ref in src_refs:
            src_stats = _merge_stats(src_stats, ref.meta["stats"]) if src_stats else dict(ref.meta["stats"])
        ids: list[str] = []
        split_keys_: list[Any] = []
        seen: set[str] = set()
        drop[i] = set()
        for pos, t in enumerate(_task_batches(src_refs)):
            if t.id in seen:
                drop[i].add(pos)
                continue
            seen.add(t.id)
            worlds[t.world] += 1
            k = split_keys(t)
            ids.append(t.id)
            split_keys_.append(k._replace(calls=_digest(k.calls), text=_digest(k.text)))
        if not ids:
            raise RuntimeError(f"synthesis of {s.method} on {s.world} produced no tasks "
                               f"(drops: {src_stats.get('drops', {})})")
        if drop[i]:
            src_stats["drops"] = {**src_stats.get("drops", {}), "duplicate_across_ranges": len(drop[i])}
        src_stats["tasks"] = len(ids)
        all_ids += ids
        if len(src_refs) > 1:
            if "emitted" in src_stats:
                src_stats["emitted"] = len(ids)
            if not METHODS.attr(canonical_method(s.method), "keeps_splits"):
                chosen = split_sides(ids, split_keys_, s.test_fraction, s.seed)
                side[i] = dict(zip(ids, chosen, strict=True))
                split_keys_ = [k._replace(split=c) for k, c in zip(split_keys_, chosen, strict=True)]
            src_stats["split"] = split_figures(split_keys_)
        splits.update(k.split for k in split_keys_)
        stats[f"{s.method}@{s.world}"] = src_stats
    if len(stats) == 1:  # one source: its stats at the top level, as before
        stats = {k: v for k, v in next(iter(stats.values())).items() if k != "tasks"}
    stats["splits"] = dict(splits)
    stats["worlds"] = dict(worlds)
    reports = [ref.meta["audit"] for ref in refs if ref.meta.get("audit") is not None]
    excluded: set[str] = set()
    if reports:
        report = merge_reports(reports)
        report.raise_if_failed()
        excluded = set(report.excluded_tasks)
        stats["verifier_audit"] = report.card()
        if all(i in excluded for i in all_ids):
            raise RuntimeError(f"every synthesized task failed the verifier self-audit: {stats['verifier_audit']}")
    else:
        stats["verifier_audit"] = {"enabled": False}

    def kept() -> Iterator[Task]:
        for i in range(len(srcs)):
            for pos, t in enumerate(_task_batches(by_source.get(i, []))):
                if pos in drop[i] or t.id in excluded:
                    continue
                if i in side:
                    t.split = side[i][t.id]
                yield t

    return _write_tasks(datasets_dir(out), kept(), lineage(cfg, [], run_id), stats)


def _write_tasks(root: Path, tasks: Iterator[Task], lin: store.Lineage, stats: dict[str, Any],
                 file_rows: int = 50_000) -> Path:
    """`tasks` as a `tasks` dataset version (files of `file_rows`, as `store.write_records`
    writes them), converted a row group at a time; the identical version reused."""
    schema, to_row, _ = CODECS["tasks"]
    pending = next(tasks, None)
    version = pending.schema_version if pending is not None else 1
    with store.DatasetWriter(root, "tasks", "tasks", schema, version) as w:
        while pending is not None:
            with w.part() as part:
                rows: list[dict[str, Any]] = []
                n, t = 0, pending
                pending = None
                while t is not None:
                    rows.append(to_row(t))
                    n += 1
                    if len(rows) >= parts.ROW_GROUP_ROWS:
                        part.write_rows(rows)
                        rows = []
                    if n >= file_rows:
                        pending = next(tasks, None)
                        break
                    t = next(tasks, None)
                if rows:
                    part.write_rows(rows)
        return w.commit(lin, stats=stats, reuse_identical=True)


def synthesize(cfg: RunConfig, out: Path, run_id: str = "", cache: ShardCache | None = None) -> Path:
    """Synthesize tasks range by range in this process and write them as a `tasks` dataset
    (each range from its part, or `cache`, when unchanged): what the flow's synthesis shards
    and its `synthesize` task do, without Prefect."""
    ranges = seed_ranges(cfg)
    return finish(cfg, out, ranges, [synthesize_range(cfg, r, out, cache) for r in ranges], run_id)


def audit_tasks(cfg: RunConfig, tasks: list[Task]) -> tuple[list[Task], dict[str, Any]]:
    """Tasks whose verifiers pass the self-audit (gold passes, mutants fail), and the audit's
    card section. Raises `VerifierAuditError` when a verifier fails too often."""
    report = audit_report(cfg, tasks)
    if report is None:
        return tasks, {"enabled": False}
    report.raise_if_failed()
    return report.kept(tasks), report.card()


__all__ = ["RANGE_TASKS", "SeedRange", "audit_report", "audit_tasks", "finish", "merge_reports", "pack", "range_key",
           "seed_ranges", "shard_cache", "sources", "synthesize", "synthesize_range"]
