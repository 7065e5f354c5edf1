"""The import contracts in pyproject.toml (`[tool.importlinter]`) hold: the layering of
docs/architecture.md, Prefect only under `pipelines/`, no import cycle between the modules of
a package. `lint-imports` is run from the venv that runs the tests, so `make test` checks them.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ["data", "envs", "verifiers", "rollout", "synthesis", "curation", "train", "pipelines"]


def lint_imports() -> str:
    """The `lint-imports` next to this interpreter (skips the test when it is missing)."""
    exe = Path(sys.executable).parent / "lint-imports"
    if not exe.exists():
        found = shutil.which("lint-imports")
        if found is None:
            pytest.skip("lint-imports is not installed (pip install -e '.[dev]' installs import-linter)")
        return found
    return str(exe)


def run(cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([lint_imports(), "--no-cache", "--no-logo", str(cwd / "pyproject.toml")],
                          cwd=cwd, capture_output=True, text=True, timeout=300)


def test_the_repository_keeps_its_import_contracts() -> None:
    out = run(ROOT)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "0 broken" in out.stdout


def test_the_contracts_cover_the_layers_prefect_and_cycles() -> None:
    cfg = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    assert sorted(cfg["root_packages"]) == sorted(PACKAGES)
    by_type = {c["type"]: c for c in cfg["contracts"]}
    assert by_type["layers"]["layers"] == ["pipelines", "curation | train | synthesis",
                                           "verifiers | rollout", "envs", "data"]
    forbidden = by_type["forbidden"]
    assert "prefect" in forbidden["forbidden_modules"]
    assert sorted(forbidden["source_modules"]) == sorted(set(PACKAGES) - {"pipelines"})
    assert sorted(by_type["acyclic_siblings"]["ancestors"]) == sorted(PACKAGES)


def test_the_contracts_catch_a_lower_layer_importing_upwards_prefect_and_a_cycle(
        tmp_path: Path) -> None:
    """The same contracts over a throwaway tree with one violation of each kind break."""
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    for name in PACKAGES:
        (tmp_path / name).mkdir()
        (tmp_path / name / "__init__.py").write_text("")
    (tmp_path / "data" / "up.py").write_text("import pipelines\n")
    (tmp_path / "envs" / "flow.py").write_text("import prefect\n")
    (tmp_path / "synthesis" / "a.py").write_text("from synthesis import b\n")
    (tmp_path / "synthesis" / "b.py").write_text("def f():\n    from synthesis import a\n")
    # the ignored import of the real tree must exist, or lint-imports reports it as unmatched
    (tmp_path / "envs" / "sandbox").mkdir()
    (tmp_path / "envs" / "sandbox" / "__init__.py").write_text("")
    (tmp_path / "envs" / "sandbox" / "image.py").write_text("import envs.workspace\n")
    (tmp_path / "envs" / "workspace.py").write_text("")
    out = run(tmp_path)
    assert out.returncode == 1, out.stdout + out.stderr
    assert "Contracts: 0 kept, 3 broken." in out.stdout, out.stdout
    assert "data.up -> pipelines" in out.stdout
    assert "envs.flow -> prefect" in out.stdout
    assert "No cycles are allowed in synthesis" in out.stdout
