"""The policy verifier: each clause counted over every write; a plan must name the record it
changes as the world names it, also a record the conversation just created (issue 16 §2)."""

from __future__ import annotations

import synthesis.dialogue as dl
from data.records import Task
from envs.registry import get_world
from tests.verifiers.dependent import NEW_RECORD, dependent_writes, writes_of
from tests.verifiers.variants import bare
from verifiers.audit import build_dialogue
from verifiers.policy import PolicyVerifier


def test_policy_names_a_new_record_as_the_world_does(dependent: tuple[str, list[Task]]) -> None:
    name, tasks = dependent
    world = get_world(name)
    task = tasks[0]
    turns = [t for t in task.dialogue if t.role == "assistant"]
    assert PolicyVerifier().verify(task, dl.play(world, task, turns)).passed
    # the plan of the follow-up without any name of the new record: not announced
    follow = dependent_writes(world, task)[0]
    new_id = follow.arguments[NEW_RECORD[name][1]]
    at = next(i for i, t in enumerate(turns) if any(c.key() == follow.key() for c in t.tool_calls))
    plan_turn = turns[at - 1]
    result = next(m for m in dl.play(world, task, turns).messages
                  if m["role"] == "tool" and new_id in (m.get("content") or ""))
    names = [n for n in (result["content"].split('"')) if n and n in plan_turn.content and len(n) > 5]
    vague = plan_turn.content
    for n in names:
        vague = vague.replace(n, "it")
    assert vague != plan_turn.content
    bad = [t.model_copy(update={"content": vague}) if i == at - 1 else t for i, t in enumerate(turns)]
    verdict = PolicyVerifier().verify(task, dl.play(world, task, bad))
    assert not verdict.passed and any("announce_and_confirm" in r for r in verdict.reasons)


def test_each_clause_is_counted_over_every_write(tasks: list[Task]) -> None:
    """The gold dialogue holds every clause at every write; without the user's yes before the
    first write, announce-and-confirm fails once and the score is the share of checks held."""
    task = next(t for t in tasks if len(writes_of(get_world(t.world), t)) == 2)
    world = get_world(task.world)
    policy = PolicyVerifier()
    assert policy.applies_to(task) and not policy.applies_to(bare(task))  # no dialogue, no POLICY basis
    gold = policy.verify(task, build_dialogue(task, task.dialogue))
    clauses = gold.details["clauses"]
    facts = clauses.pop("supported_facts")  # counted per message that states a fact
    assert gold.passed and gold.score == 1.0 and all(n == 2 and bad == 0 for n, bad in clauses.values()), clauses
    assert facts[0] >= 2 and facts[1] == 0
    turns = list(task.dialogue)
    first = next(i for i, t in enumerate(turns) if any(world.tools[c.name].write for c in t.tool_calls))
    assert turns[first - 1].role == "user"
    unconfirmed = policy.verify(task, build_dialogue(task, turns[: first - 1] + turns[first:], "no-yes"))
    assert not unconfirmed.passed and unconfirmed.details["clauses"]["announce_and_confirm"] == [2, 1]
    assert [r.split(":")[0] for r in unconfirmed.reasons] == ["announce_and_confirm"]
    checks = unconfirmed.details["checks"]
    assert unconfirmed.score == round((checks - 1) / checks, 6)


class _Judge:
    """A judge model that answers one word (or fails)."""

    def __init__(self, word: str | None) -> None:
        self.word = word
        self.asked: list[str] = []

    async def chat(self, messages: list[dict], tools: list, sampling: object) -> object:
        self.asked.append(messages[-1]["content"])
        if self.word is None:
            raise RuntimeError("the judge is down")
        return type("Reply", (), {"text": self.word})()


def test_unsure_replies_are_no_yes_unless_a_judge_reads_them(tasks: list[Task]) -> None:
    task = next(t for t in tasks if len(writes_of(get_world(t.world), t)) >= 1)
    world = get_world(task.world)
    turns = list(task.dialogue)
    first = next(i for i, t in enumerate(turns) if any(world.tools[c.name].write for c in t.tool_calls))
    assert turns[first - 1].role == "user"
    hedged = [t.model_copy(update={"content": "Hmm, I guess that might be fine?"}) if i == first - 1 else t
              for i, t in enumerate(turns)]
    traj = build_dialogue(task, hedged, "hedged")
    plain = PolicyVerifier().verify(task, traj)
    assert not plain.passed and any("not a clear yes" in r for r in plain.reasons)
    yes = _Judge("yes")
    assert PolicyVerifier(model=yes).verify(task, traj).passed and "Hmm, I guess" in yes.asked[0]
    no = PolicyVerifier(model=_Judge("No.")).verify(task, traj)
    assert not no.passed and any(r.startswith("no_write_after_decline") for r in no.reasons)
    down = PolicyVerifier(model=_Judge(None)).verify(task, traj)  # a judge that fails never makes a yes
    assert not down.passed
    # the judge is asked only about what the rules find unsure: a clear yes never reaches it
    quiet = _Judge("no")
    assert PolicyVerifier(model=quiet).verify(task, build_dialogue(task, turns)).passed and quiet.asked == []


def test_identity_is_not_read_out_of_a_longer_code(tasks: list[Task]) -> None:
    """A user who quotes a code holding their account id (``bill_<id>_2026-05``) has not said
    their id: a lookup by it does not identify them."""
    task = next(t for t in tasks if len(writes_of(get_world(t.world), t)) >= 1)
    user_id = str(task.user.known_info["user_id"])
    turns = list(task.dialogue)
    said = next(i for i, t in enumerate(turns) if t.role == "user" and user_id in t.content)
    hidden = [t.model_copy(update={"content": t.content.replace(user_id, f"bill_{user_id}_2026-05")})
              if i == said else t for i, t in enumerate(turns)]
    assert PolicyVerifier().verify(task, build_dialogue(task, turns)).passed
    verdict = PolicyVerifier().verify(task, build_dialogue(task, hidden, "hidden"))
    assert not verdict.passed and any(r.startswith("identity:") for r in verdict.reasons)
