"""The stage commands (`pipelines.cli.stage_commands`: `run`, `synth`, `rollout`, `verify`,
`reverify`, `curate`): a person's mistakes are one `error:` line with a hint, found before
Prefect starts (no flow is ever called), and the config refuses counts that cannot be right."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from data import store
from pipelines.config import ConfigError, load_config

Fails = Callable[..., str]  # the `fails` fixture (tests/pipelines/conftest.py)


def test_config_file_problems(tmp_path: Path, fails: Fails) -> None:
    fails(["run", "--config", str(tmp_path / "nope.yaml")], "config file", "not found", "configs/tiny-scripted.yaml")
    broken = tmp_path / "broken.yaml"
    broken.write_text("name: x\nrollout:\n  trials: [1\n")
    fails(["run", "--config", str(broken)], "not valid YAML at line 4")
    listed = tmp_path / "list.yaml"
    listed.write_text("- a\n- b\n")
    fails(["run", "--config", str(listed)], "must hold a mapping")
    typo = tmp_path / "typo.yaml"
    typo.write_text("synthesis:\n  n_taks: 3\n")
    fails(["run", "--config", str(typo)], "synthesis.n_taks: unknown setting", "did you mean 'synthesis.n_tasks'")
    kind = tmp_path / "kind.yaml"
    kind.write_text("rollout:\n  model:\n    kind: gpt5\n")
    fails(["run", "--config", str(kind)], "rollout.model.kind: unknown model kind 'gpt5'", "known: ", "scripted")
    fails(["run", "--set", "rollout.trials"], "--set expects key.path=value")


def test_unknown_names(tmp_path: Path, fails: Fails) -> None:
    out = ["--out", str(tmp_path / "out")]
    fails(["run", *out, "--set", "synthesis.world=atlantis"], "unknown world 'atlantis'", "known: airline", "retail",
           "trajforge worlds")
    fails(["synth", *out, "--world", "atlantis"], "unknown world 'atlantis'")
    fails(["run", *out, "--set", "synthesis.method=logic_drivn"], "unknown synthesis method 'logic_drivn'",
           "did you mean 'logic_driven'")
    fails(["run", *out, "--set", "synthesis_mix=[{world: atlantis}]"], "synthesis_mix[0].world: unknown world")
    fails(["run", *out, "--set", "rollout.model.kind=gpt5"], "unknown model kind 'gpt5'")
    fails(["run", *out, "--set", "verifiers=[state_equivalense]"], "unknown verifier 'state_equivalense'",
           "did you mean 'state_equivalence'")
    fails(["run", *out, "--set", "curation=best"], "unknown curation strategy 'best'")
    fails(["reverify", *out, "--verifier", "polcy"], "--verifier: unknown verifier 'polcy'")


@pytest.mark.parametrize(("setting", "value"), [
    ("rollout.trials", -1), ("rollout.trials", 0), ("shard_size", 0), ("rollout.concurrency", 0),
    ("synthesis.n_tasks", 0), ("runner.max_workers", 0), ("reference_trials", -1), ("synthesis.test_fraction", 2),
])
def test_invalid_counts_are_refused(setting: str, value: int, tmp_path: Path, fails: Fails) -> None:
    with pytest.raises(ConfigError, match=setting.replace(".", r"\.")):
        load_config(None, {setting: value})
    fails(["run", "--out", str(tmp_path), "--set", f"{setting}={value}"], setting)


def test_out_and_datasets(tmp_path: Path, fails: Fails) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    fails(["run", "--out", str(blocker / "out")], f"--out {blocker / 'out'}: cannot write there",
           "pass a writable folder with --out")
    verdicts = store.write_records(tmp_path / "datasets", "verdicts", "verdicts", [], store.Lineage(config_hash="x"))
    out = ["--out", str(tmp_path / "out")]
    fails(["rollout", *out, "--tasks", str(verdicts)], "holds a 'verdicts' dataset", "--tasks takes a tasks dataset")
    tasks = store.write_records(tmp_path / "datasets", "tasks", "tasks", [], store.Lineage(config_hash="x"))
    fails(["verify", *out, "--tasks", str(tasks), "--trajectories", str(verdicts)],
           "--trajectories takes a trajectories dataset")
    fails(["rollout", *out, "--tasks", str(tmp_path)], "--tasks", "no _SUCCESS marker")
    fails(["verify", "--out", str(tmp_path / "empty")], "no committed 'tasks' dataset", "run the earlier stage first")
    fails(["curate", "--out", str(tmp_path / "empty")], "no committed 'tasks' dataset")


def test_a_dead_model_endpoint_is_one_line_before_prefect(tmp_path: Path, fails: Fails) -> None:
    """Issue 34: a dead endpoint used to exit 0 and publish; now the run stops before it starts."""
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    fails(["run", "--out", str(tmp_path / "out"), "--set", "rollout.model.kind=openai",
            "--set", f"rollout.model.base_url=http://127.0.0.1:{port}/v1", "--allow-partial"],
           f"no model server answers at http://127.0.0.1:{port}/v1", "rollout.model.base_url")
