"""The telecom world: every compiled rule rejects its violating probe (with exactly its rule
id) and admits its valid probe; side effects apply; every tool runs through `Env.call`; the
generator is seeded and scales; boundary variants sit one step either side of their rule's
limit; logic-driven synthesis emits tasks that replay to their target state."""

from __future__ import annotations

import random
import re
import time
from typing import Any

import pytest

from data.records import Task, ToolCall
from envs import state as st
from envs.registry import get_world, list_worlds
from envs.world import Env, World
from envs.worlds.telecom.probes import FIXTURE, PROBES, call, pay
from synthesis.base import SynthesisConfig, get_method
from synthesis.logic_driven import replay
from synthesis.scenario import GOAL_LEADS, goal_of

WRITES = {"change_plan", "add_addon", "remove_addon", "set_roaming", "suspend_line", "resume_line",
          "terminate_line", "add_line", "pay_bill"}
ID_RE = re.compile(r"\b(ln_|lx_|plan_|ad_|bill_|pm_|py_|etf_)")


@pytest.fixture(scope="module")
def telecom() -> World:
    return get_world("telecom")


@pytest.fixture()
def env(telecom: World) -> Env:
    conn = telecom.empty_state()
    conn.executescript(FIXTURE)
    return Env(telecom, conn)


def _value(env: Env, sql: str, *args: Any) -> Any:
    return env.conn.execute(sql, args).fetchone()[0]


def test_world_is_registered_with_policy_rules(telecom: World) -> None:
    assert "telecom" in list_worlds()
    policy_rules = set(re.findall(r"\*\*(R\d+) ", telecom.policy))
    assert len(policy_rules) >= 10
    compiled = telecom.compiled_rules()
    assert len(compiled) >= 8 and all(re.fullmatch(r"R\d+_[A-Z0-9_]+", r) for r in compiled)
    assert {r.split("_")[0] for r in compiled} < policy_rules  # some rules are policy only
    assert "key = 'now'" in telecom.schema_sql


def test_every_compiled_rule_has_probes(telecom: World) -> None:
    assert set(telecom.compiled_rules()) == set(PROBES)


@pytest.mark.parametrize("rule", sorted(PROBES))
def test_rule_rejects_violation_and_admits_valid(env: Env, rule: str) -> None:
    bad, good = PROBES[rule]
    probe = env.fork()
    before = probe.state_hash()
    obs = probe.call(bad)
    assert obs.error == "rule_violation", obs.content
    assert obs.code == rule and rule in obs.content
    assert probe.state_hash() == before  # a rejected call leaves no trace
    ok = env.fork().call(good)
    assert ok.ok, ok.content


def test_payment_side_effects_settle_bills_and_reconnect(env: Env) -> None:
    assert _value(env, "SELECT amount_paid FROM bills WHERE bill_id = 'B1'") == 20
    assert env.call(pay("B3", "m2", 30)).ok  # paying a bill that is not overdue reconnects nothing
    assert _value(env, "SELECT status FROM lines WHERE line_id = 'L6'") == "suspended"
    assert env.call(call("add_addon", line_id="L5", addon_id="ad_d5")).code == "R03_OVERDUE_BALANCE"
    assert env.call(call("resume_line", line_id="L6")).code == "R03_OVERDUE_BALANCE"
    obs = env.call(pay("B2", "m2", 40))
    assert obs.ok and '"status": "paid"' in obs.content and '"remaining": 0' in obs.content
    assert _value(env, "SELECT status || '/' || IFNULL(suspend_reason, '-') FROM lines WHERE line_id = 'L6'") == "active/-"
    assert _value(env, "SELECT suspensions_ytd FROM lines WHERE line_id = 'L6'") == 0
    assert env.call(call("add_addon", line_id="L5", addon_id="ad_d5")).ok  # nothing overdue any more
    assert env.call(pay("B2", "m2", 1)).code == "R04_PAYMENT_AMOUNT"  # a settled bill takes nothing more
    assert env.call(pay("B1", "m1b", 0)).code == "R04_PAYMENT_AMOUNT"  # named CHECK: positive amounts


