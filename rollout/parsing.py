"""Tool calls out of model text.

Models without a native tool-call API write calls into their text. The canonical form is
the one our chat templates ask for::

    <tool_call>{"name": "get_order", "arguments": {"order_id": "A1"}}</tool_call>

`parse_tool_calls` takes any number of such blocks (the last one may be unterminated, as
happens when generation stops at `max_tokens` or on the end-of-turn token). When a text
holds no `<tool_call>` block at all it falls back to fenced ```json blocks and bare JSON
objects that carry "name" and "arguments" keys. Every block that is meant as a call but
cannot be used comes back as a `MalformedCall` with an error class:

- `bad_json`: the block is not parseable JSON (or nested too deeply to parse);
- `missing_name`: no non-empty string "name";
- `arguments_not_object`: "arguments" is neither an object nor a JSON string of one;
- `truncated`: generation stopped at `max_tokens` (`finish_reason="length"`) inside a call;
- `unclosed_tag`: a `<tool_call>` without `</tool_call>` whose body is not one JSON value
  (prose, or a call followed by prose);
- `invalid_utf8`: the call's name or arguments hold undecodable bytes or lone surrogates
  (they could not be stored in Parquet);
- `repeated_call`: an exact repeat (same name and arguments) of an earlier call in the
  same output; the first one is kept;
- `too_large`: the output exceeds `MAX_OUTPUT_CHARS` and holds a call marker (not parsed);
- `unsupported_call`: a native tool call that is not a function call.

`validate_calls` checks parsed calls against the tool schemas (`unknown_tool`,
`unknown_argument`, `missing_argument`, `wrong_type`: the environment's own classes), and
`parse_model_output` does all of it for one raw output (text or bytes, or native calls).

Lenient on purpose: `"parameters"` is read as `"arguments"`; an OpenAI-shaped
`{"type": "function", "function": {...}}` wrapper and a JSON list of calls in one block are
unwrapped; missing, null or empty-string arguments mean `{}`.
"""

from __future__ import annotations

import json
import re
from typing import Any

from pydantic import BaseModel, Field

from data.records import ToolCall
from rollout.model import MalformedCall

_BLOCK = re.compile(r"<tool_call>(.*?)(?:</tool_call>|(?=<tool_call>)|\Z)", re.DOTALL)
_STRAY_CLOSE = re.compile(r"</tool_call>")
_FENCE = re.compile(r"```[ \t]*(json)?\s*(.*?)(?:```|\Z)", re.DOTALL | re.IGNORECASE)
_INNER_FENCE = re.compile(r"^```[a-zA-Z]*\s*|\s*```$")
_CALL_START = re.compile(r"\{\s*\"(?:name|function)\"\s*:")
_DECODER = json.JSONDecoder()

_Item = ToolCall | MalformedCall

MAX_OUTPUT_CHARS = 256_000  # longer outputs are not searched for calls (`too_large`)
MAX_BARE_STARTS = 2_000  # `{` positions tried by the bare-JSON fallback, at most
_RAW_LIMIT = 2_000  # characters of a malformed call kept in `MalformedCall.raw`
_BAD_TEXT = re.compile(r"[\ud800-\udfff\ufffd]")
_SURROGATE = re.compile(r"[\ud800-\udfff]")
_JSON_ERRORS = (json.JSONDecodeError, RecursionError)


def parse_tool_calls(
    text: str, finish_reason: str | None = None
) -> tuple[str, list[ToolCall], list[MalformedCall]]:
    """Split model output into (remaining text, parsed calls, malformed calls).

    Calls are numbered `call_0`, `call_1`, ... in order of appearance within `text`.
    `finish_reason="length"` (generation hit `max_tokens`) turns a call cut off at the end
    into `truncated` rather than `bad_json`. Never raises on any input text.
    """
    if len(text) > MAX_OUTPUT_CHARS:
        head = text[:MAX_OUTPUT_CHARS]
        if "<tool_call>" in text or _CALL_START.search(text):
            bad = MalformedCall(
                error="too_large",
                detail=f"output of {len(text)} characters exceeds {MAX_OUTPUT_CHARS}",
                raw=text[:_RAW_LIMIT],
            )
            return _clean_text(head.split("<tool_call>", 1)[0]).strip(), [], [bad]
        return _clean_text(head).strip(), [], []
    items: list[_Item] = []
    cut = finish_reason == "length"
    if "<tool_call>" in text:
        rest = _BLOCK.sub(lambda m: _collect(items, m, cut), text)
        rest = _STRAY_CLOSE.sub("", rest)
    else:
        rest = _FENCE.sub(lambda m: _fenced(items, m, cut), text)
        rest = _bare_objects(items, rest, cut)
    calls, malformed = _number(_repeats(items))
    return _clean_text(_tidy(rest)), calls, malformed


