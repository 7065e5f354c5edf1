"""`synthesis.paraphrase`: a model's paraphrase of an instruction is used only when it keeps
the user's values and leaks no id (else the template stays), and logic-driven synthesis uses it."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from data.records import Sampling
from envs.registry import get_world
from rollout.model import ChatResponse
from synthesis import logic_driven
from synthesis.base import SynthesisConfig
from synthesis.logic_driven import replay
from synthesis.paraphrase import (
    check_paraphrase,
    is_id_like,
    paraphrase,
    paraphrase_messages,
    required_values,
)

TEMPLATE = ("You want to book 2 passengers in economy on flight HAT003 from SFO to JFK on 2026-05-12 at "
            "12:15, paying with your gift card gift_card_00072, without travel insurance.")

KNOWN = {"user_id": "mia_li_1000"}

GOOD = ("Hi! I'd like to book two passengers in economy on flight HAT003 from SFO to JFK on 2026-05-12 "
        "at 12:15. Please charge my gift card gift_card_00072, and no travel insurance.")

NO_DATE = GOOD.replace(" on 2026-05-12", "")

LEAK = GOOD.replace("Please charge", "It is for reservation R050001; please charge")

GARBAGE = "<|im_start|>assistant\n{\"name\": \"book_reservation\"}"


class ScriptedChat:
    """A ChatModel that answers each request with the next scripted text (or a transform)."""

    name = "scripted-paraphraser"

    def __init__(self, answers: list[str] | None = None, transform: Any = None) -> None:
        self.answers = list(answers or [])
        self.transform = transform
        self.seen: list[list[dict[str, Any]]] = []

    async def chat(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]],
                   sampling: Sampling) -> ChatResponse:
        self.seen.append(messages)
        text = self.transform(messages[-1]["content"]) if self.transform else self.answers.pop(0)
        return ChatResponse(text=text)

    async def aclose(self) -> None:
        return None


def test_paraphrase_check_accepts_good_and_rejects_bad() -> None:
    tools = get_world("airline").tools
    assert check_paraphrase(TEMPLATE, KNOWN, GOOD, tools) == (GOOD, "")
    assert check_paraphrase(TEMPLATE, KNOWN, NO_DATE, tools) == (None, "missing_value")
    assert check_paraphrase(TEMPLATE, KNOWN, LEAK, tools) == (None, "new_id")
    assert check_paraphrase(TEMPLATE, KNOWN, GARBAGE, tools)[0] is None
    assert check_paraphrase(TEMPLATE, KNOWN, "   ", tools) == (None, "empty")
    assert check_paraphrase(TEMPLATE, KNOWN, GOOD * 4, tools) == (None, "too_long")
    assert check_paraphrase(TEMPLATE, KNOWN, GOOD.replace("2026-05-12", "2026-05-13"), tools)[1] == "missing_value"
    assert check_paraphrase(TEMPLATE, KNOWN, GOOD.replace("book", "book_reservation"), tools)[1] == "tool_name"


def test_paraphrase_with_a_scripted_model_keeps_template_on_rejection() -> None:
    model = ScriptedChat([GOOD, NO_DATE, LEAK, GARBAGE])
    chosen, outcomes = paraphrase(model, [(TEMPLATE, KNOWN)] * 4, get_world("airline").tools)
    assert chosen == [GOOD, TEMPLATE, TEMPLATE, TEMPLATE]
    assert outcomes[:3] == ["accepted", "paraphrase_rejected:missing_value", "paraphrase_rejected:new_id"]
    assert outcomes[3] in {"paraphrase_rejected:markup", "paraphrase_rejected:too_short"}
    assert model.seen[0][-1]["content"] == TEMPLATE


def _reword(text: str) -> str:
    return "Hello, I would like to " + text.removeprefix("You want to ").replace("your ", "my ")


def _drop_dates(text: str) -> str:
    return re.sub(r" on \d{4}-\d{2}-\d{2}| at \d{2}:\d{2}", "", _reword(text))


def test_logic_driven_paraphrases_instructions() -> None:
    world = get_world("airline")
    base = logic_driven.synthesize(SynthesisConfig(n_tasks=3, seed=5), world)
    model = ScriptedChat(transform=_reword)
    result = logic_driven.synthesize(SynthesisConfig(n_tasks=3, seed=5, options={
        "paraphrase": True, "paraphrase_model": model}), world)
    assert result.stats["paraphrase"] == {"accepted": 3}
    for task, plain in zip(result.tasks, base.tasks, strict=True):
        assert task.instruction == _reword(plain.instruction) != plain.instruction
        assert task.user.task_instructions == task.instruction
        assert task.metadata["instruction_template"] == plain.instruction
        assert task.id == task.compute_id() != plain.id
        assert replay(world, task) == task.target_state_hash
    strict = logic_driven.synthesize(SynthesisConfig(n_tasks=3, seed=5, options={
        "paraphrase": True, "paraphrase_model": ScriptedChat(transform=_drop_dates)}), world)
    booked = [t for t in strict.tasks if re.search(r"\d{4}-\d{2}-\d{2}", t.instruction)]
    assert booked and all(t.metadata["paraphrase"] == "paraphrase_rejected:missing_value" for t in booked)
    assert [t.instruction for t in strict.tasks] == [
        t.instruction if re.search(r"\d{4}-\d{2}-\d{2}", t.instruction) else _drop_dates(t.instruction)
        for t in base.tasks]
    with pytest.raises(ValueError, match="paraphrase_model"):
        logic_driven.synthesize(SynthesisConfig(n_tasks=1, options={"paraphrase": True}), world)
    assert json.dumps(result.stats["paraphrase"])


def test_what_a_paraphrase_must_keep() -> None:
    assert [t for t in ("RX1A2F", "credit_card_00071", "ln_000085", "3pm", "10GB", "SFO", "gold") if is_id_like(t)] \
        == ["RX1A2F", "credit_card_00071", "ln_000085"]
    values = required_values(TEMPLATE, KNOWN)
    for v in ("HAT003", "SFO", "JFK", "2026-05-12", "12:15", "gift_card_00072", "2"):
        assert v in values, v
    assert "You" not in values and len(values) == len(set(values))
    assert check_paraphrase(TEMPLATE, KNOWN, GOOD.replace("two", "2")) == (GOOD.replace("two", "2"), "")
    assert check_paraphrase(TEMPLATE, KNOWN, None) == (None, "model_error")
    assert check_paraphrase(TEMPLATE, KNOWN, f'  "{GOOD}"  ')[0] == GOOD  # quotes and spaces trimmed
    messages = paraphrase_messages(TEMPLATE)
    assert [m["role"] for m in messages] == ["system", "user"] and messages[1]["content"] == TEMPLATE
