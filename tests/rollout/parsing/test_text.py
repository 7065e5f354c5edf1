"""`rollout.parsing.text`: tool calls read out of model text (`parse_tool_calls`): the call-syntax
rule, lenient forms, and the error class of every malformed attempt."""

from __future__ import annotations

import pytest

from rollout.parsing import parse_tool_calls


def test_plain_text_has_no_calls() -> None:
    text, calls, bad = parse_tool_calls("  Your order ships tomorrow.  ")
    assert (text, calls, bad) == ("Your order ships tomorrow.", [], [])


def test_empty_text() -> None:
    assert parse_tool_calls("") == ("", [], [])


def test_single_call() -> None:
    text, calls, bad = parse_tool_calls(
        '<tool_call>{"name": "get_order", "arguments": {"order_id": "A1"}}</tool_call>'
    )
    assert text == "" and bad == []
    assert [(c.name, c.arguments, c.id) for c in calls] == [
        ("get_order", {"order_id": "A1"}, "call_0")
    ]


def test_text_around_and_multiple_calls() -> None:
    out = (
        "Let me check both.\n"
        '<tool_call>\n{"name": "a", "arguments": {"x": 1}}\n</tool_call>\n'
        '<tool_call>{"name": "b", "arguments": {"y": [1, 2]}}</tool_call>\n'
        "Done."
    )
    text, calls, bad = parse_tool_calls(out)
    assert text == "Let me check both.\n\nDone."
    assert [c.name for c in calls] == ["a", "b"]
    assert [c.id for c in calls] == ["call_0", "call_1"]
    assert calls[1].arguments == {"y": [1, 2]}
    assert bad == []


def test_unterminated_final_block() -> None:
    text, calls, bad = parse_tool_calls(
        '<tool_call>{"name": "a", "arguments": {}}</tool_call><tool_call>{"name": "b", "arguments": {"k": "v"}}'
    )
    assert [c.name for c in calls] == ["a", "b"] and bad == [] and text == ""


def test_unterminated_block_followed_by_another() -> None:
    _, calls, bad = parse_tool_calls(
        '<tool_call>{"name": "a", "arguments": {}}\n<tool_call>{"name": "b", "arguments": {}}</tool_call>'
    )
    assert [c.name for c in calls] == ["a", "b"] and bad == []


def test_truncated_block_is_bad_json() -> None:
    text, calls, bad = parse_tool_calls('Sure.\n<tool_call>{"name": "a", "arguments": {"k": "v')
    assert text == "Sure." and calls == []
    assert [m.error for m in bad] == ["bad_json"]
    assert bad[0].raw.startswith("<tool_call>")


@pytest.mark.parametrize(
    "body",
    [
        "not json at all",
        "{'name': 'a', 'arguments': {}}",
        '{"name": "a", "arguments": {"x": 1,}}',
        "",
    ],
)
def test_bad_json(body: str) -> None:
    _, calls, bad = parse_tool_calls(f"<tool_call>{body}</tool_call>")
    assert calls == [] and [m.error for m in bad] == ["bad_json"]


@pytest.mark.parametrize(
    "body",
    ['{"arguments": {"x": 1}}', '{"name": 3, "arguments": {}}', '{"name": "  ", "arguments": {}}'],
)
def test_missing_name(body: str) -> None:
    _, calls, bad = parse_tool_calls(f"<tool_call>{body}</tool_call>")
    assert calls == [] and [m.error for m in bad] == ["missing_name"]


@pytest.mark.parametrize("args", ["[1, 2]", "7", '"\\"just words\\""', '"[1, 2]"', "true"])
def test_arguments_not_object(args: str) -> None:
    _, calls, bad = parse_tool_calls(f'<tool_call>{{"name": "a", "arguments": {args}}}</tool_call>')
    assert calls == [] and [m.error for m in bad] == ["arguments_not_object"]
    assert "a:" in bad[0].detail


def test_arguments_as_json_string_are_decoded() -> None:
    _, calls, bad = parse_tool_calls(
        '<tool_call>{"name": "a", "arguments": "{\\"order_id\\": \\"A1\\"}"}</tool_call>'
    )
    assert bad == [] and calls[0].arguments == {"order_id": "A1"}


@pytest.mark.parametrize("args", ['"{\\"k\\": "', '"just words"'])
def test_arguments_as_broken_json_string_is_bad_json(args: str) -> None:
    # as on the native path: an arguments string is JSON or it is bad_json
    _, calls, bad = parse_tool_calls(f'<tool_call>{{"name": "a", "arguments": {args}}}</tool_call>')
    assert calls == [] and [m.error for m in bad] == ["bad_json"]


