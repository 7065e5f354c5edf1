"""Constraint-guided synthesis and verification (CoVe): tasks validate, descriptions are
unique and id-free, and V(τ, C) passes outcome-equivalent paths and fails known-bad ones."""

from __future__ import annotations

import random
import re
from typing import Any

import pytest

import envs.worlds.airline.constraints as ac
import synthesis.constraint_guided as cg
from data.records import Step, Task, ToolCall, Trajectory, Verification
from envs.constraints import Constraint, FuzzifyError, load_constraints, world_constraints
from envs.world import World
from rollout.user import ScriptedUser
from synthesis.base import SynthesisConfig, SynthesisResult, get_method
from synthesis.logic_driven import replay
from verifiers.audit import audit, audit_cases, cases, counted, mutants
from verifiers.base import get_verifier
from verifiers.constraints import (
    ConstraintVerifier,
    constraint_score,
    score_constraints,
)

ID_PATTERNS = [re.compile(p) for p in (r"HAT\d{3}", r"\bR[0-9A-F]{6,}\b", r"(credit_card|gift_card|certificate)_\d")]


@pytest.fixture(scope="module")
def result(airline: World) -> SynthesisResult:
    return cg.synthesize(SynthesisConfig(method="constraint_guided", n_tasks=12, seed=3), airline)


@pytest.fixture(scope="module")
def ctasks(result: SynthesisResult) -> list[Task]:
    assert len(result.tasks) == 12
    return result.tasks


def traj(task: Task, calls: list[ToolCall], termination: str = "user_stop") -> Trajectory:
    steps = [Step(index=i, turn=i + 1, action=c) for i, c in enumerate(calls)]
    return Trajectory(id=f"t-{len(calls)}", task_id=task.id, trial=0, model="test", steps=steps,
                      termination=termination)  # type: ignore[arg-type]


def writes(world: World, task: Task) -> list[ToolCall]:
    return [c for c in task.reference_solution if world.tools[c.name].write]


def initial(world: World, task: Task) -> Any:
    ref = task.initial_state
    return world.build_state(ref.seed, ref.scale, ref.patches)


# -- synthesis -----------------------------------------------------------------------------

def test_registered_and_every_task_validates(airline: World, ctasks: list[Task]) -> None:
    assert get_method("constraint_guided").__wrapped__ is cg.synthesize  # type: ignore[attr-defined]
    state = get_verifier("state_equivalence")
    for task in ctasks:
        assert task.method == "constraint_guided" and task.id == task.compute_id()
        assert replay(airline, task) == task.target_state_hash != task.initial_state.state_hash
        assert task.target_diff and task.verification.constraints and task.metadata["fuzzy"]
        assert state.verify(task, traj(task, task.reference_solution)).passed
        constraints = load_constraints(task.verification.constraints)
        assert len(writes(airline, task)) == len(constraints)
        conn = initial(airline, task)
        env = airline.env(task.initial_state)
        for call in task.reference_solution:
            assert env.call(call).ok
        satisfied, _ = ac.check(conn, env.conn, constraints)
        assert all(satisfied)
        assert {"user_id"} <= set(task.user.known_info)


def test_stats_and_kinds(result: SynthesisResult) -> None:
    s = result.stats
    assert s["fuzzy_unique_rate"] == 1.0 and s["fuzzy_descriptions"] >= 24
    assert 0 < s["fuzzy_first_draw_unique_rate"] <= 1.0
    assert set(s["constraint_kinds"]) == {"book", "cancel", "bags", "change"}
    assert s["emitted"] == 12 and sum(result.drops.values()) == s["attempted"] - s["emitted"]


def _independent_matches(conn: Any, entity: str, where: dict[str, Any]) -> list[str]:
    """Re-count in Python from the base tables (not through the module's SQL views)."""
    def rows(sql: str) -> list[dict[str, Any]]:
        cur = conn.execute(sql)
        return [dict(zip([d[0] for d in cur.description], r, strict=True)) for r in cur.fetchall()]

    if entity == "flight":
        items = [{**f, "id": f["flight_id"], "part_of_day": ac.part_of_day(f["departure"])}
                 for f in rows("SELECT * FROM flights")]
    elif entity == "payment":
        items = [{**p, "id": p["payment_id"]} for p in rows("SELECT * FROM payment_methods")]
    else:
        flights = {f["flight_id"]: f for f in rows("SELECT * FROM flights")}
        items = [{**flights[r["flight_id"]], **r, "id": r["reservation_id"]} for r in rows("SELECT * FROM reservations")]
    return [i["id"] for i in items if all(i[k] == v for k, v in where.items())]


