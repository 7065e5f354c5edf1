"""The LLM user simulator: its prompt from the user scenario, in-character replies through
`ChatModel.chat`, the three end markers, the max-turns cap, garbage and errors as
`user_error`, the collector wiring, the rollout cache key; and multi-turn tasks where the
agent must ask the user for what only the user knows."""

from __future__ import annotations

import asyncio
import json
import re
from typing import Any

import pytest

from data.records import Sampling, Task, ToolCall
from envs.registry import get_world
from envs.world import World
from rollout.agent import AgentConfig, run_episode
from rollout.collector import ModelConfig, RolloutConfig, UserConfig, collect
from rollout.model import ChatResponse, ModelError
from rollout.policies import ScriptedPolicy
from rollout.user import (
    AGENT_GREETING,
    OUT_OF_SCOPE,
    STOP,
    TRANSFER,
    LLMUser,
    ScriptedUser,
    UserSimulator,
    first_person,
    user_system_prompt,
)
from synthesis.base import SynthesisConfig, get_method


def _section(system: str, title: str) -> str:
    return system.split(title, 1)[1].split("\n\n", 1)[0]


class RuleUser:
    """A ChatModel that plays the user by rules, reading only what `LLMUser` sends it: the
    goal and the known info come from the system prompt; a known fact is given only when
    the agent's last message names it; `end` closes the conversation."""

    def __init__(self, end: str = STOP, script: list[Any] | None = None) -> None:
        self.name = "rule-user"
        self.end = end
        self.script = list(script or [])
        self.seen: list[tuple[list[dict[str, Any]], list[dict[str, Any]], Sampling]] = []

    async def chat(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]],
                   sampling: Sampling) -> ChatResponse:
        self.seen.append(([dict(m) for m in messages], tools, sampling))
        if self.script:
            item = self.script.pop(0)
            if isinstance(item, Exception):
                raise item
            return item if isinstance(item, ChatResponse) else ChatResponse(text=item)
        system = messages[0]["content"]
        goal = _section(system, "one part at a time):\n").strip()
        known = dict(re.findall(r"^- (.+?): (.+)$", _section(system, "only when the agent asks for it:\n"),
                                re.MULTILINE))
        if len(messages) == 2:  # the agent's greeting only: state the goal
            return ChatResponse(text=goal)
        agent = messages[-1]["content"].lower()
        given = " ".join(m["content"] for m in messages if m["role"] == "assistant")
        for key, value in known.items():
            if key.split()[0].replace("_", " ") in agent and value not in given:
                return ChatResponse(text=f"My {key} is {value}.")
        if "?" in agent:
            return ChatResponse(text="Yes, please go ahead.")
        return ChatResponse(text=f"Thank you. {self.end}")

    async def aclose(self) -> None:
        return None


class AskingPolicy:
    """Follows the reference solution, but an argument value that only the user knows (in
    `known_info`) is used only after the user said it; before that the agent asks for it,
    or (with `ask=False`) gives up."""

    def __init__(self, task: Task, ask: bool = True) -> None:
        self.task, self.ask, self.name = task, ask, f"asking:{ask}"

    async def chat(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]],
                   sampling: Sampling) -> ChatResponse:
        said = " ".join(m.get("content") or "" for m in messages if m["role"] == "user")
        results = {m["tool_call_id"]: m["content"] for m in messages if m["role"] == "tool"}
        done = [c for m in messages if m["role"] == "assistant" for c in m.get("tool_calls") or []
                if '"error"' not in results.get(c["id"], '"error"')]
        plan = self.task.reference_solution
        if len(done) >= len(plan):
            return ChatResponse(text="Your request is complete.")
        call = plan[len(done)]
        args = json.dumps(call.arguments)
        missing = [k for k, v in self.task.user.known_info.items() if v in args and v not in said]
        if missing:
            text = f"Could you tell me your {missing[0]}?" if self.ask else "I cannot go on with this."
            return ChatResponse(text=text)
        return ChatResponse(tool_calls=[ToolCall(name=call.name, arguments=dict(call.arguments), id=f"c{len(done)}")])

    async def aclose(self) -> None:
        return None


class Say:
    """An agent that says the given texts in order, then `default`."""

    def __init__(self, texts: list[str], default: str) -> None:
        self.name, self.texts, self.default = "say", list(texts), default

    async def chat(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]],
                   sampling: Sampling) -> ChatResponse:
        return ChatResponse(text=self.texts.pop(0) if self.texts else self.default)

    async def aclose(self) -> None:
        return None


