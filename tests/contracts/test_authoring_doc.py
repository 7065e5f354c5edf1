"""docs/authoring-a-world.md: its example world (docs/examples/carrental) registers, every
compiled rule's probes behave through `Env.call`, the generator is seeded, and logic-driven
synthesis emits tasks that replay to their target and cross the planted rules."""

from __future__ import annotations

import re

import pytest

from envs import state as st
from envs.probes import fixture_env, load_probes, run_probes
from envs.registry import get_world, list_worlds, register_world
from envs.world import World
from synthesis.base import SynthesisConfig, get_method
from synthesis.logic_driven import replay
from tests.paths import ROOT

ROOT = ROOT
EXAMPLE = ROOT / "docs" / "examples" / "carrental"
DOC = ROOT / "docs" / "authoring-a-world.md"


@pytest.fixture(scope="module")
def world() -> World:
    register_world("carrental", EXAMPLE)
    w = get_world("carrental")
    assert isinstance(w, World)
    return w


def test_doc_names_every_file_of_the_example() -> None:
    text = DOC.read_text()
    for name in ("policy.md", "schema.sql", "tools.py", "generator.py", "design.py", "probes.py", "conversation.py"):
        assert (EXAMPLE / name).exists() and name in text, name
    for hook in ("variants", "candidate_calls", "lookup_calls", "describe", "goal_score", "register_world"):
        assert hook in text


def test_registered_with_rules_in_policy_and_schema(world: World) -> None:
    assert "carrental" in list_worlds()
    rules = world.compiled_rules()
    assert len(rules) == 5
    assert set(re.findall(r"\*\*(R\d+_[A-Z0-9_]+)\*\* \*\(enforced\)\*", world.policy)) == set(rules)


def test_every_probe_through_env_call(world: World) -> None:
    probes = load_probes(world)
    assert probes is not None
    report = run_probes(world, probes)
    assert report.uncovered == [] and report.ok, [r.detail for r in report.failures()]
    env = fixture_env(world, probes.fixture)
    for p in probes.probes:
        obs = env.fork().call(p.violating)
        assert obs.error == "rule_violation" and obs.code == p.rule, obs.content


def test_generator_is_seeded(world: World) -> None:
    assert st.state_hash(world.build_state(1, 20)) == st.state_hash(world.build_state(1, 20))
    assert st.state_hash(world.build_state(2, 20)) != st.state_hash(world.build_state(1, 20))


def test_logic_driven_synthesis(world: World) -> None:
    res = get_method("logic_driven")(SynthesisConfig(world="carrental", n_tasks=6, seed=3), world)
    assert len(res.tasks) == 6
    assert {t.metadata["boundary"] for t in res.tasks} == {"license_exact", "extend_to_limit", "car_taken"}
    for task in res.tasks:
        assert replay(world, task) == task.target_state_hash
        assert not any(name in task.instruction for name in world.tools)
        assert set(task.metadata["rules"]) & set(task.metadata["rules_crossed"])


def test_every_write_is_recorded_in_the_ledger(world: World) -> None:
    assert "ledger" in DOC.read_text()
    probes = load_probes(world)
    assert probes is not None
    base = fixture_env(world, probes.fixture)
    rows = lambda env: set(env.conn.execute("SELECT * FROM ledger").fetchall())  # noqa: E731
    before = rows(base)
    written = set()
    for p in probes.probes:
        bad, good = base.fork(), base.fork()
        assert not bad.call(p.violating).ok and rows(bad) == before
        assert p.valid is not None and good.call(p.valid).ok and rows(good) > before, p.rule
        written.add(p.valid.name)
    assert written == {n for n, t in world.tools.items() if t.write}
