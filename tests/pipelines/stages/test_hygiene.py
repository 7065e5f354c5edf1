"""The release hygiene of curated rows (`pipelines.stages.hygiene`): duplicates dropped and
reported, hygiene that can be switched off, each task's world values found once per initial
state, and the train-vs-test overlap report."""

from __future__ import annotations

from pathlib import Path

import pytest

from pipelines import stages
from pipelines.stages.hygiene import TrainVsTest

SHARED = "please move my reservation to the early morning flight on friday and add two checked bags to it today"


def test_clean_rows_drops_an_exact_duplicate(curated, tmp_path: Path) -> None:
    cfg, _, selection, tasks, _ = curated
    rows = stages.release_rows(selection, tasks, cfg.verifiers)["sft"]
    clean, card = stages.clean_rows(cfg, tmp_path, "sft", [dict(r) for r in rows], tasks, selection)
    again = dict(rows[0], trajectory_id=rows[0]["trajectory_id"] + "-again")
    with_dup, dup_card = stages.clean_rows(cfg, tmp_path, "sft", [dict(r) for r in rows] + [again], tasks, selection)
    assert [r["trajectory_id"] for r in with_dup] == [r["trajectory_id"] for r in clean]
    assert dup_card["dedup"]["exact_duplicates"] == card["dedup"]["exact_duplicates"] + 1
    assert dup_card["dedup"]["input"] == card["dedup"]["input"] + 1 and "train_vs_test" in dup_card
    off = cfg.model_copy(update={"hygiene": cfg.hygiene.model_copy(update={"enabled": False})})
    assert stages.clean_rows(off, tmp_path, "sft", rows + [again]) == (rows + [again], {"enabled": False})


def test_world_values_are_read_once_per_initial_state(curated) -> None:
    _, _, _, tasks, _ = curated
    of = stages.synthetic_of({t.id: t for t in tasks})
    first = of({"task_id": tasks[0].id})
    assert first is not None and of({"task_id": tasks[0].id, "split": "x"}) is first
    assert of({"task_id": "no-such-task"}) is None


def test_train_vs_test_reports_the_overlap_of_the_splits(monkeypatch: pytest.MonkeyPatch) -> None:
    rows = [{"id": "t1", "split": "test", "instruction": SHARED},
            {"id": "a", "split": "train", "instruction": SHARED},
            {"id": "b", "split": "train", "instruction": "what is the weather like on the moon in the northern winter"}]
    check = TrainVsTest()
    for r in rows:
        check.see(r)
    report = check.check([rows[:2], rows[2:]])
    assert report["test_items"] == 1 and report["checked"] == 2 and report["flagged_any"] == 1
    assert report["longest_match"] >= len(SHARED.split()) - 1
    none = TrainVsTest()
    assert none.check([rows[1:]]) == {"checked": 2, "test_items": 0}
    monkeypatch.setattr(TrainVsTest, "MAX_TEST_ITEMS", 1)
    bounded = TrainVsTest()
    for r in (rows[0], dict(rows[0], id="t2")):
        bounded.see(r)
    assert bounded.check([rows[1:]])["test_items_indexed"] == 1 and bounded.test_rows == 2


def test_taus_test_split_is_checked_by_default(tmp_path: Path) -> None:
    """With the tau2 extra, a run's release hygiene checks rows against τ²'s test tasks (on by
    default; `hygiene.tau2_test: false` turns it off) and the card section counts the drops."""
    pytest.importorskip("tau2")
    from envs.tau2_world import tau2_task_text, tau2_tasks
    from pipelines.config import RunConfig
    from pipelines.stages.hygiene import ReleaseHygiene, eval_sets

    cfg = RunConfig()
    assert cfg.hygiene.tau2_test and cfg.hygiene.similarity == 0.5
    assert {"tau2_airline_test", "tau2_retail_test", "tau2_telecom_test"} <= {s.name for s in eval_sets(cfg)}
    off = cfg.model_copy(update={"hygiene": cfg.hygiene.model_copy(update={"tau2_test": False})})
    assert eval_sets(off) == []
    leaked = {"id": "leak", "instruction": tau2_task_text(tau2_tasks("retail", "test")[0]), "tool_calls": []}
    fine = {"id": "fine", "instruction": "Where is my parcel? It left the depot on Monday.", "tool_calls": []}
    hygiene = ReleaseHygiene(cfg, tmp_path, "rl")
    assert [r["id"] for r in hygiene.filter([leaked, fine])] == ["fine"]
    card = hygiene.card({}, {})["contamination"]
    assert card["similarity"] == 0.5 and card["eval_sets"]["tau2_retail_test"]["removed"] == 1
    assert card["eval_sets"]["tau2_airline_test"]["removed"] == 0
