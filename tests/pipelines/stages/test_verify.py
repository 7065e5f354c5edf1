"""The verification stage (`pipelines.stages.verify`): every verifier's verdict on the
trajectories of tasks it applies to, through the shard cache, the `verdicts` dataset found
again by its lineage, and re-verification of stored trajectories without any model."""

from __future__ import annotations

from pathlib import Path

import pytest

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


@pytest.mark.slow  # a τ² or whole-flow integration test: make test runs it, the fast tier does not
def test_tau2_tasks_get_tau2s_reward_as_a_second_non_deciding_judge(tmp_path: Path) -> None:
    """A run's verification adds τ²'s evaluator (`tau2`) for tasks of τ² worlds: a verdict on
    every trajectory beside the configured verifiers, never the deciding one; the figures
    count how it agrees with the deciding verdict. A shard cached before it applied gets its
    verdicts on the next run. Tasks from the `tau2` method (τ²'s airline train split: one with
    a change, one with nothing to change), the scripted policy following the reference."""
    import pytest

    pytest.importorskip("tau2")
    from types import SimpleNamespace

    from envs.registry import get_world
    from pipelines import figures
    from pipelines.config import load_config
    from rollout.collector import ModelConfig, RolloutConfig, collect
    from synthesis.base import SynthesisConfig, get_method
    from verifiers.base import primary_verifier, second_judges

    world = get_world("tau2_airline")
    drawn = get_method("tau2")(SynthesisConfig(method="tau2", world="tau2_airline", n_tasks=8, seed=0), world).tasks
    change, answer = (next(t for t in drawn if t.verification.outcome == kind and not t.verification.communicate)
                      for kind in ("change", "answer"))
    tasks = [change, answer]
    cfg = load_config(None, {"synthesis.method": "tau2", "synthesis.world": "tau2_airline"})
    assert second_judges(tasks, cfg.verifiers) == ["tau2"] and second_judges(tasks, [*cfg.verifiers, "tau2"]) == []
    assert all(primary_verifier(t, cfg.verifiers) == "composite" for t in tasks)  # the composite decides
    policy = collect(tasks, RolloutConfig(model=ModelConfig(kind="scripted"), trials=1))
    did = next(t for t in policy if t.task_id == change.id)
    noop = did.model_copy(update={"id": "noop", "steps": [], "final_state_hash": None, "messages": [
        *did.messages[:2], {"role": "assistant", "content": "Sorry, I could not do that."}]})
    trajectories = [*policy, noop]
    by_id = {t.id: t for t in tasks}
    verdicts, cached = stages.verify_shard_cached(by_id, trajectories, cfg, ShardCache(tmp_path / "cache"))
    tau2 = {v.trajectory_id: v for v in verdicts if v.verifier == "tau2"}
    assert not cached and set(tau2) == {t.id for t in trajectories}
    assert all(tau2[t.id].passed for t in policy) and not tau2[noop.id].passed
    assert "τ²: database differs from the gold actions' end state" in tau2[noop.id].reasons
    got = figures.agreement(cfg, tasks, trajectories, verdicts)["tau2"]
    # the change and the question ("Your request is complete." closes an answer; it claims no
    # change): both pass; the no-op: both fail
    assert {c: got[c] for c in figures.AGREEMENT_CLASSES} == {
        "both_pass": 2, "only_second": 0, "only_deciding": 0, "both_fail": 1}
    assert got["reasons"]["only_second"] == {}
    fig = figures.shard_figures(cfg, tasks, trajectories, verdicts, SimpleNamespace(sft=[], rl=[], drops={}, stats={}))
    assert fig["agreement"]["tau2"] == got
    # a shard cached without τ²'s verdicts gets them (and only them) now
    cache = ShardCache(tmp_path / "old")
    old = [v for v in verdicts if v.verifier != "tau2"]
    cache.put("verify", "k", "verdicts", old)
    healed, cached = stages.verify_shard_cached(by_id, trajectories, cfg, cache, key="k")
    assert not cached and healed[:len(old)] == old and {v.trajectory_id for v in healed[len(old):]} == set(tau2)
    assert stages.verify_shard_cached(by_id, trajectories, cfg, cache, key="k") == (healed, True)
