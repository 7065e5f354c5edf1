"""A person's mistakes on the command line are one `error:` line with a hint, found before
Prefect starts (no flow is ever called), with no traceback unless `--debug` is given; and
the config models refuse counts that cannot be right."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from data import store
from pipelines import cli
from pipelines.config import ConfigError, load_config


@pytest.fixture(autouse=True)
def no_prefect(monkeypatch: pytest.MonkeyPatch) -> None:
    """Any command that reached a flow (and so Prefect) fails the test."""

    def flows() -> None:
        raise AssertionError("the command reached Prefect")

    monkeypatch.setattr(cli, "_flows", flows)


def _fails(args: list[str], *expected: str) -> str:
    result = CliRunner().invoke(cli.app, args)
    assert result.exit_code == 1, (result.exit_code, result.output, result.exception)
    assert "Traceback" not in result.output
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    for text in expected:
        assert text in lines[0], lines[0]
    return lines[0]


def test_config_file_problems(tmp_path: Path) -> None:
    _fails(["run", "--config", str(tmp_path / "nope.yaml")], "config file", "not found", "configs/tiny-scripted.yaml")
    broken = tmp_path / "broken.yaml"
    broken.write_text("name: x\nrollout:\n  trials: [1\n")
    _fails(["run", "--config", str(broken)], "not valid YAML at line 4")
    listed = tmp_path / "list.yaml"
    listed.write_text("- a\n- b\n")
    _fails(["run", "--config", str(listed)], "must hold a mapping")
    typo = tmp_path / "typo.yaml"
    typo.write_text("synthesis:\n  n_taks: 3\n")
    _fails(["run", "--config", str(typo)], "synthesis.n_taks: unknown setting", "did you mean 'synthesis.n_tasks'")
    kind = tmp_path / "kind.yaml"
    kind.write_text("rollout:\n  model:\n    kind: gpt5\n")
    _fails(["run", "--config", str(kind)], "rollout.model.kind: unknown model kind 'gpt5'", "known: ", "scripted")
    _fails(["run", "--set", "rollout.trials"], "--set expects key.path=value")


def test_unknown_names(tmp_path: Path) -> None:
    out = ["--out", str(tmp_path / "out")]
    _fails(["run", *out, "--set", "synthesis.world=atlantis"], "unknown world 'atlantis'", "known: airline", "retail",
           "trajforge worlds")
    _fails(["synth", *out, "--world", "atlantis"], "unknown world 'atlantis'")
    _fails(["run", *out, "--set", "synthesis.method=logic_drivn"], "unknown synthesis method 'logic_drivn'",
           "did you mean 'logic_driven'")
    _fails(["run", *out, "--set", "synthesis_mix=[{world: atlantis}]"], "synthesis_mix[0].world: unknown world")
    _fails(["run", *out, "--set", "rollout.model.kind=gpt5"], "unknown model kind 'gpt5'")
    _fails(["run", *out, "--set", "verifiers=[state_equivalense]"], "unknown verifier 'state_equivalense'",
           "did you mean 'state_equivalence'")
    _fails(["run", *out, "--set", "curation=best"], "unknown curation strategy 'best'")
    _fails(["reverify", *out, "--verifier", "polcy"], "--verifier: unknown verifier 'polcy'")


@pytest.mark.parametrize(("setting", "value"), [
    ("rollout.trials", -1), ("rollout.trials", 0), ("shard_size", 0), ("rollout.concurrency", 0),
    ("synthesis.n_tasks", 0), ("runner.max_workers", 0), ("reference_trials", -1), ("synthesis.test_fraction", 2),
])
def test_invalid_counts_are_refused(setting: str, value: int, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=setting.replace(".", r"\.")):
        load_config(None, {setting: value})
    _fails(["run", "--out", str(tmp_path), "--set", f"{setting}={value}"], setting)


def test_out_and_datasets(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    _fails(["run", "--out", str(blocker / "out")], f"--out {blocker / 'out'}: cannot write there",
           "pass a writable folder with --out")
    verdicts = store.write_records(tmp_path / "datasets", "verdicts", "verdicts", [], store.Lineage(config_hash="x"))
    out = ["--out", str(tmp_path / "out")]
    _fails(["rollout", *out, "--tasks", str(verdicts)], "holds a 'verdicts' dataset", "--tasks takes a tasks dataset")
    tasks = store.write_records(tmp_path / "datasets", "tasks", "tasks", [], store.Lineage(config_hash="x"))
    _fails(["verify", *out, "--tasks", str(tasks), "--trajectories", str(verdicts)],
           "--trajectories takes a trajectories dataset")
    _fails(["rollout", *out, "--tasks", str(tmp_path)], "--tasks", "no _SUCCESS marker")
    _fails(["verify", "--out", str(tmp_path / "empty")], "no committed 'tasks' dataset", "run the earlier stage first")
    _fails(["curate", "--out", str(tmp_path / "empty")], "no committed 'tasks' dataset")
    _fails(["train", "sfx", *out], "unknown training kind 'sfx'")
    _fails(["train", "sft", *out, "--dataset", str(verdicts)], "--dataset takes a sft dataset")


def test_debug_lets_the_exception_through(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cli, "_DEBUG", False)  # restored after the test: the flag is process-wide
    result = CliRunner().invoke(cli.app, ["--debug", "run", "--set", "synthesis.world=atlantis"])
    assert result.exit_code == 1 and isinstance(result.exception, cli.UserError)
    assert isinstance(result.exception.__cause__, ConfigError)


def test_a_mistake_fails_fast_without_prefect(tmp_path: Path) -> None:
    """The real entry point: the error line comes in seconds, before any Prefect server."""
    start = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "pipelines.cli", "run", "--out", str(tmp_path),
                           "--set", "synthesis.world=atlantis"], capture_output=True, text=True, timeout=60)
    took = time.monotonic() - start
    assert proc.returncode == 1 and took < 10, (took, proc.stderr[-2000:])
    assert proc.stderr.splitlines() == [
        "error: synthesis.world: unknown world 'atlantis' (known: airline, clinic, retail, telecom, terminal); "
        "`trajforge worlds` lists them"]
    assert not list(tmp_path.iterdir()), "the run started"


def test_a_dead_model_endpoint_is_one_line_before_prefect(tmp_path: Path) -> None:
    """Issue 34: a dead endpoint used to exit 0 and publish; now the run stops before it starts."""
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    _fails(["run", "--out", str(tmp_path / "out"), "--set", "rollout.model.kind=openai",
            "--set", f"rollout.model.base_url=http://127.0.0.1:{port}/v1", "--allow-partial"],
           f"no model server answers at http://127.0.0.1:{port}/v1", "rollout.model.base_url")
