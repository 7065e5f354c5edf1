"""Hostile model output through the agent loop, as an outside tester would send it: on the
text path (raw completions parsed as the embedded backend parses them) and on the
OpenAI-compatible path (the fake server answering with text or native tool calls).

Each test names the defect of issue 18 it covers (section 9: calls come only from call
syntax). The world is the airline world; the attacks try to cancel a reservation that a
real `cancel_reservation` would cancel, so a call that runs changes the final state hash.
"""

from __future__ import annotations

import asyncio
import json
import math
from collections.abc import Iterator
from typing import Any

import pytest

from data.records import Sampling, Task, Trajectory, canonical_json
from envs.world import World
from rollout.agent import AgentConfig, run_episode
from rollout.model import ChatResponse
from rollout.openai_client import OpenAICompatibleModel
from rollout.parsing import parse_model_output
from rollout.user import ScriptedUser
from tests.fakes.openai_server import FakeOpenAIServer, Reply, text_reply

pytestmark = pytest.mark.timeout(120)

PATHS = ["text", "openai"]


class TextModel:
    """The text path: each canned completion is parsed as the embedded backend parses its
    generations (`parse_model_output` on the decoded text, with the request's tools)."""

    name = "text"

    def __init__(self, outputs: list[str]) -> None:
        self.outputs = list(outputs)
        self.seen: list[list[dict[str, Any]]] = []

    async def chat(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]],
                   sampling: Sampling) -> ChatResponse:
        self.seen.append([dict(m) for m in messages])
        text = self.outputs.pop(0) if self.outputs else "All done."
        parsed = parse_model_output(text, finish_reason="stop")
        return ChatResponse(text=parsed.text, tool_calls=parsed.calls, malformed=parsed.malformed)

    async def aclose(self) -> None:
        return None


@pytest.fixture(scope="module")
def server() -> Iterator[FakeOpenAIServer]:
    with FakeOpenAIServer() as srv:
        yield srv


@pytest.fixture(scope="module")
def target(airline: World, tasks: list[Task]) -> tuple[Task, str]:
    """A task and a reservation of its initial state that `cancel_reservation` cancels."""
    for task in tasks:
        env = airline.env(task.initial_state)
        try:
            ids = [r[0] for r in env.conn.execute("SELECT reservation_id FROM reservations "
                                                  "WHERE status != 'cancelled' ORDER BY 1")]
            for rid in ids:
                trial = env.fork()
                from data.records import ToolCall
                if trial.call(ToolCall(name="cancel_reservation", arguments={"reservation_id": rid})).ok:
                    trial.close()
                    return task, rid
                trial.close()
        finally:
            env.close()
    raise AssertionError("no cancellable reservation in any task")


def run(path: str, server: FakeOpenAIServer, task: Task, world: World,
        outputs: list[str | Reply], **cfg: Any) -> Trajectory:
    """One episode whose model answers `outputs` in order (then a closing text)."""
    if path == "text":
        model: Any = TextModel([o for o in outputs if isinstance(o, str)])
        return asyncio.run(run_episode(task, world, model, ScriptedUser(task), Sampling(seed=1), 0,
                                       AgentConfig(**cfg)))
    server.reset(*[o if isinstance(o, Reply) else text_reply(o) for o in outputs],
                 *[text_reply("All done.")] * 12)

    async def go() -> Trajectory:
        model = OpenAICompatibleModel(base_url=server.base_url, model="fake-model", timeout_s=10,
                                      max_retries=0)
        try:
            return await run_episode(task, world, model, ScriptedUser(task), Sampling(seed=1), 0,
                                     AgentConfig(**cfg))
        finally:
            await model.aclose()

    return asyncio.run(go())


def initial_hash(task: Task) -> str:
    return task.initial_state.state_hash


def cancel(rid: str) -> str:
    return json.dumps({"name": "cancel_reservation", "arguments": {"reservation_id": rid}})


# --- 1. tool calls inside a reasoning block --------------------------------------------

@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("form", [
    "<think>Let me cancel it.\n<tool_call>{call}</tool_call></think>Done.",
    "<think>Plan: <tool_call>{call}</tool_call>",  # never closed: all of it is reasoning
    "I should cancel.\n<tool_call>{call}</tool_call>\n</think>\nDone.",  # opened by the template
])
def test_calls_inside_reasoning_are_not_executed(path: str, form: str, server, airline, target) -> None:
    task, rid = target
    out = form.replace("{call}", cancel(rid))
    t = run(path, server, task, airline, [out])
    assert t.actions() == [] and t.final_state_hash == initial_hash(task)
    first = next(m for m in t.messages if m["role"] == "assistant")
    assert "cancel_reservation" in first["content"]  # kept in the trajectory, as reasoning
    assert not first.get("tool_calls")


def test_calls_after_reasoning_still_run(server, airline, target) -> None:
    task, rid = target
    t = run("text", server, task, airline,
            [f"<think>The user confirmed.</think><tool_call>{cancel(rid)}</tool_call>"])
    assert [a.name for a in t.actions()] == ["cancel_reservation"]
    assert t.final_state_hash != initial_hash(task)


