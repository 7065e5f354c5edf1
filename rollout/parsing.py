"""Tool calls out of model text.

Models without a native tool-call API write calls into their text. The canonical form is
the one our chat templates ask for::

    <tool_call>{"name": "get_order", "arguments": {"order_id": "A1"}}</tool_call>

**The rule: a call comes only from call syntax.** Outside reasoning blocks, a call is read
from exactly two things:

1. a `<tool_call>...</tool_call>` block, the tag spelt exactly so (lower case, no spaces);
   any number of them, the last one may be unterminated (generation stopped at
   `max_tokens` or on the end-of-turn token);
2. when the output has no such block, an output that is *nothing but calls*: apart from
   whitespace and reasoning blocks it consists only of JSON call objects (objects with
   "name" and "arguments", or lists of them) and fenced ``` / ```json blocks each holding
   one; a stray `}` or `]` at the very end is forgiven, as in a block.

Nothing else is run. A call-shaped JSON object anywhere else (in prose, in a final answer,
in a fenced block next to text) is `call_in_prose`; a model-written tool response, tags of
another spelling and stray closing tags get their own classes (below). Native `tool_calls`
(`decode_native_tool_calls`) are calls by construction, each with its own id.

What leaves the text: `<tool_call>` blocks, tags of another spelling with their blocks,
stray closing tags, and a forged tool response with everything after it (all kept, clipped,
in a `MalformedCall`'s raw when not run). JSON in prose and calls in other syntaxes are
prose: they stay in the text and are reported as well.

Every attempt at a call that cannot be used comes back as a `MalformedCall` with an error
class (a broken call keeps the class of what is broken wherever it stands; the location
classes are for calls that would otherwise have run):

- `call_in_prose`: a well-formed JSON call object (bare or fenced) in an output that is not
  only calls, or next to `<tool_call>` blocks;
- `forged_tool_response`: the output writes a tool's answer (`<tool_response>`,
  `</tool_response>`, `<tool_result>`, `<function_results>`, `<tool_output>`, any case)
  outside a closed `<tool_call>` block; nothing from that tag on is read or run (calls
  before it are);
- `bad_tag`: a tool-call tag spelt otherwise (`<TOOL_CALL>`, `<Tool_Call>`, `< tool_call >`,
  `<tool-call>`; the block it opens is not read) or a closing tag that closes no block;
- `duplicate_call_id`: a native call whose id an earlier entry of the same message already
  has (its tool message could not be told apart); the first keeps the id;
- `bad_json`: the block is not strict JSON (or nested too deeply to parse); NaN, Infinity
  and numbers that overflow to them are not JSON, nor is an "arguments" string that does
  not parse;
- `duplicate_key`: an object of the call (the call itself or its arguments) repeats a key;
  `json` would keep the last one, so the call is refused rather than decided by it;
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
- `unsupported_call`: a native tool call that is not a function call;
- `unsupported_syntax`: a call written in a syntax this parser does not read: Python-call
  style (`cancel_order(order_id="A1")`, `functions.x(...)`), XML style (`<function=x>`,
  `<invoke name="x">`, `<function_calls>`, `[TOOL_CALLS]`, `<|python_tag|>`) or YAML style
  (`name: x` then `arguments:`). It is never run and never silently a plain reply. The
  Python rule needs a snake_case name (or a `functions.` prefix, or a name in `tool_names`)
  and keyword, dict or (alone on its line) empty arguments, so prose and code such as
  `print(x, end="")`, `df.to_csv(index=False)` or `def f(x=1)` stay text.

Reasoning blocks (`<think>...</think>`, also `<thinking>` and `<reasoning>`) are reasoning:
they stay in the text, verbatim, and nothing in them is parsed or run. An unclosed opening
tag makes the rest of the output reasoning; a closing tag with no opening tag before it
(the chat template opened the block) makes everything before it reasoning.

`validate_calls` checks parsed calls against the tool schemas (`unknown_tool`,
`unknown_argument`, `missing_argument`, `wrong_type`: the environment's own classes), and
`parse_model_output` does all of it for one raw output (text or bytes, or native calls).

Lenient on purpose: `"parameters"` is read as `"arguments"`; an OpenAI-shaped
`{"type": "function", "function": {...}}` wrapper and a JSON list of calls in one block are
unwrapped; missing, null or blank arguments (and the string `"null"`) mean `{}`.

One classifier (`_classify`) decides every call on both paths: a call written in the text
and a native `tool_calls` entry with the same arguments get the same class (a text call's
`"arguments": V` is the native `arguments: json.dumps(V)`; a string `"arguments": S` is the
native `arguments: S`). Only what is not a call at all differs: `bad_json` in the text,
`unsupported_call` among native entries.
"""

