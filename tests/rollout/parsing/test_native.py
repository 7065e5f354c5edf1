"""`rollout.parsing.native`: OpenAI `tool_calls` entries decoded with the text path's
classifier (ids kept, duplicate ids and exact repeats refused, cut arguments truncated), and
the text of a message's content."""

from __future__ import annotations

import json
from typing import Any

from rollout.parsing import decode_native_tool_calls, message_text


def test_duplicate_native_ids_are_classified() -> None:
    def entry(name: str, call_id: Any) -> dict[str, Any]:
        return {"id": call_id, "type": "function", "function": {"name": name, "arguments": "{}"}}

    calls, bad = decode_native_tool_calls([entry("a", "x"), entry("b", "x"), entry("c", "y"), entry("d", "x")])
    assert [(c.name, c.id) for c in calls] == [("a", "x"), ("c", "y")]
    assert [m.error for m in bad] == ["duplicate_call_id", "duplicate_call_id"]
    assert "'x'" in bad[0].detail and '"b"' in bad[0].raw
    calls, bad = decode_native_tool_calls([entry("a", None), entry("b", None), entry("c", "")])
    assert [c.name for c in calls] == ["a", "b", "c"] and bad == []  # no id: the agent numbers them


def _call(name: str, arguments: Any, call_id: str | None = None) -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


def test_native_calls_keep_their_ids_and_decode_arguments() -> None:
    calls, bad = decode_native_tool_calls([_call("get_order", '{"order_id": "A1"}', "c7"),
                                           {"name": "list_all", "arguments": {"page": 2}}])
    assert bad == []
    assert [(c.name, c.arguments, c.id) for c in calls] == [("get_order", {"order_id": "A1"}, "c7"),
                                                            ("list_all", {"page": 2}, None)]


def test_exact_repeats_are_repeated_call() -> None:
    args = json.dumps({"order_id": "A1"})
    calls, bad = decode_native_tool_calls([_call("get_order", args, "a"), _call("get_order", args, "b"),
                                           _call("get_order", '{"order_id": "B2"}', "c")])
    assert [c.id for c in calls] == ["a", "c"]
    assert [m.error for m in bad] == ["repeated_call"] and "identical to call 0" in bad[0].detail


def test_entries_that_are_not_function_calls_are_unsupported() -> None:
    calls, bad = decode_native_tool_calls(["get_order", {"type": "code_interpreter", "id": "x"}])
    assert calls == [] and [m.error for m in bad] == ["unsupported_call", "unsupported_call"]
    assert "code_interpreter" in bad[1].detail


def test_arguments_cut_at_max_tokens_are_truncated_not_bad_json() -> None:
    cut = [_call("get_order", '{"order_id": "A', "c0")]
    assert [m.error for m in decode_native_tool_calls(cut, finish_reason="length")[1]] == ["truncated"]
    assert [m.error for m in decode_native_tool_calls(cut, finish_reason="stop")[1]] == ["bad_json"]
    # a non-finite number is refused as bad_json even when generation was cut
    nan = [_call("get_order", '{"n": NaN}', "c0")]
    assert [m.error for m in decode_native_tool_calls(nan, finish_reason="length")[1]] == ["bad_json"]


def test_message_text_reads_strings_and_text_parts() -> None:
    assert message_text({"role": "assistant", "content": "hello"}) == "hello"
    assert message_text({"content": [{"type": "text", "text": "a"}, "junk", {"type": "image"},
                                     {"type": "text", "text": "b"}]}) == "ab"
    assert message_text({"content": None}) == "" and message_text({}) == ""
