"""Rule reports: rule guards are read from the schema, a replay traces which rules a path's
writes evaluate (rejected calls leave no trace), and every logic-driven task records the rules
its reference crosses and the distractor records it must leave alone."""

from __future__ import annotations

from data.records import Task, ToolCall
from envs import state as st
from envs.rules import guards, install_trace, read_trace, trace_rules
from envs.world import World


def test_guards_cover_every_compiled_rule(airline: World) -> None:
    conn = airline.empty_state()
    found = guards(conn)
    assert {g.rule for g in found} == set(airline.compiled_rules())
    seats = {(g.kind, g.table, g.event, g.columns) for g in found if g.rule == "R02_SEATS"}
    assert ("check", "flights", "UPDATE", ("seats_available",)) in seats
    assert ("trigger", "reservations", "INSERT", ()) in seats
    assert any(g.rule == "R10_BAG_LIMIT" and g.columns == ("bags",) for g in found)


def test_trace_sees_side_effects_and_ignores_rejected_calls(airline: World, tasks: list[Task]) -> None:
    task = next(t for t in tasks if t.metadata["boundary"] == "seats_exact")
    booking = [c for c in task.reference_solution if c.name == "book_reservation"]
    evaluated = trace_rules(airline, task.initial_state, booking)
    # the insert's own triggers, and R02's CHECK on flights through the seat-count side effect
    assert {"R01_FLIGHT_BOOKABLE", "R02_SEATS", "R03_PAYMENT_OWNER", "R11_NO_DUPLICATE"} <= set(evaluated)
    assert "R10_BAG_LIMIT" not in evaluated
    conn = airline.build_state(task.initial_state.seed, task.initial_state.scale, task.initial_state.patches)
    before = st.state_hash(conn)
    install_trace(conn, guards(conn))
    assert st.state_hash(conn) == before  # tracing lives in the temp schema
    env = airline.env(conn=conn)
    bad = ToolCall(name="book_reservation", arguments={**booking[0].arguments, "passengers": 6})
    assert not env.call(bad).ok and read_trace(conn) == []


def test_tasks_record_crossed_rules_and_distractors(tasks: list[Task]) -> None:
    crossing = 0
    for t in tasks:
        crossed = set(t.metadata["rules_crossed"])
        assert crossed <= set(t.metadata["rules_evaluated"]) & set(t.metadata["naive_rejections"])
        crossing += bool(crossed)
        assert isinstance(t.metadata["distractors"], list)
        changed = {(c["table"], c["key"]) for c in t.target_diff}
        assert all(tuple(d.split(":", 1)) not in changed for d in t.metadata["distractors"])
    refusal = next(t for t in tasks if t.metadata["boundary"] == "cancel_outside_window")
    assert refusal.metadata["rules_crossed"] == []  # the right path changes nothing
    assert crossing >= 5
    assert any(t.metadata["distractors"] for t in tasks)