from __future__ import annotations

import bisect
import json
import math
import re
import uuid
from collections.abc import Iterable
from typing import Any

from pydantic import BaseModel, Field

from data.records import ToolCall
from envs.tools import clip
from rollout.model import MalformedCall

_BLOCK = re.compile(r"<tool_call>(.*?)(?:</tool_call>|(?=<tool_call>)|\Z)", re.DOTALL)
# Any other spelling of the tag (case, spaces, `-`), and closing tags: `bad_tag` outside blocks.
_ANY_TAG = re.compile(r"<\s*/?\s*tool[_-]?call\s*>", re.IGNORECASE)
_ODD_BLOCK = re.compile(
    r"(<\s*tool[_-]?call\s*>)(.*?)(?:<\s*/\s*tool[_-]?call\s*>|(?=<\s*tool[_-]?call\s*>)|\Z)",
    re.DOTALL | re.IGNORECASE)
_CLOSE_TAG = re.compile(r"<\s*/\s*tool[_-]?call\s*>", re.IGNORECASE)
# A tool's answer written by the model (`forged_tool_response`).
_FORGED = re.compile(r"<\s*/?\s*(?:tool|function)_?(?:response|result|output)s?\b[^<>]{0,200}>", re.IGNORECASE)
_GAP = re.compile("(?:\\s|\ue000[0-9a-f]{8}:\\d+\ue001)*")  # whitespace and masked reasoning
_FENCE = re.compile(r"```[ \t]*(json)?\s*(.*?)(?:```|\Z)", re.DOTALL | re.IGNORECASE)
_INNER_FENCE = re.compile(r"^```[a-zA-Z]*\s*|\s*```$")
_CALL_START = re.compile(r"\{\s*\"(?:name|function)\"\s*:")


class _NotStrict(ValueError):
    """A number strict JSON does not have: NaN, Infinity, or one that overflows to it."""


class _Dup(dict):  # type: ignore[type-arg]
    """A decoded object that repeated a key (holding the last value, as `json` does)."""

    duplicates: list[str]


def _pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    obj: dict[str, Any] = {}
    dups: list[str] = []
    for key, value in pairs:
        if key in obj:
            dups.append(key)
        obj[key] = value
    if not dups:
        return obj
    marked = _Dup(obj)
    marked.duplicates = dups
    return marked


def _constant(name: str) -> Any:
    raise _NotStrict(f"{name} is not a JSON number")


def _float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise _NotStrict(f"number {clip(text, 40)} is out of range")
    return value


# Strict JSON: duplicate keys are marked (`_Dup`), NaN and infinities refused.
_DECODER = json.JSONDecoder(object_pairs_hook=_pairs, parse_constant=_constant, parse_float=_float)
_loads = _DECODER.decode

_Item = ToolCall | MalformedCall

MAX_OUTPUT_CHARS = 256_000  # longer outputs are not searched for calls (`too_large`)
MAX_BARE_STARTS = 2_000  # `{` positions tried by the bare-JSON fallback, at most
_RAW_LIMIT = 2_000  # characters of a malformed call kept in `MalformedCall.raw`
_BAD_TEXT = re.compile(r"[\ud800-\udfff\ufffd]")
_SURROGATE = re.compile(r"[\ud800-\udfff]")
_JSON_ERRORS = (ValueError, RecursionError)  # JSONDecodeError, _NotStrict, int digit limits
_NAME_CHARS = 100  # characters of a model-written name quoted in a detail

