"""The retail world: every compiled rule rejects its violating probe (with exactly its rule
id) and admits its valid probe one step away; side effects apply; every tool runs through
`Env.call`; the generator is seeded and scales; logic-driven synthesis emits tasks that
replay to their target, with boundary states on both sides of every rule."""

from __future__ import annotations

import json
import random
import re
import sqlite3
import time

import pytest

from data.records import StateRef, Task, ToolCall
from envs import state as st
from envs.registry import get_world, list_worlds
from envs.world import Env, World
from envs.worlds.retail.probes import (
    FIXTURE,
    MORE_PROBES,
    NOW,
    PROBES,
    address,
    call,
    exch,
    order,
    ret,
)
from synthesis.base import SynthesisConfig, get_method
from synthesis.explorer import ExplorerConfig, explore
from synthesis.logic_driven import replay
from synthesis.scenario import GOAL_LEADS, goal_of
from synthesis.set_designer import design_states


@pytest.fixture(scope="module")
def retail() -> World:
    return get_world("retail")


@pytest.fixture()
def env(retail: World) -> Env:
    conn = retail.empty_state()
    conn.executescript(FIXTURE)
    return Env(retail, conn)


def _value(env: Env, sql: str, *args: object) -> object:
    return env.conn.execute(sql, args).fetchone()[0]


def test_registered_with_compiled_and_policy_only_rules(retail: World) -> None:
    assert "retail" in list_worlds()
    compiled = retail.compiled_rules()
    assert set(compiled) == set(PROBES) and len(compiled) >= 8
    policy_ids = set(re.findall(r"\b(R\d+_[A-Z0-9_]+)\b", retail.policy))
    assert set(compiled) <= policy_ids and len(policy_ids) >= 10
    assert policy_ids - set(compiled) == {"R13_AUTHENTICATE", "R14_CONFIRM_BEFORE_WRITE", "R15_NO_WORKAROUNDS"}
    for rule in policy_ids - set(compiled):
        assert f"**{rule}** *(policy only)*" in retail.policy
    for rule in compiled:
        assert f"**{rule}** *(enforced)*" in retail.policy


def _check_probe(env: Env, rule: str, bad: ToolCall, good: ToolCall) -> None:
    probe = env.fork()
    before = probe.state_hash()
    obs = probe.call(bad)
    assert obs.error == "rule_violation", obs.content
    assert obs.code == rule and rule in obs.content, obs.content
    assert probe.state_hash() == before  # a rejected call leaves no trace
    ok = env.fork().call(good)
    assert ok.ok, ok.content
    assert ok.wrote


@pytest.mark.parametrize("rule", sorted(PROBES))
def test_rule_rejects_violation_and_admits_valid(env: Env, rule: str) -> None:
    _check_probe(env, rule, *PROBES[rule])


@pytest.mark.parametrize("i", range(len(MORE_PROBES)), ids=[p[0] for p in MORE_PROBES])
def test_rule_on_its_other_paths(env: Env, i: int) -> None:
    _check_probe(env, *MORE_PROBES[i])


def test_side_effects_of_orders_cancels_returns_and_exchanges(env: Env) -> None:
    stock = lambda v: _value(env, "SELECT stock FROM variants WHERE variant_id = ?", v)  # noqa: E731
    balance = lambda p: _value(env, "SELECT balance FROM payment_methods WHERE payment_id = ?", p)  # noqa: E731
    obs = env.call(order(["V1a", "V2a"], [2, 1], "gc1"))
    assert obs.ok, obs.content
    new = json.loads(obs.content)
    assert new["total"] == 52 and new["status"] == "pending" and new["address"] == "1 Main Street, Springfield"
    assert stock("V1a") == 8 and stock("V2a") == 9 and balance("gc1") == 48
    assert new["transactions"] == [{"source": "order", "payment_id": "gc1", "kind": "charge", "amount": 52,
                                    "created_at": NOW}]
    # cancelling refunds the gift card and restocks
    assert env.call(call("cancel_pending_order", order_id=new["order_id"], reason="ordered by mistake")).ok
    assert stock("V1a") == 10 and stock("V2a") == 10 and balance("gc1") == 100
    assert _value(env, "SELECT kind || ':' || amount FROM transactions WHERE order_id = ? AND source = 'cancel'",
                  new["order_id"]) == "refund:52"
    # a return refunds the price paid onto the chosen gift card and restocks
    obs = env.call(ret("OD", "V1a", 2, "gc1"))
    assert obs.ok, obs.content
    assert balance("gc1") == 140 and stock("V1a") == 12
    assert _value(env, "SELECT returned FROM order_items WHERE order_id = 'OD' AND variant_id = 'V1a'") == 3
    # an exchange moves stock both ways and charges the price difference (25 - 20) to the gift card
    obs = env.call(exch("O30", "V1a", "V1b", 1, "gc1"))
    assert obs.ok, obs.content
    assert stock("V1b") == 2 and stock("V1a") == 13 and balance("gc1") == 135
    body = json.loads(obs.content)
    assert body["items"][0]["exchanged"] == 1 and body["exchanges"][0]["price_difference"] == 5
    assert any(t["kind"] == "charge" and t["amount"] == 5 for t in body["transactions"])


