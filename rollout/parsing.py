"""Tool calls out of model text.

Models without a native tool-call API write calls into their text. The canonical form is
the one our chat templates ask for::

    <tool_call>{"name": "get_order", "arguments": {"order_id": "A1"}}</tool_call>

`parse_tool_calls` takes any number of such blocks (the last one may be unterminated, as
happens when generation stops at `max_tokens` or on the end-of-turn token). When a text
holds no `<tool_call>` block at all it falls back to fenced ```json blocks and bare JSON
objects that carry "name" and "arguments" keys. Every block that is meant as a call but
cannot be used comes back as a `MalformedCall` with an error class:

- `bad_json`: the block is not parseable JSON;
- `missing_name`: no non-empty string "name";
- `arguments_not_object`: "arguments" is neither an object nor a JSON string of one.

Lenient on purpose: `"parameters"` is read as `"arguments"`; an OpenAI-shaped
`{"type": "function", "function": {...}}` wrapper and a JSON list of calls in one block are
unwrapped; missing, null or empty-string arguments mean `{}`.
"""

from __future__ import annotations

import json
import re
from typing import Any

from data.records import ToolCall
from rollout.model import MalformedCall

_BLOCK = re.compile(r"<tool_call>(.*?)(?:</tool_call>|(?=<tool_call>)|\Z)", re.DOTALL)
_STRAY_CLOSE = re.compile(r"</tool_call>")
_FENCE = re.compile(r"```[ \t]*(json)?\s*(.*?)(?:```|\Z)", re.DOTALL | re.IGNORECASE)
_INNER_FENCE = re.compile(r"^```[a-zA-Z]*\s*|\s*```$")
_CALL_START = re.compile(r"\{\s*\"(?:name|function)\"\s*:")
_DECODER = json.JSONDecoder()

_Item = ToolCall | MalformedCall


def parse_tool_calls(text: str) -> tuple[str, list[ToolCall], list[MalformedCall]]:
    """Split model output into (remaining text, parsed calls, malformed calls).

    Calls are numbered `call_0`, `call_1`, ... in order of appearance within `text`.
    """
    items: list[_Item] = []
    if "<tool_call>" in text:
        rest = _BLOCK.sub(lambda m: _collect(items, m.group(1), m.group(0)), text)
        rest = _STRAY_CLOSE.sub("", rest)
    else:
        rest = _FENCE.sub(lambda m: _fenced(items, m), text)
        rest = _bare_objects(items, rest)
    calls: list[ToolCall] = []
    malformed: list[MalformedCall] = []
    for item in items:
        if isinstance(item, ToolCall):
            item.id = f"call_{len(calls)}"
            calls.append(item)
        else:
            malformed.append(item)
    return _tidy(rest), calls, malformed


def _collect(items: list[_Item], body: str, raw: str) -> str:
    """Parse one `<tool_call>` block body into `items`; return the replacement text."""
    body = _INNER_FENCE.sub("", body.strip()).strip()
    if not body:
        items.append(MalformedCall(error="bad_json", detail="empty tool call", raw=raw))
        return ""
    try:
        value = json.loads(body)
    except json.JSONDecodeError as e:
        value = _lenient_load(body)
        if value is None:
            items.append(MalformedCall(error="bad_json", detail=f"tool call: {e}", raw=raw))
            return ""
    values = value if isinstance(value, list) and value else [value]
    for v in values:
        items.append(_to_call(v, raw if len(values) == 1 else json.dumps(v, ensure_ascii=False)))
    return ""


def _lenient_load(body: str) -> Any:
    """One JSON object at the start of `body`, ignoring trailing junk (e.g. an extra `}`)."""
    start = body.find("{")
    if start != 0:
        return None
    try:
        value, end = _DECODER.raw_decode(body)
    except json.JSONDecodeError:
        return None
    return value if set(body[end:].strip()) <= {"}", "]"} else None


def _to_call(value: Any, raw: str) -> _Item:
    """Validate one decoded call object."""
    if not isinstance(value, dict):
        return MalformedCall(
            error="bad_json",
            detail=f"tool call is a JSON {type(value).__name__}, not an object",
            raw=raw,
        )
    if isinstance(value.get("function"), dict) and "name" not in value:
        value = value["function"]
    name = value.get("name")
    if not isinstance(name, str) or not name.strip():
        return MalformedCall(error="missing_name", detail="tool call has no string name", raw=raw)
    name = name.strip()
    args: Any = value.get("arguments", value.get("parameters"))
    if args is None or (isinstance(args, str) and not args.strip()):
        return ToolCall(name=name, arguments={})
    if isinstance(args, str):
        try:
            decoded = json.loads(args)
        except json.JSONDecodeError as e:
            if args.lstrip().startswith("{"):
                return MalformedCall(error="bad_json", detail=f"{name}: arguments: {e}", raw=raw)
            decoded = args
        args = decoded
    if not isinstance(args, dict):
        return MalformedCall(
            error="arguments_not_object",
            detail=f"{name}: arguments are {type(args).__name__}, not an object",
            raw=raw,
        )
    return ToolCall(name=name, arguments=args)


