"""`envs.scaffold.new_world`: the skeleton world registers, meets the world contract, passes
`tests/contracts/test_world_contract.py` unchanged and synthesizes tasks with logic-driven synthesis.
Its users identify with a member id and its announcements never repeat it, so its reference
dialogues pass the policy verifier only because the one identity vocabulary (`Identity`)
tells the verifier that `member_id` is the user's own id."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

import tests.contracts.test_world_contract as contract_tests
from envs.contract import check_world
from envs.conversation import conversation
from envs.registry import get_world, list_worlds, register_world
from envs.scaffold import FILES, new_world
from envs.world import World
from synthesis.base import SynthesisConfig, get_method, list_methods, supports
from synthesis.dialogue import plan, play
from synthesis.logic_driven import replay
from verifiers.policy import PolicyVerifier

NAME = "scaffold_lending"


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    dest = tmp_path_factory.mktemp("worlds")
    written = new_world(NAME, dest)
    assert [p.name for p in written] == list(FILES)
    assert all(p.parent == dest / NAME and p.read_text().strip() for p in written)
    return dest / NAME


@pytest.fixture(scope="module")
def world(folder: Path) -> World:
    register_world(NAME, folder)
    w = get_world(NAME)
    assert isinstance(w, World)
    return w


def test_writes_every_file_of_a_world(folder: Path) -> None:
    names = {p.name for p in folder.iterdir()}
    assert names == {"policy.md", "schema.sql", "tools.py", "generator.py", "design.py", "probes.py",
                     "conversation.py"}
    assert "{name}" not in (folder / "tools.py").read_text() and NAME in (folder / "tools.py").read_text()
    with pytest.raises(FileExistsError):
        new_world(NAME, folder.parent)
    with pytest.raises(ValueError, match="world name"):
        new_world("Bad Name", folder.parent)


def test_registers_and_meets_the_contract(world: World) -> None:
    assert NAME in list_worlds()
    check_world(world)
    assert len(world.tools) == 3 and sum(t.write for t in world.tools.values()) == 2
    assert world.compiled_rules() == ["R01_ITEM_AVAILABLE", "R02_LOAN_LIMIT", "R03_LOAN_OPEN"]


def test_passes_the_world_contract_tests_unchanged(world: World) -> None:
    contract_tests.test_every_compiled_rule_is_probed_and_holds(NAME)
    contract_tests.test_every_valid_write_probe_grows_the_ledger(NAME)
    contract_tests.test_tools_have_valid_schemas(NAME)
    contract_tests.test_generator_is_seeded_and_scales(NAME)
    methods = [m for m in list_methods() if supports(m, world) and m != "terminal"]
    assert "logic_driven" in methods
    for method in methods:
        contract_tests.test_every_supported_method_emits_replayable_tasks(NAME, method)


def _reference_policy(world: World, task) -> tuple[bool, list[str]]:  # noqa: ANN001
    trajectory = play(world, task, plan(world, task).turns)
    verdict = PolicyVerifier().verify(task, trajectory)
    return verdict.passed, verdict.reasons


def test_logic_driven_tasks_pass_the_policy_check_keyed_by_member_id(world: World,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    res = get_method("logic_driven")(SynthesisConfig(world=NAME, n_tasks=3, seed=3), world)
    assert len(res.tasks) == 3, dict(res.drops)
    conv = conversation(world)
    assert conv.identity.account_keys() == ("member_id",)
    assert conv.ask_identity == ["Could you give me your member id?"]
    writes = 0
    for task in res.tasks:
        assert replay(world, task) == task.target_state_hash
        assert set(task.user.known_info) == {"member_id"}
        assert task.reference_solution[0].name == "get_member"
        ok, reasons = _reference_policy(world, task)
        assert ok, reasons
        writes += any(c.name == "borrow_item" for c in task.reference_solution)
    assert writes  # a write that takes member_id, announced without it
    # the same dialogues fail once the vocabulary forgets that member_id is the user's own id
    task = next(t for t in res.tasks if any(c.name == "borrow_item" for c in t.reference_solution))
    monkeypatch.setattr(conv, "identity", dataclasses.replace(conv.identity, account=[]))
    ok, reasons = _reference_policy(world, task)
    assert not ok and any("member_id=" in r for r in reasons), reasons