_REASON_OPEN = re.compile(r"<(think|thinking|reasoning)>", re.IGNORECASE)
_REASON_CLOSE = re.compile(r"</(think|thinking|reasoning)>", re.IGNORECASE)

_XML_CALL = re.compile(
    r"<function\s*=\s*[\"']?(?P<n1>[A-Za-z_][\w.-]*)|<(?:function|invoke|tool_use|tool)\s+name\s*=\s*"
    r"[\"']?(?P<n2>[A-Za-z_][\w.-]*)|<invoke\b|<function_?calls?\b|<tool_use\b|<tool_calls>"
    r"|<tool_calls?\s+[\w-]+\s*=|<\|python_tag\|>|\[TOOL_CALLS\]|<\|tool_call\|>",
    re.IGNORECASE)
_XML_END = re.compile(r"</(?:function_?calls?|function|invoke|tool_use|tool_calls?|tool)>|<\|eom_id\|>",
                      re.IGNORECASE)
_PY_CALL = re.compile(
    r"(?<![\w.])(?P<ns>(?:functions|tools|default_api|api)\.)?(?P<name>[A-Za-z_]\w*)\s*\(\s*"
    r"(?P<arg>\)|[A-Za-z_]\w*\s*=(?!=)|\{)")
_YAML_CALL = re.compile(
    r"^[ \t]*(?:-[ \t]*)?[\"']?(?:name|tool|tool_name|function|function_name|action)[\"']?[ \t]*:[ \t]*"
    r"[\"']?(?P<name>[A-Za-z_][\w.-]*)[\"']?[ \t]*\r?\n(?:[^\n]*\n){0,3}?[ \t]*(?:-[ \t]*)?[\"']?"
    r"(?:arguments|parameters|args|input|action_input|tool_input)[\"']?[ \t]*:",
    re.MULTILINE | re.IGNORECASE)


def parse_tool_calls(
    text: str, finish_reason: str | None = None, tool_names: Iterable[str] | None = None
) -> tuple[str, list[ToolCall], list[MalformedCall]]:
    """Split model output into (remaining text, parsed calls, malformed calls).

    Only call syntax is read (see the module doc): `<tool_call>` blocks, or an output that
    is nothing but calls. Calls are numbered `call_0`, `call_1`, ... in order of appearance.
    `finish_reason="length"` (generation hit `max_tokens`) turns a call cut off at the end
    into `truncated` rather than `bad_json`. Reasoning blocks stay in the text, unparsed.
    `tool_names` (the request's tools) lets the `unsupported_syntax` rule recognise
    Python-style calls of those tools whatever their names look like. Never raises.
    """
    if len(text) > MAX_OUTPUT_CHARS:
        head = text[:MAX_OUTPUT_CHARS]
        if "<tool_call>" in text or _CALL_START.search(text) or _ANY_TAG.search(text):
            bad = MalformedCall(
                error="too_large",
                detail=f"output of {len(text)} characters exceeds {MAX_OUTPUT_CHARS}",
                raw=text[:_RAW_LIMIT],
            )
            return _clean_text(head.split("<tool_call>", 1)[0]).strip(), [], [bad]
        return _clean_text(head).strip(), [], []
    masked, restore = _mask_reasoning(text)
    items: list[_Item] = []
    cut = finish_reason == "length"
    only = None if "<tool_call>" in masked else _only_calls(masked, cut)
    if only is not None:
        rest, items = only
    else:
        rest, forged = _split_forged(masked)
        if "<tool_call>" in rest:
            rest = _BLOCK.sub(lambda m: _collect(items, m, cut), rest)
        rest, loose = _loose(rest, cut, set(tool_names or ()))
        items += loose
        if forged is not None:
            items.append(forged)
    calls, malformed = _number(_repeats(items))
    for m in malformed:
        m.raw, m.detail = restore(m.raw), restore(m.detail)
    return _clean_text(restore(_tidy(rest))), calls, malformed


