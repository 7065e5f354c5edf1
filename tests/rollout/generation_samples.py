"""A self-play generator output (`rollout.generation`'s tagged format) and its parts, shared by
the generation tests and the self-play tests."""

from __future__ import annotations

import json
from typing import Any

from data.self_play import Generation
from rollout.generation import parse_generation

TOOLS = [
    {"type": "function", "function": {"name": "get_user_details", "description": "A user.", "parameters": {
        "type": "object", "properties": {"user_id": {"type": "string"}}, "required": ["user_id"]}}},
    {"type": "function", "function": {"name": "update_baggage", "description": "Bags.", "parameters": {
        "type": "object", "properties": {"reservation_id": {"type": "string"}, "total_bags": {"type": "integer"}},
        "required": ["reservation_id", "total_bags"]}}},
]
QUESTION = "I am raj_ahmed_1000. Please set reservation R0000030 to 2 checked bags in total."
GOLD = [{"name": "update_baggage", "arguments": {"reservation_id": "R0000030", "total_bags": 2}}]


def generator_text(question: str = QUESTION, tools: Any = TOOLS, gold: Any = GOLD) -> str:
    t = tools if isinstance(tools, str) else json.dumps(tools)
    g = gold if isinstance(gold, str) else json.dumps(gold)
    return f"<question>{question}</question>\n<available_tools>{t}</available_tools>\n<tool_call_answer>{g}</tool_call_answer>"


def sample_generation(question: str = QUESTION, gold: list[dict[str, Any]] | None = None, tools: Any = TOOLS) -> Generation:
    g = parse_generation(generator_text(question, tools, gold or GOLD))
    assert isinstance(g, Generation)
    return g

