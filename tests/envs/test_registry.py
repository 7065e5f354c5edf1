"""Registered worlds (`envs.registry`): the built-ins, worlds registered from a folder (checked
against the contract first), and a world's version hash."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from envs.contract import WorldContractError
from envs.registry import BUILTIN, get_world, list_worlds, register_world, world_version
from envs.scaffold import new_world
from envs.workspace import WorkspaceWorld
from envs.world import World


def test_builtin_worlds_load_once_with_their_kind() -> None:
    assert set(BUILTIN) <= set(list_worlds()) and list_worlds() == sorted(list_worlds())
    airline = get_world("airline")
    assert isinstance(airline, World) and get_world("airline") is airline
    assert isinstance(get_world("terminal"), WorkspaceWorld)  # a folder with workspace.yaml
    with pytest.raises(KeyError, match="unknown world 'atlantis'; registered worlds: airline"):
        get_world("atlantis")


def test_a_registered_folder_is_checked_and_reread(tmp_path: Path) -> None:
    new_world("reg_desk", tmp_path)
    folder = tmp_path / "reg_desk"
    register_world("reg_desk_world", folder)
    world = get_world("reg_desk_world")
    assert "reg_desk_world" in list_worlds() and len(world.tools) == 3
    version = world_version("reg_desk_world")
    assert len(version) >= 16 and version == world_version("reg_desk_world")
    assert world_version("reg_desk_world") != world_version("airline")
    bad = tmp_path / "bad"
    shutil.copytree(folder, bad)
    (bad / "probes.py").write_text((bad / "probes.py").read_text() + "\nPROBES = [1]\n")
    with pytest.raises(WorldContractError, match="PROBES"):
        register_world("reg_bad_world", bad)
    assert "reg_bad_world" not in list_worlds()


def test_the_version_hashes_the_schema_as_expanded(tmp_path: Path) -> None:
    """Moving schema text into an include that expands to the same text keeps the version;
    changing what the include holds changes it."""
    new_world("reg_inc", tmp_path)
    folder = tmp_path / "reg_inc"
    moved = tmp_path / "moved"
    shutil.copytree(folder, moved)
    schema = (moved / "schema.sql").read_text()
    start = schema.index("CREATE TRIGGER r01_item_available")
    end = schema.index("END;", start) + len("END;")
    (moved / "r01.sql").write_text(schema[start:end] + "\n")
    (moved / "schema.sql").write_text(schema[:start] + "-- include: r01" + schema[end:])
    register_world("reg_inc_world", folder)
    register_world("reg_inc_moved", moved)
    assert world_version("reg_inc_moved") == world_version("reg_inc_world")
    (moved / "r01.sql").write_text(schema[start:end].replace("not available", "out") + "\n")
    register_world("reg_inc_changed", moved)
    assert world_version("reg_inc_changed") != world_version("reg_inc_world")


def test_a_world_loads_once_when_many_threads_ask_at_once(tmp_path: Path) -> None:
    """Synthesis shards of a run ask for their worlds from several threads at once: each world
    is loaded (and its modules parsed by the contract check) once."""
    from concurrent.futures import ThreadPoolExecutor

    for i in range(3):
        new_world(f"reg_threads_{i}", tmp_path)
        register_world(f"reg_threads_world_{i}", tmp_path / f"reg_threads_{i}")
    from envs import registry

    names = [f"reg_threads_world_{i}" for i in range(3)]
    for name in names:  # registered (and so loaded) above: ask again as a first use
        registry._loaded.pop(name, None)
    with ThreadPoolExecutor(8) as pool:
        worlds = list(pool.map(get_world, names * 8))
    assert len({id(w) for w in worlds}) == 3
