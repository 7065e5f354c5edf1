"""What a release card measures about training (`train.release_card`): tool calls read back
from rendered templates, token-length figures against TRL's default `max_length`, chunked
template checks merged, and rows decoded a chunk at a time."""

from __future__ import annotations

import pyarrow as pa

from train.release_card import (
    TRL_DEFAULT_MAX_LENGTH,
    decoded_chunks,
    expected_calls,
    length_figures,
    merge_template_checks,
    rendered_calls,
)


def test_rendered_calls_read_assistant_turns_only() -> None:
    call = '<tool_call>{"name": "get_user", "arguments": {"user_id": "u1"}}</tool_call>'
    chatml = ("<|im_start|>system\nCall tools like " + call.replace("get_user", "example") + "<|im_end|>\n"
              "<|im_start|>assistant\n" + call + "<|im_end|>\n<|im_start|>assistant\nDone.<|im_end|>\n")
    assert rendered_calls(chatml, "qwen2_5") == [("get_user", {"user_id": "u1"})]
    llama = ("<|start_header_id|>assistant<|end_header_id|>\n\n"
             '{"name": "add_bags", "parameters": {"bags": 2}}<|eot_id|>'
             "<|start_header_id|>assistant<|end_header_id|>\n\nAll set.<|eot_id|>")
    assert rendered_calls(llama, "llama3_2") == [("add_bags", {"bags": 2})]


def test_expected_calls_are_the_assistant_tool_calls_as_stored() -> None:
    messages = [
        {"role": "user", "content": "hi", "tool_calls": None},
        {"role": "assistant", "tool_calls": [{"function": {"name": "a", "arguments": {"x": 1}}},
                                             {"function": {"name": "b", "arguments": "{not json"}}]},
        {"role": "tool", "content": "{}"},
        {"role": "assistant", "content": "ok"},
    ]
    assert expected_calls(messages) == [("a", {"x": 1}), ("b", "{not json")]


def test_length_figures_give_the_max_length_that_drops_no_row() -> None:
    limit = TRL_DEFAULT_MAX_LENGTH
    lengths = [(10, 50), (limit, limit + 5), (30, 40), (20, limit + 1)]
    fig = length_figures(lengths)
    assert fig["rows"] == 4 and fig["min_max_length"] == limit + 1
    assert fig["before_first_assistant"] == {"p50": 20, "p95": limit, "max": limit}
    assert fig["total"]["max"] == limit + 5 and fig["total"]["p50"] == 50
    # cut: longer than the default; dropped under assistant-only loss: no assistant token left
    assert fig["over_trl_default"] == {"total": 2, "before_first_assistant": 1}
    assert length_figures([])["min_max_length"] == 0


def test_template_checks_of_consecutive_chunks_merge() -> None:
    def check(rows: int, ok: int, failures: list[int], why: dict[str, int]) -> dict:
        return {"rows": rows, "ok": ok, "skipped": sum(why.values()), "skipped_why": why, "failed": len(failures),
                "failures": [{"row": r, "problem": "arguments differ"} for r in failures],
                "assistant_only_loss": True}

    a = {"embedded": check(4, 1, [0, 1], {"malformed": 1}), "llama3_2": {"unavailable": "ImportError: trl"}}
    b = {"embedded": check(3, 1, [4, 5], {"malformed": 1, "several calls": 1})}
    merged = merge_template_checks(a, b)
    assert merged["embedded"] == {"rows": 7, "ok": 2, "skipped": 3, "skipped_why": {"malformed": 2, "several calls": 1},
                                  "failed": 4, "failures": [{"row": r, "problem": "arguments differ"} for r in (0, 1, 4)],
                                  "assistant_only_loss": True}
    assert merged["llama3_2"] == {"unavailable": "ImportError: trl"}
    assert merge_template_checks({}, b) == b


def test_decoded_chunks_stop_at_the_limit_and_decode_json_columns() -> None:
    first = pa.table({"tools": ['[{"type": "function"}]'] * 3, "n": [0, 1, 2]})
    second = pa.table({"tools": ["[]"] * 4, "n": [3, 4, 5, 6]})
    chunks = list(decoded_chunks([first, second], "sft", limit=5, chunk_rows=2))
    assert [[r["n"] for r in c] for c in chunks] == [[0, 1], [2], [3, 4]]
    assert chunks[0][0]["tools"] == [{"type": "function"}] and chunks[2][0]["tools"] == []
