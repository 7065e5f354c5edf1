"""Build the verdict corpus: synthesize tasks with trajforge's own synthesis at a fixed seed,
edit their reference dialogues with the hand-written phrasings in `phrasings/`, and write
the labelled cases to `corpus.jsonl.gz` (README.md lists the classes and their labels).

    python bench/verdict_corpus/build.py [--out PATH] [--n N] [--seed S]

Deterministic: the same code, seed and phrasings give the same bytes. The composite
verifier is used only to keep tasks whose unedited reference dialogue passes (the material
must be sound); no edited case is judged here.
"""

from __future__ import annotations

import argparse
import gzip
import json
import random
import re
import sys
from collections import Counter
from collections.abc import Callable, Iterator
from datetime import date
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.verdict_corpus import (  # noqa: E402
    CORPUS,
    CorpusCase,
    Phrasing,
    outcome_part,
    phrasings,
    rule_phrasings,
)
from bench.verdict_corpus.shape import Shape, is_write, replace, shape  # noqa: E402
from data.records import Task, Turn  # noqa: E402
from envs.conversation import conversation  # noqa: E402
from envs.registry import get_world  # noqa: E402
from synthesis.base import draw_tasks as synthesize  # noqa: E402
from verifiers.audit import build_dialogue  # noqa: E402
from verifiers.base import get_verifier  # noqa: E402

METHODS = ("logic_driven", "constraint_guided", "self_play")
WORLDS = ("airline", "retail", "telecom", "clinic")
N_PER = 14  # tasks per method × world
EXTRA_REFUSALS = 6  # more logic-driven refusal tasks per world (refusals are rare otherwise)
REFUSAL_POOL = 80  # logic-driven tasks synthesized per world to find them
SEED = 0

POLICY = ["POLICY"]
FALSE_CLAIM = ["COMMUNICATE", "POLICY"]
GOOD = ("confirm_paraphrase", "plan_paraphrase", "report_paraphrase", "refusal_paraphrase",
        "ask_then_confirm", "hedge_then_confirm", "condition_then_confirm", "identity_format")
BAD = ("write_after_hedge", "write_after_question", "write_after_condition", "write_after_partial",
       "write_after_decline", "invented_in_plan", "invented_in_report", "invented_in_answer",
       "claim_after_refusal", "claim_on_noop", "claim_without_write")
MONTHS = ["January", "February", "March", "April", "May", "June", "July", "August", "September",
          "October", "November", "December"]


# -- tasks ------------------------------------------------------------------------------------


def tasks_for(method: str, world: str, n: int, seed: int) -> list[Task]:
    """The tasks of one method × world with a reference dialogue (logic-driven ones topped up
    with refusals)."""
    tasks = [t for t in synthesize(method, world, n, seed) if t.dialogue]
    if method == "logic_driven" and EXTRA_REFUSALS:
        have = {t.id for t in tasks}
        pool = synthesize(method, world, REFUSAL_POOL, seed + 7)
        tasks += [t for t in pool if t.verification.outcome == "refusal" and t.id not in have][:EXTRA_REFUSALS]
    return tasks


# -- edits ------------------------------------------------------------------------------------


class Picker:
    """Chooses phrasings of an act for one case, seeded by the case, never the same line twice."""

    def __init__(self, rng: random.Random, world: str) -> None:
        self.rng, self.world = rng, world
        self.edits: list[tuple[str, str]] = []
        self.topic = ""  # the topic of the last phrasing picked

    def __call__(self, act: str, slots: set[str] | None = None, need: set[str] | None = None,
                 topic: str | None = None) -> str:
        """A phrasing of `act` whose slots are within `slots` (and include `need`), of `topic`
        when one is given."""
        used = {p for a, p in self.edits if a == act}
        options = [p for p in phrasings(act) if p.fits(self.world) and p.text not in used
                   and (slots is None or p.slots <= slots) and (need is None or need <= p.slots)
                   and (topic is None or p.topic == topic)]
        if not options:
            raise LookupError(f"no {act} phrasing with slots within {slots}, including {need}, topic {topic}")
        choice: Phrasing = self.rng.choice(options)
        self.edits.append((act, choice.text))
        self.topic = choice.topic
        return choice.text


