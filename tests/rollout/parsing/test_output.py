"""`rollout.parsing.output`: one raw output parsed end to end (`parse_model_output`): bytes
off the wire, native calls before text, schema checks with `tools`, and `tool_names_of`."""

from __future__ import annotations

from rollout.parsing import ParsedOutput, parse_model_output, tool_names_of
from tests.make_malformed_corpus import TOOLS


def test_valid_calls_next_to_malformed_ones_survive() -> None:
    parsed = parse_model_output(
        '<tool_call>{"name": "get_order", "arguments": {"order_id": "A1"}}</tool_call>'
        "<tool_call>{oops}</tool_call>",
        tools=TOOLS,
    )
    assert [c.name for c in parsed.calls] == ["get_order"] and parsed.error_classes == ["bad_json"]


def test_tool_names_of_reads_wrapped_and_flat_schemas() -> None:
    assert tool_names_of([{"type": "function", "function": {"name": "a"}}, {"name": "b"},
                          {"function": {"name": 3}}, "junk"]) == ["a", "b"]  # type: ignore[list-item]
    assert tool_names_of(None) == [] and tool_names_of(TOOLS)[:1] == [TOOLS[0]["function"]["name"]]


def test_invalid_utf8_bytes_are_replaced_and_classified() -> None:
    raw = '<tool_call>{"name": "get_order", "arguments": {"order_id": "A\xff1"}}</tool_call>'.encode("latin-1")
    parsed = parse_model_output(b"Hi \xfe there. " + raw)
    assert parsed.text == "Hi \ufffd there." and parsed.calls == []
    assert parsed.error_classes == ["invalid_utf8"]


def test_native_calls_take_precedence_over_text() -> None:
    native = [{"id": "n1", "type": "function", "function": {"name": "get_order", "arguments": '{"order_id": "A1"}'}}]
    text = 'Sure.<tool_call>{"name": "cancel_order", "arguments": {"order_id": "A1"}}</tool_call>\ud800'
    parsed = parse_model_output(text, native=native)
    assert [(c.name, c.id) for c in parsed.calls] == [("get_order", "n1")] and parsed.malformed == []
    assert parsed.text.endswith("\ufffd") and "<tool_call>" in parsed.text  # the text is kept, not parsed


def test_tools_check_the_schemas_after_parsing() -> None:
    out = ('<tool_call>{"name": "get_order", "arguments": {"order_id": "A1"}}</tool_call>'
           '<tool_call>{"name": "fly", "arguments": {}}</tool_call>')
    assert parse_model_output(out).error_classes == []  # no tools: not checked
    parsed = parse_model_output(out, tools=TOOLS)
    assert [c.name for c in parsed.calls] == ["get_order"] and parsed.error_classes == ["unknown_tool"]
    assert isinstance(parsed, ParsedOutput) and parse_model_output().model_dump() == ParsedOutput().model_dump()


def test_tool_names_sharpen_the_python_call_rule_end_to_end() -> None:
    out = 'calculate(expression="2+2")'
    assert parse_model_output(out).error_classes == []
    assert parse_model_output(out, tools=[{"name": "calculate"}]).error_classes == ["unsupported_syntax"]
    assert parse_model_output(out, tool_names=["calculate"]).error_classes == ["unsupported_syntax"]
