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

The modules: `text` (calls written in text), `native` (native `tool_calls`), `classify` (the
one classifier and strict JSON), `validate` (the tool schemas), `output` (one output end to
end); their public names are re-exported here.
"""

from __future__ import annotations

from rollout.parsing.native import decode_native_tool_calls, message_text
from rollout.parsing.output import ParsedOutput, parse_model_output, tool_names_of
from rollout.parsing.text import MAX_BARE_STARTS, MAX_OUTPUT_CHARS, parse_tool_calls
from rollout.parsing.validate import validate_calls

__all__ = [
    "MAX_BARE_STARTS", "MAX_OUTPUT_CHARS", "ParsedOutput", "decode_native_tool_calls", "message_text",
    "parse_model_output", "parse_tool_calls", "tool_names_of", "validate_calls",
]