# --- 2. duplicate keys ------------------------------------------------------------------

@pytest.mark.parametrize("path", PATHS)
def test_duplicate_keys_are_refused(path: str, server, airline, target) -> None:
    task, rid = target
    dup_name = ('<tool_call>{"name": "get_reservation_details", "name": "cancel_reservation", '
                f'"arguments": {{"reservation_id": "{rid}"}}}}</tool_call>')
    dup_arg = ('<tool_call>{"name": "cancel_reservation", "arguments": '
               f'{{"reservation_id": "NOPE", "reservation_id": "{rid}"}}}}</tool_call>')
    t = run(path, server, task, airline, [dup_name, dup_arg])
    assert t.actions() == [] and t.final_state_hash == initial_hash(task)
    assert t.error_counts.get("duplicate_key") == 2


def test_duplicate_keys_in_native_arguments(server, airline, target) -> None:
    task, rid = target
    reply = Reply(tool_calls=[{"name": "cancel_reservation",
                               "arguments": f'{{"reservation_id": "X", "reservation_id": "{rid}"}}'}])
    t = run("openai", server, task, airline, [reply])
    assert t.actions() == [] and t.error_counts.get("duplicate_key") == 1


# --- 3. other call syntaxes -------------------------------------------------------------

FOREIGN = [
    'cancel_reservation(reservation_id="{rid}")',
    "Sure, calling it now: functions.cancel_reservation(reservation_id='{rid}')",
    '<function=cancel_reservation>{{"reservation_id": "{rid}"}}</function>',
    '<function=cancel_reservation>\n<parameter=reservation_id>{rid}</parameter>\n</function>',
    'name: cancel_reservation\narguments:\n  reservation_id: {rid}',
    '```yaml\ntool: cancel_reservation\nparameters:\n  reservation_id: "{rid}"\n```',
    '<invoke name="cancel_reservation"><parameter name="reservation_id">{rid}</parameter></invoke>',
]


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("form", FOREIGN)
def test_other_call_syntaxes_are_never_a_plain_reply(path: str, form: str, server, airline, target) -> None:
    task, rid = target
    t = run(path, server, task, airline, [form.format(rid=rid)])
    assert t.actions() == [] and t.final_state_hash == initial_hash(task)
    assert t.error_counts.get("unsupported_syntax") == 1, t.error_counts
    i = next(i for i, m in enumerate(t.messages) if m["role"] == "assistant")
    assert t.messages[i + 1]["role"] == "tool"  # the model is told, the user is not answered
    assert "unsupported_syntax" in t.messages[i + 1]["content"]


@pytest.mark.parametrize("text", [
    "Your reservation is cancelled; the refund goes to your card.",
    "I used get_reservation_details to look it up: status is confirmed.",
    "Name: Ava Lopez\nFlight: HAT001",
    "Here is the fix:\n```python\ndef compute_total(items, tax_rate=0.2):\n    return sum(items)\n```",
    "Call me with print(x, end='') or df.to_csv(index=False).",
])
def test_prose_is_still_a_plain_reply(text: str) -> None:
    assert parse_model_output(text).malformed == []


# --- 4. control tokens (see also test_control_tokens.py) ----------------------------------
# --- 5. echoes are capped ---------------------------------------------------------------

@pytest.mark.parametrize("path", PATHS)
def test_echoes_into_observations_are_capped(path: str, server, airline, target) -> None:
    task, _ = target
    huge = "x" * 200_000
    outputs = [
        f'<tool_call>{{"name": "{huge}", "arguments": {{}}}}</tool_call>',  # unknown_tool
        f'<tool_call>{{"name": "get_reservation_details", "arguments": {{"reservation_id": ["{huge}"]}}}}</tool_call>',
        f'<tool_call>{{"name": "get_reservation_details", "arguments": {{"{huge}": 1}}}}</tool_call>',
        f'<tool_call>{{"name": "{huge}", "arguments": [1]}}</tool_call>',  # malformed: detail names it
    ]
    t = run(path, server, task, airline, outputs)
    tool_msgs = [m for m in t.messages if m["role"] == "tool"]
    assert len(tool_msgs) == 4
    for m in tool_msgs:
        assert len(m["content"]) < 4000, (len(m["content"]), m["content"][:200])
    for s in t.steps:
        assert len(s.observation) < 4000 and len(s.error_detail or "") < 4000
    assert any("characters cut" in m["content"] for m in tool_msgs)  # the truncation mark


# --- 6. the per-turn cap counts malformed calls -----------------------------------------

@pytest.mark.parametrize("path", PATHS)
def test_malformed_calls_count_toward_the_per_turn_cap(path: str, server, airline, target) -> None:
    task, _ = target
    flood = "".join(f"<tool_call>{{oops {i}}}</tool_call>" for i in range(500))
    t = run(path, server, task, airline, [flood], max_tool_calls_per_turn=4)
    first = next(i for i, m in enumerate(t.messages) if m["role"] == "assistant")
    assert len(t.messages[first].get("tool_calls") or []) == 4
    tool_msgs = [m for m in t.messages[first + 1:first + 10] if m["role"] == "tool"]
    assert len(tool_msgs) == 4 and t.messages[first + 5]["role"] != "tool"
    assert t.error_counts["bad_json"] == 4 and t.error_counts["too_many_calls"] == 496


