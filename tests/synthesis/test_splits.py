"""Train/test splits by group (`synthesis.splits`), as `get_method` applies them and the card
reports them."""

from __future__ import annotations

from data.card import run_sections
from data.records import StateRef, Task, ToolCall, UserScenario
from envs.registry import get_world
from synthesis.base import SynthesisConfig, get_method
from synthesis.splits import assign_splits, components, split_figures, split_group


def _task(i: int, kind: str, seed: int, calls: list[tuple[str, dict]], text: str | None = None) -> Task:
    return Task(world="airline", method="logic_driven", instruction=text or f"please help with request {i}",
                user=UserScenario(), initial_state=StateRef(world="airline", seed=seed, scale=30, state_hash=f"h{i}"),
                target_state_hash=f"t{i}", reference_solution=[ToolCall(name=n, arguments=a) for n, a in calls],
                metadata={"boundary": kind}).with_id()


def test_a_group_never_straddles_the_split() -> None:
    tasks = [_task(i, f"kind{i % 5}", seed=i % 3, calls=[("book", {"n": i})]) for i in range(60)]
    assign_splits(tasks, 0.3, seed=1)
    by_group: dict[str, set[str]] = {}
    for t in tasks:
        by_group.setdefault(split_group(t), set()).add(t.split)
    assert all(len(sides) == 1 for sides in by_group.values())
    assert {t.split for t in tasks} == {"train", "test"}
    assert split_figures(tasks)["test_sharing_group"] == 0


def test_shared_call_sequences_and_texts_join_groups() -> None:
    same_calls = [("cancel", {"reservation_id": "R1"})]
    a = _task(1, "cancel_late", 0, same_calls)
    b = _task(2, "cancel_early", 7, same_calls)  # another group, the same reference path
    c = _task(3, "bags", 1, [("bags", {"n": 2})], text="I want two bags")
    d = _task(4, "seat", 2, [("seat", {"n": 1})], text="I want two bags")  # the same instruction
    e = _task(5, "none", 3, [])  # no calls: joins nothing through its (empty) path
    f = _task(6, "none2", 4, [])
    comps = sorted(sorted(c) for c in components([a, b, c, d, e, f]))
    assert comps == [[0, 1], [2, 3], [4], [5]]


def test_test_share_follows_the_config() -> None:
    tasks = [_task(i, f"k{i}", seed=i, calls=[("x", {"i": i})]) for i in range(50)]
    for fraction in (0.1, 0.2, 0.5):
        assign_splits(tasks, fraction, seed=3)
        assert sum(t.split == "test" for t in tasks) == round(fraction * 50)
    assign_splits(tasks, 0.0)
    assert all(t.split == "train" for t in tasks)


def test_one_component_stays_in_train_rather_than_overlap() -> None:
    tasks = [_task(i, "same", seed=0, calls=[("x", {"i": i})]) for i in range(6)]
    assign_splits(tasks, 0.5)
    assert all(t.split == "train" for t in tasks)
    assert split_figures(tasks)["test"] == 0


def test_figures_count_what_a_per_task_split_leaks() -> None:
    calls = [("cancel", {"reservation_id": "R1"})]
    tasks = [_task(1, "a", 0, calls), _task(2, "a", 0, calls), _task(3, "b", 5, [("y", {})])]
    tasks[0].split, tasks[1].split, tasks[2].split = "train", "test", "test"
    fig = split_figures(tasks)
    assert fig["test_sharing_call_sequence"] == 1 and fig["test_sharing_group"] == 1
    assert fig["test_sharing_goal_kind"] == 1 and fig["test"] == 2 and fig["groups"] == 2


def test_synthesis_results_are_split_by_group_and_the_card_says_so() -> None:
    cfg = SynthesisConfig(n_tasks=20, seed=2, test_fraction=0.3)
    result = get_method("logic_driven")(cfg, get_world("airline"))
    fig = result.stats["split"]
    assert fig == split_figures(result.tasks)
    assert fig["test_sharing_call_sequence"] == 0 and fig["test_sharing_group"] == 0
    assert 0 < fig["test"] < len(result.tasks)
    card = run_sections({"split": {**fig, "configured_test_fraction": 0.3}})
    assert "## Train/test split" in card and "(0.3)" in card