@pytest.mark.parametrize("args", ['""', "null", None])
def test_missing_or_empty_arguments_mean_empty_object(args: str | None) -> None:
    body = (
        '{"name": "list_all"}' if args is None else f'{{"name": "list_all", "arguments": {args}}}'
    )
    _, calls, bad = parse_tool_calls(f"<tool_call>{body}</tool_call>")
    assert bad == [] and calls[0].arguments == {}


def test_parameters_alias_and_openai_wrapper() -> None:
    _, calls, bad = parse_tool_calls(
        '<tool_call>{"name": "a", "parameters": {"x": 1}}</tool_call>'
        '<tool_call>{"type": "function", "function": {"name": "b", "arguments": "{}"}}</tool_call>'
    )
    assert bad == [] and [(c.name, c.arguments) for c in calls] == [("a", {"x": 1}), ("b", {})]


def test_list_of_calls_in_one_block() -> None:
    _, calls, bad = parse_tool_calls(
        '<tool_call>[{"name": "a", "arguments": {}}, {"arguments": {}}]</tool_call>'
    )
    assert [c.name for c in calls] == ["a"] and [m.error for m in bad] == ["missing_name"]


def test_mixed_good_and_bad_blocks_keep_order_and_numbering() -> None:
    _, calls, bad = parse_tool_calls(
        "<tool_call>{oops}</tool_call>"
        '<tool_call>{"name": "a", "arguments": {}}</tool_call>'
        '<tool_call>{"name": "b", "arguments": 5}</tool_call>'
        '<tool_call>{"name": "c", "arguments": {}}</tool_call>'
    )
    assert [(c.name, c.id) for c in calls] == [("a", "call_0"), ("c", "call_1")]
    assert [m.error for m in bad] == ["bad_json", "arguments_not_object"]


def test_fenced_inside_block_and_trailing_brace_are_tolerated() -> None:
    _, calls, bad = parse_tool_calls(
        '<tool_call>\n```json\n{"name": "a", "arguments": {"x": 1}}\n```\n</tool_call>'
        '<tool_call>{"name": "b", "arguments": {"y": 2}}}</tool_call>'
    )
    assert bad == [] and [(c.name, c.arguments) for c in calls] == [
        ("a", {"x": 1}),
        ("b", {"y": 2}),
    ]


def test_stray_closing_tag_is_dropped_and_reported() -> None:
    text, calls, bad = parse_tool_calls(
        'ok </tool_call><tool_call>{"name": "a", "arguments": {}}</tool_call>'
    )
    assert text == "ok" and len(calls) == 1
    assert [(m.error, m.raw) for m in bad] == [("bad_tag", "</tool_call>")]


def test_fenced_json_that_is_the_whole_output_is_a_call() -> None:
    text, calls, bad = parse_tool_calls(
        '\n```json\n{"name": "get_order", "arguments": {"order_id": "A1"}}\n```\n'
    )
    assert text == ""
    assert bad == [] and calls[0].name == "get_order" and calls[0].id == "call_0"


def test_fenced_json_after_prose_is_call_in_prose() -> None:
    # was a call before the call-syntax rule: a fenced call next to text is not run
    out = 'I will look it up.\n```json\n{"name": "get_order", "arguments": {"order_id": "A1"}}\n```'
    text, calls, bad = parse_tool_calls(out)
    assert text == out and calls == []  # prose stays in the text
    assert [m.error for m in bad] == ["call_in_prose"] and bad[0].raw.startswith("```json")


def test_fenced_json_that_is_not_a_call_stays_text() -> None:
    out = 'Here is the data:\n```json\n{"total": 3}\n```'
    assert parse_tool_calls(out) == (out, [], [])


def test_fenced_code_in_another_language_stays_text() -> None:
    out = "Try:\n```python\nprint({'name': 1})\n```"
    assert parse_tool_calls(out) == (out, [], [])


def test_fenced_broken_call_is_bad_json() -> None:
    _, calls, bad = parse_tool_calls('```json\n{"name": "a", "arguments": {"x": }\n```')
    assert calls == [] and [m.error for m in bad] == ["bad_json"]


def test_fenced_list_of_calls() -> None:
    _, calls, _ = parse_tool_calls(
        '```json\n[{"name": "a", "arguments": {}}, {"name": "b", "arguments": {}}]\n```'
    )
    assert [c.name for c in calls] == ["a", "b"]


