"""The command line as a whole (`pipelines.cli`): a mistake is one `error:` line, found in
seconds before any Prefect server starts, with no traceback unless `--debug` is given. Each
command's own checks: `cli/test_stage_commands.py`, `cli/test_train_commands.py`,
`cli/test_utility_commands.py`."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from pipelines import cli
from pipelines.config import ConfigError

pytestmark = pytest.mark.usefixtures("no_prefect")


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
    # the worlds a fresh process knows (other tests register worlds in this one); the τ² worlds
    # are among them when the tau2 extra is installed
    known = subprocess.run([sys.executable, "-c", "from envs.registry import list_worlds; "
                            "print(', '.join(list_worlds()))"], capture_output=True, text=True,
                           timeout=60).stdout.strip()
    assert {"airline", "clinic", "retail", "telecom", "terminal"} <= set(known.split(", "))
    assert proc.stderr.splitlines() == [
        f"error: synthesis.world: unknown world 'atlantis' (known: {known}); `trajforge worlds` lists them"]
    assert not list(tmp_path.iterdir()), "the run started"