def test_descriptions_are_unique_in_the_database(airline: World, ctasks: list[Task]) -> None:
    checked = 0
    for task in ctasks:
        conn = initial(airline, task)
        constraints = task.verification.constraints
        for slot, attrs in task.metadata["fuzzy_attributes"].items():
            index, field = slot.split(".", 1)
            record = constraints[int(index[1:])]["fields"][field]
            assert _independent_matches(conn, attrs["entity"], attrs["where"]) == [record], (slot, attrs)
            assert ac.matching_ids(conn, attrs["entity"], attrs["where"]) == [record]
            assert task.metadata["fuzzy"][slot] in task.instruction
            checked += 1
    assert checked >= 2 * len(ctasks)


def test_user_side_never_sees_ids(airline: World, ctasks: list[Task]) -> None:
    for task in ctasks:
        ids = {str(v) for c in task.verification.constraints for k, v in c["fields"].items()
               if k.endswith("_id") and k != "user_id"}
        conn = initial(airline, task)
        ids |= {r[0] for r in conn.execute("SELECT flight_number FROM flights")}
        texts = [*cg.user_texts(task), ScriptedUser(task).first_message()]
        for text in texts:
            assert not any(i in text for i in ids), text
            assert not any(p.search(text) for p in ID_PATTERNS), text
            assert not any(name in text for name in airline.tools), text


def test_ambiguous_description_is_redrawn_then_dropped(airline: World) -> None:
    conn = airline.build_state(3, 30)
    uid, card = conn.execute("SELECT user_id, payment_id FROM payment_methods WHERE kind = 'gift_card'"
                             " ORDER BY payment_id LIMIT 1").fetchone()
    (balance,) = conn.execute("SELECT balance FROM payment_methods WHERE payment_id = ?", (card,)).fetchone()
    c = Constraint(kind="book", fields={"user_id": uid, "flight_id": conn.execute(
        "SELECT flight_id FROM flights WHERE status = 'scheduled' LIMIT 1").fetchone()[0],
        "cabin": "economy", "passengers": 1, "payment_id": card, "insurance": False})
    ref = ac.fuzzify(conn, [c], random.Random(0)).refs["c0.payment_id"]
    assert ref.text == "your gift card" and ref.level == 0
    # A second gift card with another balance: "your gift card" matches two, the balance decides.
    conn.execute("INSERT INTO payment_methods VALUES ('gift_card_x1', ?, 'gift_card', NULL, ?)", (uid, balance + 10))
    ref = ac.fuzzify(conn, [c], random.Random(0)).refs["c0.payment_id"]
    assert ref.first_matches == 2 and ref.level == 1 and str(balance) in ref.text
    # A third with the same balance: nothing tells them apart, so the task is dropped.
    conn.execute("INSERT INTO payment_methods VALUES ('gift_card_x2', ?, 'gift_card', NULL, ?)", (uid, balance))
    with pytest.raises(FuzzifyError):
        ac.fuzzify(conn, [c], random.Random(0))


def test_fuzzify_failures_are_counted_drops(airline: World, monkeypatch: pytest.MonkeyPatch) -> None:
    def ambiguous(conn: Any, constraints: list[Constraint], rng: random.Random) -> Any:
        raise FuzzifyError("payment", "x", 2)

    monkeypatch.setattr(world_constraints(airline), "fuzzify", ambiguous)
    r = cg.synthesize(SynthesisConfig(method="constraint_guided", n_tasks=2, seed=5), airline)
    assert not r.tasks and r.drops["fuzzy_ambiguous"] == r.stats["attempted"] > 0


