"""Loading a world folder's modules (`envs.loader`): once per file, under the package name
for a built-in world, under `trajforge_world_<world>_<stem>` for any other folder."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

import envs.worlds.airline.tools as airline_tools
from envs.loader import forget, load_module


def test_a_package_file_is_its_package_module() -> None:
    module = load_module(Path(airline_tools.__file__), "airline")
    assert module is airline_tools and module.__name__ == "envs.worlds.airline.tools"


def test_a_folder_file_loads_once_and_is_forgotten(tmp_path: Path) -> None:
    (tmp_path / "hooks.py").write_text("import itertools\nCOUNT = next(itertools.count())\nVALUE = 1\n")
    first = load_module(tmp_path / "hooks.py", "mine")
    assert first.__name__ == "trajforge_world_mine_hooks" and sys.modules[first.__name__] is first
    (tmp_path / "hooks.py").write_text("VALUE = 2\n")
    assert load_module(str(tmp_path / "hooks.py"), "mine") is first and first.VALUE == 1  # once per file
    forget(tmp_path)
    assert "trajforge_world_mine_hooks" not in sys.modules
    assert load_module(tmp_path / "hooks.py", "mine").VALUE == 2  # read again
    forget(tmp_path)


def test_missing_and_broken_files(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="world 'mine' has no absent.py"):
        load_module(tmp_path / "absent.py", "mine")
    (tmp_path / "broken.py").write_text("raise RuntimeError('boom')\n")
    with pytest.raises(RuntimeError, match="boom"):
        load_module(tmp_path / "broken.py", "mine")
    assert "trajforge_world_mine_broken" not in sys.modules  # nothing half-loaded is left