def _only_calls(text: str, cut: bool) -> tuple[str, list[_Item]] | None:
    """The calls of an output (reasoning masked, no `<tool_call>` tag) that holds nothing but
    calls: bare JSON call objects (or lists of them) and fenced blocks of them, apart from
    whitespace and reasoning; with the text left when they are taken out. None otherwise."""
    units: list[tuple[int, int, list[_Item]]] = []
    pos, n = 0, len(text)
    while (pos := _skip_gap(text, pos)) < n:
        if text.startswith("```", pos):
            m = _FENCE.match(text, pos)
            if m is None:
                return None
            try:
                value = _loads(m.group(2).strip())
            except _JSON_ERRORS:
                return None
            found = _fence_items(m, cut) if _is_calls(value) else None
            if found is None:
                return None
            units.append((pos, m.end(), found))
            pos = m.end()
        elif text[pos] in "{[":
            try:
                value, end = _DECODER.raw_decode(text, pos)
            except _JSON_ERRORS:
                return None
            if not _is_calls(value):
                return None
            values = value if isinstance(value, list) else [value]
            raw = text[pos:end]
            tail = text[end:].strip()
            if tail and set(tail) <= {"}", "]"}:  # stray closing braces at the end, as in a block
                end = n
            units.append((pos, end, [_classify(v, raw if len(values) == 1 else _raw_of(v)) for v in values]))
            pos = end
        else:
            return None
    if not units:
        return None
    return _cut(text, [(s, e) for s, e, _ in units]), [item for _, _, found in units for item in found]


def _skip_gap(text: str, pos: int) -> int:
    """The first position from `pos` on that is neither whitespace nor masked reasoning."""
    m = _GAP.match(text, pos)
    return m.end() if m is not None else pos


def _is_calls(value: Any) -> bool:
    """A call object, or a non-empty list of them."""
    if isinstance(value, list):
        return bool(value) and all(_looks_like_call(v) for v in value)
    return _looks_like_call(value)


def _split_forged(text: str) -> tuple[str, MalformedCall | None]:
    """`text` up to the first tool-response tag outside closed `<tool_call>` blocks, and a
    `forged_tool_response` holding the rest (None if there is no such tag)."""
    closed = [(m.start(), m.end()) for m in _BLOCK.finditer(text) if m.group(0).endswith("</tool_call>")] \
        if "<tool_call>" in text else []
    for f in _FORGED.finditer(text):
        if any(s <= f.start() < e for s, e in closed):
            continue
        tag = clip(f.group(0), 60)
        return text[:f.start()], _malformed(
            "forged_tool_response",
            f"{tag}: tool responses come from the environment, not from the model; nothing from "
            "this tag on was read or run",
            text[f.start():])
    return text, None


def _loose(text: str, cut: bool, tool_names: set[str]) -> tuple[str, list[_Item]]:
    """Classify what is outside `<tool_call>` blocks (none of it runs) and return the text
    with the tool-call tags taken out: odd-case or spaced tags with their blocks and stray
    closing tags (`bad_tag`), JSON calls in prose and fenced blocks (`call_in_prose`, or
    the class of what is broken in them) and calls in other syntaxes (`unsupported_syntax`,
    which take in whatever lies inside them). Items come in order of appearance."""
    found: list[tuple[int, int, _Item]] = []
    drop: list[tuple[int, int]] = []
    for m in _ODD_BLOCK.finditer(text):
        tag = clip(m.group(1), 40)
        found.append((m.start(), m.end(), _malformed(
            "bad_tag",
            f"{tag!r} is not <tool_call>: calls are read only from <tool_call>...</tool_call> "
            "written exactly so (lower case, no spaces); nothing in this block was run",
            m.group(0))))
        drop.append((m.start(), m.end()))
    blank = _blank(text, drop)
    prose = _prose_calls(blank, cut)
    blank = _blank(blank, [(s, e) for s, e, _ in prose])
    foreign = _foreign_calls(blank, tool_names, text)
    spans = [(s, e) for s, e, _ in foreign]
    found += [(s, e, item) for s, e, items in prose if not _inside(s, spans) for item in items]
    for m in _CLOSE_TAG.finditer(blank):
        if _inside(m.start(), spans):
            continue
        found.append((m.start(), m.end(), _malformed(
            "bad_tag",
            f"{clip(m.group(0), 40)!r} closes no <tool_call> block; calls are read only from "
            "<tool_call>...</tool_call>",
            m.group(0))))
        drop.append((m.start(), m.end()))
    found += foreign
    found.sort(key=lambda f: f[0])
    return _cut(text, drop), [item for _, _, item in found]


