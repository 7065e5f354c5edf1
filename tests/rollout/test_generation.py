"""`rollout.generation`: a self-play generator's output read (placeholders, the tagged format
and its lenient forms, r_format), its validity and grounding (r_valid), and the solver
pass rate p̂ (moved from tests/synthesis/test_self_play.py)."""

from __future__ import annotations

import json

import pytest

from data.records import ToolCall
from data.self_play import Generation, ParseError
from rollout.generation import (
    check_format,
    is_placeholder,
    parse_generation,
    r_format,
    r_valid,
    solver_pass_rate,
    validity,
    value_in_question,
)
from tests.rollout.generation_samples import (
    GOLD,
    QUESTION,
    TOOLS,
    generator_text,
    sample_generation,
)


@pytest.mark.parametrize("q", [None, "", "Hi there", "Book flight <flight_id> for me please.",
                               "Cancel reservation {reservation_id} for me please.", "TODO write the question here",
                               "Please cancel [insert reservation id] today.", "lorem ipsum dolor sit amet"])
def test_placeholders(q: str | None) -> None:
    assert is_placeholder(q)


def test_real_question_is_not_placeholder() -> None:
    assert not is_placeholder(QUESTION)
    assert not is_placeholder("What is 2 * (180 + 30)?")


def test_parser_good_output() -> None:
    gen = parse_generation(generator_text())
    assert isinstance(gen, Generation)
    assert gen.question == QUESTION
    assert gen.menu_names == ["get_user_details", "update_baggage"]
    assert gen.calls == [ToolCall(name="update_baggage", arguments={"reservation_id": "R0000030", "total_bags": 2})]
    assert parse_generation(gen.to_text()) == Generation(gen.question, gen.tools, gen.calls, gen.to_text())


def test_parser_lenient_forms() -> None:
    # fenced JSON, a bare {"name", "parameters"} tool, one call object instead of a list
    bare = [{"name": "get_user_details", "parameters": TOOLS[0]["function"]["parameters"]}]
    gen = parse_generation(generator_text(tools="```json\n" + json.dumps(bare) + "\n```", gold=json.dumps(GOLD[0])))
    assert isinstance(gen, Generation)
    assert gen.tools[0]["function"]["name"] == "get_user_details" and gen.tools[0]["type"] == "function"
    assert len(gen.calls) == 1


@pytest.mark.parametrize(("text", "reason"), [
    (generator_text().replace("</tool_call_answer>", ""), "tags"),  # unterminated
    (generator_text().replace("<question>", "").replace("</question>", ""), "tags"),  # missing
    (generator_text() + "<question>again</question>", "tags"),  # duplicated
    (generator_text(tools="[{'name': 'x'}]"), "tools_json"),
    (generator_text(tools="{}"), "tools_json"),
    (generator_text(tools="[]"), "tools_json"),
    (generator_text(tools='[{"description": "no name"}]'), "tools_json"),
    (generator_text(gold='[{"name": "update_baggage", "arguments": {"reservation_id": "R1"'), "gold_json"),
    (generator_text(gold='[{"arguments": {}}]'), "gold_json"),
    (generator_text(gold='[{"name": "x", "arguments": "R1"}]'), "gold_json"),
    (generator_text(gold="[]"), "gold_json"),
])
def test_parser_broken_outputs(text: str, reason: str) -> None:
    out = parse_generation(text)
    assert isinstance(out, ParseError)
    assert out.reason == reason


