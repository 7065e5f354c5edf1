"""Reading a self-play generator's output (Tool-R0, methods.md §3): the tagged format
(``<question>``, ``<available_tools>``, ``<tool_call_answer>``), its validity (gold tools in
the menu, required arguments, grounding) and a solver's agreement with the gold calls (p̂).

Choices the method text leaves open (ours):

- **Placeholder question**: missing, shorter than `MIN_QUESTION_CHARS` or 3 words, or
  holding a template slot (``<user_id>``, ``{id}``, ``[insert ...]``, TODO/TBD/XXX,
  lorem ipsum). Every generator reward term is 0 for it.
- **Grounding**: a gold argument value "appears in the question" when its text occurs
  case-insensitively and not inside a longer alphanumeric token (so ``2`` is not found in
  ``2026``); ``_`` may be written as a space (``basic_economy`` ~ "basic economy"), an
  integral float may be written as an integer. Booleans and nulls are exempt; list and
  object values are checked leaf by leaf.
- **Validity** terms are indicators over *all* gold calls, with required arguments read
  from the generation's own menu schema (the paper's rule; `synthesis.self_play` then checks
  the world's real tools). A call whose tool is not in the menu fails both the menu and the
  required-arguments term.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from data.records import ToolCall
from data.self_play import (
    Answer,
    Candidate,
    Completion,
    FormatCheck,
    Generation,
    ParseError,
    _gold_json,
    _tool_name,
    _tool_params,
)
from rollout.parsing import message_text, parse_tool_calls

TAGS = ("question", "available_tools", "tool_call_answer")
MIN_QUESTION_CHARS = 12


_FENCE = re.compile(r"^```[a-zA-Z]*\s*|\s*```$")
_PLACEHOLDER = re.compile(
    r"<[^<>\n]{0,40}>|\{[^{}\n]{0,40}\}|\[(?:insert|placeholder|your)[^\]]*\]|\b(?:TODO|TBD|XXX+|lorem ipsum)\b",
    re.IGNORECASE,
)


def is_placeholder(question: str | None) -> bool:
    """True for a missing, too short, or templated question (see the module docstring)."""
    if question is None:
        return True
    q = question.strip()
    if len(q) < MIN_QUESTION_CHARS or len(q.split()) < 3:
        return True
    return bool(_PLACEHOLDER.search(q))


def tag_block(text: str, tag: str) -> tuple[str | None, str]:
    """The body of `<tag>…</tag>` and "" when well-formed, else the problem.

    An unterminated block runs to the next known opening tag or the end of the text.
    """
    open_t, close_t = f"<{tag}>", f"</{tag}>"
    i = text.find(open_t)
    if i < 0:
        return None, f"no <{tag}>"
    start = i + len(open_t)
    j = text.find(close_t, start)
    if j < 0:
        nexts = [p for p in (text.find(f"<{t}>", start) for t in TAGS) if p >= 0]
        return text[start:min(nexts, default=len(text))], f"<{tag}> is not closed"
    if text.count(open_t) != 1 or text.count(close_t) != 1:
        return text[start:j], f"<{tag}> appears more than once"
    return text[start:j], ""


def _load_json(body: str | None) -> tuple[Any, str]:
    if body is None:
        return None, "missing"
    body = _FENCE.sub("", body.strip()).strip()
    try:
        return json.loads(body), ""
    except json.JSONDecodeError as e:
        return None, f"bad JSON: {e}"


def _normalize_tool(item: Any) -> dict[str, Any] | None:
    if not isinstance(item, dict):
        return None
    fn = item["function"] if isinstance(item.get("function"), dict) else item
    name = fn.get("name")
    params = fn.get("parameters", {"type": "object", "properties": {}})
    if not isinstance(name, str) or not name.strip() or not isinstance(params, dict):
        return None
    return {"type": "function",
            "function": {"name": name.strip(), "description": str(fn.get("description", "")), "parameters": params}}


def _parse_tools(body: str | None) -> tuple[list[dict[str, Any]] | None, str]:
    value, err = _load_json(body)
    if err:
        return None, err
    if not isinstance(value, list) or not value:
        return None, "not a non-empty JSON list"
    tools = [_normalize_tool(v) for v in value]
    if any(t is None for t in tools):
        return None, "an item is not a tool schema with a name"
    return [t for t in tools if t is not None], ""


def _parse_gold(body: str | None) -> tuple[list[ToolCall] | None, str]:
    """A JSON list (or one object) of {"name": str, "arguments": object}; arguments may be omitted."""
    value, err = _load_json(body)
    if err:
        return None, err
    items = [value] if isinstance(value, dict) else value
    if not isinstance(items, list) or not items:
        return None, "not a non-empty JSON list of calls"
    calls = []
    for v in items:
        if not isinstance(v, dict) or not isinstance(v.get("name"), str) or not v["name"].strip():
            return None, "a call has no string name"
        args = v.get("arguments", {})
        if not isinstance(args, dict):
            return None, f"{v['name']}: arguments are not an object"
        calls.append(ToolCall(name=v["name"].strip(), arguments=args))
    return calls, ""


def check_format(text: str) -> FormatCheck:
    """Read the three tagged blocks of a generator output, leniently, noting each problem."""
    bodies: dict[str, str | None] = {}
    tag_errors = []
    for tag in TAGS:
        bodies[tag], err = tag_block(text, tag)
        if err:
            tag_errors.append(err)
    question = bodies["question"].strip() if bodies["question"] is not None else None
    tools, tools_err = _parse_tools(bodies["available_tools"])
    calls, gold_err = _parse_gold(bodies["tool_call_answer"])
    return FormatCheck(question=question, tags_ok=not tag_errors, tools=tools, calls=calls,
                       tools_error=tools_err, gold_error=gold_err, tags_error="; ".join(tag_errors))


def parse_generation(text: str) -> Generation | ParseError:
    """A `Generation` when every tag is well-formed and both JSON blocks are valid."""
    fc = check_format(text)
    if not fc.tags_ok:
        return ParseError("tags", fc.tags_error, fc.question, text)
    if fc.tools is None:
        return ParseError("tools_json", fc.tools_error, fc.question, text)
    if fc.calls is None:
        return ParseError("gold_json", fc.gold_error, fc.question, text)
    return Generation(question=fc.question or "", tools=fc.tools, calls=fc.calls, raw=text)


def grounding_values(calls: Sequence[ToolCall]) -> list[tuple[str, Any]]:
    """(argument path, leaf value) of every gold value the grounding rule checks."""
    out: list[tuple[str, Any]] = []

    def walk(path: str, v: Any) -> None:
        if isinstance(v, bool) or v is None:
            return
        if isinstance(v, dict):
            for k, x in v.items():
                walk(f"{path}.{k}", x)
        elif isinstance(v, list):
            for i, x in enumerate(v):
                walk(f"{path}[{i}]", x)
        else:
            out.append((path, v))

    for i, c in enumerate(calls):
        for k, v in c.arguments.items():
            walk(f"{i}:{c.name}.{k}", v)
    return out


def value_in_question(value: Any, question: str) -> bool:
    """Whether `value` is written in `question` (see "Grounding" in the module docstring)."""
    forms = [str(value)]
    if isinstance(value, float) and value.is_integer():
        forms.append(str(int(value)))
    if isinstance(value, str) and "_" in value:
        forms.append(value.replace("_", " "))
    q = question.lower()
    for f in forms:
        f = f.strip().lower()
        if not f:
            return True
        left = r"(?<![0-9a-z])" if f[0].isalnum() else ""
        right = r"(?![0-9a-z])" if f[-1].isalnum() else ""
        if re.search(left + re.escape(f) + right, q):
            return True
    return False


@dataclass
class Validity:
    in_menu: bool
    required: bool
    grounded: bool
    missing: list[str] = field(default_factory=list)  # "tool.arg" required but absent
    ungrounded: list[str] = field(default_factory=list)  # argument paths not in the question

    @property
    def score(self) -> float:
        return 0.4 * self.in_menu + 0.4 * self.required + 0.2 * self.grounded


def validity(gen: Generation) -> Validity:
    """The three r_valid facts over all gold calls, against the generation's own menu."""
    menu = {_tool_name(s): s for s in gen.tools}
    in_menu = all(c.name in menu for c in gen.calls)
    missing = []
    for c in gen.calls:
        if c.name not in menu:
            missing.append(f"{c.name}.*")
            continue
        required = _tool_params(menu[c.name]).get("required") or []
        missing += [f"{c.name}.{r}" for r in required if isinstance(r, str) and r not in c.arguments]
    ungrounded = [p for p, v in grounding_values(gen.calls) if not value_in_question(v, gen.question)]
    return Validity(in_menu=in_menu, required=not missing, grounded=not ungrounded, missing=missing,
                    ungrounded=ungrounded)


