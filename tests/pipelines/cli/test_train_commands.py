"""The training commands (`pipelines.cli.train_commands`: `train`, `eval`, `runs`): a wrong
kind, dataset, model folder or count is one `error:` line before Prefect starts, and `runs`
lists the runs recorded on a release."""

from __future__ import annotations

import importlib.util
import json
from collections.abc import Callable
from pathlib import Path

import pytest
from typer.testing import CliRunner

from data import store
from data.schema import SFT_RECOVERY_SCHEMA, SFT_SCHEMA
from pipelines import cli

Fails = Callable[..., str]  # the `fails` fixture (tests/pipelines/conftest.py)


def _empty_sft(root: Path) -> Path:
    with store.DatasetWriter(root, "sft", "sft", SFT_SCHEMA, 1) as w:
        return w.commit(store.Lineage())


def test_train_refuses_an_unknown_kind_and_a_dataset_of_the_wrong_kind(tmp_path: Path, fails: Fails) -> None:
    verdicts = store.write_records(tmp_path / "datasets", "verdicts", "verdicts", [], store.Lineage(config_hash="x"))
    out = ["--out", str(tmp_path / "out")]
    fails(["train", "sfx", *out], "unknown training kind 'sfx'")
    fails(["train", "sft", *out, "--dataset", str(verdicts)], "--dataset takes a sft or sft_recovery dataset")
    fails(["train", "grpo", *out], "no release under", "pass --dataset")


def test_eval_checks_its_dataset_model_and_counts(tmp_path: Path, fails: Fails) -> None:
    sft = _empty_sft(tmp_path / "releases")
    verdicts = store.write_records(tmp_path / "datasets", "verdicts", "verdicts", [], store.Lineage(config_hash="x"))
    model = tmp_path / "model"
    model.mkdir()
    fails(["eval", "--dataset", str(verdicts), "--model", str(model)],
          "--dataset takes a rl or sft or sft_recovery dataset")
    fails(["eval", "--dataset", str(sft), "--model", str(tmp_path / "nope")], "--model", "no model folder there")
    fails(["eval", "--dataset", str(sft), "--model", str(model), "--trials", "0"], "--trials must be at least 1, got 0")
    fails(["eval", "--dataset", str(sft), "--model", str(model), "--max-tasks", "0"], "--max-tasks must be at least 1")


def test_runs_lists_the_runs_recorded_on_a_release(tmp_path: Path, fails: Fails) -> None:
    from train.lineage import write_run_record

    fails(["runs", "--out", str(tmp_path / "empty")], "no release under")
    sft = _empty_sft(tmp_path / "releases")
    train = tmp_path / "train"
    write_run_record(train / "sft-1", "sft", sft, store.read_manifest(sft), {}, status="done", steps=3, final_loss=0.5)
    result = CliRunner().invoke(cli.app, ["runs", "--dataset", str(sft), "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    listed = json.loads(result.stdout.strip().splitlines()[-1])
    assert listed == [{"release": str(sft), "run_dir": str(train / "sft-1"), "stage": "sft", "status": "done"}]


def test_train_sft_takes_an_sft_recovery_release(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """`trajforge train sft --dataset <sft_recovery release>` reaches the train flow (which
    keeps the failed turns out of the loss: `train.sft.check_loss_marks`); grpo refuses it."""
    with store.DatasetWriter(tmp_path / "releases", "sft_recovery", "sft_recovery", SFT_RECOVERY_SCHEMA, 3) as w:
        recovery = w.commit(store.Lineage())
    seen: list[tuple[str, str]] = []

    class Flows:
        @staticmethod
        def train_flow(kind: str, dataset: str, *args: object, **kwargs: object) -> dict[str, str]:
            seen.append((kind, dataset))
            return {"status": "done"}

    monkeypatch.setattr(cli, "_flows", lambda: Flows)
    result = CliRunner().invoke(cli.app, ["train", "sft", "--dataset", str(recovery), "--out", str(tmp_path / "out")])
    assert result.exit_code == 0, result.output
    assert seen == [("sft", str(recovery))]
    result = CliRunner().invoke(cli.app, ["train", "grpo", "--dataset", str(recovery), "--out", str(tmp_path / "out")])
    assert result.exit_code == 1 and "takes a rl dataset" in result.stderr


def test_eval_on_a_benchmark_checks_its_options(tmp_path: Path, fails: Fails) -> None:
    sft = _empty_sft(tmp_path / "releases")
    fails(["eval"], "give --dataset (a release) or --benchmark")
    fails(["eval", "--dataset", str(sft)], "--model: give the trained model folder")
    fails(["eval", "--benchmark", "tau2:airline", "--dataset", str(sft)], "--benchmark and --dataset: give one")
    fails(["eval", "--benchmark", "swe:lite"], "--benchmark: unknown benchmark 'swe:lite'")
    fails(["eval", "--benchmark", "tau2:airline", "--trials", "0"], "--trials must be at least 1, got 0")
    if importlib.util.find_spec("tau2") is not None:  # τ²'s user simulator needs an OpenAI-compatible model
        fails(["eval", "--benchmark", "tau2:airline", "--model", "scripted", "--tau2-user"], "OpenAI-compatible")


@pytest.mark.slow  # a τ² or whole-flow integration test: make test runs it, the fast tier does not
def test_eval_on_tau2s_test_tasks_with_the_scripted_policy(tmp_path: Path, no_prefect: None) -> None:
    """`trajforge eval --benchmark tau2:airline --model scripted`: τ²'s test tasks through the
    rollout engine, judged by τ²'s evaluator; the scripted policy follows τ²'s gold: pass^1 1.0."""
    import pytest

    pytest.importorskip("tau2")
    result = CliRunner().invoke(cli.app, ["eval", "--benchmark", "tau2:airline", "--model", "scripted",
                                          "--max-tasks", "1", "--trials", "2"])
    assert result.exit_code == 0, (result.output, result.exception)
    out = json.loads(result.stdout.strip().splitlines()[-1])
    assert (out["benchmark"], out["split"], out["tasks"], out["trials"]) == ("tau2:airline", "test", 1, 2)
    assert out["pass_hat_k"] == {"1": 1.0, "2": 1.0} and out["model"]["kind"] == "scripted"
    assert "pass^2" in result.stdout
    bad = CliRunner().invoke(cli.app, ["eval", "--benchmark", "tau2:airline", "--model", str(tmp_path / "nope")])
    assert bad.exit_code == 1 and "not 'embedded', 'scripted' or a model folder" in bad.stderr
