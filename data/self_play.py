"""Records of self-play task generation (Tool-R0, methods.md §3): what a generator is asked
for (`Spec`), what it wrote (`Generation`, or `ParseError`), and a generation tried by a
solver (`Candidate`, with its pass rate p̂). Plain dataclasses: synthesis writes them,
`rollout.generation` parses into them, `train.rewards` scores them.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from data.records import ToolCall, canonical_json

Completion = str | list[dict[str, Any]]
Answer = str | Sequence[ToolCall | dict[str, Any]]

# --------------------------------------------------------------------------- records


@dataclass
class Spec:
    """What to generate: a world, how many calls, which tools they use, the tool menu."""

    world: str
    n_calls: int
    tools: list[str]  # the tools the gold calls need, in order
    menu: list[dict[str, Any]]  # OpenAI tool schemas offered (contains `tools`)

    @property
    def menu_names(self) -> list[str]:
        return [_tool_name(s) for s in self.menu]

    def to_dict(self) -> dict[str, Any]:
        return {"world": self.world, "n_calls": self.n_calls, "tools": list(self.tools), "menu": self.menu}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Spec:
        return cls(world=d["world"], n_calls=int(d["n_calls"]), tools=list(d["tools"]), menu=list(d["menu"]))


@dataclass
class Generation:
    """A parsed generator output: the question, the tool menu and the gold calls."""

    question: str
    tools: list[dict[str, Any]]  # normalised OpenAI tool schemas
    calls: list[ToolCall]
    raw: str = ""

    @property
    def menu_names(self) -> list[str]:
        return [_tool_name(s) for s in self.tools]

    def to_text(self) -> str:
        """The tagged form the generator is asked to write."""
        gold = [{"name": c.name, "arguments": c.arguments} for c in self.calls]
        return (f"<question>{self.question}</question>\n"
                f"<available_tools>{json.dumps(self.tools, ensure_ascii=False)}</available_tools>\n"
                f"<tool_call_answer>{json.dumps(gold, ensure_ascii=False)}</tool_call_answer>")


@dataclass
class ParseError:
    """Why a generator output did not parse, with what could be read of it."""

    reason: str  # "tags", "tools_json" or "gold_json"
    detail: str
    question: str | None = None
    raw: str = ""


@dataclass
class FormatCheck:
    """The three format facts r_format rewards, plus the parts that could be read."""

    question: str | None
    tags_ok: bool
    tools: list[dict[str, Any]] | None  # None: not a valid JSON list of tool schemas
    calls: list[ToolCall] | None  # None: not a valid JSON list of {"name", "arguments"}
    tools_error: str = ""
    gold_error: str = ""
    tags_error: str = ""


@dataclass
class Candidate:
    """A generation with its spec and, once a solver has tried it, its pass rate p̂."""

    spec: Spec
    generation: Generation
    p_hat: float | None = None

    @property
    def world(self) -> str:
        return self.spec.world


Solve = Callable[[Candidate, int], Sequence[Answer]]
Judge = Callable[[Generation], float]


def _tool_name(schema: dict[str, Any]) -> str:
    fn = schema.get("function") if isinstance(schema.get("function"), dict) else schema
    return str(fn.get("name", ""))


def _tool_params(schema: dict[str, Any]) -> dict[str, Any]:
    fn = schema.get("function") if isinstance(schema.get("function"), dict) else schema
    params = fn.get("parameters")
    return params if isinstance(params, dict) else {}


def _gold_json(calls: Sequence[ToolCall]) -> str:
    return canonical_json([{"name": c.name, "arguments": c.arguments} for c in calls])
