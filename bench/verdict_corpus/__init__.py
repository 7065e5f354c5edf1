"""The verdict corpus: labelled conversations made by editing real synthesized tasks'
reference dialogues with hand-written phrasings (README.md). `load()` reads the committed
`corpus.jsonl.gz`; `trajectory(case)` makes what the verifiers judge; `phrasings(act)` reads
the hand-written phrasings of one dialogue act."""

from __future__ import annotations

import gzip
import json
import re
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

from data.records import Task, ToolCall, Trajectory, Turn

HERE = Path(__file__).resolve().parent
CORPUS = HERE / "corpus.jsonl.gz"
PHRASINGS = HERE / "phrasings"
# Dialogue acts with a phrasing file (`identity` is the user's identity answer).
USER_ACTS = ("confirm", "decline", "hedge", "ask", "confirm_condition", "confirm_partial", "identity")
AGENT_ACTS = ("plan", "report", "refusal", "invented", "claim", "reask", "reassure")
ACTS = (*USER_ACTS, *AGENT_ACTS)
# The acts the corpus is held to: at least 50 distinct hand-written phrasings each.
REQUIRED_ACTS = ("confirm", "decline", "hedge", "ask", "confirm_condition", "confirm_partial",
                 "plan", "report", "refusal", "identity")
OUTCOME_PARTS = ("DB", "CONSTRAINTS")  # the outcome part of a composite verdict, by the task's basis


@dataclass
class Phrasing:
    """One hand-written phrasing: its text (with `{slot}`s), the worlds it fits (empty: all)
    and its topic (pairs a question with its answer; empty: none)."""

    text: str
    worlds: tuple[str, ...] = ()
    topic: str = ""
    source: str = "hand"  # "hand", or "model" (phrasings/model/, `model_phrasings.py`)

    def fits(self, world: str) -> bool:
        return not self.worlds or world in self.worlds

    @property
    def slots(self) -> frozenset[str]:
        return frozenset(re.findall(r"\{(\w+)\}", self.text))


def _lines(path: Path) -> list[str]:
    return [s.strip() for s in path.read_text(encoding="utf-8").splitlines() if s.strip() and not s.strip().startswith("#")]


@cache
def phrasings(act: str) -> tuple[Phrasing, ...]:
    """The phrasings of `act` (`phrasings/<act>.txt`: one a line, `#` comments, an optional
    `[world,world]` prefix limiting a line to those worlds, then an optional `<topic>`), then
    the model-written ones where `model_phrasings.py` wrote `phrasings/model/<act>.txt`."""
    out = []
    model = PHRASINGS / "model" / f"{act}.txt"
    for source, path in (("hand", PHRASINGS / f"{act}.txt"), ("model", model)):
        if source == "model" and not path.is_file():
            continue  # model-written phrasings exist only where a model was configured
        for line in _lines(path):
            m = re.match(r"^(?:\[([a-z,]+)\]\s*)?(?:<(\w+)>\s*)?(.+)$", line)
            assert m is not None
            out.append(Phrasing(m.group(3), tuple(m.group(1).split(",")) if m.group(1) else (), m.group(2) or "",
                                source))
    return tuple(out)


@cache
def rule_phrasings() -> dict[tuple[str, str], list[str]]:
    """Own-words statements of each rule, by (world, rule number such as "R06")."""
    out: dict[tuple[str, str], list[str]] = {}
    for line in _lines(PHRASINGS / "rules.txt"):
        head, text = (s.strip() for s in line.split("|", 1))
        world, number = head.split()
        out.setdefault((world, number), []).append(text)
    return out


@dataclass
class CorpusCase:
    """One labelled conversation. `must_fail`: verdict parts of which at least one must fail
    when `expected_pass` is false; `act`/`phrasing`: the main edit; `edits`: every
    (act, phrasing) used; `note`: what was changed."""

    id: str
    world: str
    method: str
    task: Task
    messages: list[dict[str, Any]]
    expected_pass: bool
    must_fail: list[str]
    cls: str
    safety: bool
    act: str
    phrasing: str
    edits: list[tuple[str, str]] = field(default_factory=list)
    note: str = ""

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "world": self.world, "method": self.method, "cls": self.cls,
                "expected_pass": self.expected_pass, "must_fail": self.must_fail, "safety": self.safety,
                "act": self.act, "phrasing": self.phrasing, "edits": [list(e) for e in self.edits],
                "note": self.note, "messages": self.messages, "task": self.task.model_dump(mode="json")}


def load(path: str | Path | None = None) -> list[CorpusCase]:
    """The cases of the corpus at `path` (default: the committed `corpus.jsonl.gz`). Cases of
    one task share one `Task` object."""
    tasks: dict[str, Task] = {}
    out: list[CorpusCase] = []
    with gzip.open(Path(path) if path is not None else CORPUS, "rt", encoding="utf-8") as f:
        for line in f:
            if not line.strip():
                continue
            d = json.loads(line)
            raw = d["task"]
            task = tasks.get(raw["id"])
            if task is None:
                task = tasks[raw["id"]] = Task.model_validate(raw)
            out.append(CorpusCase(
                id=d["id"], world=d["world"], method=d["method"], task=task, messages=d["messages"],
                expected_pass=bool(d["expected_pass"]), must_fail=list(d["must_fail"]), cls=d["cls"],
                safety=bool(d["safety"]), act=d["act"], phrasing=d["phrasing"],
                edits=[(a, p) for a, p in d.get("edits", [])], note=d.get("note", "")))
    return out


def turns_of(messages: list[dict[str, Any]]) -> list[Turn]:
    """The conversation's turns (user texts, assistant texts and tool calls; tool results are
    left out: a replay makes them again)."""
    turns: list[Turn] = []
    for m in messages:
        if m["role"] == "user":
            turns.append(Turn(role="user", content=m.get("content") or ""))
        elif m["role"] == "assistant":
            calls = [ToolCall(name=c["function"]["name"], arguments=json.loads(c["function"]["arguments"] or "{}"))
                     for c in m.get("tool_calls") or []]
            turns.append(Turn(role="assistant", content=m.get("content") or "", tool_calls=calls))
    return turns


def trajectory(case: CorpusCase) -> Trajectory:
    """What the verifiers judge for `case`: its conversation with the tool results, steps and
    final state hash of a replay of its calls on the task's initial state (as the self-audit
    builds a dialogue's trajectory, `verifiers.audit.build_dialogue`)."""
    from verifiers.audit import build_dialogue

    return build_dialogue(case.task, turns_of(case.messages), name=case.id)


def outcome_part(task: Task) -> str:
    """The outcome part of `task`'s composite verdict (CONSTRAINTS for a constraint task, else DB)."""
    return "CONSTRAINTS" if "CONSTRAINTS" in task.verification.basis else "DB"
