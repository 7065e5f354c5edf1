"""`rollout.parsing.classify`: the one classifier of both paths. A call written in the text
and a native `tool_calls` entry with the same arguments get the same class (issue 18 §8),
and strict JSON refuses duplicate keys, NaN and infinities, and undecodable text."""

from __future__ import annotations

import json
from typing import Any

import pytest

from data.records import ToolCall
from rollout.model import MalformedCall
from rollout.parsing import parse_model_output
from rollout.parsing.classify import _classify, _clean_text

VALUES = [None, {}, {"order_id": "A1"}, [1], [], 7, 3.5, True]  # strings: STRINGS below


STRINGS = ["null", "bad", "{bad", "[1]", "", "  ", '{"order_id": "A1"}', '"A1"', "7", "{}}"]


def classes(**kw: Any) -> list[str] | dict:
    parsed = parse_model_output(**kw)
    return parsed.error_classes or parsed.calls[0].arguments


@pytest.mark.parametrize("value", VALUES, ids=repr)
def test_same_arguments_value_same_class(value: Any) -> None:
    text = f'<tool_call>{{"name": "get_order", "arguments": {json.dumps(value)}}}</tool_call>'
    native = [{"id": "c0", "type": "function",
               "function": {"name": "get_order", "arguments": json.dumps(value)}}]
    assert classes(output=text) == classes(native=native)


@pytest.mark.parametrize("arguments", STRINGS, ids=repr)
def test_same_arguments_string_same_class(arguments: str) -> None:
    text = f'<tool_call>{{"name": "get_order", "arguments": {json.dumps(arguments)}}}</tool_call>'
    native = [{"id": "c0", "type": "function", "function": {"name": "get_order", "arguments": arguments}}]
    assert classes(output=text) == classes(native=native)


@pytest.mark.parametrize(("entry", "error"), [
    ({"name": "a", "arguments": {"k": 1}, "name ": 2}, None),  # distinct keys: a call
    (json.loads('{"name": "a", "arguments": {"k": 1}}'), None),
    ({"name": "a\ud800", "arguments": {}}, "invalid_utf8"),
    ({"name": "a", "arguments": {"k": "x\ufffdy"}}, "invalid_utf8"),
    ({"name": "a", "arguments": {"k": float("inf")}}, "bad_json"),
    ({"name": "a", "arguments": '{"k": 1, "k": 2}'}, "duplicate_key"),
    ({"name": "a", "arguments": '{"k": 1e999}'}, "bad_json"),
    ([{"name": "a"}], "bad_json"),
])
def test_classify_one_entry(entry: Any, error: str | None) -> None:
    item = _classify(entry, json.dumps(entry, default=str))
    if error is None:
        assert isinstance(item, ToolCall) and item.name == "a" and item.arguments == {"k": 1}
    else:
        assert isinstance(item, MalformedCall) and item.error == error


def test_classify_native_flags_and_raw() -> None:
    assert _classify([1], "[1]", native=True).error == "unsupported_call"  # type: ignore[union-attr]
    cut = _classify({"name": "a", "arguments": '{"k": '}, "raw", cut=True)
    assert isinstance(cut, MalformedCall) and cut.error == "truncated" and cut.detail.startswith("a: arguments:")
    call = _classify({"type": "function", "function": {"name": " a ", "arguments": ""}}, "raw", call_id="c1")
    assert call == ToolCall(name="a", arguments={}, id="c1")
    long = _classify({"name": 5}, "x" * 5000)
    assert isinstance(long, MalformedCall) and long.error == "missing_name" and len(long.raw) == 2000
    assert _clean_text("ok\ud800") == "ok\ufffd"
