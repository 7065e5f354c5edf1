"""The contract every registered world meets, whatever its domain: its compiled rules are
probed and hold, its tools have valid schemas, its generator is seeded and scales, and every
synthesis method that supports it emits tasks whose reference replays to the target.

A new world passes this file before anything else; its own test file then covers the
domain's side effects."""

from __future__ import annotations

import pytest

from envs import state as st
from envs.probes import fixture_env, load_probes, run_probes
from envs.registry import get_world, list_worlds
from envs.world import Env, World
from synthesis.base import SynthesisConfig, get_method, list_methods, supports
from verifiers.state import score_calls

WORLDS = list_worlds()
SQL_WORLDS = [w for w in WORLDS if isinstance(get_world(w), World)]


@pytest.mark.parametrize("name", SQL_WORLDS)
def test_every_compiled_rule_is_probed_and_holds(name: str) -> None:
    world = get_world(name)
    probes = load_probes(world)
    assert probes is not None, f"{name} has no probes.py"
    report = run_probes(world, probes)
    assert not report.uncovered, f"compiled rules without a probe: {report.uncovered}"
    assert report.ok, [r.detail for r in report.failures()]
    assert report.rejection_rate == 1.0 and report.valid_rate == 1.0


def _ledger(env: Env) -> list[tuple]:
    return env.conn.execute("SELECT * FROM ledger ORDER BY ref, event, amount, detail, n").fetchall()


@pytest.mark.parametrize("name", SQL_WORLDS)
def test_every_valid_write_probe_grows_the_ledger(name: str) -> None:
    """Each write's valid probe appends to the world's ledger (what happened), only appends,
    and its violating probe leaves the ledger as it was; no tool mentions the ledger."""
    world = get_world(name)
    probes = load_probes(world)
    assert probes is not None
    base = fixture_env(world, probes.fixture)
    assert "ledger" in st.tables(base.conn), f"{name} keeps no ledger"
    before = set(_ledger(base))
    written: set[str] = set()
    try:
        for probe in probes.probes:
            for call, valid in ((probe.violating, False), (probe.valid, True)):
                if call is None or not world.tools[call.name].write:
                    continue
                env = base.fork()
                ok = env.call(call).ok
                after = _ledger(env)
                env.close()
                assert set(after) >= before, f"{call.name} removed ledger rows"
                if valid:
                    assert ok and len(after) > len(before), f"{probe.rule}: valid {call.name} left no ledger row"
                    written.add(call.name)
                elif not ok:
                    assert set(after) == before, f"{probe.rule}: a rejected {call.name} left ledger rows"
    finally:
        base.close()
    assert written, f"{name}: no valid write probe"
    for spec in world.tools.values():
        assert "ledger" not in spec.schema()["function"]["description"].lower(), spec.name


@pytest.mark.parametrize("name", WORLDS)
def test_tools_have_valid_schemas(name: str) -> None:
    world = get_world(name)
    schemas = world.tool_schemas()
    names = [s["function"]["name"] for s in schemas]
    assert len(names) == len(set(names)) and names
    assert any(t.write for t in world.tools.values()), "a world with no write tool has nothing to change"
    for s in schemas:
        fn = s["function"]
        assert s["type"] == "function" and fn["description"].strip(), fn["name"]
        params = fn["parameters"]
        assert params["type"] == "object" and set(params["required"]) <= set(params["properties"])
        for pname, prop in params["properties"].items():
            assert prop.get("type") in {"string", "integer", "number", "boolean", "array", "object"}, (fn["name"],
                                                                                                      pname)
            assert prop.get("description", "").strip(), f"{fn['name']}.{pname} has no description"


@pytest.mark.parametrize("name", SQL_WORLDS)
def test_generator_is_seeded_and_scales(name: str) -> None:
    world = get_world(name)
    a, b = world.build_state(3, 30), world.build_state(3, 30)
    big, other = world.build_state(3, 120), world.build_state(4, 30)
    try:
        assert st.state_hash(a) == st.state_hash(b)  # the same seed gives the same world
        assert st.state_hash(other) != st.state_hash(a)
        rows = {t: a.execute(f'SELECT COUNT(*) FROM "{t}"').fetchone()[0] for t in st.tables(a)}
        big_rows = {t: big.execute(f'SELECT COUNT(*) FROM "{t}"').fetchone()[0] for t in st.tables(big)}
        assert sum(big_rows.values()) > 2 * sum(rows.values()), "scale must grow the database"
        assert a.execute("SELECT value FROM meta WHERE key = 'now'").fetchone(), "the clock lives in meta.now"
    finally:
        for conn in (a, b, big, other):
            conn.close()


# The terminal method runs every candidate's hidden tests in sandboxes: tests/synthesis/test_terminal.py.
CASES = [(w, m) for w in WORLDS for m in list_methods() if supports(m, get_world(w)) and m != "terminal"]


@pytest.mark.parametrize(("name", "method"), CASES, ids=[f"{w}-{m}" for w, m in CASES])
def test_every_supported_method_emits_replayable_tasks(name: str, method: str) -> None:
    world = get_world(name)
    result = get_method(method)(SynthesisConfig(method=method, world=name, n_tasks=2, seed=5), world)
    assert result.tasks, f"{method} made no task in {name}: {dict(result.drops)}"
    for task in result.tasks:
        assert task.world == name and task.method == method and task.id == task.compute_id()
        assert score_calls(task, task.reference_solution).exact, f"{task.id}: the reference misses its target"


def test_every_world_supports_some_method() -> None:
    for name in WORLDS:
        assert any(supports(m, get_world(name)) for m in list_methods()), name
