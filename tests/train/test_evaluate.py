"""Before/after evaluation (`train.evaluate`): a release's held-out tasks (through the
lineage for an sft release), and both models judged on them (slow)."""

from __future__ import annotations

from pathlib import Path

import pytest

from data import store
from train.data import load_release


def test_release_tasks_for_evaluation(releases: dict[str, Path]) -> None:
    from train.evaluate import release_tasks

    rl_test = release_tasks(releases["rl"], "test")
    sft_test = release_tasks(releases["sft"], "test")  # task ids looked up through the lineage
    assert all(t.split == "test" for t in rl_test + sft_test) and sft_test
    assert {t.id for t in sft_test} == set(load_release(releases["sft"], "test")["task_id"])
    with pytest.raises(store.DatasetError):
        release_tasks(releases["rl"].parent, "test")


@pytest.mark.slow
def test_before_after_evaluation_runs_both_models(releases: dict[str, Path], tiny_model: Path) -> None:
    from train.evaluate import compare

    r = compare(releases["sft"], str(tiny_model), base=str(tiny_model), max_turns=1, max_tasks=1,
                sampling=None)
    for side in ("base", "trained"):
        assert r[side]["tasks"] == 1 and r[side]["trajectories"] == 1
        assert 0.0 <= r[side]["pass_rate"] <= 1.0 and r[side]["per_task"][0]["verifier"] == "composite"
    assert r["delta"]["pass_rate"] == 0.0  # the same model on both sides, greedy
    with pytest.raises(FileNotFoundError):
        compare(releases["sft"], "/nonexistent/model", max_tasks=1)


def test_release_tasks_of_an_sft_recovery_release(releases: dict[str, Path]) -> None:
    """An `sft_recovery` release names its tasks as `sft` does: looked up through its lineage."""
    from train.evaluate import release_tasks

    tasks = release_tasks(releases["sft_recovery"], "train")
    assert tasks and {t.id for t in tasks} == set(load_release(releases["sft_recovery"], "train")["task_id"])
