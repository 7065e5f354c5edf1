"""Run lineage (`train.lineage`): the runs trained on a release, listed from their
`run.json`, on its card and through `trajforge runs`; and the card's section helpers."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from data import store


def _release(root: Path, rows: int = 1, card: bool = False) -> Path:
    from data.card import render_card
    from data.schema import SFT_SCHEMA

    row = {"messages": [{"role": "user", "content": "hi", "tool_calls": None, "tool_call_id": None, "name": None},
                        {"role": "assistant", "content": "ok", "tool_calls": None, "tool_call_id": None,
                         "name": None}],
           "tools": "[]", "task_id": "t", "trajectory_id": "tr", "world": "airline", "method": "m", "model": "s",
           "trial": 0, "score": 1.0, "split": "train"}
    with store.DatasetWriter(root / "releases", "sft", "sft", SFT_SCHEMA, 1) as w:
        w.write_rows([row] * rows)
        text = render_card("sft", w.version, "rows", SFT_SCHEMA, rows, {}, {}) if card else ""
        return w.commit(store.Lineage(), card=text)


def test_runs_on_release_lists_the_runs_trained_on_it(tmp_path: Path) -> None:
    from train.lineage import read_run, runs_on_release, runs_table, write_run_record

    rel_a, rel_b = _release(tmp_path, 1), _release(tmp_path, 2)
    ma, mb = store.read_manifest(rel_a), store.read_manifest(rel_b)
    train = tmp_path / "train"
    write_run_record(train / "sft-1", "sft", rel_a, ma, {"lr": 1})
    write_run_record(train / "sft-1", "sft", rel_a, ma, {"lr": 1}, status="done", steps=5, final_loss=1.25)
    write_run_record(train / "grpo-2", "grpo", rel_b, mb, {})
    (train / "junk").mkdir()
    (train / "junk" / "run.json").write_text("{not json")
    runs = runs_on_release(rel_a)
    assert [Path(r["run_dir"]).name for r in runs] == ["sft-1"]
    assert runs[0]["status"] == "done" and runs[0]["release"]["version"] == ma.version and runs[0]["code_version"]
    assert read_run(train / "sft-1")["started_at"] <= runs[0]["finished_at"]
    assert re.search(r"\| sft-1 \| sft \| sft \| \d+ \| done \| 5 \| \d+ s \| 1.25 \|", runs_table(runs))
    assert [Path(r["run_dir"]).name for r in runs_on_release(rel_b)] == ["grpo-2"]
    with pytest.raises(FileNotFoundError):
        read_run(tmp_path)


def test_a_run_folder_trained_into_again_starts_afresh_and_the_card_shows_the_measured_wall_time(
        tmp_path: Path) -> None:
    from train.lineage import read_run, runs_on_release, runs_table, write_run_record

    old, new = _release(tmp_path, 1), _release(tmp_path, 2)
    run = tmp_path / "train" / "sft-arm"
    write_run_record(run, "sft", old, store.read_manifest(old), {}, status="done", steps=3)
    stale = {**read_run(run), "started_at": "2026-01-01T00:00:00Z", "finished_at": "2026-01-01T06:00:00Z"}
    (run / "run.json").write_text(json.dumps(stale))  # the first training, hours ago
    write_run_record(run, "sft", new, store.read_manifest(new), {})
    assert read_run(run)["started_at"] > stale["finished_at"]  # the second training's own start
    write_run_record(run, "sft", new, store.read_manifest(new), {}, status="done", steps=3, wall_s=41.6)
    (record,) = runs_on_release(new)
    assert record["wall_s"] == 41.6 and "| done | 3 | 42 s |" in runs_table([record])


def test_release_card_lists_the_runs_trained_on_it(tmp_path: Path) -> None:
    from train.lineage import RUNS_SECTION, write_run_record

    rel = _release(tmp_path, 2, card=True)
    manifest = store.read_manifest(rel)
    before = (rel / "README.md").read_text()
    train = tmp_path / "train"
    write_run_record(train / "sft-1", "sft", rel, manifest, {})
    assert (rel / "README.md").read_text() == before  # a running run changes nothing yet
    write_run_record(train / "sft-1", "sft", rel, manifest, {}, status="done", steps=6, final_loss=0.5)
    card = (rel / "README.md").read_text()
    assert card.count(f"## {RUNS_SECTION}") == 1 and re.search(r"\| sft-1 \| sft \| \w+ \| \d+ \| done \| 6 \| \d+ s \| 0.5 \| - \| - \|", card)
    assert card.index(f"## {RUNS_SECTION}") < card.index("## Columns")  # the generated card keeps its order
    # an evaluation of the run and a second run (in another train folder) update the same section
    (train / "sft-1" / "eval-v9.json").write_text(json.dumps({
        "tasks": 4, "split": "test", "release": {"name": "rl", "version": "v9"},
        "base": {"pass_rate": 0.25}, "trained": {"pass_rate": 0.5}}))
    write_run_record(tmp_path / "elsewhere" / "grpo-2", "grpo", rel, manifest, {}, status="failed", error="boom")
    card = (rel / "README.md").read_text()
    assert card.count(f"## {RUNS_SECTION}") == 1
    assert "0.25 → 0.5 on 4 test tasks of rl v9" in card and "| grpo-2 | grpo | sft | " in card and "| failed |" in card
    assert card.replace(card[card.index(f"## {RUNS_SECTION}"):card.index("## Columns")], "") == before
    # the data and manifest are untouched: the release still verifies, no temp files are left
    assert store.read_manifest(rel).files == manifest.files
    assert sorted(p.name for p in rel.iterdir()) == sorted(["README.md", "_SUCCESS", "data", "manifest.json"])


def test_runs_command_lists_runs_and_refreshes_the_card(tmp_path: Path) -> None:
    import subprocess
    import sys

    from train.lineage import RUNS_SECTION, write_run_record

    rel = _release(tmp_path, 1, card=True)
    path = tmp_path / "train" / "grpo-1" / "run.json"
    write_run_record(path.parent, "grpo", rel, store.read_manifest(rel), {}, status="done", steps=5, final_reward=0.25)
    (rel / "README.md").write_text((rel / "README.md").read_text().split(f"## {RUNS_SECTION}")[0])
    out = subprocess.run([sys.executable, "-m", "pipelines.cli", "runs", "--dataset", str(rel), "--out", str(tmp_path),
                          "--refresh-card"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    listed = json.loads(out.stdout.strip().splitlines()[-1])
    assert [(Path(r["run_dir"]).name, r["stage"], r["status"]) for r in listed] == [("grpo-1", "grpo", "done")]
    assert re.search(r"\| grpo-1 \| grpo \| \w+ \| \d+ \| done \| 5 \| \d+ s \| 0.25 \|", (rel / "README.md").read_text())
    bad = subprocess.run([sys.executable, "-m", "pipelines.cli", "runs", "--dataset", str(tmp_path / "nope")],
                         capture_output=True, text=True, timeout=120)
    assert bad.returncode != 0 and "no dataset" in bad.stderr


def test_rewrite_card_refuses_an_incomplete_dataset(tmp_path: Path) -> None:
    (tmp_path / "half").mkdir()
    with pytest.raises(store.DatasetError, match="incomplete"):
        store.rewrite_card(tmp_path / "half", "# card")


def test_set_section_replaces_or_inserts() -> None:
    from data.card import set_section

    card = "# t\n\n## A\n\na\n\n## Columns\n\nc\n"
    once = set_section(card, "Runs", "r1")
    assert once == "# t\n\n## A\n\na\n\n## Runs\n\nr1\n\n## Columns\n\nc\n"
    assert set_section(once, "Runs", "r2") == once.replace("r1", "r2")
    assert set_section("# t\n", "Runs", "r") == "# t\n\n## Runs\n\nr\n\n"
    last = set_section("# t\n\n## Runs\n\nold\n", "Runs", "new")
    assert last == "# t\n\n## Runs\n\nnew\n\n"


def test_a_benchmark_result_of_a_run_shows_on_its_release_card(tmp_path: Path) -> None:
    """`trajforge eval --benchmark tau2:<domain>` on a run's model keeps the result in the run
    folder (`record_benchmark`) and the card's "Training runs" table shows its pass^k."""
    from train.evaluate import record_benchmark
    from train.lineage import RUNS_SECTION, runs_on_release, write_run_record

    rel = _release(tmp_path, 1, card=True)
    run = tmp_path / "train" / "sft-1"
    write_run_record(run, "sft", rel, store.read_manifest(rel), {}, status="done", steps=3, final_loss=0.5)
    result = {"benchmark": "tau2:airline", "split": "test", "tasks": 20, "trials": 2,
              "pass_hat_k": {"1": 0.25, "2": 0.1}, "model": {"kind": "embedded"}}
    assert "written_to" not in record_benchmark(result, tmp_path / "elsewhere" / "final")  # not a run: kept nowhere
    written = record_benchmark(result, run / "final")
    assert written["written_to"] == str(run / "benchmark-tau2-airline-test.json")
    assert runs_on_release(rel)[0]["benchmarks"]["tau2:airline test"]["pass_hat_k"] == {"1": 0.25, "2": 0.1}
    card = (rel / "README.md").read_text()
    section = card[card.index(f"## {RUNS_SECTION}"):]
    assert "| benchmarks (pass^k) |" in section
    assert re.search(r"\| sft-1 \| sft \| \w+ \| \d+ \| done \| 3 \| \d+ s \| 0.5 \| - \| - \| "
                     r"tau2:airline test: pass\^1 0.25 pass\^2 0.1 \(20 tasks × 2\) \|", section)
