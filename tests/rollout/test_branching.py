"""Counterfactual branching: replay a stored trajectory's prefix (checking its recorded
state hashes), substitute one assistant or user message, run the rest with a model."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from data.records import Sampling, Task, ToolCall, Trajectory
from envs.conversation import is_affirmative
from envs.world import World
from rollout.agent import AgentConfig, run_episode
from rollout.branching import BranchError, as_response, branch_episode, branch_point
from rollout.model import ChatResponse
from rollout.policies import ScriptedPolicy
from rollout.user import STOP, LLMUser, ScriptedUser
from tests.conftest import BAGS_WRITES


def gold(task: Task, world: World, **cfg: Any) -> Trajectory:
    return asyncio.run(run_episode(task, world, ScriptedPolicy(task), ScriptedUser(task), Sampling(seed=1), 0,
                                   AgentConfig(**cfg)))


def branch(task: Task, world: World, parent: Trajectory, at_step: int, message: dict[str, Any],
           model: Any = None, user: Any = None, **kw: Any) -> Trajectory:
    return asyncio.run(branch_episode(task, world, parent, at_step, message, model or ScriptedPolicy(task),
                                      user or ScriptedUser(task), **kw))


@pytest.fixture(scope="module")
def bags(compound_bags: Task) -> Task:
    """A bags-at-limit task whose reference dialogue asks for the user id, reads, then
    announces, confirms and makes two writes (add bags, book)."""
    return compound_bags


WRITES = BAGS_WRITES


def step_of(parent: Trajectory, name: str) -> int:
    """The index of the parent's step that called `name`."""
    return next(i for i, s in enumerate(parent.steps) if s.action is not None and s.action.name == name)


def test_assistant_turn_substituted_by_a_question(airline: World, bags: Task) -> None:
    parent = gold(bags, airline)
    names = [a.name for a in parent.actions()]
    assert names == [c.name for c in bags.reference_solution] and set(names[-2:]) == WRITES
    at = step_of(parent, "update_baggage")
    question = {"role": "assistant", "content": "Before I change the bags: shall I go ahead?"}
    child = branch(bags, airline, parent, at, question)
    idx = [i for i, m in enumerate(parent.messages) if m["role"] == "assistant"][at]
    assert child.messages[:idx] == parent.messages[:idx] and child.messages[idx] == question
    assert child.messages[idx + 1]["role"] == "user" and is_affirmative(child.messages[idx + 1]["content"])
    assert child.steps[:at] == parent.steps[:at] and child.steps[at].action is None
    assert [a.name for a in child.actions()] == names  # the plan picks up at the turn the question replaced
    assert child.final_state_hash == bags.target_state_hash and child.termination == "user_stop"
    assert child.metadata["branch"] == {"parent_id": parent.id, "at_step": at, "role": "assistant",
                                        "substituted": question}
    assert child.id != parent.id and child.trial == parent.trial
    # the continuation's calls only: the parent's turns from the substituted one on
    assert child.usage.model_calls == len(parent.steps) - at
    assert child.metadata["persistent_state"] is True


def test_assistant_turn_substituted_by_another_call_changes_the_outcome(airline: World, bags: Task) -> None:
    parent = gold(bags, airline)
    at = step_of(parent, "book_reservation")
    args = dict(parent.steps[at].action.arguments, insurance=True)  # type: ignore[union-attr]
    wrong = {"role": "assistant", "content": "", "tool_calls": [
        {"id": "alt", "type": "function", "function": {"name": "book_reservation", "arguments": json.dumps(args)}}]}
    child = branch(bags, airline, parent, at, wrong)
    assert child.steps[:at] == parent.steps[:at]
    assert child.steps[at].action == ToolCall(name="book_reservation", arguments=args) and child.steps[at].error is None
    assert child.steps[at].state_hash != parent.steps[at].state_hash
    assert child.final_state_hash != bags.target_state_hash and child.termination == "user_stop"
    tool_msg = next(m for m in child.messages if m["role"] == "tool" and m["tool_call_id"] == "alt")
    assert tool_msg["name"] == "book_reservation"


def test_user_turn_substituted(airline: World, bags: Task) -> None:
    parent = gold(bags, airline)
    last = len(parent.steps) - 1
    assert parent.steps[last].action is None and STOP in parent.messages[-1]["content"]
    stop_now = branch(bags, airline, parent, last, {"role": "user", "content": f"Bye. {STOP}"})
    assert stop_now.usage.model_calls == 0 and stop_now.termination == "user_stop"
    assert stop_now.messages[:-1] == parent.messages[:-1] and stop_now.final_state_hash == parent.final_state_hash
    more = branch(bags, airline, parent, last, {"role": "user", "content": "Can you check it once more?"})
    assert more.messages[len(parent.messages) - 1]["content"] == "Can you check it once more?"
    assert [m["role"] for m in more.messages[len(parent.messages):]] == ["assistant", "user"]
    assert more.usage.model_calls == 1 and more.termination == "user_stop"
    assert more.steps[: last + 1] == parent.steps


def test_branch_with_the_llm_user_and_another_sampling(airline: World, bags: Task) -> None:
    from tests.rollout.test_user import RuleUser

    parent = gold(bags, airline)
    at = min(step_of(parent, name) for name in WRITES)  # the first write
    model = ScriptedPolicy(bags)
    user = LLMUser(bags, RuleUser(), max_turns=8)
    child = branch(bags, airline, parent, at, {"role": "assistant", "content": "Shall I go ahead?"},
                   model=model, user=user, sampling=Sampling(temperature=0.1, seed=9))
    assert child.sampling.temperature == 0.1
    # the LLM user answered each agent turn after the branch point (the substituted question,
    # the announcement of the second write, the closing reply); its replies count the prefix's too
    idx = [i for i, m in enumerate(parent.messages) if m["role"] == "assistant"][at]
    prefix_replies = sum(m["role"] == "user" for m in parent.messages[:idx]) - 1  # less the opening
    assert child.metadata["user"]["calls"] == 3 and STOP in child.messages[-1]["content"]
    assert child.metadata["user"]["turns"] == prefix_replies + 3
    assert child.final_state_hash == bags.target_state_hash