def test_line_side_effects(env: Env) -> None:
    # a suspension on request counts; the third one this year is refused
    assert env.call(call("suspend_line", line_id="L9", reason="lost_or_stolen")).ok
    assert _value(env, "SELECT suspensions_ytd FROM lines WHERE line_id = 'L9'") == 2
    assert env.call(call("resume_line", line_id="L9")).ok
    assert env.call(call("suspend_line", line_id="L9", reason="travel")).code == "R08_SUSPENSION_LIMIT"
    # roaming: on with a pass, off again when the pass goes
    assert env.call(call("set_roaming", line_id="L8", enabled=True)).ok
    assert env.call(call("remove_addon", line_id="L8", addon_id="ad_eu")).ok
    assert _value(env, "SELECT roaming_enabled FROM lines WHERE line_id = 'L8'") == 0
    # a contract plan starts a contract; a data add-on raises the allowance R12 checks
    assert env.call(call("change_plan", line_id="L4", plan_id="pl_world")).ok
    assert _value(env, "SELECT contract_end FROM lines WHERE line_id = 'L4'") == "2027-05-10"
    assert env.call(call("add_addon", line_id="L3", addon_id="ad_d5")).ok
    assert env.call(call("change_plan", line_id="L3", plan_id="pl_basic")).ok
    # terminating under contract bills 20 per remaining month (part of one here) and drops the add-ons
    assert env.call(call("terminate_line", line_id="L1")).ok
    assert _value(env, "SELECT amount || '/' || due_date FROM bills WHERE bill_id = 'etf_L1'") == "20/2026-05-24"
    assert _value(env, "SELECT COUNT(*) FROM line_addons WHERE line_id = 'L1'") == 0
    assert env.call(call("terminate_line", line_id="L2")).ok  # contract ends today: no fee
    assert _value(env, "SELECT COUNT(*) FROM bills WHERE bill_id = 'etf_L2'") == 0
    assert env.call(call("add_addon", line_id="L1", addon_id="ad_d5")).code == "R13_TERMINATED_FINAL"


def test_every_tool_runs_through_env_call(env: Env, telecom: World) -> None:
    calls = [
        call("get_customer_details", customer_id="c1"),
        call("find_line_by_number", phone_number="(555) 000 0004"),
        call("get_line_details", line_id="L3"),
        call("get_data_usage", line_id="L3"),
        call("list_plans", include_retired=True),
        call("list_addons"),
        call("get_bill_details", bill_id="B1"),
        call("change_plan", line_id="L4", plan_id="pl_world"),
        call("add_addon", line_id="L4", addon_id="ad_eu"),
        call("set_roaming", line_id="L4", enabled=True),
        call("remove_addon", line_id="L4", addon_id="ad_eu"),
        call("suspend_line", line_id="L9", reason="travel"),
        call("resume_line", line_id="L9"),
        call("terminate_line", line_id="L9"),
        call("add_line", customer_id="c3", plan_id="pl_plus"),
        pay("B1", "m1", 30),
        call("transfer_to_human_agents", summary="wants a fee waived"),
    ]
    assert {c.name for c in calls} == set(telecom.tools)
    assert {n for n, t in telecom.tools.items() if t.write} == WRITES
    results = {}
    for c in calls:
        obs = env.call(c)
        assert obs.ok, (c.name, obs.content)
        assert obs.wrote == (c.name in WRITES)
        results[c.name] = obs.content
    assert '"line_id": "L4"' in results["find_line_by_number"]
    assert '"data_used_mb": 5121' in results["get_data_usage"] and '"data_allowance_mb": 15360' in results[
        "get_data_usage"]
    assert "Classic 10" in results["list_plans"]
    assert "Classic 10" not in env.call(call("list_plans")).content
    assert '"remaining": 30' in results["get_bill_details"]
    assert '"roaming_enabled": 1' in results["set_roaming"]  # World 30 includes roaming
    assert '"contract_end": "2027-05-10"' in results["add_line"]
    assert '"status": "paid"' in results["pay_bill"]


def test_tool_errors_are_structured(env: Env, telecom: World) -> None:
    assert env.call(call("cancel_everything")).error == "unknown_tool"
    obs = env.call(call("get_customer_details", customer="c1"))
    assert obs.error == "bad_arguments" and obs.code == "unknown_argument"
    obs = env.call(call("pay_bill", bill_id="B1", method_id="m1"))
    assert obs.error == "bad_arguments" and obs.code == "missing_argument"
    obs = env.call(pay("B1", "m1", "ten"))  # type: ignore[arg-type]
    assert obs.error == "bad_arguments" and obs.code == "wrong_type"
    obs = env.call(call("suspend_line", line_id="L9", reason="vacation"))
    assert obs.error == "bad_arguments" and obs.code == "wrong_type"
    obs = env.call(call("get_line_details", line_id="NOPE"))
    assert obs.error == "tool_error" and obs.code == "NOT_FOUND"
    obs = env.call(call("find_line_by_number", phone_number="no digits"))
    assert obs.error == "tool_error" and obs.code == "BAD_VALUE"
    obs = env.call(call("change_plan", line_id="L4", plan_id="pl_plus"))
    assert obs.error == "tool_error" and obs.code == "NO_CHANGE"
    assert env.call(call("add_addon", line_id="L3", addon_id="ad_call")).code == "NO_CHANGE"
    assert env.call(pay("B1", "m1b", "10")).ok  # a lossless string-to-int is accepted
    schema = telecom.tools["pay_bill"].schema()["function"]
    assert schema["parameters"]["required"] == ["bill_id", "method_id", "amount"]
    assert schema["parameters"]["properties"]["amount"]["type"] == "integer"
    assert "R04" in schema["description"]
    reason = telecom.tools["suspend_line"].schema()["function"]["parameters"]["properties"]["reason"]
    assert reason["enum"] == ["lost_or_stolen", "travel"]


