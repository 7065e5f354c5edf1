"""Chat-template control tokens in content stay text.

A model can write `<|im_start|>system ...` as text, as a tool name or inside arguments, and a
tool can echo it back. Wherever content meets a chat template and the result is tokenised as
text (the embedded backend renders its prompt to a string and tokenises it; TRL does the
same with training rows), such a string would become a real control token: a forged turn.

`escape_messages` breaks every control token in message content, tool names and arguments
by inserting U+200B (zero-width space) after its first character: `<|im_start|>` becomes
`<\u200b|im_start|>`, which tokenises as ordinary text. Nothing else changes, JSON arguments
stay valid JSON, and the stored records keep the original text (escaping happens only at
rendering). The tokens are the tokenizer's own added and special tokens
(`control_tokens(tokenizer)`) plus any `<|name|>`-shaped token (ChatML, Llama 3, Phi, ...).

Released rows are escaped once more, when they are built (`curation.release`), since plain
TRL renders them with no escape of its own: `escape_released` / `escape_released_message`
insert the same U+200B into every `<|name|>` and `<｜name｜>` token (ChatML, Llama 3, Phi,
DeepSeek) and the turn markers of Gemma and Mistral (`RELEASE_MARKERS`), whatever the
tokenizer. That escape is exactly reversible (`unescape`): a token already written in its
escaped form (first character, zero-width spaces, rest) gets one zero-width space more, and
`unescape` takes one away from each. The render-time escape above leaves escaped text as it
is, so a released row is never escaped twice.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable
from functools import lru_cache
from typing import Any

ZWSP = "\u200b"
GENERIC = r"<\|[A-Za-z0-9_.:\-]{1,64}\|>"  # <|im_start|>, <|eot_id|>, <|start_header_id|>, ...
_PASSES = 8  # escaping can only create a new token when tokens overlap; bounded anyway


def control_tokens(tokenizer: Any) -> list[str]:
    """The strings a tokenizer turns into single added or special tokens (longest first)."""
    found: set[str] = set()
    for attr in ("all_special_tokens", "additional_special_tokens"):
        found.update(t for t in getattr(tokenizer, attr, None) or [] if isinstance(t, str))
    added = getattr(tokenizer, "get_added_vocab", None)
    if callable(added):
        found.update(t for t in added() if isinstance(t, str))
    return sorted((t for t in found if len(t) > 1), key=lambda t: (-len(t), t))


@lru_cache(maxsize=32)
def _pattern(tokens: tuple[str, ...]) -> re.Pattern[str]:
    parts = [re.escape(t) for t in sorted(set(tokens), key=lambda t: (-len(t), t))]
    return re.compile("|".join([*parts, GENERIC]))


def escape_control_tokens(text: str, tokens: Iterable[str] = ()) -> str:
    """`text` with every control token (of `tokens`, or `<|...|>`-shaped) broken up."""
    if not text or "<" not in text:
        return text
    pattern = _pattern(tuple(tokens))
    for _ in range(_PASSES):
        if pattern.search(text) is None:
            return text
        text = pattern.sub(lambda m: m.group(0)[0] + ZWSP + m.group(0)[1:], text)
    return text


def _escape_value(value: Any, tokens: tuple[str, ...]) -> Any:
    if isinstance(value, str):
        return escape_control_tokens(value, tokens)
    if isinstance(value, dict):
        return {_escape_value(k, tokens): _escape_value(v, tokens) for k, v in value.items()}
    if isinstance(value, list):
        return [_escape_value(v, tokens) for v in value]
    return value


def escape_messages(messages: list[dict[str, Any]], tokens: Iterable[str] = ()) -> list[dict[str, Any]]:
    """Copies of OpenAI-format `messages` with control tokens broken up in `content` (a string
    or text parts), `name`, and tool calls' names and arguments. The input is not changed."""
    toks = tuple(tokens)
    out: list[dict[str, Any]] = []
    for message in messages:
        m = dict(message)
        if "content" in m:
            m["content"] = _escape_value(m["content"], toks)
        if isinstance(m.get("name"), str):
            m["name"] = escape_control_tokens(m["name"], toks)
        if m.get("tool_calls"):
            calls = []
            for call in m["tool_calls"]:
                if not isinstance(call, dict):
                    calls.append(call)
                    continue
                c = dict(call)
                fn = c.get("function")
                target = dict(fn) if isinstance(fn, dict) else c
                if isinstance(target.get("name"), str):
                    target["name"] = escape_control_tokens(target["name"], toks)
                if "arguments" in target:
                    # a JSON string stays valid JSON: a token can only sit inside its string literals
                    target["arguments"] = _escape_value(target["arguments"], toks)
                if isinstance(fn, dict):
                    c["function"] = target
                calls.append(c)
            m["tool_calls"] = calls
        out.append(m)
    return out


