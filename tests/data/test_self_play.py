"""Self-play records: a spec survives its dict form, a generation's tagged text is what the
generator is asked to write (and parses back to it), tool names read from either schema shape."""

from __future__ import annotations

import json

from data.records import ToolCall
from data.self_play import Candidate, Generation, Spec, _gold_json, _tool_name, _tool_params
from rollout.generation import parse_generation

BOOK = {"type": "function", "function": {"name": "book", "description": "Book a flight.", "parameters": {
    "type": "object", "properties": {"flight": {"type": "string"}}, "required": ["flight"]}}}
FLAT = {"name": "lookup", "parameters": {"type": "object", "properties": {}}}  # a schema without the wrapper


def test_spec_round_trips_and_names_its_menu() -> None:
    spec = Spec(world="airline", n_calls=2, tools=["book", "book"], menu=[BOOK, FLAT])
    assert spec.menu_names == ["book", "lookup"]
    back = Spec.from_dict(json.loads(json.dumps(spec.to_dict())))
    assert back == spec and back.tools is not spec.tools
    assert Spec.from_dict({"world": "w", "n_calls": "3", "tools": ("a",), "menu": []}) == Spec("w", 3, ["a"], [])
    cand = Candidate(spec=spec, generation=Generation("q", [BOOK], []))
    assert cand.world == "airline" and cand.p_hat is None


def test_generation_text_is_the_tagged_form_and_parses_back() -> None:
    calls = [ToolCall(name="book", arguments={"flight": "HAT012"}), ToolCall(name="book", arguments={"flight": "Zürich"})]
    gen = Generation(question="Book HAT012 and the Zürich one.", tools=[BOOK], calls=calls)
    text = gen.to_text()
    assert text.startswith("<question>Book HAT012 and the Zürich one.</question>\n<available_tools>[")
    assert text.endswith('<tool_call_answer>[{"name": "book", "arguments": {"flight": "HAT012"}}, '
                         '{"name": "book", "arguments": {"flight": "Zürich"}}]</tool_call_answer>')
    parsed = parse_generation(text)
    assert isinstance(parsed, Generation)
    assert (parsed.question, parsed.tools, parsed.calls, parsed.raw) == (gen.question, gen.tools, calls, text)
    assert gen.menu_names == ["book"]


def test_schema_helpers_read_either_shape() -> None:
    assert (_tool_name(BOOK), _tool_name(FLAT), _tool_name({})) == ("book", "lookup", "")
    assert _tool_params(BOOK)["required"] == ["flight"] and _tool_params({"name": "x", "parameters": "bad"}) == {}
    a = [ToolCall(name="f", arguments={"b": 1, "a": 2})]
    b = [ToolCall(name="f", arguments={"a": 2, "b": 1})]
    assert _gold_json(a) == _gold_json(b) != _gold_json([ToolCall(name="f", arguments={"a": 2, "b": 2})])
