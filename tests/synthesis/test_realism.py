"""The task-realism figures (`synthesis.realism`, issue 16) on hand-made task lists whose
answers are known."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from data.records import StateRef, Task, ToolCall, UserScenario, Verification
from envs.registry import get_world
from synthesis.base import SynthesisConfig, get_method
from synthesis.logic_driven import kind_order
from synthesis.realism import (
    instruction_text,
    leaked_tasks,
    mean_words,
    median_nn_similarity,
    meets,
    nearest_neighbour_similarities,
    nl_assertion_coverage,
    prefix_share,
    realism_figures,
    split_overlap,
    template_family,
    write_tool_coverage,
)

REF = StateRef(world="airline", seed=0, scale=30, state_hash="x")


def task(instruction: str, *, reason: str = "", task_instructions: str = "", calls: list[ToolCall] | None = None,
         split: str = "train", metadata: dict[str, Any] | None = None, nl: list[str] | None = None,
         ref: StateRef = REF) -> Task:
    return Task(world="airline", method="logic_driven", instruction=instruction, split=split,  # type: ignore[arg-type]
                user=UserScenario(reason=reason, task_instructions=task_instructions), initial_state=ref,
                target_state_hash="y", reference_solution=calls or [], metadata=metadata or {},
                verification=Verification(nl_assertions=nl or []))


def call(name: str, **args: Any) -> ToolCall:
    return ToolCall(name=name, arguments=args)


def test_instruction_text_joins_reason_and_instructions_once() -> None:
    t = task("Cancel my trip.", reason="Plans changed.", task_instructions="Cancel my trip.")
    assert instruction_text(t) == "Cancel my trip. Plans changed."
    assert instruction_text(task("Hi.")) == "Hi."


def test_prefix_share_counts_distinct_first_eight_words() -> None:
    same = "I would like to change my flight to Boston"  # 9 words: the first 8 are shared
    tasks = [task(same + " please"), task(same + " today"), task("Cancel reservation ABC123 for me please")]
    assert prefix_share(tasks) == pytest.approx(2 / 3)
    assert prefix_share(tasks, words=10) == 1.0
    assert prefix_share([]) == 0.0


def test_nearest_neighbour_similarity_takes_the_most_similar_other_text() -> None:
    sims = nearest_neighbour_similarities(["abcdefgh", "abcdefgh", "zzzzzzzz"])
    assert sims[0] == sims[1] == 1.0
    assert sims[2] == 0.0
    tasks = [task("abcdefgh"), task("abcdefgh"), task("zzzzzzzz")]
    assert median_nn_similarity(tasks) == 1.0
    # Jaccard of 5-grams: "abcdef" {abcde, bcdef} vs "abcdeX" {abcde, bcdeX} -> 1/3
    assert nearest_neighbour_similarities(["abcdef", "abcdeX"]) == [pytest.approx(1 / 3)] * 2


def test_mean_words_and_nl_coverage() -> None:
    tasks = [task("one two three"), task("one", reason="two", nl=["The agent cancels the trip."])]
    assert mean_words(tasks) == 2.5
    assert nl_assertion_coverage(tasks) == 0.5


def test_write_tool_coverage_names_the_missing_write_tools() -> None:
    world = get_world("airline")
    tasks = [task("a", calls=[call("get_user_details", user_id="u"), call("cancel_reservation", reservation_id="R")]),
             task("b", calls=[call("update_baggage", reservation_id="R", total_baggages=1)])]
    cov = write_tool_coverage(world, tasks)
    assert cov == {"covered": 2, "total": 4, "missing": ["book_reservation", "change_flight"]}


def test_split_overlap_compares_test_with_train_only() -> None:
    a = [call("get_user_details", user_id="u1"), call("cancel_reservation", reservation_id="R1")]
    b = [call("get_user_details", user_id="u2"), call("cancel_reservation", reservation_id="R2")]
    tasks = [task("t1", calls=a, metadata={"boundary": "cancel_in_window"}),
             task("t2", calls=b, metadata={"boundary": "seats_exact"}),
             task("s1", calls=list(a), split="test", metadata={"boundary": "seats_exact"}),
             task("s2", calls=[*b[:1], call("cancel_reservation", reservation_id="R9")], split="test",
                  metadata={"boundary": "bags_at_limit"})]
    got = split_overlap(tasks)
    assert got["test"] == 2 and got["train"] == 2
    assert got["call_overlap"] == 0.5  # s1's calls are t1's; s2 differs in an argument
    assert got["family_overlap"] == 0.5  # s1 shares t2's boundary kind
    assert split_overlap([t for t in tasks if t.split == "train"])["call_overlap"] == 0.0


def test_template_family_per_method() -> None:
    assert template_family(task("a", metadata={"boundary": "seats_exact"})) == "boundary:seats_exact"
    assert template_family(task("a", metadata={"constraint_kinds": ["cancel", "bags"]})) == "constraints:bags+cancel"
    assert template_family(task("a", metadata={"spec": {"tools": ["get_user_details"]}})) == "spec:get_user_details"
    assert template_family(task("a", calls=[call("x"), call("y")])) == "calls:x+y"


def test_leaks_are_counted_on_the_world_and_targets_judged() -> None:
    world = get_world("airline")
    ref = world.state_ref(0, 30)
    env = world.env(ref)
    try:
        (payment,) = env.conn.execute('SELECT payment_id FROM payment_methods LIMIT 1').fetchone()
    finally:
        env.close()
    tasks = [task(f"Pay with {payment}.", ref=ref, nl=["x"]), task("Pay with my card ending 1234.", ref=ref, nl=["x"])]
    assert leaked_tasks(world, tasks) == 1
    figs = realism_figures(world, tasks)
    assert figs["leaked_tasks"] == 1 and figs["nl_assertion_coverage"] == 1.0
    met = meets(figs)
    assert met["leaked_tasks"] is False and met["nl_assertion_coverage"] is True
    assert met["write_tools_missing"] is False  # no task calls any write tool


# -- every write tool is some task's target (issue 16 §2) ------------------------------------------

@pytest.mark.parametrize("method", ["logic_driven", "constraint_guided"])
@pytest.mark.parametrize("name", ["airline", "retail", "telecom", "clinic"])
def test_every_write_tool_is_targeted_at_the_bench_count(method: str, name: str) -> None:
    world = get_world(name)
    result = get_method(method)(SynthesisConfig(method=method, world=name, n_tasks=20, seed=0), world)
    assert len(result.tasks) == 20, dict(result.drops)
    assert write_tool_coverage(world, result.tasks)["missing"] == []
    assert leaked_tasks(world, result.tasks) == 0


@pytest.mark.parametrize("name", ["airline", "telecom", "clinic"])
def test_declared_kind_writes_are_what_the_tasks_call(name: str) -> None:
    """Each logic-driven task calls the write tools its kind declares (none: a refusal)."""
    world = get_world(name)
    declared = world.design.KIND_WRITES
    assert set(declared) == set(world.design.KIND_NAMES if name == "clinic" else world.design.KINDS)
    result = get_method("logic_driven")(SynthesisConfig(world=name, n_tasks=16, seed=4), world)
    for t in result.tasks:
        kind = t.metadata["boundary"]
        called = {c.name for c in t.reference_solution if world.tools[c.name].write}
        assert set(declared[kind]) <= called and (declared[kind] or not called), (kind, called)


def test_kind_order_puts_uncovered_write_tools_first() -> None:
    world = get_world("airline")
    covered = [task("a", calls=[call("book_reservation"), call("cancel_reservation"), call("update_baggage")])]
    drawn = Counter({k: 1 for k in world.design.KINDS})
    order = kind_order(world, drawn, covered)
    assert order is not None and order[0] == "change_seats_exact" and sorted(order) == sorted(world.design.KINDS)
    drawn["change_seats_exact"] = 1
    drawn["seats_exact"] = 0  # drawn least: first once every write tool is covered
    everything = [*covered, task("b", calls=[call("change_flight")])]
    assert kind_order(world, drawn, everything)[0] == "seats_exact"  # type: ignore[index]
    assert kind_order(get_world("retail"), drawn, covered) is None  # retail declares no KIND_WRITES
