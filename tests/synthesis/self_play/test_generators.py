"""`synthesis.self_play.generators`: the scripted generator's grounded templates (planted
hallucinations are caught), the model generator's path and its drops, and `response_text`."""

from __future__ import annotations

import random
from typing import Any

import pytest

from bench.self_play_stubs import (
    grounding_rejection_rate,
    plant_hallucination,
)
from data.records import Sampling, ToolCall
from data.self_play import Generation
from envs.world import World
from rollout.generation import (
    parse_generation,
    r_valid,
)
from rollout.model import ChatResponse
from rollout.parsing import parse_tool_calls
from synthesis.base import SynthesisConfig, get_method
from synthesis.self_play import (
    ModelGenerator,
    ScriptedGenerator,
    generic_template,
    response_text,
    sample_spec,
    synthesize_with,
    validate_on_world,
)
from tests.rollout.generation_samples import (
    GOLD,
    generator_text,
    sample_generation,
)


def test_planted_hallucinations_are_rejected(airline: World) -> None:
    rng = random.Random(3)
    gen = ScriptedGenerator(airline)
    conn = airline.build_state(0, 30)
    clean = []
    while len(clean) < 60:
        text = gen.generate(sample_spec(airline, rng), conn, rng)
        if text is not None:
            g = parse_generation(text)
            assert isinstance(g, Generation)
            clean.append(g)
    conn.close()
    assert grounding_rejection_rate(clean) == 0.0
    planted = [plant_hallucination(g, rng) for g in clean]
    assert grounding_rejection_rate(planted) == 1.0
    assert all(r_valid(p) == pytest.approx(0.8) for p in planted)
    assert grounding_rejection_rate([]) == 0.0


def test_generic_template_is_grounded(airline: World) -> None:
    rng = random.Random(5)
    conn = airline.build_state(0, 30)
    ref = airline.state_ref(0, 30)
    for name in ("get_user_details", "get_reservation_details", "get_flight_details", "search_flights"):
        spec = airline.tools[name]
        out = generic_template(spec)(conn, rng)
        assert out is not None
        args, sentence = out[:2]
        gen = Generation(sentence, [spec.schema()], [ToolCall(name=name, arguments=args)])
        assert r_valid(gen) == 1.0, sentence
        assert validate_on_world(airline, gen, ref=ref).ok, sentence
    conn.close()


class _FakeModel:
    """A ChatModel that answers generator prompts with fixed texts, in turn."""

    name = "fake"

    def __init__(self, texts: list[str]) -> None:
        self.texts = texts
        self.calls = 0

    async def chat(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]], sampling: Sampling
                   ) -> ChatResponse:
        assert messages[0]["role"] == "system" and "<tool_call_answer>" in messages[1]["content"]
        text = self.texts[self.calls % len(self.texts)]
        self.calls += 1
        rest, calls, malformed = parse_tool_calls(text)  # what an OpenAI-compatible backend returns
        return ChatResponse(text=rest, tool_calls=calls, malformed=malformed)

    async def aclose(self) -> None:
        return None


def test_model_generator_path_counts_drops(airline: World) -> None:
    rng = random.Random(9)
    conn = airline.build_state(0, 30)
    good = ScriptedGenerator(airline).generate(sample_spec(airline, rng, n_calls=1), conn, rng)
    conn.close()
    assert good is not None
    g = parse_generation(good)
    assert isinstance(g, Generation)
    halluc = plant_hallucination(g, rng).to_text()
    placeholder = good.replace(g.question, "Do the thing for <user_id> please")
    unknown = good.replace(g.question, g.question + " Thanks a lot.").replace(
        f'"name": "{g.calls[0].name}", "arguments"', '"name": "fly_me", "arguments"')
    fake = _FakeModel([good, halluc, placeholder, "no tags at all", unknown])
    cfg = SynthesisConfig(method="self_play", n_tasks=3, seed=0, options={"max_attempts": 5, "batch_size": 5})
    result = synthesize_with(cfg, airline, ModelGenerator(model=fake))
    assert fake.calls == 5 and len(result.tasks) == 1
    assert result.tasks[0].metadata["generator"] == "model"
    assert dict(result.drops) == {"ungrounded_value": 1, "placeholder_question": 1, "format_tags": 1,
                                  "gold_not_in_menu": 1}


def test_response_text_restores_lifted_calls() -> None:
    text = generator_text()
    rest, calls, _ = parse_tool_calls(text)
    # JSON inside <tool_call_answer> is prose, not call syntax: nothing is lifted (issue 34)
    assert not calls and rest == text
    gen = parse_generation(response_text(ChatResponse(text=rest)))
    assert isinstance(gen, Generation) and gen.calls == sample_generation().calls
    assert response_text(ChatResponse(text="x", raw={"completion": text})) == text
    # a server that returns the gold as native tool calls leaves the answer block empty:
    # the calls are written back into it
    two = [*GOLD, {"name": "get_user_details", "arguments": {"user_id": "raj_ahmed_1000"}}]
    emptied = generator_text(gold="[]")
    native = [ToolCall(name=c["name"], arguments=c["arguments"]) for c in two]
    gen = parse_generation(response_text(ChatResponse(text=emptied, tool_calls=native)))
    assert isinstance(gen, Generation) and [c.name for c in gen.calls] == ["update_baggage", "get_user_details"]


def test_model_generator_refuses_scripted_backend(airline: World) -> None:
    conn = airline.build_state(0, 30)
    with pytest.raises(ValueError, match="scripted"):
        ModelGenerator(model_cfg={"kind": "scripted"})([sample_spec(airline, random.Random(0))], conn,
                                                       random.Random(0))
    conn.close()
    with pytest.raises(ValueError):
        get_method("self_play")(SynthesisConfig(method="self_play", options={"generator": "magic"}), airline)
