"""`synthesis.self_play.world_check`: a generation's gold calls run on its world, with the
reason of each failure."""

from __future__ import annotations

from data.records import ToolCall
from data.self_play import Generation
from envs.world import World
from synthesis.self_play import validate_on_world


def test_validate_on_world(airline: World) -> None:
    ref = airline.state_ref(0, 30)
    conn = airline.build_state(0, 30)
    user = conn.execute("SELECT user_id FROM users LIMIT 1").fetchone()[0]
    res = conn.execute("SELECT reservation_id, bags FROM reservations JOIN flights f USING (flight_id)"
                       " WHERE reservations.status = 'active' AND f.status <> 'departed'"
                       " AND bags < 3 * passengers LIMIT 1").fetchone()
    conn.close()
    tools = [airline.tools["get_user_details"].schema(), airline.tools["update_baggage"].schema()]
    ok = Generation(f"I am {user}; set {res[0]} to {res[1] + 1} bags please.", tools, [
        ToolCall(name="get_user_details", arguments={"user_id": user}),
        ToolCall(name="update_baggage", arguments={"reservation_id": res[0], "total_bags": res[1] + 1})])
    check = validate_on_world(airline, ok, ref=ref)
    assert check.ok and check.initial_state == ref and check.target_state_hash != ref.state_hash
    assert any(d["table"] == "reservations" for d in check.target_diff) and len(check.observations) == 2
    bad_user = Generation("q", tools, [ToolCall(name="get_user_details", arguments={"user_id": "nobody_0"})])
    assert validate_on_world(airline, bad_user, ref=ref).reason == "call_failed"
    assert validate_on_world(airline, Generation("q", tools, [ToolCall(name="fly")]), ref=ref).reason == "unknown_tool"
    invented = [*tools, {"type": "function", "function": {"name": "teleport", "parameters": {}}}]
    assert validate_on_world(airline, Generation("q", invented, ok.calls), ref=ref).reason == "unknown_menu_tool"
