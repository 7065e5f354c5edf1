"""The plugin registry: built-in modules loaded on first lookup, typed options that forbid
unknown keys, plugins built with their options."""

from __future__ import annotations

import sys
import types
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from pydantic import BaseModel, ConfigDict

from data.registry import PluginOptionsError, Registry


class Opts(BaseModel):
    model_config = ConfigDict(extra="forbid")
    size: int = 1
    label: str = "x"


def test_register_build_and_look_up() -> None:
    """A plugin is built with its parsed options as keyword arguments plus the caller's
    context; attributes it was registered with are read back; an unknown name lists the known."""
    reg: Registry[type] = Registry("widget", [])

    @reg.register("sized", options=Opts, kind="box")
    class Sized:
        def __init__(self, size: int, label: str, owner: str = "") -> None:
            self.args = (size, label, owner)

    reg.register("plain")(dict)
    assert reg.names() == ["plain", "sized"] and reg.get("sized") is Sized
    assert reg.build("sized", {"size": 3}, owner="me").args == (3, "x", "me")
    assert reg.build("sized", Opts(size=2, label="y")).args == (2, "y", "")
    assert reg.attr("sized", "kind") == "box" and reg.attr("plain", "kind", "none") == "none"
    assert reg.options_model("sized") is Opts and reg.options_model("plain") is None
    assert reg.build("plain") == {}
    with pytest.raises(PluginOptionsError, match="options of widget 'sized'"):
        reg.build("sized", {"sise": 3})
    with pytest.raises(PluginOptionsError, match="widget 'plain' takes no options, got \\['a'\\]"):
        reg.parse_options("plain", {"a": 1})
    with pytest.raises(KeyError, match="unknown widget 'nope'; known: plain, sized"):
        reg.get("nope")


def test_options_must_forbid_unknown_keys() -> None:
    class Loose(BaseModel):
        size: int = 1

    with pytest.raises(TypeError, match="must forbid unknown keys"):
        Registry("widget", []).register("loose", options=Loose)


def test_builtins_load_on_first_lookup(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The built-in modules are imported once, at the first lookup, and register themselves."""
    reg: Registry[int] = Registry("plugin", ["eager_plugin"])
    holder = types.ModuleType("plugin_holder_eager")
    holder.REG = reg  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "plugin_holder_eager", holder)
    (tmp_path / "eager_plugin.py").write_text("import plugin_holder_eager\nplugin_holder_eager.REG.register('y')(7)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "eager_plugin", raising=False)
    assert "eager_plugin" not in sys.modules
    assert reg.get("y") == 7 and "eager_plugin" in sys.modules
    assert reg.names() == ["y"]


def test_registry_lookup_is_thread_safe(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Regression: two verify shards looking a plugin up at once saw a half-loaded registry."""
    reg: Registry[int] = Registry("plugin", ["slow_plugin"])
    holder = types.ModuleType("plugin_holder")
    holder.REG = reg  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "plugin_holder", holder)
    (tmp_path / "slow_plugin.py").write_text(
        "import time\nimport plugin_holder\ntime.sleep(0.3)\nplugin_holder.REG.register('x')(1)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with ThreadPoolExecutor(8) as pool:
        got = list(pool.map(lambda _: reg.get("x"), range(8)))
    assert got == [1] * 8

