"""A named registry of plugins (synthesis methods, verifiers, curation strategies).

Each layer keeps one `Registry`; a plugin module registers itself on import, and the
registry imports the built-in modules on first lookup, so a new plugin is one module plus
one `@REGISTRY.register("name")` line (and its name in `builtins` if it ships built in).
"""

from __future__ import annotations

import importlib
import threading
from collections.abc import Callable
from typing import Generic, TypeVar

T = TypeVar("T")


class Registry(Generic[T]):
    def __init__(self, kind: str, builtins: list[str]) -> None:
        self.kind = kind
        self.builtins = builtins
        self._items: dict[str, T] = {}
        self._loaded = False
        self._lock = threading.Lock()

    def register(self, name: str) -> Callable[[T], T]:
        def deco(item: T) -> T:
            self._items[name] = item
            return item

        return deco

    def _load(self) -> None:
        # Threads of one flow look plugins up at once: none may see a half-loaded registry.
        with self._lock:
            if not self._loaded:
                for module in self.builtins:
                    importlib.import_module(module)
                self._loaded = True

    def get(self, name: str) -> T:
        self._load()
        if name not in self._items:
            raise KeyError(f"unknown {self.kind} {name!r}; known: {', '.join(sorted(self._items))}")
        return self._items[name]

    def names(self) -> list[str]:
        self._load()
        return sorted(self._items)
