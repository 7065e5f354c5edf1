"""The world contract's functions (`envs.contract`) on small modules: reading a hook, the
declared hooks, their table, and `check_world` on a one-file folder. (Registering whole
worlds against the contract is tested in tests/contracts/.)"""

from __future__ import annotations

from pathlib import Path
from types import ModuleType, SimpleNamespace

import pytest

from envs.contract import (
    HOOKS,
    Identity,
    WorldContractError,
    check_world,
    declared,
    defined_names,
    hook,
    hook_names,
    hooks_table,
)
from envs.loader import forget

GOOD_PROBES = '''from data.records import ToolCall
FIXTURE = "INSERT INTO meta VALUES ('now', '2026-01-01 00:00:00');"
PROBES = {"R01_X": (ToolCall(name="a", arguments={}), ToolCall(name="b", arguments={}))}
_HELPER = 1
def make_call(name):
    return ToolCall(name=name, arguments={})
'''


def module(file: str, **names: object) -> ModuleType:
    mod = ModuleType(file[:-3])
    mod.__file__ = f"/worlds/x/{file}"
    for key, value in names.items():
        setattr(mod, key, value)
    return mod


def test_hook_reads_only_declared_names() -> None:
    probes = module("probes.py", PROBES={"R01": 1})
    assert hook(probes, "PROBES") == {"R01": 1} and hook(probes, "MORE_PROBES", []) == []
    with pytest.raises(KeyError, match="'PROBE' is no hook of probes.py the world contract declares; "
                                       "did you mean 'PROBES'"):
        hook(probes, "PROBE")
    with pytest.raises(KeyError, match="no hook of probes.py"):
        hook(probes, "variants")  # design.py's, not probes.py's
    other = module("helpers.py", variants=len)  # a file the contract does not know: any hook name
    assert hook(other, "variants") is len and hook(None, "FIXTURE", "none") == "none"


def test_declared_hooks_and_their_shapes() -> None:
    fixture = declared("FIXTURE", "probes.py")
    assert not fixture.callable and fixture.required and fixture.shape() == "str"
    assert fixture.problem("INSERT ...") is None and "not str" in (fixture.problem(["INSERT"]) or "")
    generate = declared("generate")
    assert generate.callable and generate.params == ("conn", "seed", "scale")
    assert generate.problem(lambda conn, seed, scale: None) is None
    assert "cannot be called as generate(conn, seed, scale)" in (generate.problem(lambda conn: None) or "")
    assert "not a callable" in (generate.problem(3) or "")
    assert set(hook_names("probes.py")) == {h.name for h in HOOKS if h.module == "probes.py"}
    assert "generate" in hook_names() and "generate" not in hook_names("design.py")


def test_hooks_table_has_a_row_per_hook() -> None:
    lines = hooks_table().splitlines()
    assert lines[0] == "| module | hook | shape | required | what it is |" and len(lines) == 2 + len(HOOKS)
    row = next(line for line in lines if line.startswith("| `probes.py` | `FIXTURE` |"))
    assert "| `str` | yes |" in row
    assert all(line.count(" | ") == 4 for line in lines[2:])  # pipes inside a cell are escaped


def test_defined_names_skip_imports_and_private_names(tmp_path: Path) -> None:
    path = tmp_path / "probes.py"
    path.write_text(GOOD_PROBES + "class Thing:\n    pass\nA, B = 1, 2\n")
    assert defined_names(path) == {"FIXTURE": False, "PROBES": False, "make_call": True, "Thing": False,
                                   "A": False, "B": False}


def test_check_world_on_a_one_file_folder(tmp_path: Path) -> None:
    folder = tmp_path / "tiny"
    folder.mkdir()
    (folder / "probes.py").write_text(GOOD_PROBES)
    check_world(SimpleNamespace(name="tiny", folder=folder))
    (folder / "probes.py").write_text(GOOD_PROBES + "MORE_PROBE = []\nFIXTURE = 3\n")
    forget(folder)
    with pytest.raises(WorldContractError) as info:
        check_world(SimpleNamespace(name="tiny", folder=folder))
    assert info.value.world == "tiny" and set(info.value.hooks) == {"FIXTURE", "MORE_PROBE"}
    assert "world 'tiny' breaks the world contract" in str(info.value)
    # a workspace world's folder is checked for its own module only (seeds.py)
    check_world(SimpleNamespace(name="tiny", folder=folder, kind="workspace"))
    forget(folder)


def test_identity_vocabulary() -> None:
    who = Identity(keys=[["member_id"], ["email", "date_of_birth"]], lookups={"find": ["email"]},
                   confirm=["date_of_birth"], nouns={"member_id": "library card number"})
    assert who.account_keys() == ("member_id",)
    assert who.own_ids() == ("member_id", "user_id", "customer_id", "account_id")
    assert who.question() == "Could you give me your library card number?"
    assert who.noun("date_of_birth") == "date of birth"
    assert "user id" in who.asked_by("member_id") and who.asked_by("email") == set()
    assert Identity().question() == "Could you give me your user id?"