def test_ids_are_deterministic_in_the_state(env: Env) -> None:
    a, b = env.fork(), env.fork()
    oa = json.loads(a.call(order(["V1a"], [1], "cc1")).content)["order_id"]
    ob = json.loads(b.call(order(["V1a"], [1], "cc1")).content)["order_id"]
    assert oa == ob and oa.startswith("#W") and len(oa) == 9
    assert a.state_hash() == b.state_hash()
    assert a.call(ret("OD", "V2a", 1)).ok and b.call(ret("OD", "V2a", 1)).ok
    assert a.state_hash() == b.state_hash()


# One successful call per tool (reads and writes), each through Env.call.
TOOL_CALLS = {
    "find_customer_by_email": (call("find_customer_by_email", email=" UMA@example.com"), '"c1"'),
    "find_customer_by_name_zip": (call("find_customer_by_name_zip", first_name="uma", last_name="One",
                                       zip_code="94107"), '"customer_ids": ["c1"]'),
    "get_customer_details": (call("get_customer_details", customer_id="c1"), '"gift_card"'),
    "get_order_details": (call("get_order_details", order_id="OD"), '"product_name": "T-Shirt"'),
    "get_product_details": (call("get_product_details", product_id="P1"), '"size": "M"'),
    "list_products": (call("list_products", category="Kitchen"), '"Mug"'),
    "calculate": (call("calculate", expression="3 * (20 + 5) - 2"), '"result": 73'),
    "place_order": (order(["V2a"], [2], "pp1"), '"total": 24'),
    "cancel_pending_order": (call("cancel_pending_order", order_id="OP", reason="no longer needed"),
                             '"cancelled"'),
    "modify_order_address": (address("OPR", "  9  New Road,  Fairview "), '"9 New Road, Fairview"'),
    "return_item": (ret("O30", "V1a", 1), '"amount": 20'),
    "exchange_item": (exch("OD", "V1a", "V1b"), '"price_difference": 5'),
    "transfer_to_human_agents": (call("transfer_to_human_agents", summary="wants a refund to cash"),
                                 '"transferred": true'),
}


def test_every_tool_runs_through_env(retail: World, env: Env) -> None:
    assert set(TOOL_CALLS) == set(retail.tools) and len(retail.tools) >= 10
    writes = {n for n, t in retail.tools.items() if t.write}
    assert writes == {"place_order", "cancel_pending_order", "modify_order_address", "return_item", "exchange_item"}
    for name, (c, expected) in TOOL_CALLS.items():
        probe = env.fork()
        before = probe.state_hash()
        obs = probe.call(c)
        assert obs.ok, (name, obs.content)
        assert expected in obs.content, (name, obs.content)
        assert obs.wrote == (name in writes)
        assert (probe.state_hash() != before) == (name in writes), name


