"""ACTION: the gold write actions were taken."""

from __future__ import annotations

from data.records import Task
from envs.registry import get_world
from verifiers.audit import build_trajectory
from verifiers.base import get_verifier


def test_action_match(tasks: list[Task]) -> None:
    v = get_verifier("action_match")
    task = tasks[0]
    assert v.verify(task, build_trajectory(task, task.reference_solution)).passed
    write = next(c for c in task.reference_solution if get_world("airline").tools[c.name].write)
    dropped = [c for c in task.reference_solution if c is not write]
    assert not v.verify(task, build_trajectory(task, dropped)).passed