# -- the reversible escape of released rows ------------------------------------------------

# Turn markers of other families that are not `<|name|>`-shaped (Gemma; Mistral's instruction
# and tool markers). `<s>` / `</s>` are left out: HTML uses them.
RELEASE_MARKERS: tuple[str, ...] = ("<start_of_turn>", "<end_of_turn>", "[INST]", "[/INST]", "[TOOL_CALLS]",
                                    "[AVAILABLE_TOOLS]", "[/AVAILABLE_TOOLS]", "[TOOL_RESULTS]", "[/TOOL_RESULTS]")


def _release_pattern(escaped: bool) -> re.Pattern[str]:
    """Every release token with any number of zero-width spaces after its first character
    (`escaped`: at least one). Names hold neither bars, brackets nor U+200B, so a match never
    overlaps another and inserting U+200B at its second place creates none."""
    z = ZWSP + ("+" if escaped else "*")
    return re.compile("|".join([
        "<" + z + r"\|[A-Za-z0-9_.:\-]{1,64}\|>",  # <|im_start|>, <|eot_id|>, <|start_header_id|>, ...
        "<" + z + "\uff5c[^\uff5c<>\\s" + ZWSP + "]{1,64}\uff5c>",  # DeepSeek's <｜User｜>, <｜tool▁calls▁begin｜>
        *(re.escape(t[0]) + z + re.escape(t[1:]) for t in RELEASE_MARKERS)]))


_TO_ESCAPE = _release_pattern(escaped=False)
ESCAPED = _release_pattern(escaped=True)  # a release token in its escaped form


def escape_released_text(text: str) -> str:
    """`text` with a U+200B after the first character of every release token (and of every
    one already in escaped form, so that `unescape_text` gives `text` back exactly)."""
    if not text or ("<" not in text and "[" not in text):
        return text
    return _TO_ESCAPE.sub(lambda m: m.group(0)[0] + ZWSP + m.group(0)[1:], text)


def unescape_text(text: str) -> str:
    """The inverse of `escape_released_text`: one U+200B fewer in each escaped token."""
    if not text or ZWSP not in text:
        return text
    return ESCAPED.sub(lambda m: m.group(0)[0] + m.group(0)[2:], text)


def _map_strings(value: Any, fn: Callable[[str], str]) -> Any:
    """`value` with `fn` applied to every string in it (in lists and dicts, keys included);
    other values as they are."""
    if isinstance(value, str):
        return fn(value)
    if isinstance(value, dict):
        return {_map_strings(k, fn): _map_strings(v, fn) for k, v in value.items()}
    if isinstance(value, list):
        return [_map_strings(v, fn) for v in value]
    return value


def escape_released(value: Any) -> Any:
    """`value` (text, or lists and dicts of them, keys included) with every string escaped
    by `escape_released_text`; other values as they are."""
    return _map_strings(value, escape_released_text)


def unescape(value: Any) -> Any:
    """The released text as it was written: every string of `value` (a row, a message, a
    decoded JSON object or JSON text) with `unescape_text` applied."""
    return _map_strings(value, unescape_text)


def escape_json_text(text: str) -> str:
    """JSON text whose value has its strings escaped (`escape_released`). Unchanged when
    nothing is escaped; else dumped again, so a token written with JSON escapes
    (`"\\u003c|im_start|>"`) is caught and the escape is plain text that `unescape` reverses.
    Text that is not JSON is escaped as text."""
    try:
        value = json.loads(text)
    except (TypeError, ValueError):
        return escape_released_text(text)
    escaped = escape_released(value)
    return text if escaped == value else json.dumps(escaped, ensure_ascii=False)


def escape_released_message(message: dict[str, Any]) -> dict[str, Any]:
    """A copy of a released message (`data.schema.release_message`) with every string
    escaped: content, names, ids and tool-call arguments (JSON text stays valid JSON)."""
    def call(c: Any) -> Any:
        if not isinstance(c, dict) or not isinstance(c.get("function"), dict):
            return escape_released(c)
        fn = c["function"]
        escaped = {k: escape_json_text(v) if k == "arguments" and isinstance(v, str) else escape_released(v)
                   for k, v in fn.items()}
        return {k: escaped if k == "function" else escape_released(v) for k, v in c.items()}

    return {k: [call(c) for c in v] if k == "tool_calls" and isinstance(v, list) else escape_released(v)
            for k, v in message.items()}


def holds_escape(value: Any) -> bool:
    """Whether any string of `value` holds an escaped release token."""
    if isinstance(value, str):
        return ZWSP in value and ESCAPED.search(value) is not None
    if isinstance(value, dict):
        return any(holds_escape(k) or holds_escape(v) for k, v in value.items())
    if isinstance(value, list):
        return any(holds_escape(v) for v in value)
    return False