def test_bad_calls_are_structured_errors(env: Env) -> None:
    before = env.state_hash()
    cases = [
        (call("buy_everything"), "unknown_tool", "unknown_tool"),
        (call("get_order_details", order="OD"), "bad_arguments", "unknown_argument"),
        (call("return_item", order_id="OD", variant_id="V2a", quantity=1), "bad_arguments", "missing_argument"),
        (order(["V1a"], ["two"], "cc1"), "bad_arguments", "wrong_type"),  # type: ignore[list-item]
        (call("place_order", customer_id="c1", variant_ids="V1a", quantities=[1], payment_id="cc1"),
         "bad_arguments", "wrong_type"),
        (call("cancel_pending_order", order_id="OP", reason="changed my mind"), "bad_arguments", "wrong_type"),
        (call("get_order_details", order_id="#W0000000"), "tool_error", "NOT_FOUND"),
        (order(["V1a", "V2a"], [1], "cc1"), "tool_error", "BAD_VALUE"),
        (order(["V1a", "V1a"], [1, 1], "cc1"), "tool_error", "BAD_VALUE"),
        (order(["V9z"], [1], "cc1"), "tool_error", "NOT_FOUND"),
        (ret("OD", "V1c", 1), "tool_error", "NOT_FOUND"),  # not an item of that order
        (ret("OD", "V2a", 0), "tool_error", "BAD_VALUE"),
        (address("OP", "1 Main Street, Springfield"), "tool_error", "NO_CHANGE"),
        (call("list_products", category="garden"), "tool_error", "NOT_FOUND"),
        (call("calculate", expression="__import__('os')"), "tool_error", "BAD_EXPRESSION"),
    ]
    for c, error, code in cases:
        obs = env.call(c)
        assert (obs.error, obs.code) == (error, code), (c, obs.content)
        assert json.loads(obs.content)["error"] == error
    assert env.state_hash() == before
    assert env.call(order(["V1a"], ["2"], "cc1")).ok  # a lossless string-to-int is accepted


def test_tool_schemas_come_from_signatures_and_docstrings(retail: World) -> None:
    schema = retail.tools["place_order"].schema()["function"]
    props = schema["parameters"]["properties"]
    assert schema["parameters"]["required"] == ["customer_id", "variant_ids", "quantities", "payment_id"]
    assert props["variant_ids"] == {"type": "array", "items": {"type": "string"},
                                    "description": props["variant_ids"]["description"]}
    assert props["quantities"]["items"] == {"type": "integer"}
    assert all(f"R{n:02d}" in schema["description"] for n in (2, 3, 4, 10))
    reason = retail.tools["cancel_pending_order"].schema()["function"]["parameters"]["properties"]["reason"]
    assert reason["enum"] == ["no longer needed", "ordered by mistake"]
    optional = retail.tools["list_products"].schema()["function"]["parameters"]
    assert optional["required"] == [] and optional["properties"]["category"]["default"] is None


def _rows(conn: sqlite3.Connection) -> int:
    return sum(conn.execute(f'SELECT COUNT(*) FROM "{t}"').fetchone()[0] for t in st.tables(conn))


def _consistent(conn: sqlite3.Connection) -> None:
    """The generated history obeys the schema: keys resolve, counters and the ledger add up."""
    q = conn.execute
    assert q("PRAGMA foreign_key_check").fetchall() == []
    assert q("PRAGMA integrity_check").fetchone()[0] == "ok"
    assert q("SELECT COUNT(*) FROM orders o WHERE total <> (SELECT SUM(quantity * unit_price) FROM order_items i"
             " WHERE i.order_id = o.order_id)").fetchone()[0] == 0
    assert q("SELECT COUNT(*) FROM order_items i WHERE returned <> (SELECT COALESCE(SUM(quantity), 0) FROM returns r"
             " WHERE r.order_id = i.order_id AND r.variant_id = i.variant_id)").fetchone()[0] == 0
    assert q("SELECT COUNT(*) FROM orders WHERE order_id NOT IN (SELECT order_id FROM transactions"
             " WHERE source = 'order')").fetchone()[0] == 0
    assert q("SELECT COUNT(*) FROM orders WHERE status = 'cancelled' AND order_id NOT IN"
             " (SELECT order_id FROM transactions WHERE source = 'cancel')").fetchone()[0] == 0


