"""Scenario text written by a model (`synthesis.writer`): a rewrite in the persona's voice is
kept only when it passes the paraphrase checks and names no internal id; a kept one becomes
the instruction, the user's instructions and the reference dialogue's opening, and the
reference still passes every part of its verdict."""

from __future__ import annotations

import re
from typing import Any

import pytest

from data.records import Sampling
from envs.registry import get_world
from rollout.model import ChatResponse
from rollout.user import ScriptedUser
from synthesis.base import SynthesisConfig, get_method
from synthesis.writer import WriterConfig
from verifiers.audit import build_dialogue
from verifiers.base import get_verifier


class Voice:
    """A stand-in writer: says the instructions its own way, or breaks them on purpose."""

    name = "voice"

    def __init__(self, mode: str = "good") -> None:
        self.mode = mode
        self.prompts: list[list[dict[str, Any]]] = []

    async def chat(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]],
                   sampling: Sampling) -> ChatResponse:
        self.prompts.append(messages)
        text = messages[-1]["content"]
        if self.mode == "good":
            return ChatResponse(text="Here is the thing. " + text)
        if self.mode == "drop_value":  # loses every number
            return ChatResponse(text=re.sub(r"\d", "", text))
        return ChatResponse(text=text + " Use payment credit_card_9999999 for it.")  # an id it never had

    async def aclose(self) -> None:
        return None


def synth(method: str, world: str, writer: Any, n: int = 6):
    cfg = SynthesisConfig(method=method, world=world, n_tasks=n, seed=2,
                          writer=WriterConfig(model=writer) if writer is not None else None)
    return get_method(method)(cfg, get_world(world))


@pytest.mark.parametrize("method,world", [("logic_driven", "airline"), ("constraint_guided", "retail"),
                                          ("self_play", "telecom")])
def test_an_accepted_rewrite_replaces_the_text_and_the_reference_still_passes(method, world) -> None:
    base = synth(method, world, None)
    voice = Voice()
    out = synth(method, world, voice)
    assert out.stats["writer"] == {"writer:accepted": len(out.tasks)} and len(out.tasks) == len(base.tasks)
    composite = get_verifier("composite")
    for before, task in zip(base.tasks, out.tasks, strict=True):
        assert task.instruction == "Here is the thing. " + before.instruction
        assert task.user.task_instructions == task.instruction and task.id != before.id
        assert task.metadata["writer"] == "accepted" and task.metadata["instruction_template"] == before.instruction
        assert task.dialogue[0].content == ScriptedUser(task).first_message()
        assert task.dialogue[1:] == before.dialogue[1:]
        verdict = composite.verify(task, build_dialogue(task, task.dialogue))
        assert verdict.passed, verdict.reasons
    # the persona is in the writer's prompt
    assert all(p[0]["content"].count(t.user.persona) == 1 for p, t in zip(voice.prompts, base.tasks, strict=True))


@pytest.mark.parametrize("mode,reason", [("drop_value", "writer_rejected:missing_value"),
                                         ("new_id", "writer_rejected:new_id")])
def test_a_rejected_rewrite_keeps_the_template(mode: str, reason: str) -> None:
    base = synth("logic_driven", "airline", None)
    out = synth("logic_driven", "airline", Voice(mode))
    assert out.stats["writer"] == {reason: len(base.tasks)}
    assert [t.id for t in out.tasks] == [t.id for t in base.tasks]
    assert [t.instruction for t in out.tasks] == [t.instruction for t in base.tasks]
