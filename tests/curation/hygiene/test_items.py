"""What hygiene compares: the `Item` read from release rows, generic rows, records and texts."""

from __future__ import annotations

import pytest

from curation.hygiene import dedup, item_of, normalize
from data.records import Task
from verifiers.audit import build_trajectory


def test_dedup_reads_release_rows(tasks: list[Task]) -> None:
    trajs = [build_trajectory(t, t.reference_solution) for t in tasks[:3]]
    sft = [{"messages": t.messages, "tools": "[]", "trajectory_id": t.id} for t in trajs]
    kept, report = dedup(sft + [dict(sft[0], trajectory_id="again")])
    assert len(kept) == 3 and report.exact_duplicates == 1
    item = item_of(sft[0])
    assert item.instruction == tasks[0].instruction
    assert [n for n, _ in item.tool_calls] == [c.name for c in tasks[0].reference_solution]
    with pytest.raises(ValueError, match="no messages, prompt or instruction"):
        item_of({"foo": 1})


def test_item_of_reads_every_kind_of_row() -> None:
    """The first user turn, every user turn and the tool calls (JSON arguments decoded) of an sft
    row, an rl row (calls from its task's reference solution), a generic row, a `Task` and a text."""
    sft = {"trajectory_id": "t1", "messages": [
        {"role": "system", "content": "be kind"},
        {"role": "user", "content": [{"type": "text", "text": "Cancel"}, {"type": "text", "text": "R1"}]},
        {"role": "assistant", "content": "", "tool_calls": [
            {"id": "c", "type": "function", "function": {"name": "cancel", "arguments": '{"id": "R1"}'}}]},
        {"role": "user", "content": "yes"},
    ]}
    item = item_of(sft)
    assert (item.id, item.instruction, item.user_texts) == ("t1", "Cancel R1", ["Cancel R1", "yes"])
    assert item.tool_calls == [("cancel", {"id": "R1"})] and item.tool_text() == 'cancel({"id":"R1"})'
    rl = {"task_id": "k", "prompt": [{"role": "user", "content": "Book it"}],
          "task": '{"reference_solution": [{"name": "book", "arguments": {"n": 2}}]}'}
    assert (item_of(rl).id, item_of(rl).tool_calls) == ("k", [("book", {"n": 2})])
    generic = item_of({"id": "g", "instruction": "Hi", "tool_calls": [("f", {"x": 1}), {"name": "g", "arguments": "raw"}]})
    assert generic.tool_calls == [("f", {"x": 1}), ("g", "raw")]
    text = item_of("just words")
    assert text.id.startswith("text-") and text.instruction == "just words" and text.tool_calls == []
    assert normalize("  Ｃａｆé\tMENU \n") == "café menu"  # NFKC folds the full-width letters
    with pytest.raises(TypeError, match="got int"):
        item_of(3)


def test_item_of_a_task_is_its_instruction_and_reference_solution(tasks: list[Task]) -> None:
    task = tasks[0]
    item = item_of(task)
    assert (item.id, item.instruction, item.user_texts) == (task.id, task.instruction, [task.instruction])
    assert item.tool_calls == [(c.name, c.arguments) for c in task.reference_solution]
