"""Native tool calls (OpenAI `message.tool_calls` entries) decoded with the same classifier as
calls written in text, and the text of a message's content."""

from __future__ import annotations

from typing import Any

from data.records import ToolCall
from envs.tools import clip
from rollout.model import MalformedCall
from rollout.parsing.classify import _NAME_CHARS, _classify, _clean_text, _raw_of


def decode_native_tool_calls(
    native: list[Any], finish_reason: str | None = None
) -> tuple[list[ToolCall], list[MalformedCall]]:
    """Decode OpenAI `message.tool_calls` entries (or flat `{"name", "arguments"}` ones) into
    `ToolCall`s and `MalformedCall`s with the same classifier as calls written in text.
    Native ids are kept; a usable call whose id an earlier entry of the message already has
    is `duplicate_call_id` (its tool message could not be told apart), and exact repeats
    are `repeated_call`."""
    calls: list[ToolCall] = []
    malformed: list[MalformedCall] = []
    seen: dict[str, int] = {}
    ids: dict[str, int] = {}
    cut = finish_reason == "length"
    for n, entry in enumerate(native):
        call_id = entry.get("id") if isinstance(entry, dict) else None
        call_id = call_id if isinstance(call_id, str) and call_id else None
        item = _classify(entry, _raw_of(entry), native=True, cut=cut, call_id=call_id)
        first = ids.setdefault(call_id, n) if call_id is not None else n
        if isinstance(item, MalformedCall):
            malformed.append(item)
            continue
        if first != n:
            malformed.append(MalformedCall(
                error="duplicate_call_id",
                detail=f"{clip(item.name, _NAME_CHARS)}: id {clip(call_id or '', _NAME_CHARS)!r} is already "
                       f"the id of entry {first} of this message's tool_calls; not run",
                raw=_clean_text(_raw_of(entry)),
            ))
            continue
        key = item.key()
        if key in seen:
            malformed.append(MalformedCall(
                error="repeated_call",
                detail=f"{clip(item.name, _NAME_CHARS)}: identical to call {seen[key]} of this output",
                raw=_clean_text(_raw_of(entry)),
            ))
            continue
        seen[key] = len(seen)
        calls.append(item)
    return calls, malformed


def message_text(message: dict[str, Any]) -> str:
    """The text of a message's `content`: a string, or the text parts of a list joined."""
    content = message.get("content")
    if isinstance(content, list):
        content = "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return content or ""