def answer_calls(answer: Answer) -> list[ToolCall]:
    """The calls of one solver answer: model text (parsed) or a list of calls/dicts."""
    if isinstance(answer, str):
        return parse_tool_calls(answer)[1]
    return [a if isinstance(a, ToolCall) else ToolCall(name=str(a.get("name", "")), arguments=a.get("arguments") or {})
            for a in answer]


def solver_pass_rate(candidate: Candidate | Generation | Sequence[ToolCall], solver_answers: Sequence[Answer]) -> float:
    """p̂: share of the answers whose calls equal the gold calls exactly (canonical JSON, in order)."""
    if not solver_answers:
        return 0.0
    gold = gold_calls_of(candidate)
    target = _gold_json(gold)
    return sum(_gold_json(answer_calls(a)) == target for a in solver_answers) / len(solver_answers)


def gold_calls_of(candidate: Candidate | Generation | Sequence[ToolCall]) -> list[ToolCall]:
    if isinstance(candidate, Candidate):
        return candidate.generation.calls
    if isinstance(candidate, Generation):
        return candidate.calls
    return list(candidate)


def completion_text(completion: Completion) -> str:
    """Model text of a completion: the string, or the assistant messages' contents joined."""
    if isinstance(completion, str):
        return completion
    parts = []
    for m in completion:
        if m.get("role", "assistant") != "assistant":
            continue
        parts.append(message_text(m))
    return "\n".join(parts)


def r_format(text: str | FormatCheck) -> float:
    """⅓[tags parse] + ⅓[tools are valid JSON] + ⅓[gold is valid JSON]; 0 for a placeholder."""
    fc = check_format(text) if isinstance(text, str) else text
    if is_placeholder(fc.question):
        return 0.0
    return (fc.tags_ok + (fc.tools is not None) + (fc.calls is not None)) / 3


def r_valid(gen: Generation) -> float:
    """0.4[gold tools in menu] + 0.4[required args present] + 0.2[grounded]; 0 for a placeholder."""
    if is_placeholder(gen.question):
        return 0.0
    return validity(gen).score
