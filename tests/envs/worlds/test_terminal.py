"""The terminal world's seeds and skills (`envs/worlds/terminal/`): every seed is named,
deterministic for an rng seed and varies with it, keeps its checks out of the workspace, and
a seed's hidden tests fail on its initial workspace; skill chains are drawn the same way. (The
world's tools, synthesis and validation are tested in tests/synthesis/test_terminal.py.)"""

from __future__ import annotations

import json
import random

import pytest

from envs.registry import get_world
from envs.sandbox.bwrap import bwrap_unusable
from envs.workspace import TaskSpec, WorkspaceWorld, parse_recipe
from envs.worlds.terminal.seeds import SEEDS, SKILLS, compose_skills


def key(spec: TaskSpec) -> str:
    return json.dumps([spec.instruction, spec.files, spec.tests, spec.setup, spec.executable,
                       [c.model_dump() for c in spec.solution]], sort_keys=True)


def test_every_seed_is_named_deterministic_and_varies_with_the_rng() -> None:
    assert len(SEEDS) >= 30 and list(SEEDS)[-1].startswith("git_")  # the git seeds come last
    varied = 0
    for name, make in SEEDS.items():
        spec = make(random.Random(0))
        assert spec.name == name and spec.domain in ("text", "files", "data", "scripts", "git"), name
        assert 0 < spec.difficulty <= 1 and spec.solution and spec.instruction, name
        assert key(make(random.Random(0))) == key(spec), name  # the same rng seed, the same task
        varied += key(make(random.Random(1))) != key(spec)
        ops = parse_recipe(spec.patches())
        assert {op["path"] for op in ops if op["op"] == "write"} == set(spec.files), name
        body = spec.test_files()["test_task.py"]
        assert "def test_" in body and not any(body in text for text in spec.files.values()), name
        assert "def test_" not in json.dumps(spec.files), name  # the checks never enter the workspace
    assert varied >= 0.8 * len(SEEDS), varied


def test_skill_chains_are_drawn_from_the_rng() -> None:
    for domain in SKILLS:
        for k in (3, 5):
            spec = compose_skills(domain, random.Random(k), k)
            assert len(spec.skills) == k and len(set(spec.skills)) == k, (domain, spec.skills)
            assert key(compose_skills(domain, random.Random(k), k)) == key(spec)
    with pytest.raises(ValueError, match="unknown skill domain 'poetry'"):
        compose_skills("poetry", random.Random(0), 3)


@pytest.mark.skipif(bwrap_unusable() is not None, reason="bubblewrap cannot start a sandbox here")
def test_a_seeds_hidden_tests_fail_on_its_initial_workspace() -> None:
    """One seed per domain, at an rng seed other than the built-in tasks' (every built-in task
    is validated, slowly, in tests/synthesis/test_terminal.py)."""
    world = get_world("terminal")
    assert isinstance(world, WorkspaceWorld)
    first: dict[str, TaskSpec] = {}
    for make in SEEDS.values():
        spec = make(random.Random(7))
        first.setdefault(spec.domain, spec)
    specs = list(first.values())
    jobs = [(world.build(world.state_ref(s.patches())), s.test_files()) for s in specs]
    reports = world.run_tests_batch(jobs)
    for spec, report in zip(specs, reports, strict=True):
        assert report.ok, (spec.name, report.detail)
        # some checks guard what must stay as it is (they pass already); the task's own fail
        assert report.outcomes and set(report.outcomes.values()) - {"passed"}, (spec.name, report.outcomes)
