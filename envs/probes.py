"""Rule probes: for every compiled rule, a call that must be rejected with exactly that rule
id and a call one step away that must pass, both run through `Env.call` on a small fixture.

A world exposes its probes in an optional `probes.py` in its folder::

    FIXTURE = "INSERT INTO ...;"                      # SQL run on the empty schema
    PROBES = {"R01_NAME": (violating_call, valid_call), ...}
    MORE_PROBES = [("R01_NAME", violating_call, valid_call), ...]   # optional
    MORE_VIOLATIONS = [("R01_NAME", violating_call), ...]           # optional

(the same names the world tests use), so benchmarks and the Architect's check loop can
run them without importing tests.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

from data.records import ToolCall
from envs.contract import hook
from envs.loader import load_module
from envs.world import Env, World


@dataclass
class Probe:
    rule: str
    violating: ToolCall
    valid: ToolCall | None = None


@dataclass
class ProbeSet:
    fixture: str
    probes: list[Probe]


@dataclass
class ProbeResult:
    probe: Probe
    rejected_code: str | None  # the rule id (or error code) the violating call got, None if it passed
    rejected_ok: bool  # rejected as a rule violation with exactly the probe's rule id, state untouched
    valid_ok: bool | None  # the valid call passed (None: no valid call)
    detail: str = ""

    @property
    def ok(self) -> bool:
        return self.rejected_ok and self.valid_ok is not False


@dataclass
class ProbeReport:
    results: list[ProbeResult] = field(default_factory=list)
    uncovered: list[str] = field(default_factory=list)  # compiled rules without a probe

    @property
    def rejection_rate(self) -> float:
        """Share of violating probes rejected with exactly their rule id."""
        return sum(r.rejected_ok for r in self.results) / len(self.results) if self.results else 0.0

    @property
    def valid_rate(self) -> float:
        valid = [r for r in self.results if r.valid_ok is not None]
        return sum(bool(r.valid_ok) for r in valid) / len(valid) if valid else 0.0

    @property
    def ok(self) -> bool:
        return bool(self.results) and not self.uncovered and all(r.ok for r in self.results)

    def failures(self) -> list[ProbeResult]:
        return [r for r in self.results if not r.ok]


def _call(value: Any) -> ToolCall:
    if isinstance(value, ToolCall):
        return value
    if isinstance(value, dict) and "name" in value:
        return ToolCall(name=value["name"], arguments=dict(value.get("arguments") or {}))
    raise ValueError(f"a probe call must be a ToolCall or {{'name', 'arguments'}}, got {value!r}")


def from_module(module: ModuleType) -> ProbeSet:
    """The probe set a module defines (FIXTURE, PROBES, optional MORE_PROBES / MORE_VIOLATIONS)."""
    fixture = hook(module, "FIXTURE")
    probes = hook(module, "PROBES")
    if not isinstance(fixture, str) or not isinstance(probes, dict):
        raise ValueError(f"{module.__name__} must define FIXTURE (SQL text) and PROBES (rule -> (bad, good))")
    out = [Probe(rule, _call(bad), _call(good)) for rule, (bad, good) in probes.items()]
    out += [Probe(rule, _call(bad), _call(good)) for rule, bad, good in hook(module, "MORE_PROBES", [])]
    out += [Probe(rule, _call(bad)) for rule, bad in hook(module, "MORE_VIOLATIONS", [])]
    return ProbeSet(fixture, out)




def load_probes(world: World) -> ProbeSet | None:
    """The world's own probes (`probes.py` in its folder), or None when it has none."""
    path = world.folder / "probes.py"
    if not path.exists():
        return None
    return from_module(load_module(path, world.name))


def fixture_env(world: World, fixture: str) -> Env:
    """An environment on the empty schema plus the fixture rows."""
    conn = world.empty_state()
    try:
        conn.executescript(fixture)
    except sqlite3.Error:
        conn.close()
        raise
    return Env(world, conn)


def run_probes(world: World, probes: ProbeSet) -> ProbeReport:
    """Run every probe on a fresh fork of the fixture state."""
    base = fixture_env(world, probes.fixture)
    report = ProbeReport(uncovered=sorted(set(world.compiled_rules()) - {p.rule for p in probes.probes}))
    try:
        for probe in probes.probes:
            env = base.fork()
            before = env.state_hash()
            obs = env.call(probe.violating)
            untouched = env.state_hash() == before
            env.close()
            rejected_ok = obs.error == "rule_violation" and obs.code == probe.rule and untouched
            detail = "" if rejected_ok else (
                f"violating call {probe.violating.name} "
                + ("passed" if obs.ok else f"got {obs.error}/{obs.code}: {obs.detail}")
                + ("" if untouched else " and changed the state"))
            valid_ok: bool | None = None
            if probe.valid is not None:
                env = base.fork()
                good = env.call(probe.valid)
                env.close()
                valid_ok = good.ok
                if not good.ok:
                    detail += f"{'; ' if detail else ''}valid call {probe.valid.name} failed with " \
                              f"{good.error}/{good.code}: {good.detail}"
            report.results.append(ProbeResult(probe, None if obs.ok else obs.code, rejected_ok, valid_ok, detail))
    finally:
        base.close()
    return report
