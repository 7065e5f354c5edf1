"""The one way a world folder's modules (`tools.py`, `design.py`, `probes.py`, ...) are loaded.

A file that is part of an importable package (the built-in worlds under `envs/worlds/`)
is imported under its package name, so `envs.worlds.airline.tools` is one module whether
the world loads it or another module imports it. A file in any other folder (a world
registered from elsewhere, the Architect's output) is loaded from its path under the name
`trajforge_world_<world>_<stem>`. Either way it is registered in `sys.modules` before it
runs (dataclasses and pickling look modules up there) and loaded once per file.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
import threading
from pathlib import Path
from types import ModuleType

_lock = threading.RLock()
_by_path: dict[Path, ModuleType] = {}


def _package_name(path: Path) -> str | None:
    """The dotted name under which `path` is importable as part of a package, if any."""
    parts = [path.stem]
    folder = path.parent
    while (folder / "__init__.py").exists():
        parts.append(folder.name)
        folder = folder.parent
    if len(parts) == 1:
        return None
    name = ".".join(reversed(parts))
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return None
    origin = getattr(spec, "origin", None)
    return name if origin and Path(origin).resolve() == path else None


def load_module(path: Path | str, world: str) -> ModuleType:
    """The module in `path` (a file of `world`'s folder), loaded once."""
    path = Path(path).resolve()
    with _lock:
        if path in _by_path:
            return _by_path[path]
        if not path.exists():
            raise FileNotFoundError(f"world {world!r} has no {path.name} ({path})")
        package = _package_name(path)
        if package is not None:
            module = importlib.import_module(package)
        else:
            name = f"trajforge_world_{world}_{path.stem}"
            spec = importlib.util.spec_from_file_location(name, path)
            if spec is None or spec.loader is None:
                raise ImportError(f"cannot load {path}")
            module = importlib.util.module_from_spec(spec)
            sys.modules[name] = module
            try:
                spec.loader.exec_module(module)
            except BaseException:
                sys.modules.pop(name, None)
                raise
        _by_path[path] = module
        return module


def forget(folder: Path | str) -> None:
    """Drop the loaded modules of a folder (a world re-registered from a rewritten folder)."""
    folder = Path(folder).resolve()
    with _lock:
        for path in [p for p in _by_path if p.parent == folder]:
            module = _by_path.pop(path)
            sys.modules.pop(module.__name__, None)
