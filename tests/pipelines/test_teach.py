"""`trajforge teach` (`pipelines.teach.teach_flow`) through a real Prefect flow run: the run,
SFT on its sft release, base vs SFT on the held-out tasks onto the card, and a rerun that
trains and judges nothing again."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pipelines.config import load_config
from tests.tiny_model import make_tiny_model

CONFIG = Path(__file__).parents[2] / "configs" / "tiny-scripted.yaml"


def test_stage_key_changes_with_the_config_and_not_otherwise(tmp_path: Path) -> None:
    from data import store
    from data.schema import SFT_SCHEMA
    from pipelines.teach import stage_key

    writer = store.DatasetWriter(tmp_path, "sft", "sft", SFT_SCHEMA, 3)
    release = writer.commit(store.Lineage())
    assert stage_key(release, {"lr": 1}) == stage_key(release, {"lr": 1}) != stage_key(release, {"lr": 2})


def test_teach_refuses_an_unknown_benchmark() -> None:
    with pytest.raises(ValueError, match="unknown benchmark 'swe:lite'"):
        load_config(CONFIG, {"teach.benchmarks": ["swe:lite"]})


@pytest.mark.slow
def test_teach_trains_judges_and_reuses_what_it_made(tmp_path: Path) -> None:
    from pipelines import flows
    from pipelines.teach import teach_flow

    pytest.importorskip("tau2")
    tiny = make_tiny_model(tmp_path / "tiny")
    cfg = load_config(CONFIG, {"sft.model": str(tiny), "sft.max_steps": 1, "teach.eval_max_tasks": 1,
                               "teach.eval_max_turns": 2, "teach.benchmarks": ["tau2:airline"],
                               "teach.benchmark_max_tasks": 1})
    out = tmp_path / "out"
    summary = flows.execute(teach_flow, cfg, str(out))
    sft = summary["training"]["sft"]
    model = Path(sft["model"])
    assert (model / "model.safetensors").is_file() and summary["release"] == "published"
    assert set(sft) >= {"next_action", "pass_rate"} and sft["tasks"] == 1
    for figure in ("next_action", "pass_rate"):
        assert 0 <= sft[figure]["trained"] <= 1 and len(sft[figure]["ci95"]) == 2
    run = json.loads((model.parent / "run.json").read_text())
    assert run["status"] == "done" and run["steps"] == 1
    tau2 = sft["benchmarks"]["tau2:airline"]  # τ²'s own test task, base and SFT model, by τ²'s evaluator
    assert tau2["tasks"] == 1 and 0 <= tau2["trained"] <= 1 and len(tau2["ci95"]) == 2
    pair = model.parent / "pair-benchmark-tau2-airline-test.json"
    assert json.loads(pair.read_text())["settings"]["base"] == str(tiny)
    card = (Path(summary["releases"]["sft"]) / "README.md").read_text()
    row = next(line for line in card.splitlines() if line.startswith(f"| {model.parent.name} |"))
    assert "| sft |" in row and "→" in row and "tau2:airline test" in row
    # the rerun: the same release (unchanged), the same run folder, nothing trained or judged again
    files = (model / "model.safetensors", Path(sft["eval"]), pair)
    stamp = [f.stat().st_mtime_ns for f in files]
    again = flows.execute(teach_flow, cfg, str(out))
    assert again["release"] == "unchanged" and again["training"]["sft"]["model"] == str(model)
    assert [f.stat().st_mtime_ns for f in files] == stamp
    assert again["training"]["sft"]["benchmarks"] == sft["benchmarks"]
    assert sorted(p.name for p in (out / "train").iterdir()) == [model.parent.name]
