"""Reference dialogues: the conversation that carries out a task's reference solution the way
the world's policy says (methods.md §1, our reference-trajectory design).

For a task with a change to make:

    user:      the goal, in the user's words (no ids they would not say)
    assistant: asks for what identifies them (the world's `ASK_IDENTITY`)
    user:      answers from their known info (`rollout.user.ScriptedUser`)
    assistant: the identity lookup, then the reads that show every id a write will use
               (the reference's reads, plus the world's `grounding` hook)
    assistant: the plan of the first write, with its values and amounts (the world's
               `action` hook), and a question: shall I go ahead?
    user:      yes
    assistant: the write; then the next plan (with a word on what was done), and so on
    assistant: the result: ids created and amounts moved (the world's `facts` hook)

For a request the policy refuses: the lookups that show why, then an explanation with the
rule in the policy's own words (`policy.md`) and what the policy allows instead.

For a question (a task with answer facts and no write): the lookups, then the answer,
every fact said. A reference that ends in a transfer to a human agent (a request the
policy sends to one) says so, and what was done before, in the turn that transfers.

Phrasing is drawn from several realisations per dialogue act, seeded by the task. The
dialogue is played through the real agent loop against the scripted user and kept only if
the episode reaches the task's target and passes every part of the verdict (outcome,
communication and the policy's process); `Task.dialogue` stores it and the facts the user
must be told go to `verification.communicate`.
"""

from __future__ import annotations

import asyncio
import random
import re
import sqlite3
from dataclasses import dataclass, field
from typing import Any

from data.records import Fact, Sampling, Task, ToolCall, Trajectory, Turn
from envs import state as st
from envs.conversation import (
    Conversation,
    conversation,
    mentions_value,
    rule_fact,
    tool_result,
    write_facts,
)
from envs.stock_tools import TRANSFER_TOOL
from envs.world import World
from rollout.agent import AgentConfig, run_episode
from rollout.model import ChatResponse
from rollout.user import ScriptedUser
from synthesis.dialogue_checks import CALCULATE, said, unshown_ids
from synthesis.scenario import outcome_assertions, write_scenario

ASK_CONFIRM = ["Shall I go ahead?", "Would you like me to go ahead with that?", "Should I proceed?",
               "Shall I do that for you?"]
OPEN_PLAN = ["I'll {plan}.", "Here is what I can do: {plan}.", "I can {plan}."]
DONE = ["Done.", "That's done.", "All set."]
FOUND = ["Here is what I found: {facts}.", "I've looked it up: {facts}.", "According to our records, {facts}."]
# the result of a calculation the user asked for is worked out, not found in the records
WORKED_OUT = ["By my calculation, {facts}.", "I worked it out: {facts}.", "Worked out, {facts}."]
TRANSFER = ["I can't resolve that within our policy, so I'm transferring you to a human agent now.",
            "That is something a human agent has to handle; I'm transferring you to one now."]
APOLOGY = ["I'm sorry, I can't {action}.", "Unfortunately I'm not able to {action}.",
           "I'm sorry, but I can't {action}."]


@dataclass
class Plan:
    """The planned assistant turns (texts and single tool calls) and the facts to tell."""

    turns: list[Turn] = field(default_factory=list)
    facts: list[Fact] = field(default_factory=list)
    actions: list[str] = field(default_factory=list)  # each write as the agent announces it
    refused: str = ""  # the refused request, as the agent names it
    rule_text: str = ""  # the policy's sentence that refuses it