def _rows_by_table(conn: Any) -> dict[str, int]:
    return {t: conn.execute(f'SELECT COUNT(*) FROM "{t}"').fetchone()[0] for t in st.tables(conn)}


def _check_invariants(conn: Any) -> None:
    """The generated state obeys the compiled rules and the side effects' bookkeeping."""
    q = lambda sql: conn.execute(sql).fetchone()[0]  # noqa: E731
    assert q("SELECT COUNT(*) FROM bills b WHERE amount_paid <> (SELECT IFNULL(SUM(amount), 0)"
             " FROM payments p WHERE p.bill_id = b.bill_id)") == 0
    assert q("SELECT COUNT(*) FROM lines l WHERE data_used_mb <> (SELECT IFNULL(SUM(mb), 0)"
             " FROM usage_records u WHERE u.line_id = l.line_id)") == 0
    assert q("SELECT MAX(n) FROM (SELECT COUNT(*) n FROM line_addons GROUP BY line_id)") <= 3
    assert q("SELECT COUNT(*) FROM customers c WHERE (SELECT COUNT(*) FROM lines l WHERE l.customer_id ="
             " c.customer_id AND status <> 'terminated') > CASE segment WHEN 'business' THEN 8 ELSE 4 END") == 0
    assert q("SELECT COUNT(*) FROM lines l JOIN plans p USING (plan_id) WHERE roaming_enabled = 1"
             " AND roaming_included = 0 AND NOT EXISTS (SELECT 1 FROM line_addons la JOIN addons a"
             " USING (addon_id) WHERE la.line_id = l.line_id AND a.kind = 'roaming')") == 0
    assert q("SELECT COUNT(*) FROM lines WHERE suspend_reason = 'non_payment' AND customer_id NOT IN"
             " (SELECT customer_id FROM bills WHERE status = 'open' AND due_date < '2026-05-10')") == 0
    assert q("SELECT COUNT(*) FROM plans WHERE status = 'retired'") >= 1


def test_generator_is_seeded_at_the_default_scale(telecom: World) -> None:
    a, b = telecom.build_state(3, 20), telecom.build_state(3, 20)
    assert st.state_hash(a) == st.state_hash(b)
    assert st.state_hash(telecom.build_state(4, 20)) != st.state_hash(a)
    rows = _rows_by_table(a)
    assert 200 <= sum(rows.values()) <= 600, rows
    assert all(n > 0 for n in rows.values()), rows
    _check_invariants(a)
    with pytest.raises(ValueError, match="scale"):
        telecom.generator.generate(telecom.empty_state(), seed=1, scale=0)


@pytest.mark.slow  # 3-10 s on the shared CPU
def test_generator_reaches_1e5_rows_in_seconds(telecom: World) -> None:
    conn = telecom.empty_state()
    t0 = time.perf_counter()
    conn.execute("BEGIN")
    telecom.generator.generate(conn, seed=9, scale=7000)
    conn.execute("COMMIT")
    elapsed = time.perf_counter() - t0
    total = sum(_rows_by_table(conn).values())
    assert total >= 100_000, total
    assert elapsed < 20, elapsed  # about 3 s on one shared core
    _check_invariants(conn)


# -- boundary variants ------------------------------------------------------------------------------

def _naive_call(kind: str, v: Any) -> ToolCall:
    """The call a naive agent makes for the variant: the wanted action, taken literally."""
    f = v.focus
    want_kind, fields, _ = f["wants"][0]
    if kind == "pay_over":
        return pay(fields["bill_id"], f["method_ids"][0], v.preference["believed_amount"])
    if kind == "card_expired":
        return pay(fields["bill_id"], v.preference["preferred_method"], fields["amount"])
    if kind == "retired_plan":
        return call("change_plan", line_id=fields["line_id"], plan_id=v.preference["preferred_plan"])
    if kind == "terminated_line":
        return call("resume_line", line_id=f["line_ids"][0])
    if want_kind == "add_line":
        return call("add_line", customer_id=f["user_id"], plan_id=fields["plan_id"])
    if want_kind == "pay":
        return pay(fields["bill_id"], fields.get("method_id", f["method_ids"][0]), fields["amount"])
    if want_kind == "add_addon":
        return call("add_addon", **fields)
    if want_kind == "suspend":
        return call("suspend_line", **fields)
    if want_kind == "change_plan":
        return call("change_plan", **fields)
    if want_kind == "roaming_on":
        return call("set_roaming", line_id=fields["line_id"], enabled=True)
    if want_kind == "terminate":
        return call("terminate_line", **fields)
    raise AssertionError(want_kind)


