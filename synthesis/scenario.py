"""User scenarios in τ²-bench's spirit (issue 16 §1): who the user is, why they call, how they
react, and what a good conversation must contain.

Every tool-use task passes through `synthesis.dialogue.with_dialogue`, which calls
`write_scenario` before it plans the reference dialogue and `outcome_assertions` after:

- **persona** with content: who the caller is (the world's ``WHO`` list), a trait from the
  Set Designer's persona label (novice, boundary, mismatch, entangled), how they write, and
  their mood;
- **reason** for the call: a sentence from the world's ``REASONS`` for each write tool the
  request names, the last one's first (the refused one for a refusal), or for "answer" /
  "transfer"; a world's ``reason_key(call)`` may key a bank by the call's intent and size
  ("book_reservation:group" for several passengers); it also leads the
  instruction, so the user's opening says why they call ("My flight home was moved, so I
  need to change my reservation ...");
- **reactions**: how to act when the agent sums up, refuses, offers an alternative or asks
  for something the user does not know, drawn for the task's expected outcome;
- **natural-language assertions** of the expected outcome (what is done, what the user is
  told, what must not be claimed), which the LLM judge scores when a model is configured.

Texts are drawn without replacement within one synthesis run (`scenario_book`, opened by
`synthesis.base.get_method`), so twenty tasks of one kind read twenty different ways
before any realisation repeats; outside a run each draw is seeded by the task alone.
"""

from __future__ import annotations

import contextlib
import contextvars
import random
import re
from collections.abc import Iterator, Sequence
from typing import Any

from data.records import Fact, Task
from envs.contract import hook
from rollout.user import first_person

# -------------------------------------------------------------------------- the text banks

# Who a caller is, for a world that declares no ``WHO``.
GENERIC_WHO = [
    "a long-time customer who rarely needs to contact support",
    "a small-business owner juggling several things at once",
    "a graduate student on a tight budget",
    "a retired engineer who likes to double-check every detail",
    "a parent handling things for the whole family",
    "a nurse who works night shifts",
    "a freelancer who works from home",
    "a recent arrival in the country, still learning how things work here",
]

# A trait for each Set Designer persona label (``Variant.persona``).
TRAITS: dict[str, list[str]] = {
    "novice": ["new to this and not sure how the process works",
               "doing this over chat for the first time",
               "unfamiliar with the rules and happy to be guided"],
    "boundary": ["aware of the rules and inclined to push right up to their limits",
                 "someone who has read the fine print and expects it to be applied exactly",
                 "used to asking for a little more than the rules normally give"],
    "mismatch": ["prone to mixing up details and grateful when they are checked",
                 "sure of what they want but hazy on some of the specifics",
                 "someone whose first choice does not always fit the situation"],
    "entangled": ["trying to sort out several related things in one go",
                  "someone whose requests depend on each other",
                  "managing a request with a few moving parts"],
}
DEFAULT_TRAITS = ["a regular customer with a clear idea of what they want",
                  "someone who gets straight to the point",
                  "a customer who prefers to handle things in one conversation"]

STYLES = [
    "Writes short, to-the-point messages.",
    "Chatty, and adds a bit of small talk.",
    "Formal and polite, with complete sentences.",
    "Types quickly in lowercase and skips greetings.",
    "Explains the background before getting to the point.",
    "Asks the agent to repeat anything that sounds uncertain.",
    "Uses plain, everyday words and avoids jargon.",
    "Reads every detail back before agreeing to it.",
]
MOODS = [
    "Calm and patient today.",
    "In a hurry and wants this done quickly.",
    "A little frustrated after a long day.",
    "Cheerful and friendly.",
    "Anxious about getting it right.",
    "Tired, but determined to sort it out.",
    "Relaxed, with plenty of time.",
    "Mildly annoyed that this needs a call at all.",
]

# How the request is put, after the reason ("You want to ..." is the goal's own wording).
GOAL_LEADS = ("You want to", "You need to", "You'd like to", "You are hoping to", "You have decided to",
              "You're calling to", "You plan to")