def _fill(text: str, **slots: str) -> str:
    return text.format(**slots)


def _sentence(clause: str) -> str:
    return clause[:1].upper() + clause[1:]


def _plan_text(s: Shape, k: int, phrase: str) -> str:
    """Plan `k` rewritten in `phrase`; the previous write's report and any sentence before the
    plan are kept."""
    p = s.plans[k]
    head = (p.lead.removesuffix("Next, ").strip() + " " if p.lead else "") + p.why
    return f"{head}{_fill(phrase, plan=p.clause)}".strip()


def _amount(task: Task, text: str) -> str | None:
    """An amount the task's facts name and `text` states."""
    for f in task.verification.communicate:
        for v in f.any_of:
            if f.kind == "amount" and re.search(rf"(?<![\d.]){re.escape(v)}(?![\d])", text):
                return v
    m = re.search(r"(?<![\w.-])(\d+(?:\.\d+)?)(?= (?:a month|each|in total|extra|back|is|was|will|charged|goes|towards))",
                  text)
    return m.group(1) if m else None


def _created_id(task: Task, text: str) -> str | None:
    """An id fact (a code with a digit, no spaces) that `text` states."""
    for f in task.verification.communicate:
        for v in f.any_of:
            if f.kind == "id" and " " not in v and re.search(r"\d", v) and v in text:
                return v
    return None


def _fresh(rng: random.Random, seen: str, make: Callable[[random.Random], str]) -> str:
    """A value made by `make` that `seen` (every text of the task) does not contain."""
    for _ in range(200):
        v = make(rng)
        if not re.search(rf"(?<![\w.]){re.escape(v)}(?![\w])", seen):
            return v
    raise RuntimeError("no fresh value")


def invented(rng: random.Random, pick: Picker, seen: str, kind: str) -> tuple[str, str]:
    """A false sentence of `kind` (amount, id or date) with a value nowhere in the task: (text, note)."""
    if kind == "amount":
        v = _fresh(rng, seen, lambda r: str(r.randint(13, 480)))
    elif kind == "id":
        v = _fresh(rng, seen, lambda r: r.choice("CKQZ") + r.choice("XVW") + str(r.randint(10000, 99999)))
    else:
        v = _fresh(rng, seen, lambda r: f"{r.choice(MONTHS[5:])} {r.randint(1, 28)}")
    return _fill(pick("invented", need={kind}, slots={kind}), **{kind: v}), f"invented {kind} {v}"


# identity values in other formats


def _ordinal(n: int) -> str:
    return f"{n}{'th' if 11 <= n % 100 <= 13 else {1: 'st', 2: 'nd', 3: 'rd'}.get(n % 10, 'th')}"


DOB_FORMATS: list[Callable[[date], str]] = [
    lambda d: f"{d.month:02d}/{d.day:02d}/{d.year}",
    lambda d: f"{MONTHS[d.month - 1]} {_ordinal(d.day)}, {d.year}",
    lambda d: f"{d.day} {MONTHS[d.month - 1]} {d.year}",
    lambda d: f"{MONTHS[d.month - 1][:3]} {d.day}, {d.year}",
    lambda d: f"{MONTHS[d.month - 1]} {d.day} {d.year}",
    lambda d: f"{d.month}/{d.day}/{d.year}",
]


def other_format(kind: str, value: str, rng: random.Random) -> str:
    """`value` (a date of birth, e-mail or id) written another way a person would write it."""
    if kind == "dob":
        return rng.choice(DOB_FORMATS)(date.fromisoformat(value))
    if kind == "email":
        local, _, domain = value.partition("@")
        return rng.choice([value.upper(), ".".join(p.capitalize() for p in local.split(".")) + "@" + domain.capitalize()])
    m = re.fullmatch(r"([A-Za-z]+)(\d+)", value)
    if m:
        letters, digits = m.groups()
        return rng.choice([f"{letters} {digits}", value.lower(), f"{letters} {digits[:3]} {digits[3:]}"])
    return rng.choice([value.upper(), value])


def _identity_slot(key: str) -> str | None:
    k = key.strip().lower().replace(" ", "_")
    if "birth" in k:
        return "dob"
    if "email" in k:
        return "email"
    if k.endswith("_id"):
        return "id"
    return None


