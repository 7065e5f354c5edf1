"""Where the dialogue acts sit in a task's reference dialogue, and their parts (the plan's
clause, the report's sentences, the refused request), so the builder can edit them.

The reference dialogues are written by `synthesis.dialogue`; this module only reads their
structure (which turn is a plan, a confirmation, a report ...) and splits a turn into the
part the builder keeps (values, ids, amounts) and the framing it replaces. Every split is
checked by putting the parts back together: a turn that does not come back exactly is left
unedited (`Shape.skipped` says why)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from data.records import Task, Turn
from envs.conversation import conversation
from envs.registry import get_world
from envs.stock_tools import TRANSFER_TOOL

# The framings the reference dialogues put around a plan, a report and a refusal; used only
# to find the parts to keep (a turn whose split does not rebuild exactly is not edited).
_ASK = re.compile(r"\s*(Shall I go ahead\?|Would you like me to go ahead with that\?|Should I proceed\?|"
                  r"Shall I do that for you\?)$")
_OPEN = re.compile(r"(I'll |[Hh]ere is what I can do: |I can )")
_DONE = re.compile(r"^(Done\.|That's done\.|All set\.)\s+")
_APOLOGY = re.compile(r"^(I'm sorry, but I can't|I'm sorry, I can't|Unfortunately I'm not able to) ")
_FOUND = re.compile(r"(Here is what I found: |I've looked it up: |According to our records, )(.+)\.$")


@dataclass
class PlanTurn:
    """A plan turn split: `lead` (the previous write's report and "Next, "), `why` (a
    sentence before the plan), `opener`, `clause` (what will be done, with every value) and
    `ask` (the confirmation question)."""

    index: int
    lead: str
    why: str
    opener: str
    clause: str
    ask: str

    def text(self) -> str:
        return f"{self.lead}{self.why}{self.opener}{self.clause}. {self.ask}"

    def statement(self) -> str:
        """The turn without its question."""
        return f"{self.lead}{self.why}{self.opener}{self.clause}."


@dataclass
class Shape:
    """The reference dialogue's acts by turn index."""

    writes: list[int] = field(default_factory=list)  # assistant turns that make a write
    confirms: list[int] = field(default_factory=list)  # the user's yes right before a write
    plans: list[PlanTurn] = field(default_factory=list)  # the plan right before each yes
    report: int | None = None  # the closing text turn after the last write
    report_body: str = ""  # the report without its opening word ("Done.")
    identity: int | None = None  # the user's identity answer (not the opening)
    identity_values: dict[str, str] = field(default_factory=dict)  # known-info key -> value said
    refusal: int | None = None
    request: str = ""  # the refused request, as the refusal names it
    alternative: str = ""  # what the refusal offers instead
    answer: int | None = None  # a no-change task's closing answer
    skipped: list[str] = field(default_factory=list)


def _plan(index: int, content: str) -> PlanTurn | None:
    m = _ASK.search(content)
    if m is None:
        return None
    body = content[: m.start()]
    lead = ""
    if " Next, " in body:
        cut = body.index(" Next, ") + len(" Next, ")
        lead, body = body[:cut], body[cut:]
    o = _OPEN.search(body)
    if o is None or not body.endswith("."):
        return None
    p = PlanTurn(index, lead, body[: o.start()], o.group(1), body[o.end():-1], m.group(1))
    return p if p.text() == content else None


def is_write(world: str, name: str) -> bool:
    tools = get_world(world).tools  # type: ignore[attr-defined]
    return name in tools and bool(tools[name].write)


def shape(task: Task) -> Shape:
    """The acts of `task`'s reference dialogue (see `Shape`)."""
    turns = task.dialogue
    out = Shape()
    world = task.world
    for i, t in enumerate(turns):
        if t.role == "assistant" and any(is_write(world, c.name) for c in t.tool_calls):
            out.writes.append(i)
            if i >= 2 and turns[i - 1].role == "user" and turns[i - 2].role == "assistant" \
                    and not turns[i - 2].tool_calls:
                p = _plan(i - 2, turns[i - 2].content)
                if p is None:
                    out.skipped.append(f"plan turn {i - 2} not split")
                    continue
                out.confirms.append(i - 1)
                out.plans.append(p)
    texts = [i for i, t in enumerate(turns) if t.role == "assistant" and t.content and not t.tool_calls]
    last = texts[-1] if texts else None
    outcome = task.verification.outcome
    if outcome == "change" and out.writes and last is not None and last > out.writes[-1]:
        m = _DONE.match(turns[last].content)
        if m:
            out.report, out.report_body = last, turns[last].content[m.end():]
        else:
            out.skipped.append("report not split")
    if outcome == "refusal" and last is not None:
        content = turns[last].content
        a = _APOLOGY.match(content)
        if a and ". Under our policy, " in content:
            request = content[a.end(): content.index(". Under our policy, ")]
            rest = content[content.index(". Under our policy, ") + len(". Under our policy, "):]
            out.refusal, out.request = last, request
            alt = [s for s in re.split(r"(?<=\.)\s+", rest)]
            out.alternative = " ".join(alt[1:]) if len(alt) > 1 else ""
        else:
            out.skipped.append("refusal not split")
    if outcome == "answer" and last is not None and _FOUND.search(turns[last].content):
        out.answer = last
    conv = conversation(get_world(world))
    lookup = next((i for i, t in enumerate(turns) if t.role == "assistant"
                   and any(c.name in conv.identity.lookups for c in t.tool_calls)), None)
    if lookup is not None and lookup >= 3 and turns[lookup - 1].role == "user":
        said = turns[lookup - 1].content
        values = {k: str(v) for k, v in task.user.known_info.items() if str(v) and str(v) in said}
        if values:
            out.identity, out.identity_values = lookup - 1, values
    return out


def transfers(task: Task) -> bool:
    """Whether the reference ends by handing the user to a human agent."""
    return any(c.name == TRANSFER_TOOL for t in task.dialogue for c in t.tool_calls)


def replace(turns: list[Turn], index: int, content: str) -> list[Turn]:
    """`turns` with turn `index`'s text replaced (its tool calls kept)."""
    out = list(turns)
    out[index] = out[index].model_copy(update={"content": content})
    return out
