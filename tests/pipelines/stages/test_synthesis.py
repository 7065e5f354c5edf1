"""The synthesis stage (`pipelines.stages.synthesis`): tasks synthesized in seed ranges, each a
part with its self-audit (reused when unchanged), and written as a `tasks` dataset with their
stats, the split decided over every range on the tasks' keys."""

from __future__ import annotations

import copy
from pathlib import Path

from data import parts, store
from data.cache import ShardCache
from pipelines import stages
from pipelines.config import load_config
from pipelines.stages import synthesis as synth
from synthesis.splits import assign_splits
from verifiers.audit import audit


def test_synthesize_writes_tasks_and_reuses_the_parts(tmp_path: Path) -> None:
    cfg = load_config(None, {"synthesis.n_tasks": 2, "synthesis.seed": 5, "audit.enabled": False})
    path = stages.synthesize(cfg, tmp_path / "a")
    manifest = store.read_manifest(path)
    tasks = store.read_records(path)
    assert path.parent == tmp_path / "a" / "datasets" / "tasks" and manifest.rows == len(tasks) == 2
    assert all(t.world == "airline" and t.method == "logic_driven" for t in tasks)
    assert manifest.stats["worlds"] == {"airline": 2} and sum(manifest.stats["splits"].values()) == 2
    assert manifest.stats["verifier_audit"] == {"enabled": False} and "cached" not in manifest.stats
    assert manifest.lineage.config_hash == cfg.config_hash() and manifest.lineage.parents == []
    (r,) = synth.seed_ranges(cfg)
    assert synth.synthesize_range(cfg, r, tmp_path / "a").cached  # the range's part is its cache
    # unchanged: the identical dataset is reused, not rewritten
    again = stages.synthesize(cfg, tmp_path / "a")
    assert again == path and store.versions(tmp_path / "a" / "datasets", "tasks") == [path.name]
    # a shared cache (cache_dir) serves a run into another folder
    cache = ShardCache(tmp_path / "shared")
    stages.synthesize(cfg, tmp_path / "b", cache=cache)
    other = stages.synthesize(cfg, tmp_path / "c", cache=cache)
    assert cache.stats.by_stage["synthesize"] == {"hits": 1, "misses": 1, "corrupt": 0}
    assert store.read_table(other).to_pylist() == store.read_table(path).to_pylist()


def test_seed_ranges_cut_large_sources_only() -> None:
    small = load_config(None, {"synthesis.n_tasks": 50, "synthesis.seed": 7})
    assert synth.seed_ranges(small) == [synth.SeedRange(0, 0, 7, 50)]  # as one call of the method made it
    cut = load_config(None, {"synthesis.n_tasks": 7, "synthesis.seed": 7, "synthesis_shard_tasks": 3,
                             "synthesis_mix": [{"method": "constraint_guided", "world": "retail", "n_tasks": 2}]})
    assert synth.seed_ranges(cut) == [synth.SeedRange(0, 0, 7, 3), synth.SeedRange(0, 1, 27, 3),
                                      synth.SeedRange(0, 2, 47, 1), synth.SeedRange(1, 0, 0, 2)]
    assert [len(g) for g in synth.pack(synth.seed_ranges(cut), 3)] == [2, 1, 1]
    assert synth.pack(synth.seed_ranges(cut), 1) == [synth.seed_ranges(cut)]
    assert [len(g) for g in synth.pack(synth.seed_ranges(cut), None)] == [1, 1, 1, 1]
    # unset, the setting leaves every config hash as it was
    assert "synthesis_shard_tasks" not in small.model_dump() and "synthesis_shards" not in small.runner.model_dump()


def test_ranges_add_up_to_one_audit_and_one_split(tmp_path: Path) -> None:
    """Three ranges: the merged self-audit is the audit of all their tasks, and the split is
    the one `assign_splits` gives over all of them."""
    cfg = load_config(None, {"synthesis.n_tasks": 6, "synthesis.seed": 2, "synthesis_shard_tasks": 2,
                             "verifiers": ["state_equivalence", "policy"]})
    ranges = synth.seed_ranges(cfg)
    refs = [synth.synthesize_range(cfg, r, tmp_path) for r in ranges]
    assert len(refs) == 3 and all(r.meta["audit"] for r in refs)
    made = [t for ref in refs for t in parts.read_records(ref, "tasks")]
    assert len({t.initial_state.seed for t in made[:2]} & {t.initial_state.seed for t in made[2:]}) == 0
    whole = audit(made, cfg.verifiers, max_failure_rate=cfg.audit.max_failure_rate,
                  max_per_kind=cfg.audit.max_per_kind, options=cfg.verifier_options, raise_on_failure=False)
    assert synth.merge_reports([r.meta["audit"] for r in refs]).card() == whole.card()
    expected = copy.deepcopy(made)
    assign_splits(expected, cfg.synthesis.test_fraction, cfg.synthesis.seed)
    path = synth.finish(cfg, tmp_path, ranges, refs)
    got = {t.id: t.split for t in store.read_records(path)}
    assert got == {t.id: t.split for t in expected if t.id not in whole.excluded_tasks}
    stats = store.read_manifest(path).stats
    assert stats["emitted"] == 6 and stats["split"]["tasks"] == 6 and stats["verifier_audit"] == whole.card()


def test_audit_keeps_the_tasks_whose_verifiers_pass_it(tasks) -> None:
    cfg = load_config(None, {"verifiers": ["state_equivalence"]})
    kept, card = stages.audit_tasks(cfg, tasks[:3])
    assert [t.id for t in kept] == [t.id for t in tasks[:3]]  # synthesized tasks pass their own audit
    assert card and card != {"enabled": False}
    off = cfg.model_copy(update={"audit": cfg.audit.model_copy(update={"enabled": False})})
    assert stages.audit_tasks(off, tasks[:1]) == (tasks[:1], {"enabled": False})