# Why a user calls, for a world that declares no ``REASONS`` (keyed like them).
GENERIC_REASONS: dict[str, list[str]] = {
    "change": ["Something in your plans has shifted and your account needs to follow.",
               "You put this off for a while and finally have a moment to deal with it.",
               "A friend suggested that sorting this out over chat would be quickest.",
               "You noticed this while going through your paperwork this morning."],
    "answer": ["You are going through your accounts and want to be sure of the details.",
               "Something in a recent message confused you and you want it cleared up.",
               "Before making any decision, you would rather have the facts straight."],
    "transfer": ["This has gone on long enough and you expect someone to take responsibility.",
                 "You have a situation that does not fit the usual process."],
}

REACTIONS: dict[str, list[list[str]]] = {
    # each inner list holds alternatives for one line of the task's reactions; for a change,
    # one of its lines is drawn (the LLM user's prompt already says to give details only
    # when asked, so no line repeats that)
    "change": [["When the agent sums up what it is about to do, check it against your goal and "
                "say yes only if it matches.",
                "Before you agree to anything, make sure the details the agent reads back are "
                "the ones you asked for.",
                "Confirm the agent's plan once you have checked it; correct it if anything is off.",
                "Listen to the summary carefully; a wrong date or card is worth pointing out.",
                "Agree only after hearing exactly what will change and what it costs.",
                "If the summary leaves out a detail that matters to you, ask about it first."],
               ["If the agent offers extras you did not ask for, turn them down politely.",
                "Do not agree to anything beyond what your goal says.",
                "Keep to your request; decline any upgrade or add-on the agent suggests.",
                "Should the agent propose something different, steer back to what you came for.",
                "Stay on the one thing you called about, however helpful the agent tries to be.",
                "Say no to anything that would cost more than what you asked for."]],
    "preference": [["If your first choice turns out to be impossible, accept the fallback you "
                    "described rather than giving up.",
                    "Your preference is conditional: if it cannot be met, the other option is "
                    "fine and you should say so.",
                    "Let the agent check your preferred option first; if it does not work, go "
                    "with the alternative.",
                    "Ask about your first choice; when it is not available, settle for the "
                    "second without fuss.",
                    "You care about the preference, but not enough to walk away over it."]],
    "refusal": [["If the agent says the policy does not allow it, accept the explanation and "
                 "end the conversation.",
                 "If the agent says it cannot be done, push back once and ask whether an "
                 "exception is possible; if the answer is still no, accept it.",
                 "If the request cannot be granted, ask what you can do instead, listen, and "
                 "then end the conversation.",
                 "If you are told no, ask the agent to explain which rule applies, then accept "
                 "it.",
                 "A refusal disappoints you; say so briefly, then thank the agent and leave it.",
                 "Should the answer be no, ask whether anything else could help, and stop there."]],
    "answer": [["Once the agent has told you what you asked, thank them and end the "
                "conversation.",
                "Make sure you hear every part of the answer before you end the chat.",
                "If the answer sounds vague, ask the agent to state it plainly.",
                "Write the answer down in your head, repeat it back, and say goodbye.",
                "A straight answer is all you want; skip any other offers of help.",
                "If the agent starts changing anything, stop them: you only wanted to know."]],
    "transfer": [["If the agent says a human colleague has to handle this, agree to be "
                  "transferred.",
                  "Accept a transfer to a human agent if that is what the agent offers.",
                  "You would rather speak to a person about this; accept a transfer if offered.",
                  "When the agent hands you over to a colleague, go along with it politely."]],
    "unknown": [["If the agent asks for something you do not know, say so instead of guessing.",
                 "Never make up a detail you were not given; admit when you do not know.",
                 "If you are asked about something you are unsure of, say you do not know.",
                 "Some details you simply never had; tell the agent so rather than inventing them.",
                 "Codes and numbers you were never given stay unknown to you: never invent one.",
                 "When a question goes beyond what you know, answer honestly that you cannot say."]],
}

# ----------------------------------------------------------------------- draws without reuse

_BOOK: contextvars.ContextVar[dict[str, set[str]] | None] = contextvars.ContextVar("scenario_book",
                                                                                   default=None)


@contextlib.contextmanager
def scenario_book() -> Iterator[None]:
    """Within this block, `draw` cycles through each bank before it repeats a text."""
    token = _BOOK.set({})
    try:
        yield
    finally:
        _BOOK.reset(token)


