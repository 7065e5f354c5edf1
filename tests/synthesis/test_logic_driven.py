"""Logic-driven synthesis on a world compiled from a policy (the Architect's library, which
has no conversation contract): renewals, returns and fine payments are tasks again, not only
borrowings. Since reference dialogues must pass the policy verifier, those goals were dropped
as `user_cannot_identify` (their user knew a loan, not their member id), then as `POLICY`
(no identity lookup before the write; the agent asked for a "user id" nobody knew)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from data.records import ToolCall
from envs.conversation import conversation
from envs.registry import get_world, register_world
from envs.world import World
from rollout.user import asks_for
from synthesis.architect import ReplayModel, compile_domain
from synthesis.base import SynthesisConfig, get_method
from synthesis.logic_driven import identified, replay
from tests.paths import TESTS

FIXTURE = json.loads((TESTS / "fixtures" / "architect" / "library.json").read_text())
NAME = "library_logic_driven"


@pytest.fixture(scope="module")
def library(tmp_path_factory: pytest.TempPathFactory) -> World:
    out = tmp_path_factory.mktemp("worlds") / "library"
    result = compile_domain(ReplayModel(FIXTURE["replies"]), "library", FIXTURE["policy"], out)
    register_world(NAME, result.folder)
    world = get_world(NAME)
    assert isinstance(world, World)
    return world


def _owner(world: World, task: Any, loan: str) -> str:
    conn = world.build_state(task.initial_state.seed, task.initial_state.scale, task.initial_state.patches)
    try:
        return str(conn.execute("SELECT member_id FROM loans WHERE loan_id = ?", (loan,)).fetchone()[0])
    finally:
        conn.close()


def test_every_write_tool_of_the_compiled_world_is_a_task(library: World) -> None:
    res = get_method("logic_driven")(SynthesisConfig(world=NAME, n_tasks=6, seed=100), library)
    assert len(res.tasks) == 6
    assert "user_cannot_identify" not in res.drops and res.stats["yield"] == 1.0, dict(res.drops)
    writes = {c.name for t in res.tasks for c in t.reference_solution if library.tools[c.name].write}
    assert writes == {"borrow_copy", "renew_loan", "return_copy", "pay_fine"}
    for task in res.tasks:
        assert replay(library, task) == task.target_state_hash
        first_write = next(c for c in task.reference_solution if library.tools[c.name].write)
        if first_write.name in ("renew_loan", "return_copy"):
            # the user knows whose loan it is, and the agent looks them up before the write
            member = _owner(library, task, first_write.arguments["loan_id"])
            assert task.user.known_info["member_id"] == member
            assert task.reference_solution[0] == ToolCall(name="get_member", arguments={"member_id": member})


def test_the_default_identity_question_asks_for_the_worlds_key(library: World) -> None:
    conv = conversation(library)
    assert conv.identity.keys == [["member_id"]]
    assert conv.ask_identity == ["Could you give me your member id?"]
    assert asks_for(conv.ask_identity[0], "member_id")  # the scripted user answers it


def test_identified_puts_an_identity_lookup_first_only_when_there_is_none(library: World) -> None:
    renew = ToolCall(name="renew_loan", arguments={"loan_id": "L7"})
    lookup = ToolCall(name="get_member", arguments={"member_id": "m_reader"})
    assert identified(library, [renew], {"loans record": "L7", "member_id": "m_reader"}) == [lookup, renew]
    assert identified(library, [lookup, renew], {"member_id": "m_reader"}) == [lookup, renew]
    assert identified(library, [renew], {"loans record": "L7"}) == [renew]  # no identity known
    airline = get_world("airline")
    ref = [ToolCall(name="get_user_details", arguments={"user_id": "u1"})]
    assert identified(airline, ref, {"user_id": "u1"}) == ref