def _inside(pos: int, spans: list[tuple[int, int]]) -> bool:
    """Whether `pos` lies in one of `spans` (sorted, not overlapping)."""
    i = bisect.bisect_right(spans, (pos, math.inf)) - 1
    return i >= 0 and spans[i][0] <= pos < spans[i][1]


def _blank(text: str, spans: list[tuple[int, int]]) -> str:
    """`text` with the characters of `spans` turned into spaces (newlines kept), so that
    later passes neither see them nor shift positions."""
    if not spans:
        return text
    parts: list[str] = []
    last = 0
    for s, e in sorted(spans):
        if s < last:
            s = last
        parts.append(text[last:s])
        parts.append(re.sub(r"[^\n]", " ", text[s:e]))
        last = max(last, e)
    parts.append(text[last:])
    return "".join(parts)


def _cut(text: str, spans: list[tuple[int, int]]) -> str:
    """`text` without `spans`."""
    if not spans:
        return text
    parts: list[str] = []
    last = 0
    for s, e in sorted(spans):
        parts.append(text[last:max(s, last)])
        last = max(last, e)
    parts.append(text[last:])
    return "".join(parts)


def _mask_reasoning(text: str) -> tuple[str, Any]:
    """`text` with each reasoning block replaced by a placeholder, and the function that puts
    the blocks back into any string derived from it."""
    spans: list[tuple[int, int]] = []
    first_open = _REASON_OPEN.search(text)
    close = _REASON_CLOSE.search(text)
    pos = 0
    if close is not None and (first_open is None or close.start() < first_open.start()):
        spans.append((0, close.end()))  # the chat template opened the block
        pos = close.end()
    while (m := _REASON_OPEN.search(text, pos)) is not None:
        end_tag = re.compile(rf"</{m.group(1)}>", re.IGNORECASE).search(text, m.end())
        end = end_tag.end() if end_tag is not None else len(text)
        spans.append((m.start(), end))
        pos = end
    if not spans:
        return text, lambda s: s
    nonce = uuid.uuid4().hex[:8]
    blocks: list[str] = []
    parts: list[str] = []
    last = 0
    for start, end in spans:
        parts.append(text[last:start])
        parts.append(f"\ue000{nonce}:{len(blocks)}\ue001")
        blocks.append(text[start:end])
        last = end
    parts.append(text[last:])
    marker = re.compile(f"\ue000{nonce}:(\\d+)\ue001")

    def restore(s: str) -> str:
        return marker.sub(lambda m: blocks[int(m.group(1))], s) if "\ue000" in s else s

    return "".join(parts), restore