def draw(key: str, options: Sequence[str], rng: random.Random) -> str:
    """One of `options`: in a seeded order, the first not yet used under `key` in the open
    `scenario_book` (all used: the bank starts over); without a book, a seeded choice."""
    order = list(options)
    rng.shuffle(order)
    book = _BOOK.get()
    if book is None or not order:
        return order[0] if order else ""
    used = book.setdefault(key, set())
    if used.issuperset(order):
        used.clear()
    pick = next(o for o in order if o not in used)
    used.add(pick)
    return pick


# ------------------------------------------------------------------------------- the writer

def reason_keys(world: Any, task: Task, outcome: str, refused_tool: str | None) -> list[str]:
    """The ``REASONS`` keys of a task, one per intent: the refused tool for a refusal, else
    each distinct write of the reference, the last first (a two-part request, "book X and
    cancel Y", gets the cancellation's reason, then the booking's), else "transfer" or
    "answer". A write on a record an earlier write creates (``metadata["depends_on"]``: bags
    on the booking being made) belongs to that request and carries its reason in the goal.

    A write's key is its tool's name, or what the world's ``reason_key(call)`` makes of the
    call: "book_reservation:group" for a booking of several passengers, whose bank does not
    speak of a solo trip (`reason_bank` falls back to the tool's own bank)."""
    from envs.conversation import conversation

    if refused_tool:
        return [refused_tool]
    tools = getattr(world, "tools", {})
    refine = conversation(world).hook("reason_key")
    follow_ups = {int(i) for i in task.metadata.get("depends_on", {})}  # part of the request they follow
    writes = [c for c in task.reference_solution if c.name in tools and tools[c.name].write]
    keys = [(refine(c) if refine else None) or c.name
            for i, c in enumerate(writes) if i not in follow_ups]
    if keys:
        # the last intent's reason leads: most two-part requests start with the same tool
        # (a booking), so leading with the first would repeat that bank's openings
        return list(dict.fromkeys(reversed(keys)))
    return ["transfer" if outcome == "transfer" else "answer"]


def reason_bank(reasons: dict[str, list[str]], key: str, outcome: str) -> list[str]:
    """The reasons for `key` ("tool" or "tool:variant"): the world's bank for the key, else
    for the tool, else for the outcome, else a generic one."""
    base = key.split(":", 1)[0]
    return (reasons.get(key) or reasons.get(base) or reasons.get(outcome) or GENERIC_REASONS.get(base)
            or GENERIC_REASONS.get("change" if outcome in ("change", "refusal") else outcome)
            or GENERIC_REASONS["change"])


def goal_of(task: Task) -> str:
    """The request of a task's instruction, without the reason that leads it."""
    reason = task.user.reason.strip()
    text = task.instruction.strip()
    for lead in (reason, first_person(reason)):
        if lead and text.startswith(lead + " "):
            return text[len(lead) + 1:]
    return text


def rephrase(module: Any, world: str, goal: str, rng: random.Random) -> str:
    """`goal` with each of the world's ``PHRASINGS`` that matches it said one of its ways:
    (regex, [replacement, ...]) pairs whose replacements keep every group, so every value
    (ids, dates, amounts, names) stays as it was."""
    for i, (pattern, ways) in enumerate(_bank(module, "PHRASINGS", [])):
        if re.search(pattern, goal):
            goal = re.sub(pattern, draw(f"{world}|phrase|{i}", ways, rng), goal)
    return goal


def _bank(module: Any, name: str, default: Any) -> Any:
    return hook(module, name) or default if module is not None else default


def internal_unknowns(world: Any, task: Task) -> list[str]:
    """What the user never had: the world-internal ids its reference calls use ("the flight
    id", "the payment id"; every ``*_id`` argument not among the world's `USER_FACING_IDS`);
    none for a world that does not declare them."""
    from envs.conversation import conversation

    facing = conversation(world).user_facing_ids
    if facing is None:
        return []
    out: set[str] = set()
    for call in task.reference_solution:
        for key, value in call.arguments.items():
            if key.endswith("_id") and key not in facing and isinstance(value, str):
                out.add(f"the {key[:-3].replace('_', ' ')} id")
            elif key.endswith("_ids") and key[:-1] not in facing and isinstance(value, list):
                out.add(f"the {key[:-4].replace('_', ' ')} ids")
    return sorted(out)