def test_generator_is_seeded_and_consistent(retail: World) -> None:
    a, b = retail.build_state(3, 30), retail.build_state(3, 30)
    assert st.state_hash(a) == st.state_hash(b)
    assert st.state_hash(retail.build_state(4, 30)) != st.state_hash(a)
    assert 200 <= _rows(a) <= 1000
    _consistent(a)
    statuses = {r[0] for r in a.execute("SELECT DISTINCT status FROM orders")}
    assert statuses == {"pending", "processed", "shipped", "delivered", "cancelled"}
    assert a.execute("SELECT COUNT(*) FROM returns").fetchone()[0] > 0
    bigger = retail.build_state(3, 120)
    assert _rows(bigger) > 2.5 * _rows(a)
    _consistent(bigger)
    conn = retail.empty_state()
    with pytest.raises(ValueError, match="scale"):
        retail.generator.generate(conn, seed=0, scale=0)


def test_generator_reaches_1e5_rows(retail: World) -> None:
    conn = retail.empty_state()
    t0 = time.process_time()
    conn.execute("BEGIN")
    retail.generator.generate(conn, seed=1, scale=10_000)
    conn.execute("COMMIT")
    cpu = time.process_time() - t0
    assert _rows(conn) >= 100_000
    assert cpu < 15, f"generation took {cpu:.1f} s of CPU"
    assert conn.execute("PRAGMA foreign_key_check").fetchall() == []


# --------------------------------------------------------------------------- synthesis

def _hidden_ids(world: World, ref: StateRef) -> set[str]:
    """Ids a user would not know: customer, payment, product and variant ids."""
    conn = world.build_state(ref.seed, ref.scale, ref.patches)
    ids = {r[0] for t, c in [("customers", "customer_id"), ("payment_methods", "payment_id"),
                             ("products", "product_id"), ("variants", "variant_id")]
           for r in conn.execute(f"SELECT {c} FROM {t}")}
    conn.close()
    return ids


@pytest.fixture(scope="module")
def tasks(retail: World) -> list[Task]:
    result = get_method("logic_driven")(SynthesisConfig(world="retail", n_tasks=21, seed=3), retail)
    assert len(result.tasks) == 21, result.drops
    return result.tasks


def test_synthesized_tasks_replay_to_their_target(retail: World, tasks: list[Task]) -> None:
    for task in tasks:
        assert task.world == "retail" and task.id == task.compute_id()
        assert task.reference_solution[0].name == "find_customer_by_email"
        assert replay(retail, task) == task.target_state_hash
    assert {t.split for t in tasks} == {"train", "test"}


def test_instructions_state_goals_from_the_user_side(retail: World, tasks: list[Task]) -> None:
    for task in tasks:
        assert goal_of(task).startswith(GOAL_LEADS)
        assert not any(name in task.instruction for name in retail.tools)
        texts = [task.instruction, *task.user.known_info.values(), *task.user.unknown_info]
        leaked = {i for i in _hidden_ids(retail, task.initial_state) if any(i in text for text in texts)}
        assert not leaked, (task.instruction, leaked)
        assert "@" in task.user.known_info["email"]


def test_tasks_cover_most_rules_on_both_sides(retail: World, tasks: list[Task]) -> None:
    design = retail.design
    covered = {r for t in tasks for r in t.metadata["rules"]}
    assert len(covered & set(retail.compiled_rules())) >= 10, covered
    kinds = {t.metadata["boundary"] for t in tasks}
    assert kinds & set(design.ALLOWED) and kinds & set(design.REJECTED)
    for t in tasks:
        assert design.RULE_OF[t.metadata["boundary"]] in t.metadata["rules"]
        if t.metadata["boundary"] in design.ALLOWED:
            assert t.target_diff, t.metadata  # at the limit: the request goes through


@pytest.mark.parametrize("kind", sorted(get_world("retail").design.KINDS))
def test_each_boundary_kind_sits_one_step_from_its_rule(retail: World, kind: str) -> None:
    """At the limit the expected write succeeds and is describable; one past, the naive call
    hits exactly the rule, and either an alternative or no change is the goal."""
    design = retail.design
    base = retail.build_state(2, 30)
    variant = design._MAKERS[kind](kind, base, random.Random(7))
    base.close()
    assert variant is not None and variant.persona in {"novice", "boundary", "mismatch", "entangled"}
    ref = retail.state_ref(2, 30, variant.patches)
    env = retail.env(ref)
    root, reached, rejections = explore(retail, env, variant.focus, ExplorerConfig(max_depth=1), random.Random(0))
    rule = design.RULE_OF[kind]
    before = st.restore(root.snapshot)
    best = None
    for r in reached.values():
        after = st.restore(r.snapshot)
        changes = st.diff_states(before, after)
        goal = design.describe(changes, before, after, variant)
        score = design.goal_score(changes, variant)
        if goal is not None and (best is None or score > best[0]):
            best = (score, r, goal)
    assert best is not None
    score, goal_state, goal = best
    assert score >= 2, (kind, goal.instruction)
    if kind in design.ALLOWED:
        assert goal_state is not root  # the write at the limit went through
    else:
        assert rejections.get(rule), (kind, rejections)
        assert (goal_state is root) == variant.allow_no_change
    assert goal.instruction.startswith("You want to")
    assert not any(i in goal.instruction for i in _hidden_ids(retail, ref))