class DialoguePolicy:
    """A `ChatModel` that says the planned assistant turns one after another."""

    name = "reference"

    def __init__(self, turns: list[Turn]) -> None:
        self.turns = turns

    async def chat(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]], sampling: Sampling) -> ChatResponse:
        k = sum(m["role"] == "assistant" for m in messages)
        if k >= len(self.turns):
            return ChatResponse(text="Is there anything else I can help you with?")
        turn = self.turns[k]
        calls = [ToolCall(name=c.name, arguments=dict(c.arguments), id=f"call_{k}") for c in turn.tool_calls]
        return ChatResponse(text=turn.content, tool_calls=calls, completion_tokens=max(1, len(turn.content) // 4))

    async def aclose(self) -> None:
        return None


def policy_rule_text(world: World, rule: str) -> str:
    """The sentence of `policy.md` that states `rule`, as a reply to a customer can quote it:
    its bold title and the markdown's code marks dropped ("while the order is pending")."""
    number = rule.split("_")[0]
    m = re.search(rf"\*\*{number}(?:\b|_)[^*]*\*\*(?:\s*\*\([^)]*\)\*)?\s*:\s*(.+?)(?=\n-\s|\n\n|\Z)", world.policy, re.S)
    if m is None:
        raise KeyError(f"{world.name}: policy.md has no rule {number}")
    text = " ".join(m.group(1).replace("`", "").split())
    return re.split(r"(?<=\.)\s", text)[0].rstrip(".")


def _lowercase_first(text: str) -> str:
    if not text or text.startswith(("I ", "I'")):
        return text
    return text[:1].lower() + text[1:]


def _norm_key(key: str) -> str:
    return key.strip().lower().replace(" ", "_")


def _known(task: Task) -> dict[str, str]:
    """The user's known info by normalised key ("date of birth" = "date_of_birth")."""
    return {_norm_key(k): str(v) for k, v in task.user.known_info.items()}


def _identity_keys(conv: Conversation, task: Task) -> list[str]:
    """The identity keys the user answers with (the first key set they know, confirm fields too)."""
    known = _known(task)
    for keys in conv.identity.keys:
        if all(_norm_key(k) in known for k in keys):
            return [k for k in [*keys, *conv.identity.confirm] if _norm_key(k) in known]
    return []


def _identity_question(conv: Conversation, task: Task, opening: str, rng: random.Random) -> str | None:
    """The agent's identity question, when the opening does not already identify the user
    (a value inside a longer id, "AC100027" in "bill_AC100027_2026-05", does not)."""
    known = _known(task)
    keys = _identity_keys(conv, task)
    if not keys:
        return None
    missing = [k for k in keys if not said(opening, known[_norm_key(k)])]
    return rng.choice(conv.ask_identity) if missing else None


def _plural_label(label: str) -> bool:
    """A label naming several things ("checked bags", "refills left", "free seats")."""
    words = label.split()
    return any(w.endswith("s") and not w.endswith(("ss", "us", "is")) and len(w) > 3 for w in words[:2]) \
        and not label.startswith(("status", "address"))


def answer_text(facts: list[Fact]) -> str:
    """The facts of an answer in a sentence ("the membership tier is gold; the reservation
    ids are R1 and R2; the number of checked bags is 1"), each by its first spelling."""
    by_label: dict[str, list[str]] = {}
    for f in facts:
        by_label.setdefault(f.label, []).append(f.any_of[0])
    parts = []
    for label, values in by_label.items():
        if len(values) == 1 and _plural_label(label):
            count = re.fullmatch(r"-?\d+(?:\.\d+)?", values[0]) is not None
            parts.append(f"the number of {label} is {values[0]}" if count else f"the {label} are {values[0]}")
        elif len(values) == 1:
            parts.append(f"the {label} is {values[0]}")
        else:
            parts.append(f"the {label}s are {', '.join(values[:-1])} and {values[-1]}")
    return "; ".join(parts)


def plan(world: World, task: Task, refused: ToolCall | None = None, rule: str | None = None,
         answer: list[Fact] | None = None) -> Plan:
    """The reference dialogue's assistant turns for `task` (see the module docstring);
    `answer`: the facts that answer the user's questions."""
    conv = conversation(world)
    rng = random.Random(f"{task.id}|dialogue")
    out = Plan()
    opening = ScriptedUser(task).first_message()
    ask = _identity_question(conv, task, opening, rng)
    if ask:
        out.turns.append(Turn(role="assistant", content=ask))
    tools = world.tools
    reads = [c for c in task.reference_solution if not tools[c.name].write and c.name != TRANSFER_TOOL]
    writes = [c for c in task.reference_solution if tools[c.name].write]
    transfer = next((c for c in task.reference_solution if c.name == TRANSFER_TOOL), None)
    env = world.env(task.initial_state)
    try:
        hook = conv.hook("grounding")

        def grounding(call: ToolCall) -> list[ToolCall]:
            found = hook(env.conn, call, task.user.known_info) if callable(hook) else []
            return [g for g in found if g.key() != call.key()]

        needed = [grounding(c) for c in [*([refused] if refused else []), *writes]]
        # a conditional preference the write does not take: the reads that show why, and a
        # sentence saying so before its plan (the world's `preference` hook)
        prefer = conv.hook("preference")
        wanted = task.metadata.get("preference") or {}
        checks = {c.key(): prefer(env.conn, c, wanted) for c in writes} if callable(prefer) and wanted else {}
        needed = [*[list(r[0]) for r in checks.values() if r], *needed]
        before_read: dict[str, list[ToolCall]] = {}  # a reference read -> the reads that show its ids
        for reads_of in needed:
            for i, g in enumerate(reads_of):
                before_read.setdefault(g.key(), reads_of[:i])
        planned: list[ToolCall] = []

        def place(calls: list[ToolCall]) -> None:
            for c in calls:
                if c.key() not in {p.key() for p in planned}:
                    planned.append(c)

        for read in reads:
            place([*before_read.get(read.key(), []), *grounding(read), read])
        for reads_of in needed:
            place(reads_of)
        known = _known(task)
        said_first = [opening, *(known[_norm_key(k)] for k in _identity_keys(conv, task))]
        planned, results = _in_shown_order(world, task, planned, said_first)
        for read in planned:
            out.turns.append(Turn(role="assistant", tool_calls=[read]))
        if refused is not None:
            assert rule is not None
            text, out.refused, out.rule_text = _refusal(world, conv, env.conn, refused, rule, rng)
            out.turns.append(Turn(role="assistant", content=text))
            out.facts = [rule_fact(conv, rule)]
            return out
        action = conv.hook("action")
        reports: list[str] = []
        for call in writes:
            plan_text = (rng.choice(action(env.conn, call)) if callable(action)
                         else _plain_action(call))
            before = st.restore(env.snapshot())
            ledger_before = _ledger_size(env.conn)
            obs = env.call(call)
            try:
                found = write_facts(conv, before, env.conn, call, tool_result(obs.content)) if obs.ok else []
            finally:
                before.close()
            # the announcement states every amount the write moves (the world's ledger)
            missing = [a for a in _ledger_amounts(env.conn, ledger_before) if not mentions_value(plan_text, f"{a:g}")]
            if missing:
                plan_text += ", for " + " and ".join(f"an amount of {a:g}" for a in missing)
            out.actions.append(plan_text)
            lead = (rng.choice(DONE) + " " + reports[-1] + " Next, " if reports else "")
            opening_line = rng.choice(OPEN_PLAN).format(plan=plan_text)
            why = checks.get(call.key())
            if why and why[1]:
                opening_line = f"{why[1]} {opening_line}"
            if lead:
                opening_line = lead + _lowercase_first(opening_line)
            out.turns.append(Turn(role="assistant", content=f"{opening_line} {rng.choice(ASK_CONFIRM)}"))
            out.facts += found
            reports.append(_report(conv, env.conn, call, obs.content if obs.ok else "", found, rng))
            out.turns.append(Turn(role="assistant", tool_calls=[call]))
        closing = f"{rng.choice(DONE)} {' '.join(r for r in reports if r)}".strip() if writes else ""
        if answer:
            worked = [r for c, r in results if c.name == CALCULATE]
            calc = [f for f in answer if any(mentions_value(r, x) for r in worked for x in f.any_of)]
            records = [f for f in answer if f not in calc]
            for bank, facts in ((FOUND, records), (WORKED_OUT, calc)):
                if facts:
                    found = rng.choice(bank).format(facts=answer_text(facts))
                    closing = f"{closing} {found[:1].upper() + found[1:]}".strip()
            out.facts += list(answer)
        if transfer is not None:
            out.turns.append(Turn(role="assistant", content=f"{closing} {rng.choice(TRANSFER)}".strip(),
                                  tool_calls=[transfer]))
        elif closing:
            out.turns.append(Turn(role="assistant", content=closing))
        return out
    finally:
        env.close()


def _in_shown_order(world: World, task: Task, reads: list[ToolCall], said_first: list[str]
                    ) -> tuple[list[ToolCall], list[tuple[ToolCall, str]]]:
    """`reads` in an order in which every id a read takes was shown before it (said by the
    user, `said_first`, or in an earlier read's result): each time the first read whose ids
    are all shown, else the first left. Returns the order and each read's result."""
    env = world.env(task.initial_state)
    shown = list(said_first)
    out: list[tuple[ToolCall, str]] = []
    pending = list(reads)
    try:
        while pending:
            ready = next((c for c in pending if not unshown_ids(env.conn, c, shown)), pending[0])
            pending.remove(ready)
            content = env.call(ToolCall(name=ready.name, arguments=dict(ready.arguments))).content
            shown.append(content)
            out.append((ready, content))
    finally:
        env.close()
    return [c for c, _ in out], out


def _plain_action(call: ToolCall) -> str:
    """A write said plainly, for a world without an ``action`` hook: the tool as words, then
    its arguments ("extend rental (rental id R1, days 5)")."""
    args = ", ".join(f"{k.replace('_', ' ')} {v}" for k, v in call.arguments.items())
    return f"{call.name.replace('_', ' ')}" + (f" ({args})" if args else "")


def _ledger_size(conn: Any) -> int | None:
    """The world's ledger row count (None for a world without a ledger)."""
    try:
        return int(conn.execute("SELECT MAX(rowid) FROM ledger").fetchone()[0] or 0)
    except sqlite3.OperationalError:  # no ledger table
        return None


def _ledger_amounts(conn: Any, since: int | None) -> list[float]:
    """The amounts of the ledger rows added after row `since`."""
    if since is None:
        return []
    rows = conn.execute("SELECT amount FROM ledger WHERE rowid > ? ORDER BY rowid", (since,)).fetchall()
    return [abs(float(a)) for (a,) in rows if a]


def _report(conv: Conversation, conn: Any, call: ToolCall, content: str, facts: list[Fact],
            rng: random.Random) -> str:
    """What one write did, with its facts: the world's `report` hook when it says every fact,
    else a plain sentence of the facts."""
    hook = conv.hook("report")
    result = tool_result(content)
    options = [r for r in (hook(conn, call, result, facts) if callable(hook) and result is not None else [])
               if all(any(mentions_value(r, x) for x in f.any_of) for f in facts)]
    if options:
        return rng.choice(options)
    parts = [f"the {f.label} is {f.any_of[0]}" for f in facts]
    return (parts[0][:1].upper() + "; ".join(parts)[1:] + ".") if parts else ""


def _refusal(world: World, conv: Conversation, conn: Any, call: ToolCall, rule: str,
             rng: random.Random) -> tuple[str, str, str]:
    """The refusal turn, the refused request as it names it, and the policy's sentence."""
    action = conv.hook("action")
    what = _lowercase_first(rng.choice(action(conn, call))) if callable(action) else call.name.replace("_", " ")
    what = re.split(r";|, for a total| and refund", what)[0]
    reason = policy_rule_text(world, rule)
    text = f"{rng.choice(APOLOGY).format(action=what)} Under our policy, {_lowercase_first(reason)}."
    alternative = conv.alternatives.get(rule)
    return (f"{text} {alternative}" if alternative else text), what, reason


def play(world: World, task: Task, turns: list[Turn]) -> Trajectory:
    """The planned turns played through the agent loop against the scripted user."""
    cfg = AgentConfig(max_turns=len(turns) + 2, max_tool_calls_per_turn=1)
    return asyncio.run(run_episode(task, world, DialoguePolicy(turns), ScriptedUser(task), Sampling(seed=0), 0, cfg))


def dialogue_of(trajectory: Trajectory) -> list[Turn]:
    """The conversation after the system prompt, as `Task.dialogue` stores it (the closing
    user turn with the stop marker is left out)."""
    turns: list[Turn] = []
    for m in trajectory.messages[1:]:
        if m["role"] == "assistant":
            calls = [ToolCall(name=c["function"]["name"], arguments=tool_result(c["function"]["arguments"]) or {})
                     for c in m.get("tool_calls") or []]
            turns.append(Turn(role="assistant", content=m.get("content") or "", tool_calls=calls))
        elif m["role"] == "user":
            turns.append(Turn(role="user", content=m.get("content") or ""))
    while turns and turns[-1].role == "user":
        turns.pop()
    return turns


def identity_known(conv: Conversation, task: Task) -> bool:
    """Whether the user knows what identifies them (one of the world's identity key sets)."""
    known = _known(task)
    return any(all(_norm_key(k) in known for k in keys) for keys in conv.identity.keys)


def with_dialogue(world: World, task: Task, refused: ToolCall | None = None, rule: str | None = None,
                  basis: list[str] | None = None, answer: list[Fact] | None = None,
                  scenario: bool = True) -> tuple[Task | None, str]:
    """`task` with its user scenario (`synthesis.scenario`, unless `scenario` is false),
    reference dialogue, facts, outcome assertions, expected outcome and reward basis, or
    (None, why) when no dialogue carries it out cleanly. `answer`: the facts that answer
    the user's questions; the outcome of a task without a write is then "answer", and of one
    whose reference ends in a transfer to a human agent "transfer"."""
    from verifiers.composite import CompositeVerifier

    conv = conversation(world)
    if not identity_known(conv, task):
        return None, "user_cannot_identify"
    writes = any(world.tools[c.name].write for c in task.reference_solution)
    transfer = any(c.name == TRANSFER_TOOL for c in task.reference_solution)
    outcome = ("refusal" if refused is not None else "transfer" if transfer else "change" if writes else "answer")
    if scenario:
        task = write_scenario(world, task, outcome, refused.name if refused is not None else None)
    try:
        p = plan(world, task, refused, rule, answer)
    except KeyError as exc:
        return None, f"dialogue_unplannable:{exc.args[0][:40] if exc.args else 'rule'}"
    if refused is None and not p.facts and not writes and not transfer:
        return None, "nothing_to_tell"
    v = task.verification.model_copy(update={
        "outcome": outcome, "communicate": p.facts,
        "nl_assertions": outcome_assertions(outcome, p.actions, p.facts, p.refused, p.rule_text),
        "basis": list(basis or task.verification.basis or ["DB", "COMMUNICATE", "POLICY"])})
    draft = task.model_copy(update={"verification": v})
    episode = play(world, draft, p.turns)
    verdict = CompositeVerifier().verify(draft, episode)
    if not verdict.passed:
        failed = sorted({r.split(":", 1)[0] for r in verdict.reasons}) or ["unknown"]
        return None, "reference_dialogue_fails:" + "+".join(failed)
    turns = dialogue_of(episode)
    calls = [ToolCall(name=c.name, arguments=dict(c.arguments)) for t in turns for c in t.tool_calls]
    done = draft.model_copy(update={"dialogue": turns, "reference_solution": calls})
    if refused is not None:
        done.metadata = {**done.metadata, "refused_call": refused.model_dump(exclude={"id"}), "refused_rule": rule}
    return done.with_id(), ""



def upgrade(world: World, task: Task) -> tuple[Task, str]:
    """A task made before reference dialogues, as it would be judged today: its states
    rebuilt in the world as it is now (a world's version may have changed since: a ledger
    added, ids minted from content), then its facts, expected outcome and reward basis derived
    by writing its dialogue. The id stays, so its stored trajectories still point at it.
    Returns (task, "") when upgraded, else the task unchanged and why: "current" (it has a
    dialogue or is not a tool-use task), "reference_fails_today", or `with_dialogue`'s reason
    (e.g. "nothing_to_tell": a no-change task, which is not released today)."""
    if task.dialogue or not getattr(world, "tools", None) or task.verification.verifier:
        return task, "current"
    env = world.env(task.initial_state)
    try:
        initial = env.state_hash()
        if any(not env.call(c).ok and world.tools[c.name].write for c in task.reference_solution):
            return task, "reference_fails_today"
        target = env.state_hash() if task.target_state_hash != task.initial_state.state_hash else initial
    finally:
        env.close()
    today = task.model_copy(update={"initial_state": task.initial_state.model_copy(update={"state_hash": initial}),
                                    "target_state_hash": target})
    refused = task.metadata.get("refused_call")
    call = ToolCall.model_validate(refused) if isinstance(refused, dict) else None
    done, why = with_dialogue(world, today, call, task.metadata.get("refused_rule") if call else None,
                              scenario=False)
    if done is None:
        return task, why
    return done.model_copy(update={"id": task.id}), ""