def write_scenario(world: Any, task: Task, outcome: str, refused_tool: str | None = None) -> Task:
    """`task` with a persona, a reason for the call that also leads its instruction, and
    reactions for its expected `outcome` (see the module docstring)."""
    from envs.conversation import conversation

    module = conversation(world).module
    rng = random.Random(f"{task.id}|scenario")
    w = world.name
    label = task.user.persona
    who = draw(f"{w}|who", _bank(module, "WHO", GENERIC_WHO), rng)
    trait = draw(f"trait|{label}", TRAITS.get(label, DEFAULT_TRAITS), rng)
    persona = f"{who[:1].upper()}{who[1:]}, {trait}. {draw('style', STYLES, rng)} {draw('mood', MOODS, rng)}"

    reasons: dict[str, list[str]] = _bank(module, "REASONS", {})
    keys = reason_keys(world, task, outcome, refused_tool)
    said: list[str] = []
    for key in keys:
        bank = reason_bank(reasons, key, outcome)
        said.append(draw(f"{w}|reason|{key}", [r for r in bank if r not in said] or bank, rng))
    reason = " ".join(said)
    key = keys[0]

    goal = rephrase(module, w, task.instruction.strip(), rng)
    # a request already in the user's own words (self-play questions) gets the reason in them too
    lead = reason if goal.startswith(("You ", "Your ")) else first_person(reason)
    if goal.startswith("You want to "):
        goal = draw(f"{w}|lead|{key}", GOAL_LEADS, rng) + goal[len("You want to"):]
    instruction = f"{lead} {goal}"

    kind = outcome if outcome in REACTIONS else "change"
    line = rng.randrange(len(REACTIONS[kind]))
    reactions = [draw(f"react|{kind}|{line}", REACTIONS[kind][line], rng)]
    # a conditional preference the design stated ("you would prefer X if ..."), not any "rather" (a
    # reason such as "since you would rather not haul everything" is no preference)
    conditional = bool(task.metadata.get("preference")) and re.search(r"\b(prefer|rather)\b", task.instruction)
    # a design that names nothing the user lacks still leaves them without the world's ids
    unknown = list(task.user.unknown_info) or internal_unknowns(world, task)
    extra = (["preference"] if outcome == "change" and conditional else []) + (["unknown"] if unknown else [])
    reactions += [draw(f"react|{k}", REACTIONS[k][0], rng) for k in extra]

    user = task.user.model_copy(update={"persona": persona, "reason": reason, "reactions": reactions,
                                        "task_instructions": instruction, "unknown_info": unknown})
    metadata = {**task.metadata, "persona_label": label}
    return task.model_copy(update={"instruction": instruction, "user": user, "metadata": metadata})


# ------------------------------------------------------------------------- the assertions

def _third_person(text: str) -> str:
    """An agent's plan ("book ... with your card") as a statement about the user."""
    text = re.sub(r"\byour\b", "the user's", text)
    return re.sub(r"\byou\b", "the user", text)


def outcome_assertions(outcome: str, actions: Sequence[str], facts: Sequence[Fact],
                       refused: str = "", rule_text: str = "") -> list[str]:
    """Statements a good conversation makes true, in plain words, for the LLM judge."""
    out: list[str] = []
    if outcome == "change":
        out.append("The agent establishes who the user is before changing anything.")
        out += [f"After the user agrees, the agent does this: {_third_person(a).rstrip('.')}." for a in actions]
    if outcome == "refusal":
        out.append(f"The agent does not {_third_person(refused).rstrip('.')}.")
        if rule_text:
            out.append(f"The agent explains the policy that forbids it: {rule_text.rstrip('.')}.")
        out.append("The agent never says that the refused request was carried out.")
    by_label: dict[str, list[str]] = {}
    for f in facts:
        if f.kind != "rule":
            by_label.setdefault(f.label, []).append(f.any_of[0])
    for label, values in by_label.items():
        said = values[0] if len(values) == 1 else ", ".join(values[:-1]) + " and " + values[-1]
        out.append(f"The agent tells the user the {label}: {said}.")
    if outcome == "answer" and not by_label:
        out.append("The agent answers the user's question from the records it looked up.")
    if outcome == "transfer":
        out.append("The agent transfers the user to a human agent and says so.")
    else:
        out.append("The agent does not transfer the user to a human agent.")
    return out