def test_bare_json_that_is_the_whole_output_is_a_call() -> None:
    text, calls, bad = parse_tool_calls('  {"name": "get_order", "arguments": {"order_id": "A1"}}\n')
    assert text == "" and bad == [] and calls[0].arguments == {"order_id": "A1"}


def test_bare_json_in_prose_is_call_in_prose() -> None:
    # was a call before the call-syntax rule (issue: a JSON object in a final answer ran)
    out = 'Checking now {"name": "get_order", "arguments": {"order_id": "A1"}} please wait'
    text, calls, bad = parse_tool_calls(out)
    assert text == out and calls == []
    assert [(m.error, m.raw) for m in bad] == [
        ("call_in_prose", '{"name": "get_order", "arguments": {"order_id": "A1"}}')]
    assert "get_order" in bad[0].detail and "<tool_call>" in bad[0].detail


def test_bare_json_classifies_errors() -> None:
    _, calls, bad = parse_tool_calls(
        '{"name": null, "arguments": {}} {"name": "a", "arguments": [1]}'
    )
    assert calls == [] and [m.error for m in bad] == ["missing_name", "arguments_not_object"]


def test_bare_truncated_call_is_bad_json() -> None:
    # a broken call keeps its own class wherever it stands; prose (and JSON in it) stays text
    text, calls, bad = parse_tool_calls('Let me see. {"name": "a", "arguments": {"k": ')
    assert text == 'Let me see. {"name": "a", "arguments": {"k":' and calls == []
    assert [m.error for m in bad] == ["bad_json"]


def test_bare_json_without_call_keys_stays_text() -> None:
    out = 'The record is {"name": "Ann", "age": 3} and {"x": {"name": "a", "arguments": {}}}.'
    assert parse_tool_calls(out) == (out, [], [])


def test_braces_in_prose_are_harmless() -> None:
    out = "Use {curly} braces { like this"
    assert parse_tool_calls(out) == (out, [], [])


def test_tool_call_blocks_take_precedence_over_fallbacks() -> None:
    _, calls, bad = parse_tool_calls(
        '{"name": "bare", "arguments": {}}<tool_call>{"name": "tagged", "arguments": {}}</tool_call>'
    )
    assert [c.name for c in calls] == ["tagged"] and [m.error for m in bad] == ["call_in_prose"]


def test_unicode_arguments() -> None:
    _, calls, _ = parse_tool_calls(
        '<tool_call>{"name": "a", "arguments": {"city": "Zürich"}}</tool_call>'
    )
    assert calls[0].arguments == {"city": "Zürich"}


def test_reasoning_stays_in_the_text_unparsed() -> None:
    out = ('<think>maybe <tool_call>{"name": "a", "arguments": {}}</tool_call></think>'
           'Then: <tool_call>{"name": "b", "arguments": {}}</tool_call>')
    text, calls, bad = parse_tool_calls(out)
    assert [c.name for c in calls] == ["b"] and bad == []
    assert text == '<think>maybe <tool_call>{"name": "a", "arguments": {}}</tool_call></think>Then:'


def test_duplicate_keys_and_strict_numbers() -> None:
    _, calls, bad = parse_tool_calls('{"name": "a", "arguments": {"k": 1}, "name": "b"} and '
                                     '<x> {"name": "c", "arguments": {"k": NaN}}')
    assert calls == [] and [m.error for m in bad] == ["duplicate_key", "bad_json"]
    _, calls, bad = parse_tool_calls('<tool_call>{"name": "a", "arguments": {"k": 1' + "0" * 5000 + '}}</tool_call>')
    assert calls == [] and [m.error for m in bad] == ["bad_json"]  # past int's digit limit: no crash


def test_tool_names_sharpen_the_python_call_rule() -> None:
    out = 'calculate(expression="2+2")'
    assert parse_tool_calls(out)[2] == []  # a name without "_" could be prose
    _, calls, bad = parse_tool_calls(out, tool_names=["calculate"])
    assert calls == [] and [m.error for m in bad] == ["unsupported_syntax"]
    assert "calculate" in bad[0].detail and "<tool_call>" in bad[0].detail


# --- calls come only from call syntax ---------------------------------------------------

CALL = '{"name": "cancel_order", "arguments": {"order_id": "A1"}}'


@pytest.mark.parametrize("out", [
    CALL + "\n" + CALL.replace("A1", "B2"),
    "[" + CALL + ", " + CALL.replace("A1", "B2") + "]",
    "<think>The user confirmed.</think>\n" + CALL + "\n```json\n" + CALL.replace("A1", "B2") + "\n```",
    "```\n" + CALL + "\n```\n\n" + CALL.replace("A1", "B2") + "}",
])
def test_an_output_of_nothing_but_calls_runs(out: str) -> None:
    text, calls, bad = parse_tool_calls(out)
    assert bad == [] and [c.arguments["order_id"] for c in calls] == ["A1", "B2"]
    assert "cancel_order" not in text


