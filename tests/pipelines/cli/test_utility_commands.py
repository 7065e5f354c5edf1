"""The other commands (`pipelines.cli.utility_commands`): `worlds` lists each world's
conversation clauses, and `new-world` writes a skeleton world folder once."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from typer.testing import CliRunner

from pipelines import cli

Fails = Callable[..., str]  # the `fails` fixture (tests/pipelines/conftest.py)


def test_cli_worlds_lists_each_worlds_clauses() -> None:
    out = subprocess.run([sys.executable, "-m", "pipelines.cli", "worlds"], capture_output=True, text=True,
                         timeout=120, env={**os.environ, "COLUMNS": "250"})
    assert out.returncode == 0, out.stderr
    rows = [line for line in out.stdout.splitlines() if "│" in line]
    clauses = {(cells[1], cells[2]) for line in rows if len(cells := [c.strip() for c in line.split("│")]) > 3}
    for world in ("airline", "retail", "telecom", "clinic"):
        assert {(world, c) for c in ("identity", "grounded_arguments", "announce_and_confirm",
                                     "no_write_after_decline")} <= clauses, world
    assert ("clinic", "confirm_identity") in clauses and ("airline", "confirm_identity") not in clauses


def test_new_world_writes_the_folder_and_refuses_to_overwrite_it(tmp_path: Path, fails: Fails) -> None:
    from envs.scaffold import FILES

    result = CliRunner().invoke(cli.app, ["new-world", "lending_desk", "--to", str(tmp_path)])
    assert result.exit_code == 0, result.output
    folder = tmp_path / "lending_desk"
    assert result.stdout.strip().splitlines()[-1] == str(folder)
    assert sorted(p.name for p in folder.iterdir()) == sorted(FILES)
    policy = (folder / "policy.md").read_text()
    assert policy.startswith("# Lending Desk desk policy") and "{title}" not in policy
    before = {p.name: p.read_text() for p in folder.iterdir()}
    fails(["new-world", "lending_desk", "--to", str(tmp_path)], str(folder), "exists and is not empty")
    assert {p.name: p.read_text() for p in folder.iterdir()} == before  # nothing overwritten
    fails(["new-world", "Bad-Name", "--to", str(tmp_path)], "world name 'Bad-Name'")


def test_export_tau2_takes_a_release(tmp_path: Path, fails: Fails) -> None:
    """`export-tau2` reads an rl release (its rows carry the full task) as well as a tasks
    dataset, and says how many tasks of each domain it wrote."""
    import json

    import pyarrow as pa

    from data import store
    from envs.registry import get_world
    from synthesis.base import SynthesisConfig, get_method

    tasks = get_method("logic_driven")(SynthesisConfig(world="clinic", n_tasks=2, seed=1), get_world("clinic")).tasks
    with store.DatasetWriter(tmp_path / "run" / "releases", "rl", "rl", pa.schema([("task", pa.string())]), 1) as w:
        w.write_rows([{"task": t.model_dump_json()} for t in tasks])
        w.commit(store.Lineage())
    out = tmp_path / "tau2.json"
    result = CliRunner().invoke(cli.app, ["export-tau2", "--release", str(tmp_path / "run"), "--to", str(out)])
    assert result.exit_code == 0, result.output
    assert f"{len(tasks)} tasks (trajforge_clinic: {len(tasks)})" in " ".join(result.output.split())
    assert [d["id"] for d in json.loads(out.read_text())] == [t.id for t in tasks]
    fails(["export-tau2", str(tmp_path / "run"), "--tasks", str(tmp_path), "--to", str(out)], "one of SOURCE")
    fails(["export-tau2", str(tmp_path / "none"), "--to", str(out)], "no tasks dataset or rl release")
