"""Releases into TRL's shapes (`train.data`): splits, complete releases only, tool schemas
kept exact, and rows without an assistant turn refused."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from data import store
from data.schema import SFT_SCHEMA
from train.data import clean_messages, load_release, sft_example, to_trl_prompts, to_trl_sft

TOOLS = [
    {"type": "function", "function": {"name": "get_user", "description": "A user.", "parameters": {
        "type": "object", "properties": {"user_id": {"type": "string"}}, "required": ["user_id"]}}},
    {"type": "function", "function": {"name": "add_bags", "description": "Bags.", "parameters": {
        "type": "object", "properties": {"reservation_id": {"type": "string"}, "bags": {"type": "integer"}},
        "required": ["reservation_id", "bags"]}}},
]


def _sft_rows() -> list[dict[str, Any]]:
    def row(split: str, user: str) -> dict[str, Any]:
        messages = [
            {"role": "system", "content": "You are an agent."},
            {"role": "user", "content": user},
            {"role": "assistant", "content": None, "tool_calls": [{"id": "call_0", "type": "function", "function": {
                "name": "add_bags", "arguments": '{"bags":2,"reservation_id":"R1"}'}}]},
            {"role": "tool", "content": '{"ok": true}', "tool_call_id": "call_0", "name": "add_bags"},
            {"role": "assistant", "content": "Done."},
        ]
        full = [{"content": None, "tool_calls": None, "tool_call_id": None, "name": None, **m} for m in messages]
        return {"messages": full, "tools": json.dumps(TOOLS), "task_id": "t", "trajectory_id": f"tr-{user}",
                "world": "airline", "method": "logic_driven", "model": "scripted", "trial": 0, "score": 1.0,
                "split": split}

    return [row("train", "a"), row("train", "b"), row("test", "c")]


@pytest.fixture
def sft_release(tmp_path: Path) -> Path:
    with store.DatasetWriter(tmp_path / "releases", "sft", "sft", SFT_SCHEMA, 1, "v1") as w:
        w.write_rows(_sft_rows())
        return w.commit(store.Lineage())


def test_load_release_filters_split_and_refuses_incomplete(sft_release: Path) -> None:
    assert load_release(sft_release, "train").num_rows == 2
    assert load_release(sft_release, "test").num_rows == 1
    assert load_release(sft_release, None).num_rows == 3
    (sft_release / "_SUCCESS").unlink()
    with pytest.raises(store.DatasetError):
        load_release(sft_release, "train")


def test_to_trl_sft_keeps_tool_schemas_exact(sft_release: Path) -> None:
    # `sft_release` is a schema version 1 release (tools and arguments as JSON strings):
    # load_release casts those columns to `Json`, so it reads like a current one
    assert store.read_manifest(sft_release).schema_version == 1
    ds = to_trl_sft(load_release(sft_release, "train"))
    assert ds.column_names == ["messages", "tools"]
    row = ds[0]
    # tools are objects, exactly the original schemas, with no `"bags": null` merged into
    # get_user's parameters (JSON-typed, never Arrow structs)
    assert row["tools"] == TOOLS
    call = row["messages"][2]["tool_calls"][0]
    assert call["function"]["arguments"] == {"bags": 2, "reservation_id": "R1"}

    ex = sft_example(row)
    assert ex["tools"] == TOOLS
    assert all(None not in m.values() for m in ex["messages"])
    assert ex["messages"][2] == {"role": "assistant", "tool_calls": [{"id": "call_0", "type": "function",
                                 "function": {"name": "add_bags", "arguments": {"bags": 2, "reservation_id": "R1"}}}]}
    decoded = clean_messages(row["messages"], decode_arguments=True)
    assert decoded[2]["tool_calls"][0]["function"]["arguments"] == {"bags": 2, "reservation_id": "R1"}
    # JSON text (as pyarrow gives it) is decoded too
    text = [{"role": "assistant", "tool_calls": [{"function": {"name": "f", "arguments": '{"a": 1}'}}]}]
    assert clean_messages(text, decode_arguments=True)[0]["tool_calls"][0]["function"]["arguments"] == {"a": 1}


def test_to_trl_sft_refuses_rows_without_an_assistant_turn(tmp_path: Path) -> None:
    rows = _sft_rows()[:1]
    rows[0]["messages"] = [m for m in rows[0]["messages"] if m["role"] != "assistant"]
    with store.DatasetWriter(tmp_path, "sft", "sft", SFT_SCHEMA, 1, "v1") as w:
        w.write_rows(rows)
        path = w.commit(store.Lineage())
    with pytest.raises(ValueError, match="no assistant"):
        to_trl_sft(load_release(path, None))
    with pytest.raises(ValueError, match="not an rl release"):
        to_trl_prompts(load_release(path, None))


def test_an_sft_recovery_release_keeps_its_loss_marks_for_trl(tmp_path: Path) -> None:
    """`to_trl_sft` hands TRL the messages with their `train` marks; `loss_marked_turns` counts
    the marked (failed) assistant turns, 0 for a release without marks."""
    from data.schema import RELEASE_SCHEMA_VERSION, SFT_RECOVERY_SCHEMA
    from train.data import loss_marked_turns

    rows = _sft_rows()
    for r in rows:
        r["messages"] = [{**m, "train": (i != 2) if m["role"] == "assistant" else None}
                         for i, m in enumerate(r["messages"])]
        r.update(reference=False, recovery=True, selection_reason="test", tools=json.dumps(TOOLS))
    with store.DatasetWriter(tmp_path, "sft_recovery", "sft_recovery", SFT_RECOVERY_SCHEMA,
                             RELEASE_SCHEMA_VERSION, "v1") as w:
        w.write_rows(rows)
        path = w.commit(store.Lineage())
    ds = to_trl_sft(load_release(path, "train"))
    assert [m["train"] for m in ds[0]["messages"]][2:] == [False, None, True]
    assert loss_marked_turns(ds) == 2
    plain = to_trl_sft(load_release(path, "train").map(
        lambda messages: {"messages": [{k: v for k, v in m.items() if k != "train"} for m in messages]},
        input_columns=["messages"], remove_columns=["messages"]))
    assert loss_marked_turns(plain) == 0
