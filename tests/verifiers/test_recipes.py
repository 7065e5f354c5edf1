"""The recipes of docs/architecture.md ("Where a new piece goes"), walked with the example
plugins of docs/examples/plugins/: each is one module, made known the way an installed
package's entry point would (importing it registers it), then named in a `RunConfig` with
its options and run through the stages. The world recipe is tests/contracts/test_authoring_doc.py."""

from __future__ import annotations

import importlib
import json
import re
import sys
from pathlib import Path

import pytest

from data.records import Task
from pipelines import stages
from pipelines.config import RunConfig, load_config
from rollout.collector import collect
from synthesis.base import SynthesisConfig, get_method, supports
from tests.paths import ROOT
from verifiers.audit import audit
from verifiers.state import score_calls

ROOT = ROOT
PLUGINS = ROOT / "docs" / "examples" / "plugins"
DOC = ROOT / "docs" / "architecture.md"


@pytest.fixture(scope="module", autouse=True)
def plugins() -> None:
    sys.path.insert(0, str(PLUGINS))
    for name in ("one_write", "call_budget", "shortest", "recorded"):
        importlib.import_module(name)


def test_the_doc_names_each_recipe_and_its_files() -> None:
    text = DOC.read_text()
    section = text[text.index("## Where a new piece goes"):]
    for piece in ("world", "synthesis method", "verifier", "curation strategy", "model backend"):
        assert re.search(rf"\*\*A {piece}\*\*", section), piece
    for name in ("one_write.py", "call_budget.py", "shortest.py", "recorded.py", "carrental"):
        assert name in section, name


def test_a_synthesis_method(airline) -> None:  # noqa: ANN001
    cfg = load_config(None, {"synthesis.method": "one_write", "synthesis.n_tasks": 3, "synthesis.seed": 2,
                             "synthesis.options": {"candidates": 6}})
    assert supports("one_write", airline)
    result = get_method("one_write")(cfg.synthesis, airline)
    assert len(result.tasks) == 3
    assert all(score_calls(t, t.reference_solution).exact for t in result.tasks)
    with pytest.raises(ValueError, match="synthesis method 'one_write'"):
        SynthesisConfig(method="one_write", options={"candidate": 6})


def test_a_verifier(tasks: list[Task]) -> None:
    cfg = RunConfig.model_validate({"verifiers": ["state_equivalence", "call_budget"],
                                    "verifier_options": {"call_budget": {"max_calls": 4}}})
    gold = stages.rollout_shard(tasks[:3], cfg.model_copy(update={"rollout": cfg.rollout.model_copy(
        update={"model": cfg.rollout.model.model_validate({"kind": "scripted"}), "trials": 0})}))
    verdicts = stages.verify_shard({t.id: t for t in tasks}, gold, cfg.verifiers, cfg.verifier_options)
    budget = [v for v in verdicts if v.verifier == "call_budget"]
    assert len(budget) == 3 and all(v.passed == (v.details["calls"] <= 4) for v in budget)
    report = audit(tasks[:3], [stages.get_verifier("call_budget", {"max_calls": 4})], raise_on_failure=False)
    assert report.verifiers["call_budget"].tasks_audited == 3
    with pytest.raises(ValueError, match="verifier 'call_budget'"):
        RunConfig.model_validate({"verifiers": ["call_budget"], "verifier_options": {"call_budget": {"max": 1}}})


def test_a_curation_strategy(tasks: list[Task]) -> None:
    cfg = load_config(None, {"curation": "shortest", "curation_options": {"per_task": 1},
                             "rollout.model.kind": "scripted", "rollout.model.noise": 0.5, "rollout.trials": 3})
    trajectories = stages.rollout_shard(tasks[:3], cfg)
    verdicts = stages.verify_shard({t.id: t for t in tasks}, trajectories, cfg.verifiers)
    selection = stages.curate(cfg, tasks[:3], trajectories, verdicts)
    per_task = [t.task_id for t, _ in selection.sft]
    assert per_task and len(per_task) == len(set(per_task))  # one row per task
    with pytest.raises(ValueError, match="curation strategy 'shortest'"):
        load_config(None, {"curation": "shortest", "curation_options": {"per_tasks": 1}})


def test_a_model_backend(tasks: list[Task], tmp_path: Path) -> None:
    task = tasks[0]
    turns = [{"tool_calls": [c.model_dump(include={"name", "arguments"})]} for c in task.reference_solution]
    path = tmp_path / "turns.jsonl"
    path.write_text("\n".join(json.dumps(t) for t in [*turns, {"text": "Done."}]) + "\n")
    cfg = load_config(None, {"rollout.model": {"kind": "recorded", "name": "gold", "options": {"path": str(path)}},
                             "rollout.trials": 1})
    (traj,) = collect([task], cfg.rollout)
    assert traj.model == "recorded:gold" and traj.final_state_hash == task.target_state_hash
    with pytest.raises(ValueError, match="model backend 'recorded'"):
        load_config(None, {"rollout.model": {"kind": "recorded", "options": {"file": str(path)}}})
