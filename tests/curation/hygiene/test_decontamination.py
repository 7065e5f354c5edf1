"""Decontamination: n-gram overlap with registered evaluation sets, on instructions and
tool-call sequences."""

from __future__ import annotations

import pytest

from curation.hygiene import decontaminate
from data.records import Task
from tests.curation.hygiene.planted import EVAL_TEXT


def test_decontamination_flags_planted_overlap(eval_set: str, many_tasks: list[Task]) -> None:
    words = EVAL_TEXT.split()
    contaminated = {
        "id": "dirty",
        "instruction": "Hello. " + " ".join(words[2:20]) + ". Thanks!",
        "tool_calls": [],
    }
    nine = {
        "id": "nine",
        "instruction": "Well " + " ".join(words[5:14]) + " ok",
        "tool_calls": [],
    }  # 9 tokens
    tools_dirty = {
        "id": "dirty-tools",
        "instruction": "please add bags",
        "tool_calls": [
            {"name": "update_baggage", "arguments": {"reservation_id": "RZZ1", "total_bags": 3}}
        ],
    }
    clean = [
        {
            "id": t.id,
            "instruction": t.instruction,
            "tool_calls": [
                {"name": c.name, "arguments": c.arguments} for c in t.reference_solution
            ],
        }
        for t in many_tasks
    ]
    kept, report = decontaminate([contaminated, nine, tools_dirty, *clean], [eval_set])
    r = report.eval_sets[eval_set]
    assert r.checked == 3 + len(clean)
    assert r.flagged == {"instruction@8": 2, "instruction@13": 1, "tool_calls@8": 1}
    assert r.flagged_any == 3 and r.longest_match == 18 and r.removed == 1
    assert [x["id"] for x in kept] == ["nine", "dirty-tools", *[c["id"] for c in clean]]
    ex = next(e for e in r.examples if e["row"] == "dirty" and e["n"] == 13)
    assert ex["longest_match"] == 18 and ex["match"].startswith("to change my flight")
    kept8, report8 = decontaminate([contaminated, nine, tools_dirty, *clean], [eval_set], drop_n=8)
    assert [x["id"] for x in kept8] == [c["id"] for c in clean]
    with pytest.raises(KeyError, match="unknown eval set"):
        decontaminate(clean, ["nope"])
    with pytest.raises(ValueError, match="drop_n"):
        decontaminate(clean, [eval_set], drop_n=5)