def run(task: Task, world: World, agent: Any, user: UserSimulator, **cfg: Any):
    return asyncio.run(run_episode(task, world, agent, user, Sampling(seed=1), 0, AgentConfig(**cfg)))


@pytest.fixture(scope="module")
def retail_task() -> Task:
    """A retail task whose user must be identified by an email the first message lacks."""
    result = get_method("logic_driven")(SynthesisConfig(n_tasks=6, seed=3, world="retail"), get_world("retail"))
    found = [t for t in result.tasks if "email" in t.user.known_info and t.reference_solution
             and t.reference_solution[0].name == "find_customer_by_email"]
    assert found, "no retail task identifies its customer by email any more"
    return found[0]


# -- the prompt and the conversation as the user sees it -------------------------------------

def test_system_prompt_carries_the_scenario(tasks: list[Task]) -> None:
    task = next(t for t in tasks if any("cancelled" in x for x in t.user.unknown_info))  # a refused cancellation
    prompt = user_system_prompt(task)
    assert task.user.persona in prompt and task.user.reason in prompt
    assert "to cancel my reservation" in prompt and first_person(task.instruction) in prompt  # the goal, as the user says it
    for key, value in task.user.known_info.items():
        assert f"- {key}: {value}" in _section(prompt, "only when the agent asks for it:\n")
    assert task.user.unknown_info[0] in _section(prompt, "never make it up:\n")
    assert STOP in prompt and TRANSFER in prompt and OUT_OF_SCOPE in prompt
    assert "Never invent identifiers" in prompt


def test_user_sees_swapped_roles_and_no_tool_traffic(tasks: list[Task]) -> None:
    task = tasks[0]
    model = RuleUser()
    user = LLMUser(task, model, Sampling(temperature=0.3, seed=5))
    opening = asyncio.run(user.opening())
    view, tools, sampling = model.seen[0]
    assert tools == [] and sampling.temperature == 0.3
    assert [m["role"] for m in view] == ["system", "user"] and view[1]["content"] == AGENT_GREETING
    assert opening.startswith(first_person(task.user.reason)) and task.user.known_info["user_id"] not in opening
    convo = [{"role": "system", "content": "agent policy"}, {"role": "user", "content": opening},
             {"role": "assistant", "content": "", "tool_calls": [{"id": "a", "type": "function",
              "function": {"name": "get_user_details", "arguments": "{}"}}]},
             {"role": "tool", "tool_call_id": "a", "name": "get_user_details", "content": "{\"secret\": 1}"},
             {"role": "assistant", "content": "What is your user id?"}]
    reply = asyncio.run(user.respond(convo))
    assert reply == f"My user_id is {task.user.known_info['user_id']}."
    view = model.seen[-1][0]
    assert [m["role"] for m in view] == ["system", "user", "assistant", "user"]
    assert view[2]["content"] == opening and view[3]["content"] == "What is your user id?"
    assert "agent policy" not in json.dumps(view) and "secret" not in json.dumps(view)


# -- episodes with the LLM user --------------------------------------------------------------

@pytest.mark.parametrize(("marker", "termination"), [(STOP, "user_stop"), (TRANSFER, "transfer"),
                                                     (OUT_OF_SCOPE, "out_of_scope")])
def test_each_marker_ends_the_episode(airline: World, tasks: list[Task], marker: str, termination: str) -> None:
    task = tasks[2]
    t = run(task, airline, ScriptedPolicy(task), LLMUser(task, RuleUser(end=marker)))
    assert t.termination == termination and t.messages[-1]["content"].endswith(marker)
    assert t.final_state_hash == task.target_state_hash
    assert t.metadata["user"]["kind"] == "llm" and t.metadata["user"]["end"] == "marker"
    # the opening, one answer per question the reference dialogue asks, and the closing
    assert t.metadata["user"]["calls"] == sum(turn.role == "user" for turn in task.dialogue) + 1
    assert t.metadata["persistent_state"] is True