def _looks_like_call(value: Any) -> bool:
    if not isinstance(value, dict):
        return False
    if "name" in value and "arguments" in value:
        return True
    return isinstance(value.get("function"), dict) and _looks_like_call(value["function"])


def _fenced(items: list[_Item], m: re.Match[str]) -> str:
    """A fenced code block: a call if it holds a call object, else left as text."""
    body = m.group(2).strip()
    try:
        value = json.loads(body)
    except json.JSONDecodeError as e:
        if m.group(1) and _CALL_START.match(body) and '"arguments"' in body:
            items.append(MalformedCall(error="bad_json", detail=f"tool call: {e}", raw=m.group(0)))
            return ""
        return m.group(0)
    if _looks_like_call(value):
        items.append(_to_call(value, m.group(0)))
        return ""
    if isinstance(value, list) and value and all(_looks_like_call(v) for v in value):
        items.extend(_to_call(v, json.dumps(v, ensure_ascii=False)) for v in value)
        return ""
    return m.group(0)


def _bare_objects(items: list[_Item], text: str) -> str:
    """Bare JSON call objects in running text; a truncated one counts as `bad_json`."""
    out: list[str] = []
    pos = 0
    i = text.find("{")
    while i != -1:
        try:
            value, end = _DECODER.raw_decode(text, i)
        except json.JSONDecodeError as e:
            if _CALL_START.match(text, i) and '"arguments"' in text[i:]:
                out.append(text[pos:i])
                items.append(
                    MalformedCall(error="bad_json", detail=f"tool call: {e}", raw=text[i:])
                )
                pos = len(text)
                break
            i = text.find("{", i + 1)
            continue
        if _looks_like_call(value):
            out.append(text[pos:i])
            items.append(_to_call(value, text[i:end]))
            pos = end
        i = text.find("{", end)  # objects nested in a decoded one are not calls
    out.append(text[pos:])
    return "".join(out)


def _tidy(text: str) -> str:
    """Strip and collapse the blank lines left where blocks were removed."""
    return re.sub(r"\n{3,}", "\n\n", text).strip()


def decode_native_tool_calls(
    native: list[Any],
) -> tuple[list[ToolCall], list[MalformedCall]]:
    """Decode OpenAI `message.tool_calls` entries (or flat `{"name", "arguments"}` ones) into
    `ToolCall`s and `MalformedCall`s. Empty arguments (`""`) count as `{}`."""
    calls: list[ToolCall] = []
    malformed: list[MalformedCall] = []
    for entry in native:
        raw = json.dumps(entry, ensure_ascii=False, default=str)
        function = entry.get("function") if isinstance(entry, dict) else None
        if function is None and isinstance(entry, dict) and "name" in entry:
            function = entry  # the flat {"name", "arguments"} form
        if not isinstance(function, dict):
            kind = entry.get("type") if isinstance(entry, dict) else type(entry).__name__
            malformed.append(
                MalformedCall(
                    error="unsupported_call", detail=f"not a function call: {kind}", raw=raw
                )
            )
            continue
        name = function.get("name")
        if not isinstance(name, str) or not name.strip():
            malformed.append(
                MalformedCall(error="missing_name", detail="tool call has no name", raw=raw)
            )
            continue
        arguments: Any = function.get("arguments")
        if arguments is None or (isinstance(arguments, str) and not arguments.strip()):
            arguments = {}
        elif isinstance(arguments, str):
            try:
                arguments = json.loads(arguments)
            except json.JSONDecodeError as e:
                malformed.append(
                    MalformedCall(error="bad_json", detail=f"{name}: arguments: {e}", raw=raw)
                )
                continue
        if not isinstance(arguments, dict):
            malformed.append(
                MalformedCall(
                    error="arguments_not_object",
                    detail=f"{name}: arguments are {type(arguments).__name__}, not an object",
                    raw=raw,
                )
            )
            continue
        call_id = entry.get("id")
        calls.append(
            ToolCall(
                name=name, arguments=arguments, id=call_id if isinstance(call_id, str) else None
            )
        )
    return calls, malformed


def message_text(message: dict[str, Any]) -> str:
    """The text of a message's `content`: a string, or the text parts of a list joined."""
    content = message.get("content")
    if isinstance(content, list):
        content = "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return content or ""
