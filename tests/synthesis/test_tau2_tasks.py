"""The `tau2` method: τ²-bench's own tasks drawn (seeded) from a τ² world's split, each a
trajforge task whose reference replays to τ²'s target hash."""

from __future__ import annotations

import pytest

from envs.registry import get_world
from synthesis.base import SynthesisConfig, get_method, supports
from verifiers.state import score_calls

pytest.importorskip("tau2")


def _draw(n: int, seed: int, split: str = "train") -> list:
    cfg = SynthesisConfig(method="tau2", world="tau2_airline", n_tasks=n, seed=seed, options={"split": split})
    return get_method("tau2")(cfg, get_world("tau2_airline")).tasks


@pytest.mark.slow  # a τ² or whole-flow integration test: make test runs it, the fast tier does not
def test_tau2_tasks_are_drawn_seeded_and_replay_to_their_target() -> None:
    assert supports("tau2", get_world("tau2_airline")) and not supports("tau2", get_world("airline"))
    tasks = _draw(3, seed=1)
    assert len(tasks) == 3 and all(t.method == "tau2" and t.split == "train" for t in tasks)
    assert [t.id for t in tasks] == [t.id for t in _draw(3, seed=1)]
    assert {t.id for t in tasks} != {t.id for t in _draw(3, seed=2)}
    for task in tasks:
        assert score_calls(task, task.reference_solution).exact
    changing = next(t for t in tasks if t.verification.outcome == "change")
    assert not score_calls(changing, []).exact  # doing nothing misses τ²'s target


def test_the_test_split_stays_the_test_split() -> None:
    assert all(t.split == "test" for t in _draw(2, seed=0, split="test"))


@pytest.mark.slow  # draws the whole retail train split
def test_train_tasks_near_a_test_task_are_left_out() -> None:
    from curation.hygiene.decontamination import tau2_test_proximity

    cfg = SynthesisConfig(method="tau2", world="tau2_retail", n_tasks=200, seed=0)
    result = get_method("tau2")(cfg, get_world("tau2_retail"))
    assert result.drops["near_test"] > 0  # τ²'s retail splits share scenarios
    assert tau2_test_proximity(result.tasks)["within"] == 0