def _number(items: list[_Item]) -> tuple[list[ToolCall], list[MalformedCall]]:
    calls: list[ToolCall] = []
    malformed: list[MalformedCall] = []
    for item in items:
        if isinstance(item, ToolCall):
            item.id = f"call_{len(calls)}"
            calls.append(item)
        else:
            item.raw, item.detail = _clean_text(item.raw), _clean_text(item.detail)
            malformed.append(item)
    return calls, malformed


def _repeats(items: list[_Item]) -> list[_Item]:
    """Exact repeats of an earlier call in the same output become `repeated_call`."""
    seen: dict[str, int] = {}
    out: list[_Item] = []
    for item in items:
        if isinstance(item, ToolCall):
            key = item.key()
            if key in seen:
                item = MalformedCall(
                    error="repeated_call",
                    detail=f"{item.name}: identical to call {seen[key]} of this output",
                    raw=key[:_RAW_LIMIT],
                )
            else:
                seen[key] = len(seen)
        out.append(item)
    return out


def _clean_text(text: str) -> str:
    """`text` with lone surrogates replaced by U+FFFD (they cannot be encoded as UTF-8)."""
    return _SURROGATE.sub("\ufffd", text)


def _has_bad_text(value: Any) -> bool:
    """True if a decoded JSON value holds lone surrogates or U+FFFD anywhere."""
    if isinstance(value, str):
        return _BAD_TEXT.search(value) is not None
    if isinstance(value, dict):
        return any(_has_bad_text(k) or _has_bad_text(v) for k, v in value.items())
    if isinstance(value, list):
        return any(_has_bad_text(v) for v in value)
    return False


def _malformed(error: str, detail: str, raw: str) -> MalformedCall:
    return MalformedCall(error=error, detail=detail, raw=_clean_text(raw[:_RAW_LIMIT]))


def _collect(items: list[_Item], m: re.Match[str], cut: bool) -> str:
    """Parse one `<tool_call>` block into `items`; return the replacement text."""
    raw = m.group(0)
    closed = raw.endswith("</tool_call>")
    body = _INNER_FENCE.sub("", m.group(1).strip()).strip()
    if not body:
        if cut and not closed:
            items.append(_malformed("truncated", "output ended inside a tool call", raw))
        else:
            items.append(_malformed("bad_json", "empty tool call", raw))
        return ""
    try:
        value = json.loads(body)
    except _JSON_ERRORS as e:
        value = _lenient_load(body)
        if value is None:
            items.append(_block_error(body, raw, closed, cut, e))
            return ""
    values = value if isinstance(value, list) and value else [value]
    for v in values:
        items.append(_to_call(v, raw if len(values) == 1 else json.dumps(v, ensure_ascii=False)))
    return ""


def _block_error(body: str, raw: str, closed: bool, cut: bool, e: Exception) -> MalformedCall:
    """Classify a `<tool_call>` block whose body is not JSON."""
    detail = f"tool call: {e}" if isinstance(e, json.JSONDecodeError) else "nested too deeply"
    if closed:
        return _malformed("bad_json", detail, raw)
    if cut:
        return _malformed("truncated", f"output ended at max_tokens inside a call: {detail}", raw)
    if body[0] not in "{[":
        return _malformed("unclosed_tag", "<tool_call> without </tool_call> holds no JSON", raw)
    try:
        _, end = _DECODER.raw_decode(body)
    except _JSON_ERRORS:
        return _malformed("bad_json", detail, raw)
    return _malformed(
        "unclosed_tag",
        f"<tool_call> without </tool_call>: text after the call: {body[end:end + 40]!r}",
        raw,
    )


def _lenient_load(body: str) -> Any:
    """One JSON object at the start of `body`, ignoring trailing junk (e.g. an extra `}`)."""
    start = body.find("{")
    if start != 0:
        return None
    try:
        value, end = _DECODER.raw_decode(body)
    except _JSON_ERRORS:
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
    if _has_bad_text(name) or _has_bad_text(args):
        return _malformed("invalid_utf8", f"{_clean_text(name)}: undecodable text", raw)
    if args is None or (isinstance(args, str) and not args.strip()):
        return ToolCall(name=name, arguments={})
    if isinstance(args, str):
        try:
            decoded = json.loads(args)
        except _JSON_ERRORS as e:
            if args.lstrip().startswith("{"):
                return _malformed("bad_json", f"{name}: arguments: {e}", raw)
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


