"""Tool calls written in model text (`parse_tool_calls`): `<tool_call>` blocks, or an output
that is nothing but calls; reasoning blocks masked, forged tool responses, tags of another
spelling, calls in prose and calls in other syntaxes classified (`rollout.parsing` gives the
rule)."""

from __future__ import annotations

import bisect
import math
import re
import uuid
from collections.abc import Iterable
from typing import Any

from data.records import ToolCall
from envs.tools import clip
from rollout.model import MalformedCall
from rollout.parsing.classify import (
    _DECODER,
    _JSON_ERRORS,
    _NAME_CHARS,
    _RAW_LIMIT,
    _classify,
    _clean_text,
    _Item,
    _loads,
    _malformed,
    _NotStrict,
    _raw_of,
    _why,
)

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

MAX_OUTPUT_CHARS = 256_000  # longer outputs are not searched for calls (`too_large`)
MAX_BARE_STARTS = 2_000  # `{` positions tried by the bare-JSON fallback, at most

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

    def bad_tag(m: re.Match[str], message: str) -> None:
        """A `bad_tag` item for the match `m`, whose text is taken out."""
        found.append((m.start(), m.end(), _malformed("bad_tag", message, m.group(0))))
        drop.append((m.start(), m.end()))

    for m in _ODD_BLOCK.finditer(text):
        bad_tag(m, f"{clip(m.group(1), 40)!r} is not <tool_call>: calls are read only from "
                   "<tool_call>...</tool_call> written exactly so (lower case, no spaces); nothing "
                   "in this block was run")
    blank = _blank(text, drop)
    prose = _prose_calls(blank, cut)
    blank = _blank(blank, [(s, e) for s, e, _ in prose])
    foreign = _foreign_calls(blank, tool_names, text)
    spans = [(s, e) for s, e, _ in foreign]
    found += [(s, e, item) for s, e, items in prose if not _inside(s, spans) for item in items]
    for m in _CLOSE_TAG.finditer(blank):
        if not _inside(m.start(), spans):
            bad_tag(m, f"{clip(m.group(0), 40)!r} closes no <tool_call> block; calls are read only "
                       "from <tool_call>...</tool_call>")
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
