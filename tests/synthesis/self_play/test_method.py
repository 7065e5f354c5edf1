"""`synthesis.self_play.method`: the registered `self_play` method: validated tasks, the
filter and dedup with a stub solver, the calculator cap and the write-tool coverage."""

from __future__ import annotations

import random
import sqlite3
from collections.abc import Sequence

import pytest

from bench.self_play_stubs import StubSolver
from data.self_play import Generation, Spec
from envs.conversation import leaked_ids
from envs.registry import get_world
from envs.world import World
from rollout.generation import r_valid
from synthesis.base import SynthesisConfig, get_method
from synthesis.logic_driven import replay
from synthesis.self_play import (
    ScriptedGenerator,
    cluster,
    gold_calls,
    solver_question,
    synthesize_with,
)


def test_scripted_self_play_tasks_validate(airline: World) -> None:
    result = get_method("self_play")(SynthesisConfig(method="self_play", n_tasks=24, seed=4), airline)
    assert len(result.tasks) == 24
    assert result.stats["yield"] > 0.8
    assert set(result.stats["calls_per_task"]) == {"1", "2"} and all(result.stats["calls_per_task"].values())
    for task in result.tasks:
        assert task.method == "self_play" and task.world == "airline" and task.id == task.compute_id()
        assert replay(airline, task) == task.target_state_hash
        gold = gold_calls(task)  # the solver's question states every gold value (Tool-R0)
        gen = Generation(solver_question(task), [airline.tools[n].schema() for n in task.metadata["menu"]], gold)
        assert r_valid(gen) == 1.0 and task.metadata["r_valid"] == 1.0
        assert {c.name for c in gold} <= set(task.metadata["menu"])
        assert {c.key() for c in gold} <= {c.key() for c in task.reference_solution}  # with the lookups
        assert set(task.metadata["spec"]) == {"world", "n_calls", "tools", "menu"}
        assert "p_hat" not in task.metadata
        assert task.dialogue and task.verification.outcome in ("change", "answer", "transfer")
    assert any(t.target_state_hash != t.initial_state.state_hash for t in result.tasks)  # some writes
    env = airline.env(result.tasks[0].initial_state)
    for task in result.tasks:  # the user knows who they are and every gold value, in their own words
        assert task.user.known_info["user_id"] == task.metadata["account"]
        stated = {str(v) for c in gold_calls(task) for v in c.arguments.values() if not isinstance(v, bool)}
        internal = set(leaked_ids(airline, env.conn, sorted(stated)))
        assert stated - internal <= set(task.user.known_info.values()), task.user.known_info
        assert not internal & set(task.user.known_info.values()) and not leaked_ids(airline, env.conn, [task.instruction])
    env.close()


def test_self_play_with_stub_filter_and_dedup(airline: World) -> None:
    cfg = SynthesisConfig(method="self_play", n_tasks=6, seed=2, options={"dedup_threshold": 0.3})
    result = synthesize_with(cfg, airline, ScriptedGenerator(airline), solve=StubSolver(0.0, random.Random(0)))
    assert result.tasks == [] and sum(result.drops.values()) == result.stats["attempted"]
    assert result.drops["low_agreement"] and set(result.drops) <= {"low_agreement", "calculator_cap", "no_generation"}
    result = synthesize_with(cfg, airline, ScriptedGenerator(airline), solve=StubSolver(1.0, random.Random(0)))
    assert len(result.tasks) == 6
    assert all(t.metadata["p_hat"] == 1.0 and t.difficulty == 0.0 for t in result.tasks)
    labels = cluster([t.instruction for t in result.tasks])
    assert labels == list(range(6))


class _Calculator:
    """The scripted generator asked for calculator questions only."""

    name = "scripted"

    def __init__(self, world: World) -> None:
        self.inner = ScriptedGenerator(world)
        self.notes = self.inner.notes
        self.spec = Spec(world.name, 1, ["calculate"], [world.tools["calculate"].schema()])

    def __call__(self, specs: Sequence[Spec], conn: sqlite3.Connection, rng: random.Random) -> list[str | None]:
        return [self.inner.generate(self.spec, conn, rng) for _ in specs]


@pytest.mark.parametrize(("share", "kept"), [(0.1, 2), (0.0, 0), (0.5, 10)])
def test_calculator_questions_are_capped(airline: World, share: float, kept: int) -> None:
    cfg = SynthesisConfig(method="self_play", n_tasks=20, seed=3,
                          options={"max_calculator_share": share, "max_attempts": 30})
    result = synthesize_with(cfg, airline, _Calculator(airline))
    assert len(result.tasks) == kept and result.drops["calculator_cap"] >= 30 - 20  # the rest was drawn and capped
    assert all(t.verification.outcome == "answer" and t.verification.communicate for t in result.tasks)


def test_scripted_self_play_targets_every_write_tool():
    """Specs lean towards write tools no accepted task has yet (`cover_write_tools`), so
    twenty tasks cover each world's write tools (issue 16 §2)."""
    from synthesis.base import SynthesisConfig, get_method

    for name in ("airline", "retail"):
        world = get_world(name)
        cfg = SynthesisConfig(method="self_play", world=name, n_tasks=20, seed=0)
        tasks = get_method("self_play")(cfg, world).tasks
        used = {c.name for t in tasks for c in t.reference_solution}
        assert {t for t, spec in world.tools.items() if spec.write} <= used, name
