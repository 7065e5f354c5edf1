"""`envs.scaffold.new_world`'s files, read as files: the name and title filled in, the Python
files compile, the schema builds a database whose triggers raise the rule ids the policy
states. (That the world registers and synthesizes is tested in tests/contracts/.)"""

from __future__ import annotations

import re
import sqlite3
from pathlib import Path

import pytest

from envs.scaffold import FILES, new_world
from envs.sql import schema_script


@pytest.fixture()
def folder(tmp_path: Path) -> Path:
    (tmp_path / "town_desk").mkdir()  # an empty folder may be written into
    written = new_world("town_desk", tmp_path)
    assert [p.name for p in written] == list(FILES)
    return tmp_path / "town_desk"


def test_the_name_and_title_are_filled_in(folder: Path) -> None:
    for path in folder.iterdir():
        text = path.read_text()
        assert "{name}" not in text and "{title}" not in text, path.name
    assert (folder / "policy.md").read_text().startswith("# Town Desk desk policy")


def test_python_files_compile_and_the_schema_enforces_the_policys_rules(folder: Path) -> None:
    for path in folder.glob("*.py"):
        compile(path.read_text(), str(path), "exec")
    enforced = set(re.findall(r"\*\*(R\d+_[A-Z_]+)\*\* \*\(enforced\)\*", (folder / "policy.md").read_text()))
    schema = (folder / "schema.sql").read_text()
    assert enforced == {"R01_ITEM_AVAILABLE", "R02_LOAN_LIMIT", "R03_LOAN_OPEN"}
    assert enforced == set(re.findall(r"RAISE\(ABORT, '(R\d+_[A-Z_]+)", schema))
    db = sqlite3.connect(":memory:")
    db.executescript(schema_script(folder / "schema.sql"))  # the kit's ledger included, as the loader does
    db.executescript("INSERT INTO members VALUES ('m1', 'Ada', 1); INSERT INTO items (item_id, title) VALUES "
                     "('i1', 'Atlas'), ('i2', 'River');")
    db.execute("INSERT INTO loans (loan_id, member_id, item_id) VALUES ('l1', 'm1', 'i1')")
    with pytest.raises(sqlite3.IntegrityError, match="R02_LOAN_LIMIT"):
        db.execute("INSERT INTO loans (loan_id, member_id, item_id) VALUES ('l2', 'm1', 'i2')")  # over the limit


def test_only_lower_case_identifiers_name_a_world(tmp_path: Path) -> None:
    for bad in ("Desk", "1desk", "my-desk", ""):
        with pytest.raises(ValueError, match="world name"):
            new_world(bad, tmp_path)
    assert list(tmp_path.iterdir()) == []  # nothing written