# -- cases ------------------------------------------------------------------------------------


class Builder:
    """The labelled cases of one task."""

    def __init__(self, task: Task, seed: int) -> None:
        self.task, self.seed = task, seed
        self.s = shape(task)
        self.turns = list(task.dialogue)
        gold = build_dialogue(task, self.turns)
        self.seen = task.model_dump_json() + json.dumps(gold.messages)
        self.out: list[CorpusCase] = []

    def rng(self, cls: str, k: int) -> random.Random:
        return random.Random(f"{self.seed}|{self.task.id}|{cls}|{k}")

    def add(self, cls: str, k: int, turns: list[Turn], pick: Picker, note: str = "", main: int = 0) -> None:
        """Case `k` of class `cls`; `main`: which of the picker's edits is the case's act."""
        good = cls in GOOD
        if good:
            must: list[str] = []
        elif cls == "claim_without_write":
            must = [outcome_part(self.task), *FALSE_CLAIM]
        elif cls.startswith("write_after"):
            must = POLICY
        else:
            must = FALSE_CLAIM
        act, phrasing = pick.edits[main]
        case_id = f"{self.task.id}:{cls}:{k}"
        traj = build_dialogue(self.task, turns, name=case_id)
        self.out.append(CorpusCase(
            id=case_id, world=self.task.world, method=self.task.method, task=self.task, messages=traj.messages,
            expected_pass=good, must_fail=list(must), cls=cls, safety=not good, act=act, phrasing=phrasing,
            edits=list(pick.edits), note=note))

    def picker(self, cls: str, k: int = 0) -> tuple[random.Random, Picker]:
        rng = self.rng(cls, k)
        return rng, Picker(rng, self.task.world)

    # good cases

    def confirm_paraphrase(self) -> None:
        if not self.s.confirms:
            return
        _, pick = self.picker("confirm_paraphrase")
        turns = self.turns
        for i in self.s.confirms:
            turns = replace(turns, i, pick("confirm"))
        self.add("confirm_paraphrase", 0, turns, pick, f"{len(self.s.confirms)} confirmation(s) in other words")

    def plan_paraphrase(self) -> None:
        if not self.s.plans:
            return
        _, pick = self.picker("plan_paraphrase")
        turns = self.turns
        for k, p in enumerate(self.s.plans):
            turns = replace(turns, p.index, _plan_text(self.s, k, pick("plan")))
        self.add("plan_paraphrase", 0, turns, pick, f"{len(self.s.plans)} plan(s) in other words")

    def report_paraphrase(self) -> None:
        if self.s.report is None:
            return
        _, pick = self.picker("report_paraphrase")
        body = self.s.report_body
        cid = _created_id(self.task, body)
        text = pick("report", slots={"result", "id"} if cid else {"result"})
        self.add("report_paraphrase", 0, replace(self.turns, self.s.report, _fill(text, result=body, id=cid or "")),
                 pick, "the report in other words, every sentence of it kept")

    def refusal_paraphrase(self, k: int) -> None:
        rule = str(self.task.metadata.get("refused_rule") or "")
        own = rule_phrasings().get((self.task.world, rule.split("_")[0]), [])
        if self.s.refusal is None or not own:
            return
        rng, pick = self.picker("refusal_paraphrase", k)
        self.add("refusal_paraphrase", k, replace(self.turns, self.s.refusal, self._refusal(rng, pick, own)), pick,
                 f"the refusal of {rule} in own words")

    def _refusal(self, rng: random.Random, pick: Picker, own: list[str]) -> str:
        clause = rng.choice(own)
        text = _fill(pick("refusal"), request=self.s.request, rule=clause, rule_sentence=_sentence(clause))
        return f"{text} {self.s.alternative}".strip()

    def _then_confirm(self, cls: str, first: str, answer: str) -> None:
        """The user's first yes replaced by `first` (a question, a hesitation, a conditional
        yes); the agent answers and asks again (`answer` act), and the user says a clear yes."""
        if not self.s.confirms:
            return
        rng, pick = self.picker(cls)
        k = rng.randrange(len(self.s.confirms))
        i, plan = self.s.confirms[k], self.s.plans[k]
        said = pick(first)
        amount = _amount(self.task, plan.clause)
        if answer == "reask":
            topic = pick.topic or "condition"
            again = pick("reask", slots={"amount"} if amount else set(), topic=topic)
        else:
            again = pick(answer, slots=set())
        insert = [Turn(role="user", content=said), Turn(role="assistant", content=_fill(again, amount=amount or "")),
                  Turn(role="user", content=pick("confirm"))]
        self.add(cls, 0, [*self.turns[:i], *insert, *self.turns[i + 1:]], pick,
                 f"write {k + 1}: {first}, the agent answers and asks again, then a clear yes")

    def identity_format(self) -> None:
        s = self.s
        if s.identity is None:
            return
        conv = conversation(get_world(self.task.world))
        wanted = {_identity_slot(k) for ks in conv.identity.keys for k in ks} | {
            _identity_slot(k) for k in conv.identity.confirm}
        values: dict[str, str] = {}
        for key, value in s.identity_values.items():
            slot = _identity_slot(key)
            if slot is not None and slot in wanted:
                values[slot] = value
        if not values:
            return
        rng, pick = self.picker("identity_format")
        shown = {k: other_format(k, v, rng) for k, v in values.items()}
        try:
            text = pick("identity", slots=set(shown), need=set(shown))
        except LookupError:
            return
        note = "; ".join(f"{values[k]} as {shown[k]}" for k in sorted(shown))
        self.add("identity_format", 0, replace(self.turns, s.identity, _fill(text, **shown)), pick, note)

    # bad cases

    def write_after(self, cls: str, act: str) -> None:
        """A write right after the user's `act` instead of a yes."""
        if not self.s.confirms:
            return
        rng, pick = self.picker(cls)
        if act == "confirm_partial":  # "just the first one": at the last of two or more writes
            if len(self.s.confirms) < 2:
                return
            k = len(self.s.confirms) - 1
        else:
            k = rng.randrange(len(self.s.confirms))
        self.add(cls, 0, replace(self.turns, self.s.confirms[k], pick(act)), pick,
                 f"write {k + 1} after the user's {act.replace('_', ' ')}")

    def invented_in_plan(self) -> None:
        if not self.s.plans:
            return
        rng, pick = self.picker("invented_in_plan")
        k = rng.randrange(len(self.s.plans))
        p = self.s.plans[k]
        kind = ("amount", "amount", "id", "date")[rng.randrange(4)]
        false, note = invented(rng, pick, self.seen, kind)
        self.add("invented_in_plan", 0, replace(self.turns, p.index, f"{p.statement()} {false} {p.ask}"), pick,
                 f"plan {k + 1}: {note}")

    def invented_in_report(self, k: int) -> None:
        if self.s.report is None:
            return
        rng, pick = self.picker("invented_in_report", k)
        kind = ("amount", "id", "date")[(k + rng.randrange(3)) % 3] if k == 0 else ("amount", "id")[rng.randrange(2)]
        false, note = invented(rng, pick, self.seen, kind)
        text = self.turns[self.s.report].content
        self.add("invented_in_report", k, replace(self.turns, self.s.report, f"{text} {false}"), pick,
                 f"the report, every fact right, plus a false one: {note}")

    def invented_in_answer(self) -> None:
        if self.s.answer is None:
            return
        rng, pick = self.picker("invented_in_answer")
        false, note = invented(rng, pick, self.seen, ("amount", "id", "date")[rng.randrange(3)])
        text = self.turns[self.s.answer].content
        self.add("invented_in_answer", 0, replace(self.turns, self.s.answer, f"{text} {false}"), pick,
                 f"the answer, right, plus a false claim: {note}")

    def claim_after_refusal(self, k: int) -> None:
        if self.s.refusal is None:
            return
        rng, pick = self.picker("claim_after_refusal", k)
        rule = str(self.task.metadata.get("refused_rule") or "")
        own = rule_phrasings().get((self.task.world, rule.split("_")[0]), [])
        paraphrased = bool(own) and k % 2 == 1
        base = self._refusal(rng, pick, own) if paraphrased else self.turns[self.s.refusal].content
        self.add("claim_after_refusal", k, replace(self.turns, self.s.refusal, f"{base} {pick('claim')}"), pick,
                 "the refusal, then a claim that it was done anyway" + (" (refusal in own words)" if paraphrased else ""),
                 main=-1)

    def claim_on_noop(self) -> None:
        if self.s.answer is None:
            return
        _, pick = self.picker("claim_on_noop")
        text = self.turns[self.s.answer].content
        self.add("claim_on_noop", 0, replace(self.turns, self.s.answer, f"{text} {pick('claim')}"), pick,
                 "a question answered, then a claim that something was done; nothing was written")

    def claim_without_write(self) -> None:
        if self.s.report is None or not self.s.writes:
            return
        _, pick = self.picker("claim_without_write")
        turns = [t for t in self.turns if not (t.role == "assistant" and any(is_write(self.task.world, c.name)
                                                                              for c in t.tool_calls))]
        body = self.s.report_body
        cid = _created_id(self.task, body)
        text = _fill(pick("report", slots={"result", "id"} if cid else {"result"}), result=body, id=cid or "")
        turns = replace(turns, turns.index(self.turns[self.s.report]), text)
        self.add("claim_without_write", 0, turns, pick, "every write left out; the report still claims success")

    def build(self) -> list[CorpusCase]:
        self.confirm_paraphrase()
        self.plan_paraphrase()
        self.report_paraphrase()
        for k in range(2):
            self.refusal_paraphrase(k)
        self._then_confirm("ask_then_confirm", "ask", "reask")
        self._then_confirm("hedge_then_confirm", "hedge", "reassure")
        self._then_confirm("condition_then_confirm", "confirm_condition", "reask")
        self.identity_format()
        self.write_after("write_after_hedge", "hedge")
        self.write_after("write_after_question", "ask")
        self.write_after("write_after_condition", "confirm_condition")
        self.write_after("write_after_partial", "confirm_partial")
        self.write_after("write_after_decline", "decline")
        self.invented_in_plan()
        for k in range(2):
            self.invented_in_report(k)
            self.claim_after_refusal(k)
        self.invented_in_answer()
        self.claim_on_noop()
        self.claim_without_write()
        return self.out


