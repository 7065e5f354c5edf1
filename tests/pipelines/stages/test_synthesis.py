"""The synthesis stage (`pipelines.stages.synthesis`): tasks written as a `tasks` dataset
with their stats and self-audit, from the shard cache when nothing changed (and then the
identical dataset reused)."""

from __future__ import annotations

from pathlib import Path

from data import store
from data.cache import ShardCache
from pipelines import stages
from pipelines.config import load_config


def test_synthesize_writes_tasks_and_reuses_the_cache(tmp_path: Path) -> None:
    cfg = load_config(None, {"synthesis.n_tasks": 2, "synthesis.seed": 5, "audit.enabled": False})
    cache = ShardCache(tmp_path / "cache")
    path = stages.synthesize(cfg, tmp_path, cache=cache)
    manifest = store.read_manifest(path)
    tasks = store.read_records(path)
    assert path.parent == tmp_path / "datasets" / "tasks" and manifest.rows == len(tasks) == 2
    assert all(t.world == "airline" and t.method == "logic_driven" for t in tasks)
    assert manifest.stats["worlds"] == {"airline": 2} and sum(manifest.stats["splits"].values()) == 2
    assert manifest.stats["verifier_audit"] == {"enabled": False} and "cached" not in manifest.stats
    assert manifest.lineage.config_hash == cfg.config_hash() and manifest.lineage.parents == []
    assert cache.stats.by_stage["synthesize"] == {"hits": 0, "misses": 1, "corrupt": 0}
    # unchanged: the tasks come from the cache, and the identical dataset is reused, not rewritten
    again = stages.synthesize(cfg, tmp_path, cache=cache)
    assert again == path and store.versions(tmp_path / "datasets", "tasks") == [path.name]
    assert cache.stats.by_stage["synthesize"]["hits"] == 1


def test_audit_keeps_the_tasks_whose_verifiers_pass_it(tasks) -> None:
    cfg = load_config(None, {"verifiers": ["state_equivalence"]})
    kept, card = stages.audit_tasks(cfg, tasks[:3])
    assert [t.id for t in kept] == [t.id for t in tasks[:3]]  # synthesized tasks pass their own audit
    assert card and card != {"enabled": False}
    off = cfg.model_copy(update={"audit": cfg.audit.model_copy(update={"enabled": False})})
    assert stages.audit_tasks(off, tasks[:1]) == (tasks[:1], {"enabled": False})
