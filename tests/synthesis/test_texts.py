"""Tasks say only what a real user knows: no world-internal id (payment, slot, flight-instance,
plan and add-on codes) in what the user simulator may say."""

from __future__ import annotations

import pytest

from envs.conversation import internal_id_columns, leaked_ids
from envs.registry import get_world
from synthesis.base import SynthesisConfig, get_method, internal_id_leaks, user_facing_texts


@pytest.mark.parametrize(("world_name", "internal", "facing"), [
    ("airline", {"payment_id", "flight_id"}, {"user_id", "reservation_id"}),
    ("clinic", {"slot_id", "provider_id", "plan_id"}, {"patient_id", "appointment_id"}),
    ("telecom", {"plan_id", "addon_id", "line_id"}, {"customer_id"}),
])
def test_each_world_declares_what_users_know(world_name: str, internal: set[str], facing: set[str]) -> None:
    world = get_world(world_name)
    task = get_method("logic_driven")(SynthesisConfig(n_tasks=1, seed=5), world).tasks[0]
    env = world.env(task.initial_state)
    try:
        columns = {c for _, c in internal_id_columns(env.conn, ["user_id", *facing])}
        assert internal <= columns and not facing & columns
        table, col = next((t, c) for t, c in internal_id_columns(env.conn, list(facing)) if c in internal)
        (value,) = env.conn.execute(f'SELECT "{col}" FROM "{table}" LIMIT 1').fetchone()
        assert leaked_ids(world, env.conn, [f"Please use {value}."]) == [value]
        own = task.user.known_info.get("user_id") or task.user.known_info.get("patient_id") or ""
        assert leaked_ids(world, env.conn, [f"I am {own}.", "It costs 250 on 2026-05-12."]) == []
    finally:
        env.close()


def test_synthesized_tasks_leak_no_internal_id() -> None:
    for method in ("logic_driven", "constraint_guided"):
        for name in ("airline", "retail", "telecom", "clinic"):
            world = get_world(name)
            result = get_method(method)(SynthesisConfig(method=method, n_tasks=4, seed=2), world)
            assert result.tasks, (method, name, dict(result.drops))
            for task in result.tasks:
                assert internal_id_leaks(world, task) == [], (method, name, user_facing_texts(task))
                assert "credit_card_" not in task.instruction and "gift_card_" not in task.instruction


def test_a_leaking_task_is_flagged() -> None:
    world = get_world("airline")
    task = get_method("logic_driven")(SynthesisConfig(n_tasks=1, seed=5), world).tasks[0]
    env = world.env(task.initial_state)
    (pid,) = env.conn.execute("SELECT payment_id FROM payment_methods LIMIT 1").fetchone()
    env.close()
    leaky = task.model_copy(update={"instruction": task.instruction + f" Pay with {pid}."})
    assert internal_id_leaks(world, leaky) == [pid]