def test_r_format_partials() -> None:
    assert r_format(generator_text()) == 1.0
    assert r_format(generator_text(tools="not json")) == pytest.approx(2 / 3)
    assert r_format(generator_text(gold="[{oops")) == pytest.approx(2 / 3)
    assert r_format(generator_text(tools="nope", gold="nope")) == pytest.approx(1 / 3)
    # an unterminated last block still yields its JSON: tags fail, both JSON parts count
    unclosed = generator_text().replace("</tool_call_answer>", "")
    assert check_format(unclosed).calls is not None
    assert r_format(unclosed) == pytest.approx(2 / 3)
    # missing tools block: tags and tools fail
    assert r_format(f"<question>{QUESTION}</question><tool_call_answer>{json.dumps(GOLD)}</tool_call_answer>") \
        == pytest.approx(1 / 3)
    # a placeholder (or missing) question zeroes everything
    assert r_format(generator_text(question="Set <reservation_id> bags to {n} please")) == 0.0
    assert r_format("<available_tools>[]</available_tools>") == 0.0


def test_value_in_question_rules() -> None:
    assert value_in_question("R0000030", "Cancel r0000030 now")  # case-insensitive
    assert not value_in_question(2, "Fly on 2026-05-12")  # not inside a longer number
    assert value_in_question(2, "Add 2 bags")
    assert value_in_question(2.0, "Add 2 bags")
    assert value_in_question("basic_economy", "in basic economy please")
    assert not value_in_question("R0000030", "Cancel R00000301")
    assert value_in_question("2 * (180 + 30)", "What is 2 * (180 + 30)?")


def test_r_valid_cases() -> None:
    assert r_valid(sample_generation()) == 1.0
    # tool outside the menu: no menu credit, its required args cannot be checked; still grounded
    other = [{"name": "cancel_reservation", "arguments": {"reservation_id": "R0000030"}}]
    assert r_valid(sample_generation(gold=other)) == pytest.approx(0.2)
    # a required argument missing
    missing = [{"name": "update_baggage", "arguments": {"reservation_id": "R0000030"}}]
    v = validity(sample_generation(gold=missing))
    assert (v.in_menu, v.required, v.grounded, v.missing) == (True, False, True, ["update_baggage.total_bags"])
    assert r_valid(sample_generation(gold=missing)) == pytest.approx(0.6)
    # grounding: a value the question does not state (hallucinated)
    halluc = [{"name": "update_baggage", "arguments": {"reservation_id": "R0000099", "total_bags": 2}}]
    assert r_valid(sample_generation(gold=halluc)) == pytest.approx(0.8)
    assert validity(sample_generation(gold=halluc)).ungrounded == ["0:update_baggage.reservation_id"]
    # all gold calls count: a second, ungrounded call fails grounding
    two = [*GOLD, {"name": "get_user_details", "arguments": {"user_id": "mia_li_1003"}}]
    assert r_valid(sample_generation(gold=two)) == pytest.approx(0.8)
    assert r_valid(sample_generation(gold=[*GOLD, {"name": "get_user_details", "arguments": {"user_id": "raj_ahmed_1000"}}])) == 1.0
    # booleans are exempt from grounding
    menu = [*TOOLS, {"type": "function", "function": {"name": "book", "parameters": {
        "type": "object", "properties": {"insurance": {"type": "boolean"}}, "required": []}}}]
    assert r_valid(sample_generation(gold=[{"name": "book", "arguments": {"insurance": True}}], tools=menu)) == 1.0
    # placeholder question: 0
    assert r_valid(Generation("TODO", TOOLS, [ToolCall(name="get_user_details", arguments={"user_id": "x"})])) == 0.0


def test_solver_pass_rate_exact_canonical_match() -> None:
    gen = sample_generation()
    right = [ToolCall(name="update_baggage", arguments={"total_bags": 2, "reservation_id": "R0000030"})]
    wrong = [ToolCall(name="update_baggage", arguments={"total_bags": 3, "reservation_id": "R0000030"})]
    text = '<tool_call>{"name": "update_baggage", "arguments": {"reservation_id": "R0000030", "total_bags": 2}}</tool_call>'
    assert solver_pass_rate(gen, [right, wrong, wrong, text]) == 0.5
    assert solver_pass_rate(gen, [right + right]) == 0.0  # an extra call is not an exact match
    assert solver_pass_rate(gen, []) == 0.0
