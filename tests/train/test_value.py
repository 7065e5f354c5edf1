"""Base against trained on held-out tasks (`train.value`): intervals, paired differences,
arms cut from a release, and one evaluation written beside its run and onto the card."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from data import store
from train.value import (
    arm_dataset,
    bootstrap_interval,
    evaluate_pair,
    heldout_dialogues,
    paired_difference,
)


def test_bootstrap_interval_brackets_the_mean_and_narrows_with_more_tasks() -> None:
    assert bootstrap_interval([0.5] * 10) == (0.5, 0.5)
    few = bootstrap_interval([0, 1] * 5)
    many = bootstrap_interval([0, 1] * 200)
    assert few[0] < 0.5 < few[1] and many[0] < 0.5 < many[1]
    assert many[1] - many[0] < few[1] - few[0]
    with pytest.raises(ValueError):
        bootstrap_interval([])


def test_paired_difference_says_whether_the_interval_excludes_zero() -> None:
    base = {f"t{i}": 0.0 for i in range(40)}
    better = {f"t{i}": 1.0 if i % 2 else 0.0 for i in range(40)}
    d = paired_difference(base, better)
    assert d["mean"] == 0.5 and d["excludes_zero"] and d["ci95"][0] > 0 and d["tasks"] == 40
    same = paired_difference(base, dict(base))
    assert same["mean"] == 0.0 and not same["excludes_zero"]
    noisy = paired_difference({"a": 0.0, "b": 1.0}, {"a": 1.0, "b": 0.0})
    assert not noisy["excludes_zero"]
    with pytest.raises(ValueError):
        paired_difference({"a": 1.0}, {"b": 1.0})


def test_an_arm_keeps_the_rows_its_rule_accepts_up_to_the_count(releases: dict[str, Path], tmp_path: Path) -> None:
    rows = store.read_table(releases["sft"]).to_pylist()
    train = [r for r in rows if r["split"] == "train"]
    refs = [r for r in train if r["reference"]]
    arm = arm_dataset(releases["sft"], tmp_path, "reference", rows=2, keep=lambda r: bool(r["reference"]))
    kept = store.read_table(arm).to_pylist()
    manifest = store.read_manifest(arm)
    assert len(kept) == min(2, len(refs)) and all(r["reference"] and r["split"] == "train" for r in kept)
    assert manifest.stats["arm"] == "reference" and manifest.stats["eligible"] == len(refs)
    assert manifest.lineage.parents == [str(releases["sft"].resolve())]
    again = arm_dataset(releases["sft"], tmp_path / "again", "reference", rows=2, keep=lambda r: bool(r["reference"]))
    assert [r["trajectory_id"] for r in store.read_table(again).to_pylist()] == [r["trajectory_id"] for r in kept]
    everything = arm_dataset(releases["sft"], tmp_path, "all", held_out=True)
    assert store.read_manifest(everything).rows == len(rows)
    # a run's clean rows and its recoveries together: an sft_recovery arm whose failed turns stay marked
    recoveries = store.read_table(releases["sft_recovery"]).to_pylist()
    both = arm_dataset([releases["sft"], releases["sft_recovery"]], tmp_path, "both")
    manifest = store.read_manifest(both)
    assert manifest.kind == "sft_recovery" and len(manifest.lineage.parents) == 2
    assert manifest.rows == len(train) + sum(r["split"] == "train" for r in recoveries)
    from train.data import load_release, loss_marked_turns

    marked = loss_marked_turns(load_release(releases["sft_recovery"], "train"))
    assert marked > 0 and loss_marked_turns(load_release(both, "train")) == marked


def test_heldout_dialogues_are_the_test_reference_rows(releases: dict[str, Path]) -> None:
    rows = store.read_table(releases["sft"]).to_pylist()
    test_ids = list(dict.fromkeys(r["task_id"] for r in rows if r["split"] == "test" and r["reference"]))
    dialogues = heldout_dialogues(releases["sft"], [*test_ids, "task-not-there"])
    assert [d.task_id for d in dialogues] == test_ids
    assert all(d.tools and any(m["role"] == "assistant" for m in d.messages) for d in dialogues)


@pytest.mark.slow
def test_evaluate_pair_judges_both_models_and_writes_beside_the_run(releases: dict[str, Path], tiny_model: Path,
                                                                    tmp_path: Path) -> None:
    from train.lineage import write_run_record

    release = tmp_path / "releases" / "sft" / releases["sft"].name  # a copy: its card is rewritten
    shutil.copytree(releases["sft"], release)
    run = tmp_path / "train" / "sft-x"
    shutil.copytree(tiny_model, run / "final")
    write_run_record(run, "sft", release, store.read_manifest(release), {}, status="done", steps=1)
    result = evaluate_pair(release, str(run / "final"), base=str(tiny_model), max_tasks=1, max_turns=2)
    for side in ("base", "trained"):
        assert 0 <= result[side]["next_action"]["accuracy"] <= 1
        assert result[side]["episodes"]["trajectories"] == 1
        assert len(result[side]["next_action"]["interval"]["ci95"]) == 2
    # the same weights: every turn and episode the same, so the paired differences are 0
    assert result["delta"]["next_action"]["mean"] == 0.0 and result["delta"]["pass_rate"]["mean"] == 0.0
    written = json.loads(Path(result["written_to"]).read_text())
    assert written["settings"]["max_tasks"] == 1 and written["tasks"] == 1
    from train.evaluate import read_episodes

    for side in ("base", "trained"):  # the episodes each pass rate was computed from, beside the run
        kept = read_episodes(run / f"episodes-{store.read_manifest(release).version}-{side}.jsonl")
        assert [t.task_id for t, _ in kept] == written["task_ids"]
    card = (release / "README.md").read_text()
    assert "sft-x" in card


def test_a_run_on_an_arm_shows_on_the_card_of_the_release_it_was_cut_from(releases: dict[str, Path],
                                                                         tmp_path: Path) -> None:
    from train.lineage import RUNS_SECTION, refresh_release_card, runs_on_release, write_run_record

    release = tmp_path / "releases" / "sft" / releases["sft"].name  # a copy: its card is rewritten
    shutil.copytree(releases["sft"], release)
    arm = arm_dataset(release, tmp_path / "arms", "topology", rows=1)
    run = tmp_path / "train" / "sft-topology"
    write_run_record(run, "sft", arm, store.read_manifest(arm), {}, status="done", steps=4, final_loss=0.75)
    (run / "eval-v1.json").write_text(json.dumps({
        "tasks": 3, "split": "test", "release": {"name": "sft", "version": "v1"},
        "base": {"next_action": {"accuracy": 0.1}, "episodes": {"pass_rate": 0.0}},
        "trained": {"next_action": {"accuracy": 0.6, "turns": 20}, "episodes": {"pass_rate": 0.3333}},
        "delta": {"next_action": {"mean": 0.5, "ci95": [0.3, 0.7]}, "pass_rate": {"mean": 0.3333, "ci95": [0.0, 1.0]}}}))
    assert [r["arm"] for r in runs_on_release(release)] == [{"name": "topology", "rows": 1}]
    refresh_release_card(arm, [tmp_path / "train"])  # as a run or an evaluation of it does: the arm's card and
    card = (release / "README.md").read_text()  # the card of the release it was cut from
    assert "sft-topology" in (arm / "README.md").read_text()
    row = next(line for line in card[card.index(f"## {RUNS_SECTION}"):].splitlines() if "sft-topology" in line)
    assert "| topology | 1 | done | 4 |" in row and "| 0.75 |" in row
    assert "0.1 → 0.6 (Δ +0.500, 95% CI +0.300 … +0.700) on 20 turns" in row
    assert "0.0 → 0.3333 (Δ +0.333, 95% CI +0.000 … +1.000) on 3 test tasks" in row


@pytest.mark.slow  # a τ² integration test: τ²'s tasks, database and evaluator
def test_benchmark_pair_judges_base_and_trained_on_tau2_tasks_and_keeps_the_result(
        tiny_model: Path, releases: dict[str, Path], tmp_path: Path) -> None:
    pytest.importorskip("tau2")
    from train.lineage import write_run_record
    from train.value import benchmark_pair

    run = tmp_path / "train" / "sft-a"
    shutil.copytree(tiny_model, run / "final")
    write_run_record(run, "sft", releases["sft"], store.read_manifest(releases["sft"]), {}, status="done",
                     final_model=str(run / "final"))
    r = benchmark_pair("tau2:airline", str(run / "final"), base=str(tiny_model), max_tasks=2, max_turns=2)
    assert r["tasks"] == 2 and r["base"]["tasks"] == 2 and r["base"]["model"]["options"]["path"] == str(tiny_model)
    # the same weights under two names play the same greedy episodes (some τ² tasks pass on doing nothing)
    assert r["trained"]["pass_rate"] == r["base"]["pass_rate"] and r["delta"]["mean"] == 0.0
    assert set(r["trained"]["interval"]) >= {"mean", "ci95"}
    kept = json.loads((run / "benchmark-tau2-airline-test.json").read_text())
    assert kept["tasks"] == 2 and kept["pass_hat_k"] == {"1": r["trained"]["pass_rate"]}
    again = benchmark_pair("tau2:airline", str(run / "final"), max_tasks=2, max_turns=2, base_result=r["base"])
    assert again["base"] is r["base"]
