"""Synthesis inside τ²'s domains (synthesis/tau2_synth.py): logic-driven, constraint-guided and
self-play tasks in tau2_airline and tau2_retail, each a τ² `Task` with τ²'s tool names and
evaluation criteria whose reference τ²'s own evaluator scores 1.0 on τ²'s database (every
task at seed 0), clear of τ²'s test split."""

from __future__ import annotations

import json
import os

import pytest

pytest.importorskip("tau2")
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # no network when τ² imports litellm

from data.records import Task  # noqa: E402
from envs.registry import get_world  # noqa: E402
from synthesis.base import SynthesisConfig, get_method, supports  # noqa: E402

METHODS = ("tau2_logic_driven", "tau2_constraint_guided", "tau2_self_play")


def _draw(method: str, world: str, n: int, seed: int = 0) -> list[Task]:
    return get_method(method)(SynthesisConfig(method=method, world=world, n_tasks=n, seed=seed), get_world(world)).tasks


def _tau2_score(task: Task, calls: list | None = None) -> float:
    """τ²'s reward of the reference conversation (or one making `calls`) on the task's τ² form,
    read back as τ² reads a task file, in τ²'s own domain."""
    from tau2.data_model.tasks import Task as T2Task

    from synthesis.tau2 import to_tau2
    from verifiers.tau2_reward import reference_messages, tau2_reward

    exported = json.loads(json.dumps(to_tau2(task)))
    t2 = T2Task.model_validate(exported)
    return tau2_reward(t2, reference_messages(task, calls), domain=exported["user_scenario"]["instructions"]["domain"]).reward


def test_the_methods_apply_to_tau2_worlds_only() -> None:
    for m in METHODS:
        assert not supports(m, get_world("airline"))
    with pytest.raises(ValueError, match="generator"):  # a self-play option is not a logic-driven one
        SynthesisConfig(method="tau2_logic_driven", world="tau2_airline", options={"generator": "model"})
    assert SynthesisConfig(method="tau2_self_play", world="tau2_airline", options={"generator": "model"})


@pytest.mark.slow  # τ²'s evaluator takes about 1.5 s a task
@pytest.mark.parametrize("domain", ["airline", "retail"])
def test_synthesized_tasks_are_tau2_tasks_whose_reference_scores_one(domain: str) -> None:
    from curation.hygiene.decontamination import tau2_test_proximity
    from data.records import ToolCall
    from envs.tau2_policy import check
    from synthesis.tau2 import from_tau2, to_tau2

    world = get_world(f"tau2_{domain}")
    assert all(supports(m, world) for m in METHODS)
    tasks: list[Task] = []
    for method in METHODS:
        drawn = _draw(method, world.name, 4)
        assert len(drawn) == 4, method
        tasks += drawn
    assert [t.id for t in tasks[:4]] == [t.id for t in _draw(METHODS[0], world.name, 4)]  # seeded
    for task in tasks:
        t2 = task.metadata["tau2_task"]
        criteria = t2["evaluation_criteria"]
        assert {a["name"] for a in criteria["actions"]} <= set(world.tools)  # τ²'s tool names
        assert set(criteria) >= {"actions", "communicate_info", "nl_assertions", "reward_basis"}
        assert t2["user_scenario"]["instructions"]["domain"] == domain
        assert from_tau2(json.loads(json.dumps(to_tau2(task)))) == task  # its export reads back
        assert _tau2_score(task) == 1.0, (task.method, task.instruction)
        if task.verification.outcome == "change":  # doing nothing, or only looking, fails it
            looks = [c for c in task.reference_solution if not world.tools[c.name].write]
            assert _tau2_score(task, looks) == 0.0, task.instruction
    logic = [t for t in tasks if t.method == "tau2_logic_driven"]
    assert {t.verification.outcome for t in logic} == {"change", "refusal"}  # both sides of a boundary
    assert all(t.metadata["boundary"] and t.metadata["rules"] for t in logic)
    for task in logic:  # a refusal is what the policy (or τ²'s API) says to the request, and a change too
        request = ToolCall.model_validate(task.metadata["request"])
        allowed = check(domain, world.db(task.initial_state.patches), request.name, request.arguments,
                        task.metadata.get("tau2_context")).allowed
        accepted = world.env(task.initial_state).call(request).ok
        assert (allowed and accepted) == (task.verification.outcome == "change"), task.metadata["boundary"]
    assert any(t.verification.communicate for t in tasks if t.method == "tau2_self_play")
    assert all(t.metadata["constraints"] for t in tasks if t.method == "tau2_constraint_guided")
    assert tau2_test_proximity(tasks)["within"] == 0


@pytest.mark.slow
def test_a_refusal_is_the_policy_s_not_the_api_s() -> None:
    """Airline's API cancels any reservation; the policy does not: a reservation booked 25
    hours ago, in economy, uninsured, gets a refusal task whose Explorer met the rule."""
    tasks = _draw("tau2_logic_driven", "tau2_airline", 2)
    inside, outside = tasks
    assert inside.metadata["boundary"] == "booked_within_24h" and inside.verification.outcome == "change"
    assert outside.metadata["boundary"] == "booked_over_24h" and outside.verification.outcome == "refusal"
    assert outside.metadata["naive_rejections"].get("airline.cancel.not_eligible")
    assert outside.target_state_hash == outside.initial_state.state_hash
    assert outside.verification.nl_assertions


@pytest.mark.slow  # τ²'s evaluator on the kept task
def test_self_play_with_a_model_generator() -> None:
    """`generator: model`: a model (the loopback fake OpenAI server) writes the request and its
    gold calls in self-play's tagged form; unparsable and non-τ² generations are dropped by
    reason, a kept one gets the customer's identity lookup in front and τ²'s reward 1.0."""
    from data.records import ToolCall
    from data.self_play import Generation
    from tests.fakes.openai_server import FakeOpenAIServer, text_reply

    world = get_world("tau2_airline")
    status = ToolCall(name="get_flight_status", arguments={"flight_number": "HAT170", "date": "2024-05-22"})
    menu = [s for s in world.tool_schemas() if s["function"]["name"] == "get_flight_status"]
    good = Generation(question="Is flight HAT170 on 2024-05-22 on time?", tools=menu, calls=[status]).to_text()
    alien = Generation(question="Find HAT170 on 2024-05-22.", tools=[{**menu[0], "function": {
        **menu[0]["function"], "name": "find_flight"}}], calls=[ToolCall(name="find_flight", arguments={
            "flight_number": "HAT170", "date": "2024-05-22"})]).to_text()
    with FakeOpenAIServer([text_reply("no tags here"), text_reply(alien), text_reply(good)]) as server:
        cfg = SynthesisConfig(method="tau2_self_play", world=world.name, n_tasks=1, seed=0, options={
            "generator": "model", "model": {"kind": "openai", "name": "fake", "base_url": server.base_url,
                                             "max_retries": 0}})
        result = get_method("tau2_self_play")(cfg, world)
    assert len(result.tasks) == 1, dict(result.drops)
    task = result.tasks[0]
    assert [c.name for c in task.reference_solution] == ["get_user_details", "get_flight_status"]
    assert task.instruction == "Is flight HAT170 on 2024-05-22 on time?" and task.verification.outcome == "answer"
    assert task.metadata["tau2_task"]["evaluation_criteria"]["reward_basis"] == ["DB", "ACTION"]
    assert set(result.drops) <= {"format_tags", "gold_not_a_tau2_tool", "no_generation"}
    assert _tau2_score(task) == 1.0 and _tau2_score(task, []) == 0.0
