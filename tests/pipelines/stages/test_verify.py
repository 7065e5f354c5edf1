"""The verification stage (`pipelines.stages.verify`): every verifier's verdict on the
trajectories of tasks it applies to, through the shard cache, the `verdicts` dataset found
again by its lineage, and re-verification of stored trajectories without any model."""

from __future__ import annotations

from pathlib import Path

from data import store
from data.cache import ShardCache
from pipelines import stages


def test_verify_shard_judges_every_trajectory_with_every_verifier(small_run) -> None:
    tasks = {t.id: t for t in small_run.tasks}
    verdicts = stages.verify_shard(tasks, small_run.trajectories, ["state_equivalence", "policy"])
    assert len(verdicts) == 2 * len(small_run.trajectories)
    assert {(v.trajectory_id, v.verifier) for v in verdicts} == {
        (t.id, n) for t in small_run.trajectories for n in ("state_equivalence", "policy")}
    gold = {t.id for t in small_run.trajectories if t.reference}
    assert all(v.passed for v in verdicts if v.trajectory_id in gold and v.verifier == "state_equivalence")
    assert stages.verdict_stats(verdicts) == {"verdicts": len(verdicts), "passed": sum(v.passed for v in verdicts)}


def test_verify_shard_cached_hits_on_the_same_shard(small_run, tmp_path: Path) -> None:
    tasks = {t.id: t for t in small_run.tasks}
    cache = ShardCache(tmp_path / "cache")
    first, cached = stages.verify_shard_cached(tasks, small_run.trajectories, small_run.cfg, cache)
    assert not cached and first == stages.verify_shard(tasks, small_run.trajectories, small_run.cfg.verifiers)
    again, cached = stages.verify_shard_cached(tasks, small_run.trajectories, small_run.cfg, cache)
    assert cached and again == first
    fewer, cached = stages.verify_shard_cached(tasks, small_run.trajectories[:1], small_run.cfg, cache)
    assert not cached and {v.trajectory_id for v in fewer} == {small_run.trajectories[0].id}


def test_verdicts_are_found_by_the_trajectories_they_judged(small_run, tmp_path: Path) -> None:
    paths = small_run.paths
    assert stages.find_verdicts_for(small_run.out, paths["trajectories"]) == paths["verdicts"]
    assert stages.find_verdicts_for(small_run.out, tmp_path / "trajectories" / "v0") is None
    assert stages.find_verdicts_for(tmp_path, paths["trajectories"]) is None  # no verdicts under that out
    manifest = store.read_manifest(paths["verdicts"])
    assert manifest.stats == stages.verdict_stats(small_run.verdicts)
    assert manifest.lineage.parents == [str(paths["tasks"]), str(paths["trajectories"])]


def test_reverify_rescores_stored_trajectories(small_run, tmp_path: Path) -> None:
    path, diff = stages.reverify(small_run.cfg, tmp_path, small_run.paths["trajectories"], "state_equivalence",
                                 verdicts_path=small_run.paths["verdicts"])
    totals = diff.totals()
    n = len(small_run.trajectories)
    assert totals["trajectories"] == totals["compared"] == n
    assert totals["pass_to_fail"] == totals["fail_to_pass"] == 0  # the same verifier version: no flips
    manifest = store.read_manifest(path)
    assert manifest.rows == n and manifest.stats["reverify"] == totals
    # the tasks were found through the trajectories' lineage
    assert manifest.lineage.parents == [str(small_run.paths[k]) for k in ("trajectories", "tasks", "verdicts")]
    assert (path / "diff.md").is_file() and (path / "diff.json").is_file()