def test_replay_must_reproduce_the_recorded_states(airline: World, bags: Task) -> None:
    parent = gold(bags, airline)
    at = step_of(parent, "update_baggage")
    tampered = parent.model_copy(deep=True)
    tampered.steps[at].state_hash = "0" * 16
    with pytest.raises(BranchError, match=f"replaying step {at}"):
        branch(bags, airline, tampered, at + 1, {"role": "assistant", "content": "Shall I book it?"})
    # a branch at the tampered step replays nothing from it on
    ok = branch(bags, airline, tampered, at, {"role": "assistant", "content": "Shall I add the bags?"})
    assert ok.final_state_hash == bags.target_state_hash
    other = parent.model_copy(update={"task_id": "task-other"})
    with pytest.raises(BranchError, match="not"):
        branch(bags, airline, other, 1, {"role": "assistant", "content": "x"})


def test_stateless_parent_is_replayed_statelessly(airline: World, bags: Task) -> None:
    parent = gold(bags, airline, persistent_state=False)
    at = step_of(parent, "book_reservation")
    child = branch(bags, airline, parent, at, {"role": "assistant", "content": "Shall I book it?"})
    assert child.metadata["persistent_state"] is False
    assert child.final_state_hash == parent.final_state_hash != bags.target_state_hash
    with pytest.raises(BranchError, match="persistent_state"):
        branch(bags, airline, parent, at, {"role": "assistant", "content": "x"}, cfg=AgentConfig())


def test_bad_branch_points_and_messages(airline: World, tasks: list[Task]) -> None:
    task = tasks[0]
    two = [ToolCall(name="calculate", arguments={"expression": f"{i}+1"}, id=f"k{i}") for i in range(2)]

    class TwoAtOnce:
        name = "two"

        async def chat(self, messages: list[dict[str, Any]], tools: Any, sampling: Any) -> ChatResponse:
            return ChatResponse(text="Done.") if len(messages) > 2 else ChatResponse(tool_calls=two)

    parent = asyncio.run(run_episode(task, airline, TwoAtOnce(), ScriptedUser(task), Sampling(), 0))
    assert [s.turn for s in parent.steps] == [1, 1, 2]
    assert branch_point(parent, 0, "assistant") == (2, 0, 1)
    assert branch_point(parent, 2, "user") == (6, 3, 2)
    for at, role, match in [(1, "assistant", "first step of turn 1"), (0, "user", "tool call"),
                            (3, "assistant", "outside"), (-1, "assistant", "outside"), (0, "system", "substitute")]:
        with pytest.raises(BranchError, match=match):
            branch_point(parent, at, role)
    for bad in [{"role": "user", "content": "  "}, {"role": "assistant", "content": ""},
                {"role": "tool", "content": "x"}, {"role": "user", "content": 5}]:
        with pytest.raises(BranchError):
            branch(task, airline, parent, 2 if bad["role"] == "user" else 0, bad)


def test_substituted_calls_are_parsed_like_model_output() -> None:
    resp = as_response({"role": "assistant", "content": "ok", "tool_calls": [
        {"id": "a", "function": {"name": "f", "arguments": '{"x": 1}'}},
        {"id": "b", "function": {"name": "g", "arguments": "{oops"}},
        {"id": "c", "function": {"name": "h", "arguments": "[1]"}},
        {"id": "d", "function": {"arguments": {}}}]})
    assert resp.text == "ok" and resp.tool_calls == [ToolCall(name="f", arguments={"x": 1}, id="a")]
    assert [m.error for m in resp.malformed] == ["bad_json", "arguments_not_object", "missing_name"]


bwrap = pytest.mark.skipif(
    (lambda: __import__("envs.sandbox.bwrap", fromlist=["x"]).bwrap_unusable())() is not None,
    reason="bubblewrap cannot start a sandbox here")


@bwrap
def test_branch_a_terminal_task() -> None:
    from envs.registry import get_world
    from tests.synthesis.test_terminal import seed_task

    world = get_world("terminal")
    task = seed_task(world, "fix_median")  # type: ignore[arg-type]
    parent = gold(task, world)
    assert parent.final_state_hash == task.target_state_hash and parent.steps[0].action is not None
    last = len(parent.steps) - 1
    assert parent.steps[last].action is None
    # a user turn after the fix: the fix is replayed in a fresh sandbox and its hash checked
    child = branch(task, world, parent, last, {"role": "user", "content": "Did the tests pass?"})
    assert child.steps[: last + 1] == parent.steps and child.final_state_hash == task.target_state_hash
    # the fix itself swapped for a command that breaks the file
    shell = {"role": "assistant", "content": "", "tool_calls": [{"id": "s", "type": "function", "function": {
        "name": "run_shell", "arguments": json.dumps({"command": "echo 'oops(' >> stats.py"})}}]}
    broken = branch(task, world, parent, 0, shell)
    assert broken.steps[0].action.name == "run_shell"  # type: ignore[union-attr]
    assert broken.final_state_hash not in (task.target_state_hash, task.initial_state.state_hash)
    tampered = parent.model_copy(deep=True)
    tampered.steps[0].state_hash = "f" * 32
    with pytest.raises(BranchError, match="replaying step 0"):
        branch(task, world, tampered, last, {"role": "user", "content": "x"})