def _lookalike_case(airline: World) -> tuple[int, list[Constraint]]:
    """A seed and a two-write set whose first write books a look-alike of the reservation the
    second changes: the user's only reservation, and another flight on the same route and
    day booked in the same cabin for as many passengers. "Your trip to X" (or "on <date>")
    is unique at first and matches both reservations after the booking, however specific."""
    module = world_constraints(airline)
    for seed in range(1, 12):
        conn = airline.build_state(seed, 30)
        try:
            rows = conn.execute(
                "SELECT r.user_id, r.reservation_id, r.cabin, r.passengers, g.flight_id FROM reservations r"
                " JOIN flights f ON f.flight_id = r.flight_id JOIN flights g ON g.origin = f.origin"
                " AND g.destination = f.destination AND g.date = f.date AND g.flight_id <> f.flight_id"
                " WHERE r.status = 'active' AND f.status IN ('scheduled', 'delayed') AND g.status = 'scheduled'"
                " AND g.date > date((SELECT value FROM meta WHERE key = 'now')) AND g.seats_available >= r.passengers"
                " AND (SELECT COUNT(*) FROM reservations x WHERE x.user_id = r.user_id) = 1"
                " ORDER BY r.reservation_id").fetchall()
            for uid, rid, cabin, pax, flight in rows:
                _, bags = module._bag_options(conn, rid)
                (card,) = conn.execute("SELECT payment_id FROM payment_methods WHERE user_id = ?"
                                       " AND kind = 'credit_card'", (uid,)).fetchone()
                if bags:
                    return seed, [
                        Constraint(kind="book", fields={"user_id": uid, "flight_id": flight, "cabin": cabin,
                                                        "passengers": pax, "payment_id": card, "insurance": False}),
                        Constraint(kind="bags", fields={"user_id": uid, "reservation_id": rid, "total_bags": bags[0]})]
        finally:
            conn.close()
    raise AssertionError("no seed has a look-alike case")


def test_description_made_ambiguous_by_the_tasks_own_write_is_dropped(
        airline: World, monkeypatch: pytest.MonkeyPatch) -> None:
    seed, constraints = _lookalike_case(airline)
    module = world_constraints(airline)
    ref, conn = airline.state_ref(seed, 30), airline.build_state(seed, 30)
    try:
        fuzzy = module.fuzzify(conn, constraints, random.Random(0))
        task = cg._build(airline, module, ref, conn, constraints, fuzzy, SynthesisResult())
    finally:
        conn.close()
    assert task is not None, "the task builds and its reference reaches the target"
    assert cg.recheck_unique(airline, task) == (3, 3)  # unique on the initial state
    found = cg.ambiguous_after_writes(airline, task)
    assert set(found) == {"c1.reservation_id"}
    after, ids = found["c1.reservation_id"]
    assert after == 1 and constraints[1]["reservation_id"] in ids and len(ids) == 2

    # Through the synthesis loop: the only set it can draw is that one, so nothing is emitted.
    def only_this(c: Any, rng: random.Random, **_: Any) -> list[Constraint]:
        rid = constraints[1]["reservation_id"]
        return constraints if c.execute("SELECT 1 FROM reservations WHERE reservation_id = ?", (rid,)).fetchone() \
            else []

    monkeypatch.setattr(module, "sample_constraints", only_this)
    r = cg.synthesize(SynthesisConfig(method="constraint_guided", n_tasks=1, seed=seed,
                                      options={"tasks_per_seed": 1}), airline)
    assert not r.tasks and r.drops["ambiguous_after_write"] >= 1
    assert r.stats["ambiguous_after_write"] == r.drops["ambiguous_after_write"]
    assert sum(r.drops.values()) == r.stats["attempted"]


def test_emitted_descriptions_stay_unique_through_the_writes(airline: World, ctasks: list[Task],
                                                             result: SynthesisResult) -> None:
    assert all(not cg.ambiguous_after_writes(airline, t) for t in ctasks)
    assert result.stats["ambiguous_after_write"] == result.drops["ambiguous_after_write"]


# -- verifier --------------------------------------------------------------------------------

def test_gold_and_read_variations_pass(airline: World, ctasks: list[Task]) -> None:
    v = get_verifier("constraint_satisfaction")
    assert isinstance(v, ConstraintVerifier) and v.version == "1.0.0"
    for task in ctasks:
        w = writes(airline, task)
        reads = [c for c in task.reference_solution if c not in w]
        for calls in (task.reference_solution, w, [*w, *reversed(reads)], [reads[-1], *w]):
            verdict = v.verify(task, traj(task, calls))
            assert verdict.passed and verdict.score == 1.0, verdict.reasons
            assert verdict.details["redundant_writes"] == 0


def test_known_bad_cases_fail(airline: World, ctasks: list[Task]) -> None:
    v = ConstraintVerifier()
    seen: set[str] = set()
    for task in ctasks:
        for c in counted(v, task, cases(task)):
            verdict = v.verify(task, c.trajectory)
            assert verdict.passed == c.expected_pass, (c.kind, c.note, verdict.reasons)
            if not c.expected_pass:
                assert verdict.score < 1.0
                if c.kind == "world_mutation":  # valid calls: they fail on outcome, not on error
                    assert verdict.details["failed_writes"] == 0, (c.note, verdict.reasons)
            seen.add(c.note if c.kind == "world_mutation" else c.kind)
        # the audit keeps the first few world mutations by name; every one the world offers must fail
        conn = initial(airline, task)
        try:
            offered = ac.audit_mutations(conn, load_constraints(task.verification.constraints),
                                         task.reference_solution)
        finally:
            conn.close()
        for name, calls in offered.items():
            assert not v.verify(task, traj(task, calls)).passed, name
            seen.add(name)
    assert {"wrong_flight", "wrong_cabin", "wrong_payment", "extra_write", "wrong_bag_count",
            "drop_write", "reorder_writes", "reorder_reads", "skip_reads"} <= seen


