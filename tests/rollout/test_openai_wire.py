"""`rollout.openai_wire`: the chat completions wire format as pure functions: JSON in and out,
messages in the wire's shape (malformed calls' arguments wrapped), and the reply's fields
read defensively (Retry-After, error messages, token ids, logprobs, counts)."""

from __future__ import annotations

import json
from typing import Any

from rollout.openai_wire import (
    clip,
    completion_logprobs,
    count,
    dumps,
    error_message,
    int_list,
    loads,
    prompt_logprobs,
    retry_after,
    to_openai_messages,
)


def test_retry_after_headers() -> None:
    assert retry_after({"retry-after-ms": "250"}) == 0.25
    assert retry_after({"retry-after": "3"}) == 3.0
    assert retry_after({"retry-after": "Wed, 21 Oct 2015 07:28:00 GMT"}) == 0.0  # in the past
    assert retry_after({"retry-after": "soon"}) is None
    assert retry_after({}) is None


def test_dumps_and_loads_round_trip_and_survive_odd_input() -> None:
    value = {"a": [1, 2.5, None, True], "b": "Zürich"}
    assert loads(dumps(value)) == value
    assert loads(dumps({"s": "x\ud800"})) == {"s": "x\ud800"}  # a lone surrogate is escaped, not an error
    assert loads(b'{"s": "caf\xe9"}') == {"s": "caf\ufffd"}  # invalid UTF-8 is replaced


def test_to_openai_messages_wraps_flat_and_malformed_calls() -> None:
    wire = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": '{"a": 1}'}}
    ready = {"role": "assistant", "content": "", "tool_calls": [wire]}
    flat = {"role": "assistant", "content": "", "tool_calls": [
        {"name": "g", "arguments": {"b": 2}},
        {"id": "c9", "function": {"name": "h", "arguments": "<tool_call>{oops"}},
    ]}
    user = {"role": "user", "content": "hi"}
    out = to_openai_messages([user, ready, flat])
    assert out[0] is user and out[1] is ready  # nothing to change: passed through
    calls: list[dict[str, Any]] = out[2]["tool_calls"]
    assert calls[0] == {"id": "call_0", "type": "function", "function": {"name": "g", "arguments": '{"b": 2}'}}
    assert calls[1]["id"] == "c9" and json.loads(calls[1]["function"]["arguments"]) == {"raw": "<tool_call>{oops"}
    assert flat["tool_calls"][0] == {"name": "g", "arguments": {"b": 2}}  # the caller's message is not changed


def test_error_message_reads_the_usual_shapes() -> None:
    assert error_message(b'{"error": {"message": "bad model"}}') == "bad model"
    assert error_message(b'{"error": "overloaded"}') == "overloaded"
    assert error_message(b'{"detail": 1}') == "{'detail': 1}"
    assert error_message(b"<html>502</html>") == "<html>502</html>"


def test_token_fields_are_read_defensively() -> None:
    assert int_list([1, 2, 3]) == [1, 2, 3] and int_list([1, True]) is None and int_list("12") is None
    assert completion_logprobs({"content": [{"logprob": -0.5}, {"logprob": 0}]}) == [-0.5, 0.0]
    assert completion_logprobs({"content": [{"logprob": "x"}]}) is None and completion_logprobs(None) is None
    entries = [None, {"7": {"logprob": -1.0}, "8": {"logprob": -2.0}}, {"9": {"logprob": -3.0}}, {}]
    assert prompt_logprobs(entries, [5, 8, 9, 1]) == [None, -2.0, -3.0, None]
    assert prompt_logprobs(entries, None) == [None, None, -3.0, None]  # one candidate: it is the token
    assert prompt_logprobs("nope", None) is None
    assert (count(12), count(3.9), count(True), count(None)) == (12, 3, 0, 0)
    assert clip("abc", 5) == "abc" and clip("abcdef", 3) == "abc..."
