"""A named registry of plugins (synthesis methods, verifiers, curation strategies, model
backends), each with its own typed options.

Each layer keeps one `Registry`. A plugin module registers itself on import::

    @VERIFIERS.register("my_verifier", options=MyOptions)
    class MyVerifier: ...

and the registry imports its built-in modules on first lookup, plus any module another
installed package names under the entry-point group ``trajforge.<group>`` (e.g.
``[project.entry-points."trajforge.verifiers"] mine = "mypkg.verifier"``). A new plugin is
therefore one module plus one line (its module in `builtins`, or an entry point).

`options` is a pydantic model that forbids unknown keys: `parse_options` turns a config's
mapping into it, so a typo in a config is an error naming the plugin, and `build` makes the
plugin with those options (as keyword arguments, next to any context the caller passes).
"""

from __future__ import annotations

import importlib
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from importlib.metadata import entry_points
from typing import Any, Generic, TypeVar

from pydantic import BaseModel, ValidationError

T = TypeVar("T")


class PluginOptionsError(ValueError):
    """A plugin's options do not fit its options model."""


@dataclass(frozen=True)
class Plugin(Generic[T]):
    name: str
    item: T
    options: type[BaseModel] | None
    attrs: Mapping[str, Any] = field(default_factory=dict)  # e.g. a synthesis method's `supports`


class Registry(Generic[T]):
    def __init__(self, kind: str, builtins: list[str], group: str | None = None) -> None:
        self.kind = kind
        self.builtins = builtins
        self.group = group  # entry-point group suffix: "trajforge.<group>"
        self._items: dict[str, Plugin[T]] = {}
        self._loaded = False
        self._lock = threading.RLock()

    def register(self, name: str, options: type[BaseModel] | None = None, **attrs: Any) -> Callable[[T], T]:
        """Register a plugin under `name`, with the pydantic model of its options (if any)
        and any attributes the layer's contract defines (`attr` reads them)."""
        if options is not None and options.model_config.get("extra") != "forbid":
            raise TypeError(f"{self.kind} {name!r}: options model {options.__name__} must forbid unknown keys "
                            "(model_config = ConfigDict(extra='forbid'))")

        def deco(item: T) -> T:
            self._items[name] = Plugin(name, item, options, dict(attrs))
            return item

        return deco

    def _load(self) -> None:
        # Threads of one flow look plugins up at once: none may see a half-loaded registry.
        with self._lock:
            if self._loaded:
                return
            for module in self.builtins:
                importlib.import_module(module)
            if self.group:
                for ep in entry_points(group=f"trajforge.{self.group}"):
                    ep.load()
            self._loaded = True

    def plugin(self, name: str) -> Plugin[T]:
        self._load()
        if name not in self._items:
            raise KeyError(f"unknown {self.kind} {name!r}; known: {', '.join(sorted(self._items))}")
        return self._items[name]

    def get(self, name: str) -> T:
        return self.plugin(name).item

    def names(self) -> list[str]:
        self._load()
        return sorted(self._items)

    def attr(self, name: str, key: str, default: Any = None) -> Any:
        """An attribute the plugin was registered with."""
        return self.plugin(name).attrs.get(key, default)

    def options_model(self, name: str) -> type[BaseModel] | None:
        return self.plugin(name).options

    def parse_options(self, name: str, raw: Mapping[str, Any] | BaseModel | None) -> BaseModel | None:
        """`raw` validated against the plugin's options model (None for a plugin without
        options, which then takes none). Raises `PluginOptionsError` naming the plugin."""
        model = self.options_model(name)
        if isinstance(raw, BaseModel):
            raw = {k: getattr(raw, k) for k in type(raw).model_fields}
        if model is None:
            if raw:
                raise PluginOptionsError(f"{self.kind} {name!r} takes no options, got {sorted(raw)}")
            return None
        try:
            return model.model_validate(dict(raw or {}))
        except ValidationError as exc:
            raise PluginOptionsError(f"options of {self.kind} {name!r}: {exc}") from exc

    def build(self, name: str, options: Mapping[str, Any] | BaseModel | None = None, **context: Any) -> Any:
        """The plugin called with its parsed options as keyword arguments plus `context`."""
        parsed = self.parse_options(name, options)
        kwargs = {} if parsed is None else {k: getattr(parsed, k) for k in type(parsed).model_fields}
        return self.get(name)(**kwargs, **context)  # type: ignore[operator]