def _foreign_calls(text: str, tool_names: set[str], source: str | None = None) -> list[tuple[int, int, _Item]]:
    """`unsupported_syntax` for each call written in another syntax (see the module doc),
    with its span. `source` (default `text`): the text the raw is taken from, when `text` is
    a copy of it with parts blanked out."""
    source = text if source is None else source
    found: list[tuple[int, int, str, str]] = []  # start, end, name, kind
    for m in _XML_CALL.finditer(text):
        end_tag = _XML_END.search(text, m.end())
        end = end_tag.end() if end_tag is not None else len(text)
        found.append((m.start(), end, m.group("n1") or m.group("n2") or "?", "XML tags"))
    for m in _PY_CALL.finditer(text):
        name = m.group("name")
        if not (m.group("ns") or "_" in name or name in tool_names):
            continue
        before = text[max(0, m.start() - 6):m.start()]
        if before.endswith(("def ", "class ")) or re.search(r"\b(?:def|class)\s+$", before):
            continue
        line_start = text.rfind("\n", 0, m.start()) + 1
        line_end = text.find("\n", m.end())
        line_end = len(text) if line_end == -1 else line_end
        if m.group("arg") == ")" and text[line_start:line_end].strip(" `\t") != text[m.start():m.end()]:
            continue  # a bare `name()` in prose is a mention, not a call
        found.append((m.start(), line_end, name, "a Python call"))
    for m in _YAML_CALL.finditer(text):
        name = m.group("name")
        if not ("_" in name or name in tool_names):
            continue
        end = text.find("\n\n", m.end())
        found.append((m.start(), len(text) if end == -1 else end, name, "YAML"))
    items: list[tuple[int, int, _Item]] = []
    last_end = -1
    for start, end, name, kind in sorted(found):
        if start < last_end:
            continue  # inside a call already reported
        last_end = end
        items.append((start, end, _malformed(
            "unsupported_syntax",
            f"{clip(name, _NAME_CHARS)}: a call written as {kind} is not read; write "
            '<tool_call>{"name": ..., "arguments": {...}}</tool_call>',
            source[start:end])))
    return items


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
                    detail=f"{clip(item.name, _NAME_CHARS)}: identical to call {seen[key]} of this output",
                    raw=key[:_RAW_LIMIT],
                )
            else:
                seen[key] = len(seen)
        out.append(item)
    return out


def _clean_text(text: str) -> str:
    """`text` with lone surrogates replaced by U+FFFD (they cannot be encoded as UTF-8)."""
    return _SURROGATE.sub("\ufffd", text)


def _scan(value: Any) -> tuple[str, str] | None:
    """The first thing in a decoded call that cannot be stored faithfully: a repeated key
    (`duplicate_key`), a non-finite number (`bad_json`) or undecodable text (`invalid_utf8`)."""
    stack = [value]
    bad_text = False
    while stack:
        v = stack.pop()
        if isinstance(v, str):
            bad_text = bad_text or _BAD_TEXT.search(v) is not None
        elif isinstance(v, dict):
            if isinstance(v, _Dup):
                keys = ", ".join(repr(clip(k, _NAME_CHARS)) for k in v.duplicates[:5])
                return "duplicate_key", f"an object repeats the key(s) {keys}"
            for k, item in v.items():
                stack.append(k)
                stack.append(item)
        elif isinstance(v, list):
            stack.extend(v)
        elif isinstance(v, float) and not math.isfinite(v):
            return "bad_json", f"{v} is not a JSON number"
    return ("invalid_utf8", "undecodable text") if bad_text else None


def _malformed(error: str, detail: str, raw: str) -> MalformedCall:
    return MalformedCall(error=error, detail=detail, raw=_clean_text(raw[:_RAW_LIMIT]))


def _why(e: BaseException) -> str:
    return "nested too deeply" if isinstance(e, RecursionError) else clip(str(e), 300)


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
        value = _loads(body)
    except _JSON_ERRORS as e:
        value = _lenient_load(body)
        if value is None:
            items.append(_block_error(body, raw, closed, cut, e))
            return ""
    values = value if isinstance(value, list) and value else [value]
    for v in values:
        items.append(_classify(v, raw if len(values) == 1 else _raw_of(v)))
    return ""


def _raw_of(value: Any) -> str:
    try:
        return json.dumps(value, ensure_ascii=False, default=str)[:_RAW_LIMIT]
    except (ValueError, RecursionError):
        return repr(value)[:_RAW_LIMIT]


def _block_error(body: str, raw: str, closed: bool, cut: bool, e: Exception) -> MalformedCall:
    """Classify a `<tool_call>` block whose body is not JSON."""
    detail = f"tool call: {_why(e)}"
    if closed or isinstance(e, _NotStrict):
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


