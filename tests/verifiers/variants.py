"""Variants of a task's verification block for the per-task verifier tests: facts to tell,
another reward basis, a task as if synthesized without a reference dialogue."""

from __future__ import annotations

from typing import Any

from data.records import Fact, Task, Verification


def facts(*values: str) -> list[Fact]:
    return [Fact(label=v, any_of=[v]) for v in values]


def with_verification(task: Task, **verification: Any) -> Task:
    block = Verification.model_validate({**task.verification.model_dump(), **verification})
    return task.model_copy(update={"verification": block})


def bare(task: Task) -> Task:
    """`task` as if synthesized without a reference dialogue: no facts to tell, no basis of its
    own (its method's default decides)."""
    return with_verification(task, communicate=[], basis=[]).model_copy(update={"dialogue": []})