def test_agent_must_ask_for_what_only_the_user_knows(retail_task: Task) -> None:
    world, task = get_world("retail"), retail_task
    email = task.user.known_info["email"]
    assert email not in ScriptedUser(task).first_message()  # withheld from the first message
    for user in (lambda: ScriptedUser(task), lambda: LLMUser(task, RuleUser())):
        asking = run(task, world, AskingPolicy(task), user())
        assert asking.final_state_hash == task.target_state_hash, asking.messages
        assert any(email in (m.get("content") or "") for m in asking.messages if m["role"] == "user")
        silent = run(task, world, AskingPolicy(task, ask=False), user())
        assert silent.final_state_hash != task.target_state_hash
        assert silent.actions() == [] and silent.termination == "user_stop"


def test_no_marker_hits_the_turn_cap(airline: World, tasks: list[Task]) -> None:
    task = tasks[0]
    chatty = RuleUser(script=["Hello, I need a flight."] + [f"Tell me more, please ({i})." for i in range(9)])
    t = run(task, airline, Say([], default="Anything else I can do?"), LLMUser(task, chatty, max_turns=3), max_turns=10)
    assert t.termination == "user_stop" and t.messages[-1]["content"] == STOP
    assert t.metadata["user"]["end"] == "max_turns" and t.metadata["user"]["turns"] == 3
    assert t.metadata["user"]["calls"] == 4  # the opening and 3 replies; the cap asks no model


@pytest.mark.parametrize(("script", "reason"), [
    ([ModelError("user backend down", reason="timeout")], "model_error"),
    ([ModelError("scenario of 9000 tokens", reason="context_length")], "context_length"),
    ([RuntimeError("bug")], "model_error"),
    (["", "   "], "empty"),
    ([ChatResponse(tool_calls=[ToolCall(name="get_user_details")])] * 2, "tool_call"),
    (["My reservation is RXZZ99.", "It is reservation RQ1234 I think."], "invented_id"),
    ([STOP], "early_stop"),
])
def test_garbage_and_errors_in_the_opening_end_with_user_error(
        airline: World, tasks: list[Task], script: list[Any], reason: str) -> None:
    task = tasks[0]
    t = run(task, airline, ScriptedPolicy(task), LLMUser(task, RuleUser(script=script), retries=1))
    assert t.termination == "user_error" and t.metadata["user_error_reason"] == reason
    assert t.error_counts == {"user_error": 1} and t.usage.model_calls == 0
    assert [m["role"] for m in t.messages] == ["system"] and t.metadata["user"]["end"] == "error"


def test_garbage_reply_mid_episode_is_retried_then_recorded(airline: World, tasks: list[Task]) -> None:
    task = tasks[0]
    uid = task.user.known_info["user_id"]
    # a bad reply retried into a good one: the episode goes on
    agent = Say(["What is your user id?"], default="Done.")
    fixed = RuleUser(script=["I need help.", "My user id is xavier_999.", f"It is {uid}.", f"Bye {STOP}"])
    t = run(task, airline, agent, LLMUser(task, fixed, retries=1))
    assert t.termination == "user_stop" and t.metadata["user"]["retries"] == 1
    assert t.metadata["user"]["problems"] == ["invented_id"]
    assert [m["content"] for m in t.messages if m["role"] == "user"][1] == f"It is {uid}."
    assert "xavier_999" not in json.dumps(t.messages)
    retry_view = fixed.seen[2][0]
    assert "not usable" in retry_view[-1]["content"] and "xavier_999" in retry_view[-1]["content"]
    # an echo of the agent, twice: the episode ends with user_error after the agent's turn
    first = next(turn.content for turn in task.dialogue if turn.role == "assistant")
    assert first  # the reference dialogue opens with a question for the user
    echo = RuleUser(script=["I need help.", first, first.lower() + "!"])
    t = run(task, airline, ScriptedPolicy(task), LLMUser(task, echo, retries=1))
    assert t.termination == "user_error" and t.metadata["user_error_reason"] == "echo"
    assert t.messages[-1]["role"] == "assistant" and t.messages[-1]["content"] == first
    assert t.usage.model_calls == 1


def test_a_conversation_that_outgrows_the_users_model_ends_on_its_own_length(
        airline: World, tasks: list[Task]) -> None:
    task = tasks[0]
    overflow = ModelError("prompt of 8100 tokens exceeds the model's 8192 positions", reason="context_length")
    user = LLMUser(task, RuleUser(script=["I need help with a booking.", overflow]), retries=1)
    t = run(task, airline, Say(["What is your user id?"], default="Done."), user)
    # after the agent spoke it is the conversation's length, judged like max_turns, not infrastructure
    assert (t.termination, t.error_counts, t.infra_failed) == ("context_exhausted", {"context_exhausted": 1}, False)
    assert "user's model" in t.metadata["context_exhausted"] and "user_error" not in t.metadata
    assert t.messages[-1]["role"] == "assistant"


