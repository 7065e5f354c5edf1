"""Integration: the whole flow through real Prefect on a tiny config (scripted policy),
stage flows one by one, the CLI, and the released datasets' contract."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from data import store
from pipelines.config import load_config

TINY = {"synthesis.n_tasks": 5, "synthesis.seed": 7, "rollout.model.kind": "scripted",
        "rollout.model.noise": 0.5, "rollout.trials": 3, "shard_size": 2}


@pytest.fixture(scope="module")
def flows():
    from pipelines import flows

    return flows


@pytest.mark.slow  # a τ² or whole-flow integration test: make test runs it, the fast tier does not
def test_end_to_end_flow_releases_sft_and_rl(tmp_path: Path, flows) -> None:
    cfg = load_config(None, TINY)
    summary = flows.run_flow(cfg.model_dump(mode="json"), str(tmp_path))
    assert summary["tasks"] == 5 and summary["policy_trajectories"] == 15 and summary["reference_trajectories"] == 5
    assert 0 < summary["policy_pass_rate"] < 1
    sft, rl = Path(summary["releases"]["sft"]), Path(summary["releases"]["rl"])
    assert sft.parent == tmp_path / "releases" / "sft" and sft.name == rl.name
    for path in (sft, rl):
        m = store.read_manifest(path)
        assert (path / "_SUCCESS").exists() and (path / "README.md").read_text().startswith("---")
        assert m.lineage.config_hash == cfg.config_hash() and len(m.lineage.parents) == 4
        assert m.rows > 0
    rows = store.read_table(sft).to_pylist()
    assert rows[0]["messages"][0]["role"] == "system"
    assert json.loads(rows[0]["tools"])[0]["type"] == "function"
    rl_rows = store.read_table(rl).to_pylist()
    assert {r["selection_reason"] for r in rl_rows} <= {"mixed_outcomes", "explorer_solved_unsolved_by_policy"}
    task = json.loads(rl_rows[0]["task"])
    assert task["id"] == rl_rows[0]["task_id"] and task["target_state_hash"]
    # every stage left a committed dataset with lineage
    for name in ("tasks", "trajectories", "verdicts", "curated_sft", "curated_rl"):
        assert store.latest(tmp_path / "datasets", name) is not None


def test_stage_flows_chain_through_latest_datasets(tmp_path: Path, flows) -> None:
    cfg = load_config(None, {**TINY, "synthesis.n_tasks": 3}).model_dump(mode="json")
    out = str(tmp_path)
    tasks = flows.synth_flow(cfg, out)
    trajs = flows.rollout_flow(cfg, out)
    verdicts = flows.verify_flow(cfg, out)
    assert store.read_manifest(verdicts).lineage.parents == [tasks, trajs]
    curated = flows.curate_flow(cfg, out)
    releases = flows.release_flow(cfg, out)
    assert set(releases) == {"sft", "sft_recovery", "rl"}  # one version, the recoveries their own config
    for name in releases:
        assert store.read_manifest(releases[name]).lineage.parents[0] == curated[name]


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pipelines.cli", *args], capture_output=True, text=True, timeout=300)


@pytest.mark.slow
def test_cli_run_and_datasets_verify(tmp_path: Path) -> None:
    sets = [a for k, v in TINY.items() for a in ("--set", f"{k}={v}")]
    r = _cli("run", "--out", str(tmp_path), *sets, "--set", "synthesis.n_tasks=2")
    assert r.returncode == 0, r.stderr[-2000:]
    summary = json.loads(r.stdout.strip().splitlines()[-1])
    assert summary["tasks"] == 2
    sft = summary["releases"]["sft"]
    ok = _cli("datasets", "verify", sft)
    assert ok.returncode == 0 and ok.stdout.startswith("ok: sft")
    part = next(Path(sft, "data").glob("*.parquet"))
    part.write_bytes(part.read_bytes() + b"tampered")
    bad = _cli("datasets", "verify", sft)
    assert bad.returncode == 1 and "checksum mismatch" in bad.stderr


def test_cli_reports_missing_inputs_clearly(tmp_path: Path) -> None:
    r = _cli("verify", "--out", str(tmp_path / "empty"))
    assert r.returncode == 1 and "run the earlier stage first" in r.stderr
    r = _cli("run", "--set", "synthesis.world=atlantis", "--out", str(tmp_path))
    assert r.returncode != 0 and "unknown world 'atlantis'" in (r.stderr + r.stdout)


def test_self_play_tasks_through_the_flow(tmp_path: Path, flows) -> None:
    cfg = load_config(None, {**TINY, "synthesis.method": "self_play", "synthesis.n_tasks": 3})
    summary = flows.run_flow(cfg.model_dump(mode="json"), str(tmp_path))
    assert summary["tasks"] == 3 and summary["sft_rows"] > 0
    assert set(summary["releases"]) == {"sft", "sft_recovery", "rl"} and summary["trained_failures"] == 0
    assert summary["sft_recovery_rows"] == store.read_manifest(summary["releases"]["sft_recovery"]).rows
    tasks = store.read_records(store.latest(tmp_path / "datasets", "tasks"))
    assert all(t.method == "self_play" and t.reference_solution for t in tasks)


def test_constraint_guided_through_the_flow(tmp_path: Path, flows) -> None:
    cfg = load_config(None, {**TINY, "synthesis.method": "constraint_guided", "synthesis.n_tasks": 3})
    summary = flows.run_flow(cfg.model_dump(mode="json"), str(tmp_path))
    assert summary["tasks"] == 3
    verdicts = store.read_records(store.latest(tmp_path / "datasets", "verdicts"))
    names = {v.verifier for v in verdicts}
    assert names == {"composite", "state_equivalence", "constraint_satisfaction", "communicate", "policy"}
    tasks = store.read_records(store.latest(tmp_path / "datasets", "tasks"))
    assert all(t.method == "constraint_guided" and t.verification.constraints for t in tasks)
    sft = store.read_table(summary["releases"]["sft"]).to_pylist()
    assert sft and all(r["method"] == "constraint_guided" for r in sft)


def test_mixed_worlds_topology_curation_and_report(tmp_path: Path) -> None:
    """Terminal tasks (verified by tests in the sandbox) flow through the same run as tool-use
    tasks; TopoCurate selects; the release carries its HTML report."""
    from pipelines import flows

    cfg = load_config(None, {**TINY, "synthesis.n_tasks": 3,
                             "synthesis_mix": [{"method": "terminal", "world": "terminal", "n_tasks": 2, "seed": 1}],
                             "curation": "topology", "curation_options": {"sft_per_task": 1}})
    summary = flows.run_flow(cfg.model_dump(mode="json"), str(tmp_path))
    assert summary["tasks"] == 5
    tasks = store.read_records(store.latest(tmp_path / "datasets", "tasks"))
    terminal = {t.id for t in tasks if t.world == "terminal"}
    assert len(terminal) == 2
    verdicts = store.read_records(store.latest(tmp_path / "datasets", "verdicts"))
    assert {v.verifier for v in verdicts if v.task_id in terminal} == {"composite", "tests_pass"}
    gold = {t.id for t in store.read_records(store.latest(tmp_path / "datasets", "trajectories"))
            if t.reference and t.task_id in terminal}
    gold_verdicts = [v for v in verdicts if v.trajectory_id in gold and v.verifier == "tests_pass"]
    assert len(gold_verdicts) == 2 and all(v.passed for v in gold_verdicts), \
        "the reference solutions of terminal tasks must pass in the sandbox"
    sft = Path(summary["releases"]["sft"])
    worlds = {r["world"] for r in store.read_table(sft).to_pylist()}
    assert worlds == {"terminal", "airline"}
    html = (sft / "report.html").read_text()
    assert html.count("<svg") >= 3 and "terminal" in html


@pytest.mark.slow
def test_reverify_cli_diffs_a_new_verifier_version(tmp_path: Path) -> None:
    """Re-scoring stored rollouts needs no model: the CLI writes new verdicts with a diff."""
    from pipelines import flows

    cfg = load_config(None, {**TINY, "synthesis.n_tasks": 3})
    flows.run_flow(cfg.model_dump(mode="json"), str(tmp_path))
    rp = store.latest(tmp_path / "datasets", "trajectories")
    out = subprocess.run([sys.executable, "-m", "pipelines.cli", "reverify", "--out", str(tmp_path),
                          "--verifier", "state_equivalence"], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    totals = json.loads(out.stdout.strip().splitlines()[-1])
    assert totals["compared"] == totals["trajectories"] == 12 and totals["pass_to_fail"] == totals["fail_to_pass"] == 0
    new = Path(totals["verdicts"])
    assert str(rp) in store.read_manifest(new).lineage.parents and (new / "diff.md").exists()


def test_eval_set_contamination_is_removed_and_stated_on_the_card(tmp_path: Path) -> None:
    from pipelines import flows, stages

    cfg = load_config(None, {**TINY, "synthesis.n_tasks": 4})
    tasks = store.read_records(stages.synthesize(cfg, tmp_path / "probe"))
    leaked = tasks[0]
    evalset = tmp_path / "heldout.jsonl"
    evalset.write_text(json.dumps({"text": leaked.instruction}) + "\n")
    cfg = load_config(None, {**TINY, "synthesis.n_tasks": 4, "hygiene.eval_sets": {"heldout": str(evalset)}})
    summary = flows.run_flow(cfg.model_dump(mode="json"), str(tmp_path / "run"))
    rl = Path(summary["releases"]["rl"])
    assert leaked.id not in {r["task_id"] for r in store.read_table(rl).to_pylist()}
    report = store.read_manifest(rl).stats["hygiene"]["contamination"]["eval_sets"]["heldout"]
    assert report["flagged_any"] >= 1 and report["removed"] >= 1 and report["longest_match"] >= 13
    assert "heldout:" in (rl / "README.md").read_text()


