"""The portable action-match reward (`train.portable`) an `rl` card carries: tool calls read
from text and messages, gold writes matched once each, and card code that runs on its own."""

from __future__ import annotations

import json
from typing import Any

from train.portable import action_match_reward, card_code, completion_calls

GOLD = [{"name": "get_user", "arguments": {"user_id": "u1"}, "write": False},
        {"name": "add_bags", "arguments": {"reservation_id": "R1", "bags": 2}, "write": True}]
WRITES = ["add_bags", "cancel_reservation"]


def _call(name: str, arguments: dict[str, Any]) -> str:
    return "<tool_call>" + json.dumps({"name": name, "arguments": arguments}) + "</tool_call>"


def test_completion_calls_read_text_blocks_and_native_calls() -> None:
    text = _call("add_bags", {"bags": 2, "reservation_id": "R1"}) + "<tool_call>{broken</tool_call>"
    assert completion_calls(text) == [("add_bags", '{"bags": 2, "reservation_id": "R1"}')]
    messages = [{"role": "user", "content": _call("ignored", {})},
                {"role": "assistant", "content": "", "tool_calls": [
                    {"type": "function", "function": {"name": "get_user", "arguments": '{"user_id": "u1"}'}},
                    {"function": {"name": "bad", "arguments": "{"}}]}]
    assert completion_calls(messages) == [("get_user", '{"user_id": "u1"}')]


def test_action_match_reward_counts_gold_writes_and_stray_writes() -> None:
    gold = _call("add_bags", {"reservation_id": "R1", "bags": 2})
    completions = [
        _call("get_user", {"user_id": "other"}) + gold,  # reads are free
        gold + gold,  # the second write matches nothing: 1 / (1 + 1)
        _call("add_bags", {"reservation_id": "R1", "bags": "2"}),  # exact arguments only
        "I cannot help with that.",
    ]
    rewards = action_match_reward(completions, [GOLD] * 4, [WRITES] * 4)
    assert rewards == [1.0, 0.5, 0.0, 0.0]
    # a task that needs no write: refusing scores 1, writing scores 0
    reads = [GOLD[0]]
    assert action_match_reward(["No.", gold], [reads, reads], [WRITES, WRITES]) == [1.0, 0.0]


def test_card_code_runs_without_trajforge() -> None:
    code = card_code()
    assert code.startswith("import json") and "def action_match_reward" in code and "card_code" not in code
    namespace: dict[str, Any] = {}
    exec(compile(code, "<card>", "exec"), namespace)  # the card's own code, run alone
    reward = namespace["action_match_reward"]
    assert reward([_call("add_bags", {"reservation_id": "R1", "bags": 2})], [GOLD], [WRITES]) == [1.0]