def test_ids_from_the_conversation_are_not_invented(tasks: list[Task]) -> None:
    task = tasks[0]
    user = LLMUser(task, RuleUser(script=["Yes, book RX9Q2Z please."]))
    convo = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "Shall I use RX9Q2Z?"}]
    assert asyncio.run(user.respond(convo)) == "Yes, book RX9Q2Z please."


def test_resume_counts_earlier_turns(tasks: list[Task]) -> None:
    user = LLMUser(tasks[0], RuleUser(), max_turns=2)
    user.resume([{"role": "system", "content": ""}, {"role": "user", "content": "a"},
                 {"role": "assistant", "content": "b"}, {"role": "user", "content": "c"}])
    assert user.turns == 1
    asyncio.run(user.respond([{"role": "assistant", "content": "Anything else?"}]))
    assert asyncio.run(user.respond([{"role": "assistant", "content": "Anything else?"}])) == STOP


# -- configuration, collector, cache key -----------------------------------------------------

def test_collector_runs_the_llm_user(tasks: list[Task]) -> None:
    cfg = RolloutConfig(model=ModelConfig(kind="scripted"), trials=2,
                        user=UserConfig(kind="llm", model=ModelConfig(kind="openai", name="user-model"),
                                        sampling=Sampling(temperature=0.4, seed=3)))
    models: list[RuleUser] = []
    trajs = collect(tasks[:3], cfg, user_model_for=lambda task: models.append(RuleUser()) or models[-1])
    assert len(trajs) == 6 and all(t.metadata["user"]["kind"] == "llm" for t in trajs)
    assert all(t.termination == "user_stop" for t in trajs)
    seeds = sorted({s.seed for m in models for _, _, s in m.seen})
    assert seeds == [3000, 3001] and {s.temperature for m in models for _, _, s in m.seen} == {0.4}
    plain = collect(tasks[:1], RolloutConfig(model=ModelConfig(kind="scripted"), trials=1))
    assert "user" not in plain[0].metadata and plain[0].metadata["max_tool_calls_per_turn"] == 4


def test_rollout_key_includes_the_user(tasks: list[Task]) -> None:
    from pipelines.config import RunConfig
    from pipelines.keys import rollout_key

    def key(**user: Any) -> str:
        return rollout_key(RunConfig.model_validate({"rollout": {"user": user}}), tasks[:2])

    scripted, llm = key(), key(kind="llm")
    assert scripted == key(kind="scripted") and llm == key(kind="llm")
    assert len({scripted, llm, key(kind="llm", sampling={"temperature": 0.1}),
                key(kind="llm", model={"kind": "openai", "name": "judge-7b"}), key(kind="llm", max_turns=3)}) == 5
    # transport settings of the user's model do not change the key
    assert key(kind="llm", model={"kind": "openai", "name": "m", "timeout_s": 5}) == \
        key(kind="llm", model={"kind": "openai", "name": "m", "timeout_s": 50})


@pytest.mark.slow
def test_embedded_model_plays_the_user(airline: World, tasks: list[Task]) -> None:
    from rollout.embedded import EmbeddedModel, default_model_dir

    if not (default_model_dir() / "_READY").exists():
        pytest.skip("the embedded model is not prepared (trajforge prepare-model)")
    task = tasks[2]
    model = EmbeddedModel(max_batch=1)
    try:
        user = LLMUser(task, model, Sampling(temperature=0.7, max_tokens=24, seed=0), max_turns=1)
        t = run(task, airline, ScriptedPolicy(task), user)
    finally:
        asyncio.run(model.aclose())
    info = t.metadata["user"]
    assert info["model"] == model.name and info["calls"] >= 1 and info["completion_tokens"] > 0
    assert t.termination in {"user_stop", "transfer", "out_of_scope", "user_error"}
    if t.termination == "user_error":
        assert t.metadata["user_error_reason"] in {"empty", "tool_call", "echo", "invented_id", "early_stop"}
    else:
        users = [m["content"] for m in t.messages if m["role"] == "user"]
        assert users[0].strip() and "<tool_call>" not in users[0]
        assert info["end"] in {"marker", "max_turns"}