def test_constraint_guided_runs_on_retail(retail: World) -> None:
    # The world has CoVe hooks now (envs/worlds/retail/constraints.py; tests/envs/test_cove.py).
    r = get_method("constraint_guided")(SynthesisConfig(method="constraint_guided", world="retail", n_tasks=2), retail)
    assert len(r.tasks) == 2 and all(replay(retail, t) == t.target_state_hash for t in r.tasks)


def test_boundary_state_makes_a_naive_return_hit_the_window(retail: World) -> None:
    for variant, ref in design_states(retail, seed=0, scale=30, n=24):
        if variant.kind != "return_day_31":
            continue
        env = retail.env(ref)
        oid = variant.focus["order_ids"][0]
        line = env.conn.execute("SELECT variant_id, quantity FROM order_items WHERE order_id = ?"
                                " ORDER BY variant_id", (oid,)).fetchone()
        pay = env.conn.execute("SELECT payment_id FROM orders WHERE order_id = ?", (oid,)).fetchone()[0]
        assert env.call(ret(oid, line[0], 1, pay)).code == "R05_RETURN_WINDOW"
        return
    raise AssertionError("no return_day_31 variant designed")


ASKED = {"address": "modify_order_address", "cancel": "cancel_pending_order", "return": "return_item",
         "exchange": "exchange_item"}


@pytest.mark.parametrize("kind", sorted(k for k in get_world("retail").design.REJECTED if k.split("_")[0] in ASKED))
def test_a_refusal_task_refuses_what_its_user_asks_for(retail: World, kind: str) -> None:
    """The refused request is the one the user's wish names: a user who wants a cancelled or
    shipped order sent elsewhere is refused the address change, not a cancellation they never
    asked for (the cancel call, also a candidate there, hits the same rule first otherwise)."""
    from synthesis.logic_driven import refused_request

    base = retail.build_state(2, 30)
    variant = retail.design._MAKERS[kind](kind, base, random.Random(7))
    base.close()
    refused, rule = refused_request(retail, retail.state_ref(2, 30, variant.patches), variant)
    assert refused is not None and rule == retail.design.RULE_OF[kind]
    assert refused.name == ASKED[kind.split("_")[0]], (kind, refused)


@pytest.mark.parametrize("kind", ["payment_same_account", "payment_other_account"])
def test_the_other_account_is_the_same_persons_own(retail: World, kind: str) -> None:
    """The person's second account is a customer row of its own: the person's name, an id of
    the generator's form that no one else holds, and the gift card on it; no other customer
    is renamed."""
    base = retail.build_state(2, 30)
    before = {r[0]: r[1:] for r in base.execute("SELECT * FROM customers")}
    variant = retail.design._MAKERS[kind](kind, base, random.Random(7))
    base.close()
    env = retail.env(retail.state_ref(2, 30, variant.patches))
    after = {r[0]: r[1:] for r in env.conn.execute("SELECT * FROM customers")}
    owner, other = variant.focus["buy"]["customer_ids"]
    assert other not in before and set(after) == set(before) | {other}
    assert all(after[c] == before[c] for c in before)
    first, last = after[other][0], after[other][1]
    assert (first, last) == before[owner][:2] and re.fullmatch(rf"{first.lower()}_{last.lower()}_\d{{4}}", other)
    gift = variant.focus["buy"]["payment_ids"][0]
    assert env.conn.execute("SELECT customer_id, kind FROM payment_methods WHERE payment_id = ?",
                            (gift,)).fetchone() == (other, "gift_card")
