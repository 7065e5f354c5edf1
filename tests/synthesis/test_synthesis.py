"""Logic-driven synthesis: boundary states and validated tasks (the registry: test_base.py,
explorer paths: test_explorer.py)."""

from __future__ import annotations

from data.records import Task
from envs.world import World
from synthesis.logic_driven import replay
from synthesis.scenario import GOAL_LEADS, goal_of
from synthesis.set_designer import design_states


def test_every_task_replays_to_its_target(airline: World, tasks: list[Task]) -> None:
    for task in tasks:
        assert task.id == task.compute_id()
        assert replay(airline, task) == task.target_state_hash
        assert task.reference_solution, task.id


def test_instructions_state_goals_not_solutions(airline: World, tasks: list[Task]) -> None:
    for task in tasks:
        assert not any(name in task.instruction for name in airline.tools)
        assert goal_of(task).startswith(GOAL_LEADS)
        assert task.user.known_info["user_id"] in {r["user_id"] for r in _users(airline, task)}


def _users(world: World, task: Task) -> list[dict]:
    conn = world.build_state(task.initial_state.seed, task.initial_state.scale, task.initial_state.patches)
    cur = conn.execute("SELECT user_id FROM users")
    return [{"user_id": r[0]} for r in cur.fetchall()]


def test_boundary_kinds_and_rules_are_recorded(tasks: list[Task]) -> None:
    kinds = {t.metadata["boundary"] for t in tasks}
    assert kinds == {"seats_exact", "seats_short", "balance_exact", "balance_short",
                     "cancel_inside_window", "cancel_outside_window", "bags_at_limit"}
    for t in tasks:
        assert t.metadata["rules"], t.metadata


def test_boundary_state_makes_a_naive_call_hit_its_trigger(airline: World) -> None:
    """On a 'seats_short' state, booking everyone on the preferred flight is rejected by R02."""
    for variant, ref in design_states(airline, seed=2, scale=30, n=7):
        if variant.kind != "seats_short":
            continue
        env = airline.env(ref)
        preferred = variant.preference["preferred_flight"]
        user = variant.focus["user_id"]
        pay = env.conn.execute("SELECT payment_id FROM payment_methods WHERE user_id=? AND kind='credit_card'",
                               (user,)).fetchone()[0]
        from data.records import ToolCall

        obs = env.call(ToolCall(name="book_reservation", arguments={
            "user_id": user, "flight_id": preferred, "cabin": "economy",
            "passengers": variant.focus["passengers"], "payment_id": pay}))
        assert obs.code == "R02_SEATS"
        return
    raise AssertionError("no seats_short variant designed")
