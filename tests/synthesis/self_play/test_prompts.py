"""`synthesis.self_play.prompts`: sampled specs and the generator's prompt with its world
context."""

from __future__ import annotations

import json
import random

from data.self_play import Spec
from envs.world import World
from synthesis.self_play import (
    generator_prompt,
    sample_spec,
    world_context,
)


def test_sample_spec(airline: World) -> None:
    rng = random.Random(0)
    for _ in range(200):
        spec = sample_spec(airline, rng)
        assert spec.world == "airline" and spec.n_calls in (1, 2) and len(spec.tools) == spec.n_calls
        assert 2 <= len(spec.menu) <= 8 and set(spec.tools) <= set(spec.menu_names)
        assert len(set(spec.menu_names)) == len(spec.menu_names)
        assert Spec.from_dict(json.loads(json.dumps(spec.to_dict()))) == spec


def test_generator_prompt_holds_spec_and_context(airline: World) -> None:
    rng = random.Random(1)
    conn = airline.build_state(0, 30)
    context = world_context(conn, rng)
    conn.close()
    assert set(context) == {"meta", "users", "payment_methods", "flights", "reservations", "ledger"}
    assert len(context["users"]) == 2 and context["meta"][0]["key"] == "now"
    spec = sample_spec(airline, rng)
    messages = generator_prompt(spec, context)
    assert [m["role"] for m in messages] == ["system", "user"]
    body = messages[1]["content"]
    for name in spec.tools:
        assert name in body
    assert context["users"][0]["user_id"] in body
    assert "<tool_call_answer>" in body
