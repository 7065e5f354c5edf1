"""The synthesis stage: synthesize tasks (from the shard cache when unchanged), keep those
whose verifiers pass the self-audit, and write them as a `tasks` dataset."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

from data import store
from data.cache import ShardCache
from data.records import Task
from envs.registry import get_world
from pipelines import keys
from pipelines.config import RunConfig
from pipelines.stages.base import datasets_dir, lineage
from synthesis.base import get_method
from verifiers.base import get_verifier


def synthesize(cfg: RunConfig, out: Path, run_id: str = "", cache: ShardCache | None = None) -> Path:
    """Synthesize tasks and write them as a `tasks` dataset (from the cache when unchanged)."""
    key = keys.synthesis_key(cfg) if cache else ""
    hit = cache.get_with_meta("synthesize", key, "tasks") if cache else None
    if hit is not None:
        tasks, stats = hit
        stats = {**stats, "cached": True}
    else:
        tasks, stats = [], {}
        for source in [cfg.synthesis, *cfg.synthesis_mix]:
            result = get_method(source.method)(source, get_world(source.world))
            if not result.tasks:
                raise RuntimeError(f"synthesis of {source.method} on {source.world} produced no tasks "
                                   f"(drops: {dict(result.drops)})")
            tasks += result.tasks
            stats[f"{source.method}@{source.world}"] = {
                **result.stats, "tasks": len(result.tasks), "drops": dict(result.drops)}
        if len(stats) == 1:  # one source: its stats at the top level, as before
            stats = {k: v for k, v in next(iter(stats.values())).items() if k != "tasks"}
        stats["splits"] = dict(Counter(t.split for t in tasks))
        stats["worlds"] = dict(Counter(t.world for t in tasks))
        if cache:
            cache.put("synthesize", key, "tasks", tasks, meta=stats)
    tasks, stats["verifier_audit"] = audit_tasks(cfg, tasks)
    if not tasks:
        raise RuntimeError(f"every synthesized task failed the verifier self-audit: {stats['verifier_audit']}")
    lin = lineage(cfg, [], run_id)
    return store.write_records(datasets_dir(out), "tasks", "tasks", tasks, lin, stats=stats, reuse_identical=True)


def audit_tasks(cfg: RunConfig, tasks: list[Task]) -> tuple[list[Task], dict[str, Any]]:
    """Tasks whose verifiers pass the self-audit (gold passes, mutants fail), and the audit's
    card section. Raises `VerifierAuditError` when a verifier fails too often."""
    if not cfg.audit.enabled:
        return tasks, {"enabled": False}
    from verifiers.audit import audit

    # built without a model: those that need one (the judge) are reported as skipped
    verifiers = [get_verifier(n, cfg.verifier_options.get(n)) for n in cfg.verifiers]
    report = audit(tasks, verifiers, max_failure_rate=cfg.audit.max_failure_rate, max_per_kind=cfg.audit.max_per_kind,
                   options=cfg.verifier_options)
    return report.kept(tasks), report.card()
