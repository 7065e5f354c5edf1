"""The Architect: a scripted model whose first attempt is broken (a trigger with an SQL
error, a rule raising the wrong id, a CHECK one step off) is repaired by the check -> repair
-> verify loop; the written library world loads, registers, rejects each violating probe
with exactly its rule id through `Env.call`, and logic-driven synthesis runs on it. A model
that never repairs ends with a clear error after N rounds."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from data.records import ToolCall
from envs.probes import fixture_env, load_probes
from envs.registry import get_world, register_world
from envs.world import World
from rollout.model import ChatModel
from synthesis.architect import (
    ArchitectConfig,
    ArchitectError,
    ReplayModel,
    compile_domain,
    merge,
    parse_reply,
)
from synthesis.base import SynthesisConfig, get_method
from synthesis.logic_driven import replay
from tests.paths import TESTS

FIXTURE = json.loads((TESTS / "fixtures" / "architect" / "library.json").read_text())
RULES = ["R01_COPY_AVAILABLE", "R02_LOAN_LIMIT", "R03_FINES_BLOCK", "R04_RENEWAL_LIMIT", "R05_KNOWN_MEMBER",
         "R06_LOAN_CLOSED", "R07_FINE_OVERPAID", "R08_OVERDUE_NO_RENEW"]


@pytest.fixture(scope="module")
def compiled(tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, ReplayModel]:
    model = ReplayModel(FIXTURE["replies"])
    assert isinstance(model, ChatModel)
    out = tmp_path_factory.mktemp("worlds") / "library"
    result = compile_domain(model, "library", FIXTURE["policy"], out)
    return result, model


def test_broken_first_attempt_is_repaired(compiled: tuple[Any, ReplayModel]) -> None:
    result, model = compiled
    assert result.rounds == 3 and len(model.prompts) == 5  # 3 compile requests + 2 repairs
    first, second = result.history
    assert any("R02_LOAN_LIMIT: SQL error" in e and "SELEC" in e for e in first)
    assert any(e.startswith("rule R03_FINES_BLOCK: its triggers raise ['R02_LOAN_LIMIT']") for e in first)
    assert any("probe for R03_FINES_BLOCK: violating call borrow_copy got rule_violation/R02_LOAN_LIMIT" in e
               for e in first)
    assert any("probe for R04_RENEWAL_LIMIT: violating call renew_loan passed" in e for e in first)
    assert second == ["probe for R04_RENEWAL_LIMIT: violating call renew_loan passed and changed the state"]
    # the errors went back to the model verbatim
    assert "near \"SELEC\": syntax error" in model.prompts[3] and "R04_RENEWAL_LIMIT" in model.prompts[4]
    assert result.rules == RULES


def test_written_world_loads_and_rejects_each_violating_probe(compiled: tuple[Any, ReplayModel]) -> None:
    result, _ = compiled
    register_world("library_compiled", result.folder)
    world = get_world("library_compiled")
    assert isinstance(world, World)
    assert world.compiled_rules() == RULES
    for rule in RULES:
        assert f"**{rule}** *(enforced)*" in world.policy
    writes = {n for n, t in world.tools.items() if t.write}
    assert writes == {"borrow_copy", "renew_loan", "return_copy", "pay_fine"}
    schema = world.tools["pay_fine"].schema()["function"]
    assert schema["parameters"]["properties"]["amount"]["type"] == "integer" and "R07" in schema["description"]
    probes = load_probes(world)
    assert probes is not None and {p.rule for p in probes.probes} == set(RULES)
    base = fixture_env(world, probes.fixture)
    for p in probes.probes:
        env = base.fork()
        before = env.state_hash()
        obs = env.call(p.violating)
        assert obs.error == "rule_violation" and obs.code == p.rule, (p.rule, obs.content)
        assert env.state_hash() == before
        assert p.valid is not None and base.fork().call(p.valid).ok, p.rule
    # side effects compiled as AFTER triggers: a late return adds a fine and frees the copy
    env = base.fork()
    assert env.call(ToolCall(name="return_copy", arguments={"loan_id": "L9"})).ok
    fines = env.conn.execute("SELECT fines_due FROM members WHERE member_id = 'm_reader'").fetchone()[0]
    status = env.conn.execute("SELECT status FROM copies WHERE copy_id = 'c10'").fetchone()[0]
    assert (fines, status) == (1, "available")
    assert env.call(ToolCall(name="renew_loan", arguments={"loan_id": "nope"})).code == "NOT_FOUND"


def test_logic_driven_synthesis_on_the_compiled_world(compiled: tuple[Any, ReplayModel]) -> None:
    result, _ = compiled
    register_world("library_compiled", result.folder)
    world = get_world("library_compiled")
    res = get_method("logic_driven")(SynthesisConfig(world="library_compiled", n_tasks=5, seed=1), world)
    assert len(res.tasks) == 5
    for task in res.tasks:
        assert replay(world, task) == task.target_state_hash
        assert not any(name in task.instruction for name in world.tools)
    crossed = {r for t in res.tasks for r in t.metadata["rules_crossed"]}
    assert len(crossed) >= 3 and crossed <= set(RULES)


def test_a_model_that_never_repairs_fails_after_n_rounds(tmp_path: Path) -> None:
    replies = FIXTURE["replies"][:3]
    model = ReplayModel([*replies, {"rules": []}], repeat_last=True)
    with pytest.raises(ArchitectError, match=r"still fails \d+ check\(s\) after 2 round\(s\)") as info:
        compile_domain(model, "library", FIXTURE["policy"], tmp_path / "library", ArchitectConfig(max_rounds=2))
    assert any("R02_LOAN_LIMIT" in e for e in info.value.errors) and info.value.rounds == 2
    assert len(model.prompts) == 4  # 3 compile requests + 1 repair
    assert not (tmp_path / "library").exists()


def test_reply_parsing_and_merging() -> None:
    assert parse_reply('Sure.\n```json\n{"a": 1}\n```') == {"a": 1}
    with pytest.raises(ValueError, match="no JSON object"):
        parse_reply("I cannot do that")
    spec = {"tables": ["A"], "rules": [{"id": "R01_X", "sql": ["old"]}, {"id": "R02_Y", "sql": []}]}
    merged = merge(spec, {"rules": [{"id": "R01_X", "sql": ["new"]}], "tables": ["B"]})
    assert merged["tables"] == ["B"] and merged["rules"][0]["sql"] == ["new"] and len(merged["rules"]) == 2
    assert spec["rules"][0]["sql"] == ["old"]  # the input is not modified
    assert merge(spec, {"rules": "not a list"})["rules"] == "not a list"  # left to the shape check


def test_bad_input_is_a_clear_error(tmp_path: Path) -> None:
    model = ReplayModel([])
    with pytest.raises(ValueError, match="lower-case identifier"):
        compile_domain(model, "Library!", "policy", tmp_path / "x")
    with pytest.raises(ValueError, match="policy is empty"):
        compile_domain(model, "library", "  ", tmp_path / "x")


def test_a_reply_that_is_not_json_goes_back_to_the_model(tmp_path: Path) -> None:
    replies = FIXTURE["replies"]
    model = ReplayModel(["I would rather describe it in prose.", replies[1], replies[2], replies[0], *replies[3:]])
    result = compile_domain(model, "library", FIXTURE["policy"], tmp_path / "library",
                            ArchitectConfig(max_rounds=5))
    assert any("the reply was not a JSON object" in e for e in result.history[0])
    assert "the reply was not a JSON object" in model.prompts[3]
    assert result.rounds == 4
