"""`synthesis.base`: the method registry (names, aliases, which worlds a method supports),
`SynthesisConfig` with options checked against the method, the provisional split by id, and
`SynthesisResult`'s accepted tasks."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from data.records import Task
from envs.registry import get_world
from envs.world import World
from synthesis.base import (
    SynthesisConfig,
    SynthesisResult,
    canonical_method,
    get_method,
    list_methods,
    split_for,
    supports,
)
from synthesis.writer import WriterConfig


def test_registry_lists_logic_driven() -> None:
    assert "logic_driven" in list_methods()


def test_synthesis_is_deterministic(airline: World) -> None:
    cfg = SynthesisConfig(n_tasks=3, seed=21)
    a = [t.id for t in get_method("logic_driven")(cfg, airline).tasks]
    b = [t.id for t in get_method("logic_driven")(cfg, airline).tasks]
    assert a == b and len(set(a)) == 3


def test_no_writer_leaves_config_hashes_as_they_were() -> None:
    """The field is left out of the dump when unset, so caches and release fingerprints made
    before it existed still match."""
    assert "writer" not in SynthesisConfig().model_dump()
    assert SynthesisConfig(writer=WriterConfig(model={"kind": "embedded"})).model_dump()["writer"]["model"] == {
        "kind": "embedded"}


def test_aliases_and_unknown_methods() -> None:
    assert [canonical_method(n) for n in ("logic", "cove", "selfplay", "terminal")] == \
        ["logic_driven", "constraint_guided", "self_play", "terminal"]
    assert list_methods() == sorted(list_methods()) and {"constraint_guided", "self_play"} <= set(list_methods())
    with pytest.raises(KeyError, match="unknown synthesis method 'nope'; known: constraint_guided"):
        get_method("nope")


def test_supports_follows_the_registered_check(airline: World) -> None:
    assert supports("logic", airline) and supports("self_play", airline)
    assert not supports("terminal", airline)
    assert supports("terminal", get_world("terminal"))


def test_options_are_checked_against_the_method() -> None:
    opts = SynthesisConfig(method="logic", options={"max_depth": 3}).method_options()
    assert opts.max_depth == 3 and opts.paraphrase is False
    with pytest.raises(ValidationError, match="options of synthesis method 'logic_driven'"):
        SynthesisConfig(options={"nope": 1})
    with pytest.raises(ValidationError):
        SynthesisConfig(n_task=3)  # type: ignore[call-arg]


def test_split_for_is_a_stable_hash_of_the_id() -> None:
    ids = [f"task-{i}" for i in range(400)]
    splits = [split_for(i, 0.25) for i in ids]
    assert splits == [split_for(i, 0.25) for i in ids] and set(splits) == {"train", "test"}
    assert 60 < splits.count("test") < 140
    assert {split_for(i, 0.0) for i in ids} == {"train"} and {split_for(i, 1.01) for i in ids} == {"test"}


def test_result_accepts_each_task_once(tasks: list[Task]) -> None:
    result = SynthesisResult()
    task = tasks[0].model_copy()
    assert not result.has(task)
    result.accept(task, 1.01)
    assert result.has(task) and result.tasks == [task] and task.split == "test"
    assert result.has(tasks[0].model_copy()) and not result.has(tasks[1])  # by content id


def test_draw_tasks_tops_up_with_further_seeds() -> None:
    from synthesis.base import draw_tasks

    tasks = draw_tasks("logic_driven", "airline", 5, seed=3)
    assert len(tasks) == 5 and len({t.id for t in tasks}) == 5
    assert [t.id for t in tasks] == [t.id for t in draw_tasks("logic_driven", "airline", 5, seed=3)]
    assert draw_tasks("terminal", "airline", 2, seed=0) == []  # a method that does not support the world
