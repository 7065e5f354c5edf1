"""`synthesis.dialogue_checks` (issue 36 item 5): the scanners, and the synthesized reference
dialogues of every tool-use world and method pass them: every lookup's id was shown first,
every id a write creates is told, no template artefact, and self-play instructions carry no
internal id, ask nothing about the past, get no arithmetic told as a record and are trivial
at most `max_trivial_share` of the time."""

from __future__ import annotations

import functools

import pytest

from data.records import Task, ToolCall, Turn
from envs.registry import get_world
from synthesis.base import SynthesisConfig, get_method
from synthesis.dialogue_checks import (
    artefacts,
    enum_values,
    is_trivial,
    said,
    self_play_problems,
    task_artefacts,
    unseen_lookups,
    untold_ids,
)

WORLDS = ["airline", "retail", "telecom", "clinic"]
METHODS = ["logic_driven", "constraint_guided", "self_play"]


@functools.cache
def made(method: str, world: str) -> tuple[Task, ...]:
    """A few tasks of one method on one world (small seed, fast)."""
    cfg = SynthesisConfig(method=method, world=world, n_tasks=8, seed=1)
    return tuple(get_method(method)(cfg, get_world(world)).tasks)


CELLS = [(m, w) for m in METHODS for w in WORLDS]


@pytest.mark.parametrize(("method", "world"), CELLS)
def test_reference_dialogues_pass_every_check(method: str, world: str) -> None:
    w = get_world(world)
    tasks = made(method, world)
    assert tasks
    for task in tasks:
        assert unseen_lookups(w, task) == [], (task.id, task.instruction)
        assert untold_ids(w, task) == [], task.id
        assert task_artefacts(w, task) == [], task.id
        if method == "self_play":
            assert self_play_problems(w, task) == [], (task.id, task.instruction)


@pytest.mark.parametrize("world", WORLDS)
def test_self_play_bounds_trivial_tasks(world: str) -> None:
    from synthesis.self_play import synthesize

    w = get_world(world)
    r = synthesize(SynthesisConfig(method="self_play", world=world, n_tasks=20, seed=3,
                                   options={"max_trivial_share": 0.1}), w)
    calculator = [all(c["name"] == "calculate" for c in t.metadata["gold_calls"]) for t in r.tasks]
    trivial = sum(is_trivial(w, t) and not calc for t, calc in zip(r.tasks, calculator, strict=True))
    assert trivial == r.stats["trivial"] <= 2 and len(r.tasks) == 20
    # with the calculator's own cap (0.1), at most 20% of the tasks are trivial
    assert sum(is_trivial(w, t) for t in r.tasks) <= 4


def test_artefact_scan_finds_each_kind() -> None:
    telecom, clinic = get_world("telecom"), get_world("clinic")
    assert "lost_or_stolen" in enum_values(telecom)
    cases = {
        "Return 2 of them (2 unit(s)).": "unit(s)",
        "I'd like to schedule a annual physical.": "a annual",
        "The later flight would suit I better.": "suit I",
        "Your albuterol is refilled; 1 refills remain.": "1 refills",
        "Please suspend my line (reason: lost_or_stolen).": "lost_or_stolen",
        "According to our records, the checked bags is 1.": "the checked bags is",
        "Please return 3 unit of it.": "3 unit",
    }
    for text, found in cases.items():
        assert any(found in a for a in artefacts(telecom, text)), text
    for clean in ["I can book an annual physical for a unit price of 40.", "1 refill remains; 2 units left.",
                  "The flight status is scheduled; the number of checked bags is 1.",
                  "It would be better for me.", "Your line is suspended (lost or stolen)."]:
        assert artefacts(clinic, clean) == [] and artefacts(telecom, clean) == [], clean


def test_a_lookup_of_an_id_nobody_showed_is_found() -> None:
    clinic = get_world("clinic")
    task = made("self_play", "clinic")[0]
    conn = clinic.build_state(task.initial_state.seed, task.initial_state.scale)
    (pid,) = conn.execute("SELECT provider_id FROM providers LIMIT 1").fetchone()
    conn.close()
    bad = task.model_copy(update={"dialogue": [
        Turn(role="user", content="Where does my doctor see patients?"),
        Turn(role="assistant", tool_calls=[ToolCall(name="get_provider_details", arguments={"provider_id": pid})])]})
    assert unseen_lookups(clinic, bad) == [f"get_provider_details(provider_id={pid})"]
    said_first = bad.model_copy(update={"dialogue": [Turn(role="user", content=f"Where does {pid} see patients?"),
                                                     *bad.dialogue[1:]]})
    assert unseen_lookups(clinic, said_first) == []


def test_an_id_inside_a_longer_id_is_not_said() -> None:
    assert said("Pay my bill bill_AC100027_2026-05", "bill_AC100027_2026-05")
    assert not said("Pay my bill bill_AC100027_2026-05", "AC100027")
    assert said("It's AC100027.", "AC100027") and said("Order #W123 please", "#W123")


def test_a_return_whose_id_is_never_told_is_found() -> None:
    retail = get_world("retail")
    task = next(t for m in ("logic_driven", "constraint_guided", "self_play") for t in made(m, "retail")
                if any(c.name == "return_item" for turn in t.dialogue for c in turn.tool_calls))
    assert untold_ids(retail, task) == []
    mute = [t if t.role != "assistant" or t.tool_calls else t.model_copy(update={"content": "Done."})
            for t in task.dialogue]
    assert [i for i in untold_ids(retail, task.model_copy(update={"dialogue": mute})) if i.startswith("RT")]


def test_self_play_problems_are_found() -> None:
    telecom = get_world("telecom")
    task = made("self_play", "telecom")[0]
    conn = telecom.build_state(task.initial_state.seed, task.initial_state.scale)
    (bill,) = conn.execute("SELECT bill_id FROM bills LIMIT 1").fetchone()
    conn.close()
    leaky = task.model_copy(update={"instruction": f"Pay 20 towards my bill {bill}. Is my trip on 2026-05-01 ok?"})
    found = self_play_problems(telecom, leaky)
    assert f"internal_id:{bill}" in found and "past:2026-05-01" in found
    calc = leaky.model_copy(update={"instruction": "What is 2 * 3?", "dialogue": [
        Turn(role="assistant", tool_calls=[ToolCall(name="calculate", arguments={"expression": "2 * 3"})]),
        Turn(role="assistant", content="According to our records, the amount is 6.")]})
    assert self_play_problems(telecom, calc) == ["arithmetic_as_record"]
