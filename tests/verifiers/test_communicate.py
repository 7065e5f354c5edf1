"""COMMUNICATE: the facts the user must hear were said, in any spelling."""

from __future__ import annotations

import pytest

from data.records import Task
from tests.verifiers.variants import bare, facts, with_verification
from verifiers.audit import audit, build_trajectory
from verifiers.base import get_verifier


def test_communicate(tasks: list[Task]) -> None:
    task = with_verification(bare(tasks[0]), communicate=facts("1,234", "HAT012"))
    v = get_verifier("communicate")
    said = build_trajectory(
        task, task.reference_solution, text="Refunded 1234 dollars for flight hat012."
    )
    assert v.verify(task, said).passed
    half = build_trajectory(task, task.reference_solution, text="Refunded 1234 dollars.")
    verdict = v.verify(task, half)
    assert not verdict.passed and verdict.score == 0.5 and "HAT012" in verdict.reasons[0]
    assert v.applies_to(tasks[0])  # type: ignore[attr-defined]  # its dialogue states facts
    assert not v.applies_to(bare(tasks[0]))  # type: ignore[attr-defined]
    with pytest.raises(ValueError, match="any_of"):
        with_verification(tasks[0], communicate=[{"label": "HAT012", "any_of": "HAT012"}])
    report = audit([task], ["communicate", "composite"])  # composite adds COMMUNICATE for this task
    for a in report.verifiers.values():
        assert a.mutants["drop_communication"].killed == 1
