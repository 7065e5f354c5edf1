"""Rule probes (`envs.probes`): a world's probe set is read from its `probes.py` and run on
forks of its fixture; a probe that does not hold, or a rule without one, fails the report."""

from __future__ import annotations

import sqlite3
from types import ModuleType

import pytest

from data.records import ToolCall
from envs.probes import Probe, ProbeSet, fixture_env, from_module, load_probes, run_probes
from envs.world import World


def test_the_airline_probes_all_hold(airline: World) -> None:
    probes = load_probes(airline)
    assert probes is not None and {p.rule for p in probes.probes} >= set(airline.compiled_rules())
    report = run_probes(airline, probes)
    assert report.ok and report.rejection_rate == 1.0 and report.valid_rate == 1.0
    assert report.uncovered == [] and report.failures() == []


def test_a_probe_that_does_not_hold_is_reported(airline: World) -> None:
    probes = load_probes(airline)
    assert probes is not None
    rule, first = probes.probes[0].rule, probes.probes[0]
    swapped = Probe(rule, violating=first.valid, valid=first.violating)  # type: ignore[arg-type]
    report = run_probes(airline, ProbeSet(probes.fixture, [swapped]))
    (result,) = report.results
    assert not report.ok and report.uncovered  # the other rules have no probe now
    assert not result.rejected_ok and result.valid_ok is False and result.rejected_code is None
    assert "passed" in result.detail and "valid call" in result.detail
    assert report.failures() == [result] and report.rejection_rate == 0.0


def test_a_probe_module_and_the_fixture_env(airline: World) -> None:
    module = ModuleType("probes")
    module.__file__ = "/somewhere/probes.py"
    module.FIXTURE = "INSERT INTO meta VALUES ('now', '2026-05-10 12:00:00');"
    module.PROBES = {"R01_X": ({"name": "a", "arguments": {"x": 1}}, ToolCall(name="b", arguments={}))}
    module.MORE_VIOLATIONS = [("R02_Y", {"name": "c"})]
    found = from_module(module)
    assert [(p.rule, p.violating.name, p.valid.name if p.valid else None) for p in found.probes] == [
        ("R01_X", "a", "b"), ("R02_Y", "c", None)]
    module.PROBES = {"R01_X": ("not a call", None)}
    with pytest.raises(ValueError, match="a probe call must be"):
        from_module(module)
    env = fixture_env(airline, module.FIXTURE)
    assert env.conn.execute("SELECT value FROM meta").fetchone() == ("2026-05-10 12:00:00",)
    env.close()
    with pytest.raises(sqlite3.OperationalError, match="no_such_table"):
        fixture_env(airline, "INSERT INTO no_such_table VALUES (1);")
