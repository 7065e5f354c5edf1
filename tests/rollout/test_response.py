"""rollout.response: a local engine's decoded text as a ChatResponse."""

from rollout.response import decoded_response

CALL = '<tool_call>{"name": "get_user_details", "arguments": {"user_id": "u1"}}</tool_call>'


def test_a_stop_after_calls_is_tool_calls() -> None:
    r = decoded_response(CALL, None, 7, 3, {"k": 1})
    assert r.finish_reason == "tool_calls"
    assert [c.name for c in r.tool_calls] == ["get_user_details"]
    assert (r.prompt_tokens, r.completion_tokens, r.raw) == (7, 3, {"k": 1})


def test_plain_text_stops_and_other_reasons_stay() -> None:
    assert decoded_response("hello", None, 1, 1, {}).finish_reason == "stop"
    assert decoded_response("hello", "stop", 1, 1, {}).finish_reason == "stop"
    assert decoded_response(CALL, "abort", 1, 1, {}).finish_reason == "abort"


def test_a_cut_call_is_truncated_and_length() -> None:
    r = decoded_response(CALL[:40], "length", 1, 1, {})
    assert r.finish_reason == "length"
    assert not r.tool_calls and [m.error for m in r.malformed] == ["truncated"]


def test_token_records_pass_through() -> None:
    r = decoded_response("hi", None, 2, 1, {}, prompt_token_ids=[1, 2], completion_token_ids=[3])
    assert r.prompt_token_ids == [1, 2] and r.completion_token_ids == [3]