def _classify(entry: Any, raw: str, *, native: bool = False, cut: bool = False,
              call_id: str | None = None) -> _Item:
    """The one classifier of a call: a decoded `<tool_call>`/fenced/bare object (`native`
    False) or an OpenAI `tool_calls` entry (`native` True). `cut`: the call's own text was
    cut at max_tokens (a native call's arguments string), so broken arguments are
    `truncated` rather than `bad_json`."""
    raw = _clean_text(raw[:_RAW_LIMIT])
    if not isinstance(entry, dict):
        if native:
            kind = type(entry).__name__
            return MalformedCall(error="unsupported_call", detail=f"not a function call: {kind}", raw=raw)
        return MalformedCall(error="bad_json",
                             detail=f"tool call is a JSON {type(entry).__name__}, not an object", raw=raw)
    problem = _scan(entry)
    if problem is not None and problem[0] != "invalid_utf8":
        return MalformedCall(error=problem[0], detail=f"tool call: {problem[1]}", raw=raw)
    fn: Any = entry
    if isinstance(entry.get("function"), dict) and "name" not in entry:
        fn = entry["function"]
    elif native and "name" not in entry:
        kind = entry.get("type") if isinstance(entry.get("type"), str) else "no function"
        return MalformedCall(error="unsupported_call", detail=f"not a function call: {clip(kind, 40)}",
                             raw=raw)
    name = fn.get("name")
    if not isinstance(name, str) or not name.strip():
        return MalformedCall(error="missing_name", detail="tool call has no string name", raw=raw)
    name = name.strip()
    shown = clip(_clean_text(name), _NAME_CHARS)
    args: Any = fn.get("arguments", fn.get("parameters"))
    if problem is not None:  # invalid_utf8 in the name or the arguments
        return _malformed("invalid_utf8", f"{shown}: undecodable text", raw)
    if isinstance(args, str):
        if not args.strip():
            args = None
        else:
            try:
                args = _loads(args)
            except _JSON_ERRORS as e:
                error = "truncated" if cut and not isinstance(e, _NotStrict) else "bad_json"
                return _malformed(error, f"{shown}: arguments: {_why(e)}", raw)
            problem = _scan(args)
            if problem is not None:
                return _malformed(problem[0], f"{shown}: arguments: {problem[1]}", raw)
    if args is None:
        args = {}
    if not isinstance(args, dict):
        return MalformedCall(
            error="arguments_not_object",
            detail=f"{shown}: arguments are {type(args).__name__}, not an object",
            raw=raw,
        )
    return ToolCall(name=name, arguments=args, id=call_id)


def _looks_like_call(value: Any) -> bool:
    if not isinstance(value, dict):
        return False
    if "name" in value and "arguments" in value:
        return True
    return isinstance(value.get("function"), dict) and _looks_like_call(value["function"])


def _fence_items(m: re.Match[str], cut: bool = False) -> list[_Item] | None:
    """The calls of a fenced code block (a call object or a list of them; a broken one in a
    ```json block is `bad_json`, or `truncated` when cut at max_tokens), or None when the
    block is not a call."""
    body = m.group(2).strip()
    try:
        value = _loads(body)
    except _JSON_ERRORS as e:
        if m.group(1) and _CALL_START.match(body) and '"arguments"' in body:
            unterminated = not m.group(0).rstrip().endswith("```") or m.group(0) == "```"
            error = "truncated" if cut and unterminated and not isinstance(e, _NotStrict) else "bad_json"
            return [_malformed(error, f"tool call: {_why(e)}", m.group(0))]
        return None
    if _looks_like_call(value):
        return [_classify(value, m.group(0))]
    if isinstance(value, list) and value and all(_looks_like_call(v) for v in value):
        return [_classify(v, _raw_of(v)) for v in value]
    return None


def _in_prose(item: _Item, raw: str) -> _Item:
    """A call found in prose is never run: a usable one becomes `call_in_prose`."""
    if isinstance(item, MalformedCall):
        return item
    return _malformed(
        "call_in_prose",
        f"{clip(item.name, _NAME_CHARS)}: a call inside other text is not run; write it as "
        '<tool_call>{"name": ..., "arguments": {...}}</tool_call> (or make the call the whole output)',
        raw)