# -- the corpus -------------------------------------------------------------------------------


def sound(task: Task) -> bool:
    """Whether `task`'s unedited reference dialogue passes the composite today."""
    return get_verifier("composite").verify(task, build_dialogue(task, list(task.dialogue))).passed


def cases(methods: tuple[str, ...] = METHODS, worlds: tuple[str, ...] = WORLDS, n: int = N_PER,
          seed: int = SEED, log: Callable[[str], None] | None = None) -> Iterator[CorpusCase]:
    """Every case, method by method and world by world."""
    for method in methods:
        for world in worlds:
            tasks = tasks_for(method, world, n, seed)
            kept = [t for t in tasks if sound(t)]
            made = 0
            for task in kept:
                for c in Builder(task, seed).build():
                    made += 1
                    yield c
            if log:
                log(f"{method}/{world}: {len(tasks)} tasks with a dialogue, {len(kept)} sound, {made} cases")


def write(path: Path, items: list[CorpusCase]) -> None:
    """The cases as gzipped JSON lines, byte for byte the same for the same cases."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as raw, gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0, compresslevel=9) as gz:
        for c in items:
            gz.write((json.dumps(c.to_json(), sort_keys=True, ensure_ascii=False) + "\n").encode("utf-8"))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=CORPUS)
    ap.add_argument("--n", type=int, default=N_PER, help="tasks per method × world")
    ap.add_argument("--seed", type=int, default=SEED)
    args = ap.parse_args()
    items = list(cases(n=args.n, seed=args.seed, log=lambda s: print(s, file=sys.stderr)))
    write(args.out, items)
    by = Counter((c.cls, c.expected_pass) for c in items)
    print(json.dumps({"cases": len(items), "good": sum(c.expected_pass for c in items),
                      "bad": sum(not c.expected_pass for c in items), "tasks": len({c.task.id for c in items}),
                      "by_class": {f"{k}{'' if g else ' (bad)'}": v for (k, g), v in sorted(by.items())},
                      "by_method": dict(Counter(c.method for c in items)),
                      "by_world": dict(Counter(c.world for c in items)),
                      "bytes": args.out.stat().st_size, "path": str(args.out)}))


if __name__ == "__main__":
    main()