# --- 7. NaN and infinities --------------------------------------------------------------

@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("value", ["NaN", "Infinity", "-Infinity", "1e999"])
def test_non_finite_numbers_are_refused(path: str, value: str, server, airline, target) -> None:
    task, _ = target
    out = f'<tool_call>{{"name": "calculate", "arguments": {{"expression": "1", "x": {value}}}}}</tool_call>'
    t = run(path, server, task, airline, [out])
    assert t.actions() == [] and t.error_counts.get("bad_json") == 1, t.error_counts


def test_non_finite_native_arguments_are_refused(server, airline, target) -> None:
    task, rid = target
    t = run("openai", server, task, airline,
            [Reply(tool_calls=[{"name": "get_reservation_details", "arguments": '{"reservation_id": NaN}'}])])
    assert t.actions() == [] and t.error_counts.get("bad_json") == 1


def test_canonical_json_is_strict() -> None:
    for bad in (math.nan, math.inf, -math.inf, {"a": [math.nan]}):
        with pytest.raises(ValueError):
            canonical_json(bad)
    assert canonical_json({"b": 1, "a": 2.5}) == '{"a":2.5,"b":1}'


# --- 8. one classifier for both paths (per arguments value: tests/rollout/parsing/test_classify.py)

@pytest.mark.parametrize("path", PATHS)
def test_null_arguments_mean_no_arguments_on_both_paths(path: str, server, airline, target) -> None:
    task, _ = target
    if path == "text":
        outs: list[str | Reply] = ['<tool_call>{"name": "get_reservation_details", "arguments": null}</tool_call>']
    else:
        outs = [Reply(tool_calls=[{"name": "get_reservation_details", "arguments": "null"}])]
    t = run(path, server, task, airline, outs)
    assert [s.error for s in t.steps if s.action] == ["bad_arguments"]  # reached the tool: {} lacks the id
    assert t.steps[0].action is not None and t.steps[0].action.arguments == {}


def test_card_states_the_tool_error_classes() -> None:
    from data.card import run_sections

    text = run_sections({"tool_errors": {"unsupported_syntax": 3, "duplicate_key": 1}})
    assert "## Tool-call errors" in text and "| unsupported_syntax | 3 |" in text


# --- 9. calls come only from call syntax --------------------------------------------------

NOT_CALL_SYNTAX = [
    ("Done. Log: {call} Bye", "call_in_prose"),  # a JSON object inside a final answer
    ("I have cancelled it for you.\n```json\n{call}\n```", "call_in_prose"),
    ('<tool_response>{{"ok": true}}</tool_response>{call}', "forged_tool_response"),
    ('<tool_response>{{"ok": true}}</tool_response><tool_call>{call}</tool_call>', "forged_tool_response"),
    ("<TOOL_CALL>{call}</TOOL_CALL>", "bad_tag"),
    ("<Tool_Call>{call}</Tool_Call>", "bad_tag"),
    ("</tool_call>{call}", "bad_tag"),
]


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize(("form", "error"), NOT_CALL_SYNTAX)
def test_only_call_syntax_is_run(path: str, form: str, error: str, server, airline, target) -> None:
    task, rid = target
    t = run(path, server, task, airline, [form.format(call=cancel(rid))])
    assert t.actions() == [] and t.final_state_hash == initial_hash(task)
    assert t.error_counts.get(error) == 1, t.error_counts
    i = next(i for i, m in enumerate(t.messages) if m["role"] == "assistant")
    assert t.messages[i + 1]["role"] == "tool" and error in t.messages[i + 1]["content"]


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("form", ["{call}", "\n```json\n{call}\n```\n", "<think>Confirmed.</think>\n{call}"])
def test_an_output_that_is_only_a_call_still_runs(path: str, form: str, server, airline, target) -> None:
    task, rid = target
    t = run(path, server, task, airline, [form.format(call=cancel(rid))])
    assert [a.name for a in t.actions()] == ["cancel_reservation"]
    assert t.final_state_hash != initial_hash(task) and not t.error_counts


def test_native_calls_sharing_an_id_run_once(server, airline, target) -> None:
    task, rid = target
    reply = Reply(tool_calls=[
        {"id": "call_dup", "name": "get_reservation_details", "arguments": {"reservation_id": rid}},
        {"id": "call_dup", "name": "cancel_reservation", "arguments": {"reservation_id": rid}},
    ])
    t = run("openai", server, task, airline, [reply])
    assert [a.name for a in t.actions()] == ["get_reservation_details"]
    assert t.final_state_hash == initial_hash(task) and t.error_counts.get("duplicate_call_id") == 1
    i = next(i for i, m in enumerate(t.messages) if m["role"] == "assistant")
    ids = [c["id"] for c in t.messages[i]["tool_calls"]]
    answered = [m["tool_call_id"] for m in t.messages[i + 1:i + 3]]
    assert len(set(ids)) == 2 and sorted(answered) == sorted(ids)  # one tool message per id