def _prose_calls(text: str, cut: bool) -> list[tuple[int, int, list[_Item]]]:
    """JSON call objects (fenced or bare) in text that is not only calls, with their spans:
    each is classified, and one that could run is `call_in_prose`."""
    found: list[tuple[int, int, list[_Item]]] = []
    for m in _FENCE.finditer(text):
        items = _fence_items(m, cut)
        if items is not None:
            found.append((m.start(), m.end(), [_in_prose(i, m.group(0)) for i in items]))
    found += _bare_objects(_blank(text, [(s, e) for s, e, _ in found]), cut)
    found.sort(key=lambda f: f[0])
    return found


def _bare_objects(text: str, cut: bool = False) -> list[tuple[int, int, list[_Item]]]:
    """Bare JSON call objects in running text, with their spans (one that could run is
    `call_in_prose`); a truncated one counts as `bad_json` (`truncated` when generation
    stopped at max_tokens)."""
    found: list[tuple[int, int, list[_Item]]] = []
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
                error = "truncated" if cut and not isinstance(e, _NotStrict) else "bad_json"
                found.append((i, len(text), [_malformed(error, f"tool call: {_why(e)}", text[i:])]))
                break
            i = text.find("{", i + 1)
            continue
        if _looks_like_call(value):
            found.append((i, end, [_in_prose(_classify(value, text[i:end]), text[i:end])]))
        i = text.find("{", end)  # objects nested in a decoded one are not calls
    return found


def _tidy(text: str) -> str:
    """Strip and collapse the blank lines left where blocks were removed."""
    return re.sub(r"\n{3,}", "\n\n", text).strip()


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
        return "unknown_tool", f"no tool named {clip(call.name, _NAME_CHARS)!r}; tools are: {known}"
    schema = schemas[call.name]
    props = schema.get("properties") or {}
    unknown = sorted(set(call.arguments) - set(props))
    if unknown:
        names = [clip(u, _NAME_CHARS) for u in unknown[:10]]
        return "unknown_argument", f"{call.name} has no argument(s) {names}"
    for name in schema.get("required") or []:
        if name not in call.arguments:
            return "missing_argument", f"{call.name} needs argument {name!r}"
    for name, value in call.arguments.items():
        if not _fits(value, props.get(name) or {}):
            return "wrong_type", f"{call.name}: argument {name!r} does not fit its schema: {clip(repr(value), 60)}"
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


def tool_names_of(tools: list[dict[str, Any]] | None) -> list[str]:
    """The function names of OpenAI tool schemas."""
    names = []
    for tool in tools or []:
        fn = tool.get("function", tool) if isinstance(tool, dict) else None
        if isinstance(fn, dict) and isinstance(fn.get("name"), str):
            names.append(fn["name"])
    return names


def parse_model_output(
    output: str | bytes = "",
    tools: list[dict[str, Any]] | None = None,
    finish_reason: str | None = None,
    native: list[Any] | None = None,
    tool_names: Iterable[str] | None = None,
) -> ParsedOutput:
    """Parse one raw model output end to end and classify every malformed call: what every
    backend (embedded, OpenAI-compatible, vLLM offline) returns for a completion.

    `output` may be bytes as they came off the wire: invalid UTF-8 is replaced (U+FFFD) and
    a call holding it is `invalid_utf8`. `native` (OpenAI `tool_calls`) takes precedence
    over calls written in the text, as in the OpenAI client. With `tools`, parsed calls are
    checked against the schemas too (`validate_calls`); `tool_names` (default: those of
    `tools`) only sharpen the `unsupported_syntax` rule. Never raises.
    """
    text = output.decode("utf-8", "replace") if isinstance(output, bytes) else output
    names = tool_names if tool_names is not None else tool_names_of(tools)
    if native:
        calls, malformed = decode_native_tool_calls(native, finish_reason)
        text = _clean_text(text)
    else:
        text, calls, malformed = parse_tool_calls(text, finish_reason, names)
    if tools is not None:
        calls, invalid = validate_calls(calls, tools)
        malformed = malformed + invalid
    return ParsedOutput(text=text, calls=calls, malformed=malformed)