def test_partial_satisfaction_gives_partial_score(airline: World, ctasks: list[Task]) -> None:
    # a two-write task whose booking has a wrong-flight variant (the state offers another flight)
    task = next(t for t in ctasks if len(t.verification.constraints) == 2
                and any(m.note == "wrong_flight" for m in mutants(t) if m.kind == "world_mutation"))
    w = writes(airline, task)
    for dropped in w:
        s = score_constraints(task, [c for c in task.reference_solution if c is not dropped])
        assert sum(s.satisfied) == 1 and s.redundant_writes == 0 and s.score == pytest.approx(0.5)
    # A wrong booking beside a right second write: half satisfied, and the wrong write is redundant.
    bad = next(m.calls for m in mutants(task) if m.kind == "world_mutation" and m.note == "wrong_flight")
    s = score_constraints(task, bad)
    assert s.satisfied == [False, True] and s.redundant_writes == 1
    assert s.score == pytest.approx(0.5 / 1.5)


def test_redundant_writes_definition(airline: World, ctasks: list[Task]) -> None:
    task = next(t for t in ctasks if "bags" in t.metadata["constraint_kinds"] and "depends_on" not in t.metadata)
    c = next(c for c in load_constraints(task.verification.constraints) if c.kind == "bags")
    gold = task.reference_solution
    conn = initial(airline, task)
    (current,) = conn.execute("SELECT bags FROM reservations WHERE reservation_id = ?",
                              (c["reservation_id"],)).fetchone()
    # A no-op write (same bag count) and a failed write (over the R10 limit) are not effective.
    noop = ToolCall(name="update_baggage", arguments={"reservation_id": c["reservation_id"], "total_bags": current})
    over = ToolCall(name="update_baggage", arguments={"reservation_id": c["reservation_id"], "total_bags": 99})
    s = score_constraints(task, [noop, over, *gold])
    assert s.failed_writes == 1 and s.effective_writes == len(writes(airline, task)) and s.score == 1.0
    # Setting the bags twice: the constraint claims the last write; the first is redundant.
    other = next(b for b in range(0, current + 3) if b not in (current, c["total_bags"]))
    twice = ToolCall(name="update_baggage", arguments={"reservation_id": c["reservation_id"], "total_bags": other})
    s = score_constraints(task, [twice, *gold])
    assert all(s.satisfied) and s.redundant_writes == 1 and s.score == pytest.approx(1 / 1.5)
    assert constraint_score(2, 2, 0) == 1.0 and constraint_score(1, 2, 2) == pytest.approx(0.25)
    assert constraint_score(0, 0, 0) == 0.0


def test_unclean_termination_and_missing_constraints(ctasks: list[Task]) -> None:
    task = ctasks[0]
    verdict = ConstraintVerifier().verify(task, traj(task, task.reference_solution, termination="max_turns"))
    assert not verdict.passed and verdict.score == 0.0
    plain = task.model_copy(update={"verification": Verification()})
    verdict = ConstraintVerifier().verify(plain, traj(plain, plain.reference_solution))
    assert not verdict.passed and verdict.reasons == ["task carries no constraint set"]


def test_audit_agreement(ctasks: list[Task]) -> None:
    found = audit_cases(ctasks[0], "constraint_satisfaction")
    assert found and all(c.expected_pass == c.got_pass for c in found)
    report = audit(ctasks, ["constraint_satisfaction"])
    a = report.verifiers["constraint_satisfaction"]
    assert not report.excluded_tasks and a.mutants["world_mutation"].killed > 0
    assert a.alternatives["reorder_writes"].passed > 0 and a.alternatives["skip_reads"].failed == 0


def test_synthesis_is_deterministic(airline: World, ctasks: list[Task]) -> None:
    again = cg.synthesize(SynthesisConfig(method="constraint_guided", n_tasks=12, seed=3), airline)
    assert [t.id for t in again.tasks] == [t.id for t in ctasks]
    assert [t.metadata for t in again.tasks] == [t.metadata for t in ctasks]