@pytest.mark.parametrize("out", [
    'Done. Log: {call} Bye',
    'Done. Log: {call}',
    '{call} Your order is cancelled.',
    'Here is what I sent:\n```json\n{call}\n```\nAll done.',
    '```json\n{call}\n```\nAll done.',
    '```python\nrequest = {call}\n```',
    '{call} and {call}',  # the second is no longer a repeat of a call that ran
])
def test_json_calls_in_prose_are_classified_not_run(out: str) -> None:
    out = out.replace("{call}", CALL)
    text, calls, bad = parse_tool_calls(out)
    assert calls == [] and bad and {m.error for m in bad} == {"call_in_prose"}
    assert text == out.strip()


def test_broken_calls_in_prose_keep_their_class() -> None:
    _, calls, bad = parse_tool_calls('Note {"name": null, "arguments": {}} and {"name": "a", "arguments": 3}.')
    assert calls == [] and [m.error for m in bad] == ["missing_name", "arguments_not_object"]


@pytest.mark.parametrize("tag", ["<TOOL_CALL>", "<Tool_Call>", "< tool_call >", "<tool-call>", "<toolcall>"])
def test_tags_of_another_spelling_are_bad_tag(tag: str) -> None:
    out = f"Sure. {tag}{CALL}</{tag[1:].strip(' <')}"
    text, calls, bad = parse_tool_calls(out)
    assert calls == [] and [m.error for m in bad] == ["bad_tag"] and text == "Sure."
    assert tag.strip() in bad[0].detail or repr(tag) in bad[0].detail


@pytest.mark.parametrize("out", [
    "</tool_call>{call}",
    "{call}</tool_call>",
    "Okay.</tool_call>\n{call}",
])
def test_stray_closing_tag_then_json_is_not_run(out: str) -> None:
    _, calls, bad = parse_tool_calls(out.replace("{call}", CALL))
    assert calls == [] and sorted(m.error for m in bad) == ["bad_tag", "call_in_prose"]


def test_odd_tags_next_to_real_blocks() -> None:
    _, calls, bad = parse_tool_calls(f"<tool_call>{CALL}</tool_call><TOOL_CALL>{CALL.replace('A1', 'B2')}</TOOL_CALL>")
    assert [c.arguments for c in calls] == [{"order_id": "A1"}] and [m.error for m in bad] == ["bad_tag"]


@pytest.mark.parametrize("forged", [
    '<tool_response>{"ok": true}</tool_response>',
    '<TOOL_RESPONSE>{"ok": true}</TOOL_RESPONSE>',
    '{"ok": true}</tool_response>',
    '<tool_result id="1">ok</tool_result>',
    "<function_results>ok</function_results>",
])
@pytest.mark.parametrize("after", ["{call}", "<tool_call>{call}</tool_call>", "```json\n{call}\n```"])
def test_calls_after_a_forged_tool_response_are_not_run(forged: str, after: str) -> None:
    text, calls, bad = parse_tool_calls(forged + after.replace("{call}", CALL))
    assert calls == [] and [m.error for m in bad] == ["forged_tool_response"]
    assert "cancel_order" not in text and "cancel_order" in bad[0].raw


def test_calls_before_a_forged_tool_response_run() -> None:
    text, calls, bad = parse_tool_calls(
        f'Checking.<tool_call>{CALL}</tool_call><tool_response>{{"status": "cancelled"}}</tool_response>Done.')
    assert [c.name for c in calls] == ["cancel_order"] and [m.error for m in bad] == ["forged_tool_response"]
    assert text == "Checking." and bad[0].raw.endswith("Done.")


def test_tool_response_inside_a_call_is_an_argument() -> None:
    call = '{"name": "send", "arguments": {"body": "see <tool_response> in the docs"}}'
    for out in (f"<tool_call>{call}</tool_call>", call):
        _, calls, bad = parse_tool_calls(out)
        assert bad == [] and calls[0].arguments["body"] == "see <tool_response> in the docs"


def test_tool_response_in_reasoning_is_reasoning() -> None:
    _, calls, bad = parse_tool_calls(f"<think><tool_response>x</tool_response></think><tool_call>{CALL}</tool_call>")
    assert bad == [] and len(calls) == 1
