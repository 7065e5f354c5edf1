"""bench/train_value.py resumes (as `trajforge teach` does): an arm's SFT model and its
evaluation (`train.value.evaluation_before`) are reused only when their inputs are the same
(the arm's rows, the stage config, the evaluation settings and base)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.train_value import trained_before
from data import store
from pipelines.config import RunConfig
from train.lineage import write_run_record
from train.value import (
    arm_dataset,
    eval_settings,
    evaluation_before,
    held_out_selection,
    model_weights,
)


def test_an_sft_run_is_reused_only_for_the_same_rows_and_config(releases: dict[str, Path], tmp_path: Path) -> None:
    stage = RunConfig().sft.model_copy(update={"max_steps": 3})
    arm = arm_dataset(releases["sft"], tmp_path, "a", rows=2, seed=0)
    run = tmp_path / "train" / "sft-a"
    manifest = store.read_manifest(arm)
    write_run_record(run, "sft", arm, manifest, stage.model_dump())
    assert trained_before(run, arm, stage) is None  # still running
    write_run_record(run, "sft", arm, manifest, stage.model_dump(), status="done", final_model=str(run / "final"))
    assert trained_before(run, arm, stage) == str(run / "final")
    again = arm_dataset(releases["sft"], tmp_path, "a", rows=2, seed=0)  # the same rows, a new version
    assert store.read_manifest(again).version != manifest.version
    assert trained_before(run, again, stage) == str(run / "final")
    assert trained_before(run, arm_dataset(releases["sft"], tmp_path, "a", rows=2, seed=1), stage) is None
    assert trained_before(run, arm, stage.model_copy(update={"max_steps": 4})) is None
    assert trained_before(tmp_path / "nowhere", arm, stage) is None


def test_arm_lengths_count_whole_rows_and_the_max_length_cuts_none(releases: dict[str, Path], tmp_path: Path) -> None:
    from bench.train_value import arm_lengths
    from train.data import load_release
    from train.release_card import embedded_tokenizer, rows_lengths
    from train.sft import fitted_max_length

    arm = arm_dataset(releases["sft"], tmp_path, "a", rows=3, seed=0)
    rows = list(load_release(arm, "train"))
    heads = [head for head, _ in rows_lengths(embedded_tokenizer(), rows, "sft")]
    lengths = arm_lengths(arm)
    assert len(lengths) == 3 and all(n > h for n, h in zip(lengths, heads, strict=True))
    fit = fitted_max_length(max(lengths), None)
    assert fit >= max(lengths) and fit % 256 == 0 and fit - max(lengths) < 256
    assert fitted_max_length(max(lengths), 1000) == 1000  # never past the model's positions


def test_an_evaluation_is_reused_only_for_the_same_settings_and_weights(releases: dict[str, Path],
                                                                        tmp_path: Path) -> None:
    model = tmp_path / "train" / "sft-a" / "final"
    model.mkdir(parents=True)
    (model / "model.safetensors").write_bytes(b"weights")
    args = {"max_turns": 8, "max_tasks": 40, "max_dialogues": 40}  # evaluate_pair's arguments
    settings = eval_settings(**args)  # as its result records them
    tasks, scored = held_out_selection(releases["sft"], "test", 40, 40)
    result = {"settings": settings, "base": {"model": "embedded"}, "task_ids": [t.id for t in tasks],
              "dialogue_ids": [t.id for t in scored],
              "trained": {"model": str(model), "weights": model_weights(str(model))}}
    kept = model.parent / f"eval-{store.read_manifest(releases['sft']).version}.json"
    # the same settings once judged other tasks (e.g. before a cap took each world in turn)
    older = {k: v for k, v in settings.items() if k != "max_tokens"}  # judged before the turn budget was recorded
    for other in ({"task_ids": ["other"]}, {"dialogue_ids": ["other"]}, {"task_ids": None}, {"settings": older}):
        kept.write_text(json.dumps({**result, **other}))
        assert evaluation_before(releases["sft"], str(model), "embedded", args) is None
    kept.unlink()
    assert evaluation_before(releases["sft"], str(model), "embedded", args) is None
    (model.parent / f"eval-{store.read_manifest(releases['sft']).version}.json").write_text(json.dumps(result))
    assert evaluation_before(releases["sft"], str(model), "embedded", args) == result
    assert evaluation_before(releases["sft"], str(model), "embedded", {**args, "max_turns": 12}) is None
    assert evaluation_before(releases["sft"], str(model), str(tmp_path / "other-base"), args) is None
    # kept for another version of the same held-out rows (a rerun whose config changed
    # republished them): as good; for other held-out tasks: not
    (model.parent / f"eval-{store.read_manifest(releases['sft']).version}.json").rename(
        model.parent / "eval-20000101T000000000000Z.json")
    assert evaluation_before(releases["sft"], str(model), "embedded", args) == result
    (model.parent / "eval-20000101T000000000000Z.json").write_text(json.dumps({**result, "task_ids": ["other"]}))
    assert evaluation_before(releases["sft"], str(model), "embedded", args) is None
    (model.parent / "eval-20000101T000000000000Z.json").write_text(json.dumps(result))
    (model / "model.safetensors").write_bytes(b"trained again")  # the same folder, other weights
    assert evaluation_before(releases["sft"], str(model), "embedded", args) is None


@pytest.mark.slow  # four tiny runs through the real flow
def test_the_data_phase_rerun_keeps_its_releases(tmp_path: Path) -> None:
    """Each curation's run has its own releases: a rerun finds them unchanged (same versions),
    which is what lets the arms' evaluations be read back."""
    from bench.train_value import data_phase

    first = data_phase(4, 7, 1, 0.4, tmp_path)
    assert first["outcome"]["sft"] != first["topology"]["sft"]
    assert data_phase(4, 7, 1, 0.4, tmp_path) == first