def _fenced(items: list[_Item], m: re.Match[str], cut: bool = False) -> str:
    """A fenced code block: a call if it holds a call object, else left as text."""
    body = m.group(2).strip()
    try:
        value = json.loads(body)
    except _JSON_ERRORS as e:
        if m.group(1) and _CALL_START.match(body) and '"arguments"' in body:
            unterminated = not m.group(0).rstrip().endswith("```") or m.group(0) == "```"
            error = "truncated" if cut and unterminated else "bad_json"
            items.append(_malformed(error, f"tool call: {e}", m.group(0)))
            return ""
        return m.group(0)
    if _looks_like_call(value):
        items.append(_to_call(value, m.group(0)))
        return ""
    if isinstance(value, list) and value and all(_looks_like_call(v) for v in value):
        items.extend(_to_call(v, json.dumps(v, ensure_ascii=False)) for v in value)
        return ""
    return m.group(0)


def _bare_objects(items: list[_Item], text: str, cut: bool = False) -> str:
    """Bare JSON call objects in running text; a truncated one counts as `bad_json`
    (`truncated` when generation stopped at max_tokens)."""
    out: list[str] = []
    pos = 0
    last_arguments = text.rfind('"arguments"')
    tries = 0
    i = text.find("{")
    while i != -1:
        tries += 1
        if tries > MAX_BARE_STARTS:
            break
        try:
            value, end = _DECODER.raw_decode(text, i)
        except _JSON_ERRORS as e:
            if _CALL_START.match(text, i) and last_arguments > i:
                out.append(text[pos:i])
                detail = f"tool call: {e}" if isinstance(e, ValueError) else "nested too deeply"
                items.append(_malformed("truncated" if cut else "bad_json", detail, text[i:]))
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
    native: list[Any], finish_reason: str | None = None
) -> tuple[list[ToolCall], list[MalformedCall]]:
    """Decode OpenAI `message.tool_calls` entries (or flat `{"name", "arguments"}` ones) into
    `ToolCall`s and `MalformedCall`s. Empty arguments (`""`) count as `{}`. Native ids are
    kept; exact repeats become `repeated_call`."""
    calls: list[ToolCall] = []
    malformed: list[MalformedCall] = []
    seen: dict[str, int] = {}
    for entry in native:
        try:
            raw = json.dumps(entry, ensure_ascii=False, default=str)[:_RAW_LIMIT]
        except (ValueError, RecursionError):
            raw = repr(entry)[:_RAW_LIMIT]
        raw = _clean_text(raw)
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
        if _has_bad_text(name) or _has_bad_text(arguments):
            malformed.append(_malformed("invalid_utf8", f"{_clean_text(name)}: undecodable", raw))
            continue
        if arguments is None or (isinstance(arguments, str) and not arguments.strip()):
            arguments = {}
        elif isinstance(arguments, str):
            try:
                arguments = json.loads(arguments)
            except _JSON_ERRORS as e:
                error = "truncated" if finish_reason == "length" else "bad_json"
                malformed.append(MalformedCall(error=error, detail=f"{name}: arguments: {e}", raw=raw))
                continue
            if _has_bad_text(arguments):
                malformed.append(_malformed("invalid_utf8", f"{name}: undecodable", raw))
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
        call = ToolCall(
            name=name, arguments=arguments, id=call_id if isinstance(call_id, str) else None
        )
        key = call.key()
        if key in seen:
            malformed.append(
                MalformedCall(
                    error="repeated_call",
                    detail=f"{name}: identical to call {seen[key]} of this output",
                    raw=raw,
                )
            )
            continue
        seen[key] = len(seen)
        calls.append(call)
    return calls, malformed


def message_text(message: dict[str, Any]) -> str:
    """The text of a message's `content`: a string, or the text parts of a list joined."""
    content = message.get("content")
    if isinstance(content, list):
        content = "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return content or ""


_JSON_TYPES: dict[str, tuple[type, ...]] = {
    "string": (str,),
    "integer": (int,),
    "number": (int, float),
    "boolean": (bool,),
    "array": (list,),
    "object": (dict,),
    "null": (type(None),),
}


