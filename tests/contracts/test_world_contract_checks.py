"""`envs.contract.check_world`: a misspelled hook, a hook of the wrong shape and a hook in the
wrong module each fail registration with an error naming the hook; every real world passes;
the framework reads hooks only by declared names; and the identity vocabulary agrees in the
three places that use it (the agent's question, the scripted user, the policy verifier)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from envs.contract import (
    HOOKS,
    Identity,
    WorldContractError,
    check_world,
    declared,
    hook,
    hook_names,
)
from envs.conversation import conversation
from envs.registry import get_world, list_worlds, register_world
from envs.scaffold import new_world
from envs.world import World
from rollout.user import ScriptedUser, asks_for
from synthesis.architect import ReplayModel, compile_domain

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture()
def skeleton(tmp_path: Path) -> Path:
    new_world("checked", tmp_path)
    return tmp_path / "checked"


def _fails(folder: Path, name: str) -> WorldContractError:
    with pytest.raises(WorldContractError) as info:
        register_world("checked_bad", folder)
    assert name in info.value.hooks and name in str(info.value), str(info.value)
    assert "checked_bad" not in list_worlds()  # nothing registered
    return info.value


def _append(path: Path, text: str) -> None:
    path.write_text(path.read_text() + "\n" + text + "\n")


def test_a_good_world_registers(skeleton: Path) -> None:
    register_world("checked_good", skeleton)
    check_world(get_world("checked_good"))


@pytest.mark.parametrize(("file", "text", "name", "meant"), [
    ("design.py", 'KIND_WRITE = {"limit_room": ["borrow_item"]}', "KIND_WRITE", "KIND_WRITES"),
    ("design.py", "def self_play_template():\n    return {}", "self_play_template", "self_play_templates"),
    ("conversation.py", 'ASK_IDENTITIES = ["Your member id?"]', "ASK_IDENTITIES", "ASK_IDENTITY"),
    ("conversation.py", 'ask_identity = ["Your member id?"]', "ask_identity", "ASK_IDENTITY"),
    ("conversation.py", 'USER_FACING_ID = ["member_id"]', "USER_FACING_ID", "USER_FACING_IDS"),
    ("probes.py", "MORE_PROBE = []", "MORE_PROBE", "MORE_PROBES"),
])
def test_a_misspelled_hook_is_named_with_the_hook_it_resembles(skeleton: Path, file: str, text: str, name: str,
                                                                meant: str) -> None:
    _append(skeleton / file, text)
    err = _fails(skeleton, name)
    assert f"{file} defines {name}, which is no hook; did you mean {meant}?" in str(err)


@pytest.mark.parametrize(("file", "text", "name", "why"), [
    ("design.py", 'KIND_WRITES = ["borrow_item"]', "KIND_WRITES", "not dict[str, list[str]]"),
    ("design.py", 'KIND_WRITES = {"limit_room": "borrow_item"}', "KIND_WRITES", "entry 'limit_room'"),
    ("design.py", "def lookup_calls(focus, conn):\n    return []", "lookup_calls", "cannot be called as"),
    ("conversation.py", 'USER_FACING_IDS = "member_id"', "USER_FACING_IDS", "not list[str]"),
    ("conversation.py", 'IDENTITY = {"keys": [["member_id"]]}', "IDENTITY", "not Identity"),
    ("conversation.py", "action = 'lend it'", "action", "not a callable"),
    ("probes.py", "PROBES = [1, 2]", "PROBES", "not dict"),
])
def test_a_hook_of_the_wrong_shape_is_named(skeleton: Path, file: str, text: str, name: str, why: str) -> None:
    _append(skeleton / file, text)
    err = _fails(skeleton, name)
    assert f"{file} hook {name}" in str(err) and why in str(err), str(err)


def test_a_missing_required_hook_and_a_hook_in_the_wrong_module_are_named(skeleton: Path) -> None:
    design = skeleton / "design.py"
    design.write_text(design.read_text().replace("def goal_score(", "def _goal_score("))
    assert "design.py lacks goal_score" in str(_fails(skeleton, "goal_score"))
    design.write_text(design.read_text().replace("def _goal_score(", "def goal_score("))
    _append(design, "def audit_mutations(conn, constraints, reference):\n    return {}")
    assert "a hook of constraints.py, not of design.py" in str(_fails(skeleton, "audit_mutations"))


def test_helpers_and_private_names_are_not_hooks(skeleton: Path) -> None:
    _append(skeleton / "design.py", "PERSONAS = ['novice']\n_KIND_WRITE = 1\ndef describe_loan():\n    return ''")
    _append(skeleton / "conversation.py", "from envs.contract import hook as KIND_WRITE  # noqa")
    register_world("checked_helpers", skeleton)


@pytest.fixture(scope="module")
def library(tmp_path_factory: pytest.TempPathFactory) -> str:
    fixture = json.loads((ROOT / "tests" / "fixtures" / "architect" / "library.json").read_text())
    out = tmp_path_factory.mktemp("worlds") / "library"
    result = compile_domain(ReplayModel(fixture["replies"]), "library", fixture["policy"], out)
    register_world("library_checked", result.folder)
    register_world("carrental_checked", ROOT / "docs" / "examples" / "carrental")
    return "library_checked"


def test_every_real_world_meets_the_contract(library: str) -> None:
    names = list_worlds()
    assert {"airline", "retail", "telecom", "clinic", "terminal", library, "carrental_checked"} <= set(names)
    for name in names:
        check_world(get_world(name))


def test_the_framework_reads_only_declared_hooks() -> None:
    design = get_world("airline").design
    assert hook(design, "KIND_WRITES") is design.KIND_WRITES
    with pytest.raises(KeyError, match="did you mean 'KIND_WRITES'"):
        hook(design, "KIND_WRITE")
    with pytest.raises(KeyError, match="no hook of design.py"):
        hook(design, "ASK_IDENTITY")  # a conversation hook, not design's
    with pytest.raises(KeyError):
        conversation(get_world("airline")).hook("groundng")
    assert hook(None, "PROBES", {}) == {}
    assert declared("variants", "design.py").params == ("conn", "rng", "n")
    assert len(HOOKS) == len({(h.module, h.name) for h in HOOKS}) and "audit_mutations" in hook_names("constraints.py")


def test_the_identity_vocabulary_agrees_for_every_registered_world(library: str) -> None:
    for name in list_worlds():
        world = get_world(name)
        if not isinstance(world, World):
            continue
        conv = conversation(world)
        identity = conv.identity
        first = identity.keys[0]
        # the agent's question asks for what the user knows, and the scripted user hears it
        for ask in conv.ask_identity:
            assert all(asks_for(ask, k, identity) for k in first if k not in identity.confirm), (name, ask)
        if conv.module is None or not hasattr(conv.module, "ASK_IDENTITY"):
            assert conv.ask_identity == [identity.question()]
        # the policy verifier's own ids are the ids the scripted user answers for by any name
        own = identity.own_ids()
        assert set(identity.account_keys()) <= set(own)
        for key in own:
            assert all(asks_for(f"What is your {k.replace('_', ' ')}?", key, identity) for k in own), (name, key)
        # the lookups take what identifies the user
        assert all(set(args) <= {a for ks in identity.keys for k in ks for a in (k, k.replace(" ", "_"))}
                   | {"first_name", "last_name"} for args in identity.lookups.values()), name


def test_the_scripted_user_answers_with_its_worlds_vocabulary(library: str) -> None:
    from data.records import StateRef, Task, UserScenario

    task = Task(world=library, method="logic_driven", instruction="Renew my loan.",
                user=UserScenario(known_info={"member_id": "m_1"}),
                initial_state=StateRef(world=library, seed=0, scale=1, state_hash="x"), target_state_hash="x")
    user = ScriptedUser(task)
    assert user.identity.account_keys() == ("member_id",)
    assert asks_for("Could you give me your account id?", "member_id", user.identity)
    assert not asks_for("Could you give me your account id?", "member_id", Identity())