ALLOWED = {"line_limit_room", "pay_exact", "card_valid", "bill_due_today", "addons_room", "suspend_one_used",
           "contract_ends_today", "usage_at_allowance", "roaming_with_pass", "close_line"}


def test_boundary_variants_sit_one_step_either_side_of_their_rule(telecom: World) -> None:
    """At the limit the wanted call passes; one past it (or the naive first choice) is rejected
    with exactly the variant's rule."""
    design = telecom.design
    base = telecom.build_state(2, 20)
    seen = set()
    for kind in design.KINDS:
        rng = random.Random(kind)
        v = next(v for v in (design._make(kind, base, rng) for _ in range(20)) if v is not None)
        env = telecom.env(telecom.state_ref(2, 20, v.patches))
        obs = env.call(_naive_call(kind, v))
        if kind in ALLOWED:
            assert obs.ok, (kind, v.note, obs.content)
            assert not v.allow_no_change
        else:
            assert obs.code == v.rules[0], (kind, v.note, obs.content)
        assert v.persona in {"novice", "boundary", "mismatch", "entangled"}
        seen.add(v.rules[0])
        env.close()
    base.close()
    assert len(seen) >= 11


# -- logic-driven synthesis ---------------------------------------------------------------------------

@pytest.fixture(scope="module")
def synthesized(telecom: World) -> tuple[list[Task], dict]:
    result = get_method("logic_driven")(SynthesisConfig(world="telecom", n_tasks=14, seed=0), telecom)
    assert len(result.tasks) == 14, dict(result.drops)
    return result.tasks, result.stats


def test_synthesized_tasks_replay_to_their_targets(telecom: World, synthesized: tuple[list[Task], dict]) -> None:
    tasks, stats = synthesized
    assert stats["yield"] > 0.5
    for task in tasks:
        assert task.world == "telecom" and task.id == task.compute_id()
        assert replay(telecom, task) == task.target_state_hash
        assert task.reference_solution[0].name == "get_customer_details"
        if task.metadata["path_length"] == 0:  # refusing is right: the target is the initial state
            assert task.target_state_hash == task.initial_state.state_hash and not task.target_diff
        else:
            assert task.target_diff
    assert {t.split for t in tasks} == {"train", "test"}
    assert any(t.metadata["path_length"] == 0 for t in tasks) and any(t.metadata["path_length"] == 2 for t in tasks)


def test_synthesized_tasks_speak_from_the_users_side(telecom: World,
                                                     synthesized: tuple[list[Task], dict]) -> None:
    tasks, _ = synthesized
    for task in tasks:
        assert goal_of(task).startswith(GOAL_LEADS)
        assert not any(name in task.instruction for name in telecom.tools)
        assert not ID_RE.search(task.instruction), task.instruction
        conn = telecom.build_state(task.initial_state.seed, task.initial_state.scale, task.initial_state.patches)
        cid = task.user.known_info["user_id"]
        assert conn.execute("SELECT 1 FROM customers WHERE customer_id = ?", (cid,)).fetchone()
        number = task.user.known_info.get("phone number")
        if number:
            assert number in task.instruction
            owner = conn.execute("SELECT customer_id FROM lines WHERE phone_number = ?", (number,)).fetchone()
            assert owner == (cid,)
        conn.close()


def test_synthesis_covers_most_compiled_rules(telecom: World, synthesized: tuple[list[Task], dict]) -> None:
    tasks, stats = synthesized
    covered = {r for t in tasks for r in t.metadata["rules"]}
    assert covered <= set(telecom.compiled_rules())
    assert len(covered) > len(telecom.compiled_rules()) / 2, sorted(covered)
    assert len({t.metadata["boundary"] for t in tasks}) >= 10
    assert set(stats["rule_rejections_during_search"]) & covered  # naive calls did hit the triggers


def test_constraint_guided_runs_on_telecom(telecom: World) -> None:
    # The world has CoVe hooks now (envs/worlds/telecom/constraints.py; tests/envs/test_cove.py).
    r = get_method("constraint_guided")(SynthesisConfig(world="telecom", method="constraint_guided", n_tasks=2),
                                        telecom)
    assert len(r.tasks) == 2 and all(replay(telecom, t) == t.target_state_hash for t in r.tasks)
