"""docs/authoring-a-world.md shows every hook of the world contract, as the protocols in
`envs/contract.py` declare it: its generated table matches `hooks_table()` exactly."""

from __future__ import annotations

from pathlib import Path

from envs.contract import (
    DOC_END,
    DOC_START,
    HOOKS,
    MODULES,
    doc_section,
    hooks_table,
    with_hooks_table,
)

DOC = Path(__file__).resolve().parents[2] / "docs" / "authoring-a-world.md"


def test_the_doc_lists_every_hook_of_the_protocol() -> None:
    section = doc_section(DOC.read_text())
    assert section is not None, f"{DOC.name} has no {DOC_START} ... {DOC_END} section"
    assert section == hooks_table(), (
        "the hooks table drifted from envs/contract.py; regenerate it with "
        "`python -c \"from pathlib import Path; from envs.contract import with_hooks_table; "
        "p = Path('docs/authoring-a-world.md'); p.write_text(with_hooks_table(p.read_text()))\"`")
    for h in HOOKS:
        assert f"| `{h.module}` | `{h.name}` |" in section, h.name
    assert {m.file for m in MODULES} == {h.module for h in HOOKS}


def test_a_drifted_table_is_caught() -> None:
    text = DOC.read_text()
    dropped = text.replace("| `design.py` | `KIND_WRITES` |", "| `design.py` | `KIND_WRITE` |")
    assert doc_section(dropped) != hooks_table()
    assert doc_section(with_hooks_table(dropped)) == hooks_table()
