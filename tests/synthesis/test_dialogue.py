"""`synthesis.dialogue`: reference dialogues. The stored dialogue plays back to the task's
target through the agent loop and reads back the same, a refusal quotes the policy's rule,
answers are said fact by fact, and a task made before dialogues is upgraded to one."""

from __future__ import annotations

import asyncio

import pytest

from data.records import Fact, Sampling, Task, Turn
from envs.registry import get_world
from envs.world import World
from synthesis.dialogue import (
    DialoguePolicy,
    answer_text,
    dialogue_of,
    play,
    policy_rule_text,
    upgrade,
)
from verifiers.composite import CompositeVerifier


def _assistant_turns(task: Task) -> list[Turn]:
    return [t for t in task.dialogue if t.role == "assistant"]


def test_the_stored_dialogue_plays_back_to_the_target(airline: World, tasks: list[Task]) -> None:
    task = tasks[0]
    episode = play(airline, task, _assistant_turns(task))
    assert episode.termination == "user_stop" and episode.final_state_hash == task.target_state_hash
    assert dialogue_of(episode) == task.dialogue  # the closing stop marker is left out
    assert dialogue_of(episode)[-1].role == "assistant"
    assert CompositeVerifier().verify(task, episode).passed
    assert task.verification.outcome == "change" and task.verification.communicate


def test_a_refusal_states_the_rule_in_the_policys_words(airline: World, tasks: list[Task]) -> None:
    task = next(t for t in tasks if t.verification.outcome == "refusal")
    rule = task.metadata["refused_rule"]
    sentence = policy_rule_text(airline, rule)
    assert sentence and not sentence.endswith(".") and "**" not in sentence
    said = " ".join(t.content for t in _assistant_turns(task))
    assert sentence[1:] in said  # quoted, its first letter lowered
    assert policy_rule_text(airline, "R02_SEATS") == \
        "a reservation needs as many free seats on the flight as it has passengers"
    with pytest.raises(KeyError, match="no rule R99"):
        policy_rule_text(airline, "R99_NOTHING")
    # the policy's code marks are markdown, not words a customer reads
    assert policy_rule_text(get_world("retail"), "R11_ADDRESS_CHANGE").startswith(
        "the shipping address of an order can be changed while the order is pending or processed, not once")


def test_answer_text_says_every_fact_by_its_first_spelling() -> None:
    facts = [Fact(label="membership tier", any_of=["gold", "Gold"]),
             Fact(label="reservation id", any_of=["R1"]), Fact(label="reservation id", any_of=["R2"]),
             Fact(label="reservation id", any_of=["R3", "r3"])]
    assert answer_text(facts) == "the membership tier is gold; the reservation ids are R1, R2 and R3"
    assert answer_text([]) == ""


def test_dialogue_policy_says_the_turns_then_closes(tasks: list[Task]) -> None:
    turns = _assistant_turns(tasks[0])
    policy = DialoguePolicy(turns)
    first = asyncio.run(policy.chat([{"role": "system", "content": ""}], [], Sampling()))
    assert first.text == turns[0].content
    done = [{"role": "assistant", "content": ""}] * len(turns)
    assert asyncio.run(policy.chat(done, [], Sampling())).text == "Is there anything else I can help you with?"


def test_upgrade_writes_the_dialogue_of_an_old_task(airline: World, tasks: list[Task]) -> None:
    task = tasks[0]
    assert upgrade(airline, task) == (task, "current")  # it has a dialogue
    old = task.model_copy(update={"dialogue": []})
    new, why = upgrade(airline, old)
    assert why == "" and new.id == task.id  # the id stays: stored trajectories still point at it
    assert new.dialogue and new.verification.outcome == "change"
    assert play(airline, new, _assistant_turns(new)).final_state_hash == task.target_state_hash
