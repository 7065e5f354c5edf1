"""`rollout.parsing.validate`: parsed calls checked against OpenAI tool schemas, with the
environment's error classes (`unknown_tool`, `unknown_argument`, `missing_argument`,
`wrong_type`)."""

from __future__ import annotations

from typing import Any

import pytest

from data.records import ToolCall
from rollout.parsing import validate_calls

TOOLS: list[dict[str, Any]] = [
    {"type": "function", "function": {"name": "book", "parameters": {
        "type": "object",
        "properties": {
            "flight": {"type": "string"},
            "seats": {"type": "integer"},
            "cabin": {"type": "string", "enum": ["economy", "business"]},
            "insured": {"type": "boolean"},
            "price": {"type": "number"},
            "names": {"type": "array", "items": {"type": "string"}},
            "note": {"anyOf": [{"type": "string"}, {"type": "null"}]},
            "extra": {"type": ["object", "null"]},
        },
        "required": ["flight", "seats"],
    }}},
    {"name": "ping"},  # a flat schema without parameters
]


def _check(**arguments: Any) -> list[str]:
    ok, bad = validate_calls([ToolCall(name="book", arguments=arguments)], TOOLS)
    assert len(ok) + len(bad) == 1
    return [m.error for m in bad]


def test_calls_that_fit_pass_through_unchanged() -> None:
    calls = [ToolCall(name="book", arguments={"flight": "F1", "seats": 2, "cabin": "economy", "insured": False,
                                              "price": 10, "names": ["a", "b"], "note": None, "extra": {}}),
             ToolCall(name="ping", arguments={}, id="c9")]
    ok, bad = validate_calls(calls, TOOLS)
    assert ok == calls and bad == []
    assert _check(flight="F1", seats=2.0) == []  # an integral float is an integer


@pytest.mark.parametrize(("arguments", "error"), [
    ({"flight": "F1"}, "missing_argument"),
    ({"flight": "F1", "seats": 1, "meal": "veg"}, "unknown_argument"),
    ({"flight": "F1", "seats": "2"}, "wrong_type"),
    ({"flight": "F1", "seats": True}, "wrong_type"),  # a boolean is not an integer
    ({"flight": "F1", "seats": 1.5}, "wrong_type"),
    ({"flight": "F1", "seats": 1, "cabin": "first"}, "wrong_type"),  # outside the enum
    ({"flight": "F1", "seats": 1, "names": ["a", 2]}, "wrong_type"),  # an item of the wrong type
    ({"flight": "F1", "seats": 1, "note": 3}, "wrong_type"),  # none of anyOf
    ({"flight": "F1", "seats": 1, "extra": []}, "wrong_type"),
    ({"flight": "F1", "seats": 1, "price": False}, "wrong_type"),
])
def test_each_schema_problem_has_its_class(arguments: dict[str, Any], error: str) -> None:
    assert _check(**arguments) == [error]


def test_unknown_tools_name_the_known_ones_and_keep_order() -> None:
    calls = [ToolCall(name="fly", arguments={"x": 1}), ToolCall(name="ping", arguments={}),
             ToolCall(name="book", arguments={"flight": "F1"})]
    ok, bad = validate_calls(calls, TOOLS)
    assert [c.name for c in ok] == ["ping"]
    assert [m.error for m in bad] == ["unknown_tool", "missing_argument"]
    assert "'fly'" in bad[0].detail and "book, ping" in bad[0].detail
    assert bad[0].raw == '{"name": "fly", "arguments": {"x": 1}}'
    assert validate_calls(calls[:1], [])[1][0].detail.endswith("tools are: none")