def validate_calls(
    calls: list[ToolCall], tools: list[dict[str, Any]]
) -> tuple[list[ToolCall], list[MalformedCall]]:
    """Split `calls` into those that fit the OpenAI tool schemas `tools` and those that do
    not: `unknown_tool`, `unknown_argument`, `missing_argument` or `wrong_type` (a value
    of the wrong JSON type or outside the schema's `enum`), the environment's classes."""
    schemas: dict[str, dict[str, Any]] = {}
    for tool in tools:
        fn = tool.get("function", tool) if isinstance(tool, dict) else {}
        if isinstance(fn, dict) and isinstance(fn.get("name"), str):
            params = fn.get("parameters")
            schemas[fn["name"]] = params if isinstance(params, dict) else {}
    ok: list[ToolCall] = []
    bad: list[MalformedCall] = []
    for call in calls:
        problem = _schema_problem(call, schemas)
        if problem is None:
            ok.append(call)
        else:
            error, detail = problem
            raw = json.dumps({"name": call.name, "arguments": call.arguments}, ensure_ascii=False)
            bad.append(MalformedCall(error=error, detail=detail, raw=raw[:_RAW_LIMIT]))
    return ok, bad


def _schema_problem(
    call: ToolCall, schemas: dict[str, dict[str, Any]]
) -> tuple[str, str] | None:
    if call.name not in schemas:
        known = ", ".join(sorted(schemas)) or "none"
        return "unknown_tool", f"no tool named {call.name!r}; tools are: {known}"
    schema = schemas[call.name]
    props = schema.get("properties") or {}
    unknown = sorted(set(call.arguments) - set(props))
    if unknown:
        return "unknown_argument", f"{call.name} has no argument(s) {unknown}"
    for name in schema.get("required") or []:
        if name not in call.arguments:
            return "missing_argument", f"{call.name} needs argument {name!r}"
    for name, value in call.arguments.items():
        if not _fits(value, props.get(name) or {}):
            return "wrong_type", f"{call.name}: argument {name!r} does not fit its schema: {value!r:.60}"
    return None


def _fits(value: Any, schema: dict[str, Any]) -> bool:
    """Whether `value` has the schema's JSON type(s) and is in its `enum` (if any)."""
    if "enum" in schema and value not in schema["enum"]:
        return False
    if "anyOf" in schema or "oneOf" in schema:
        options = schema.get("anyOf") or schema.get("oneOf") or []
        return any(_fits(value, o) for o in options if isinstance(o, dict))
    kinds = schema.get("type")
    if kinds is None:
        return True
    for kind in kinds if isinstance(kinds, list) else [kinds]:
        types = _JSON_TYPES.get(kind)
        if types is None:
            return True  # a type we do not check
        if isinstance(value, bool) and kind in ("integer", "number"):
            continue
        if kind == "integer" and isinstance(value, float) and value.is_integer():
            return True
        if isinstance(value, types):
            if kind == "array" and isinstance(schema.get("items"), dict):
                return all(_fits(v, schema["items"]) for v in value)
            return True
    return False


class ParsedOutput(BaseModel):
    """Everything `parse_model_output` found in one raw model output."""

    text: str = ""
    calls: list[ToolCall] = Field(default_factory=list)
    malformed: list[MalformedCall] = Field(default_factory=list)

    @property
    def error_classes(self) -> list[str]:
        return [m.error for m in self.malformed]


def parse_model_output(
    output: str | bytes = "",
    tools: list[dict[str, Any]] | None = None,
    finish_reason: str | None = None,
    native: list[Any] | None = None,
) -> ParsedOutput:
    """Parse one raw model output end to end and classify every malformed call.

    `output` may be bytes as they came off the wire: invalid UTF-8 is replaced (U+FFFD) and
    a call holding it is `invalid_utf8`. `native` (OpenAI `tool_calls`) takes precedence
    over calls written in the text, as in the OpenAI client. With `tools`, parsed calls are
    checked against the schemas too (`validate_calls`). Never raises.
    """
    text = output.decode("utf-8", "replace") if isinstance(output, bytes) else output
    if native:
        calls, malformed = decode_native_tool_calls(native, finish_reason)
        text = _clean_text(text)
    else:
        text, calls, malformed = parse_tool_calls(text, finish_reason)
    if tools is not None:
        calls, invalid = validate_calls(calls, tools)
        malformed = malformed + invalid
    return ParsedOutput(text=text, calls=calls, malformed=malformed)
