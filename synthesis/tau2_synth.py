"""Synthesis inside τ²'s own domains: logic-driven, constraint-guided and self-play tasks in
the τ² worlds (`tau2_airline`, `tau2_retail`), each a τ² `Task` that τ²'s runtime runs.

trajforge's own methods (`logic_driven`, `constraint_guided`, `self_play`) read SQLite worlds
(a design, constraints and templates over tables); a τ² world is τ²'s pydantic database and
τ²'s tools. These three methods do the same steps on it:

- ``tau2_logic_driven`` (LOGIGEN): boundary-adjacent states (`boundary_states`: an update of
  τ²'s database that puts one record just inside or just outside a policy rule: booked 23 or
  25 hours ago, insured with a covered or an uncovered reason, basic economy or economy, an
  order pending or processed, delivered or not), the user's request on that record, and the
  Explorer (`explore`): a search over candidate τ² calls on the record whose every step τ²'s
  API accepts *and* τ²'s policy allows (`envs.tau2_policy`), for the shortest path to the
  request's end state. Found: a task whose reference is that path; none (the policy forbids
  what the API would do): a refusal task whose reference only looks, the deciding rule in
  the metadata (``naive_rejections``: the rules that refused API-accepted calls).
- ``tau2_constraint_guided`` (CoVe): constraints on the target state (a reservation's cabin
  or bags, a reservation or order cancelled, an order's return or exchange or address) over
  one user's records, each record described without its id (its route and date, the items
  it holds) and checked to match one record of the user; the Explorer finds the allowed path
  that makes every constraint hold, and the constraints are checked on the replayed state.
- ``tau2_self_play`` (Tool-R0, scripted generator): one user's records give a question and
  its gold calls (flight status, free bag allowance by membership tier, a certificate's
  amount, an order's status or tracking number or total, or one small write); the gold runs
  on the world, the answer read from its results is the fact to tell, and near-duplicate
  questions are dropped.

Every task: the reference replays on a fresh copy of its initial state (every call succeeds,
every write allowed by the policy), its τ² form (`synthesis.tau2.to_tau2`: τ²'s tool names,
``evaluation_criteria`` with actions, communicate_info, nl_assertions and reward_basis)
validates as τ²'s `Task` and rides in ``metadata["tau2_task"]`` so τ²'s evaluator is its
second judge; a task within instruction similarity 0.5 of a τ² test task is dropped
(``near_test``). τ²'s reward of each reference is measured by tests and
`bench/tau2_agreement.py` (1.5 s a task: not done here).
"""

from __future__ import annotations

import json
import random
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from data.records import Fact, StateRef, Task, ToolCall, UserScenario, Verification, canonical_json
from data.similarity import char_ngrams, jaccard, task_text
from synthesis.base import SynthesisConfig, SynthesisResult, register

LOGIC, CONSTRAINT, SELF_PLAY = "tau2_logic_driven", "tau2_constraint_guided", "tau2_self_play"
SIM_NGRAM = 5


def _supports(world: Any) -> bool:
    from envs.tau2_world import DOMAINS, Tau2World

    return isinstance(world, Tau2World) and world.domain in DOMAINS


class Tau2SynthOptions(BaseModel):
    """Options of the τ² synthesis methods."""

    model_config = ConfigDict(extra="forbid")

    max_depth: int = Field(2, ge=1)  # the Explorer's path length
    beam_width: int = Field(8, ge=1)
    max_test_similarity: float = Field(0.5, gt=0, le=1)  # near a τ² test task: dropped


class Tau2SelfPlayOptions(Tau2SynthOptions):
    """Options of τ² self-play: besides the Explorer's and the similarity bounds, the generator."""

    dedup_similarity: float = Field(0.8, gt=0, le=1)  # a question this alike to a kept one is dropped
    # the scripted generator, or a model (a ModelConfig: kind openai or embedded)
    generator: Literal["scripted", "model"] = "scripted"
    model: dict[str, Any] = Field(default_factory=dict)
    temperature: float = Field(1.0, ge=0)
    max_tokens: int = Field(512, ge=1)


# -- requests: what a user asks of one record ------------------------------------------------------


@dataclass
class Request:
    """A user's request on one record: the write it maps to (None for a question) and how the
    user says it."""

    kind: str
    user_id: str
    record: str  # reservation or order id
    call: ToolCall | None
    text: str  # the request, in the user's words (no ids but the record's, where it is known)
    context: dict[str, Any] = field(default_factory=dict)  # e.g. the reason for a cancellation
    facts: list[str] = field(default_factory=list)  # what the agent must tell (a question's answer)
    reads: list[ToolCall] = field(default_factory=list)  # lookups beyond the identity's


def _flights(res: Any) -> list[dict[str, str]]:
    return [{"flight_number": f.flight_number, "date": f.date} for f in res.flights]


def _card(user: Any, amount: float = 0.0) -> str | None:
    """A payment method for a change: a credit card, else a gift card that covers `amount`."""
    methods = list(user.payment_methods.values())
    for m in methods:
        if m.source == "credit_card":
            return str(m.id)
    for m in methods:
        if m.source == "gift_card" and float(getattr(m, "amount", 0)) >= amount:
            return str(m.id)
    return None


def airline_requests(db: Any, res: Any, rng: random.Random) -> list[Request]:
    """The write requests a user could make on reservation `res`."""
    from envs.tau2_policy import free_bags

    user = db.users[res.user_id]
    out: list[Request] = []
    where = f"from {res.origin} to {res.destination}"
    for reason in ("change of plan", "health", "weather"):
        why = {"change of plan": "your plans changed", "health": "you are unwell and cannot travel",
               "weather": "a storm is forecast at your destination"}[reason]
        out.append(Request("cancel", user.user_id, res.reservation_id,
                           ToolCall(name="cancel_reservation", arguments={"reservation_id": res.reservation_id}),
                           f"Cancel your trip {where} because {why}.", {"reason": reason}))
    card = _card(user, 100.0)
    if card is not None:
        add = rng.choice([1, 2])
        total = res.total_baggages + add
        allowance = free_bags(user.membership, res.cabin) * len(res.passengers)
        out.append(Request("add_bags", user.user_id, res.reservation_id, ToolCall(
            name="update_reservation_baggages", arguments={
                "reservation_id": res.reservation_id, "total_baggages": total,
                "nonfree_baggages": max(0, total - allowance), "payment_id": card}),
            f"Add {add} checked bag{'s' * (add > 1)} to your trip {where}, paying any fee with your "
            f"{card.split('_')[0]} card ending {card[-4:]}.", {"add": add}))
        for cabin in ("economy", "business"):
            if cabin != res.cabin:
                out.append(Request("change_cabin", user.user_id, res.reservation_id, ToolCall(
                    name="update_reservation_flights", arguments={
                        "reservation_id": res.reservation_id, "cabin": cabin, "flights": _flights(res),
                        "payment_id": card}),
                    f"Upgrade every passenger of your trip {where} to {cabin.replace('_', ' ')}, same flights, "
                    f"paying with your {card.split('_')[0]} card ending {card[-4:]}.", {"cabin": cabin}))
        later = _later_flights(db, res)
        if later is not None:
            out.append(Request("change_flights", user.user_id, res.reservation_id, ToolCall(
                name="update_reservation_flights", arguments={
                    "reservation_id": res.reservation_id, "cabin": res.cabin, "flights": later,
                    "payment_id": card}),
                f"Move your trip {where} one day later on the same flight numbers, same cabin, paying any "
                f"difference with your {card.split('_')[0]} card ending {card[-4:]}.", {}))
    first = res.passengers[0]
    fixed = {"first_name": first.first_name, "last_name": first.last_name + "-" + rng.choice(["Lee", "Ray", "Fox"]),
             "dob": first.dob}
    out.append(Request("passenger", user.user_id, res.reservation_id, ToolCall(
        name="update_reservation_passengers", arguments={
            "reservation_id": res.reservation_id,
            "passengers": [fixed] + [p.model_dump(mode="json") for p in res.passengers[1:]]}),
        f"Your trip {where} spells {first.first_name}'s last name wrong: it should be {fixed['last_name']}. "
        "Have it corrected and keep everyone else as they are.", {}))
    return out


def _later_flights(db: Any, res: Any) -> list[dict[str, str]] | None:
    """The reservation's flights one day later, where every one of them can be booked."""
    from datetime import date

    out = []
    for f in res.flights:
        day = (date.fromisoformat(f.date) + timedelta(days=1)).isoformat()
        status = db.flights[f.flight_number].dates.get(day)
        if getattr(status, "status", None) != "available":
            return None
        out.append({"flight_number": f.flight_number, "date": day})
    return out


def retail_requests(db: Any, order: Any, rng: random.Random) -> list[Request]:
    """The write requests a user could make on `order`."""
    user = db.users[order.user_id]
    names = _item_names(order)
    out: list[Request] = []
    for reason in ("no longer needed", "ordered by mistake"):
        out.append(Request("cancel", user.user_id, order.order_id, ToolCall(
            name="cancel_pending_order", arguments={"order_id": order.order_id, "reason": reason}),
            f"Cancel your order of the {names}: {'you no longer need it' if reason[0] == 'n' else 'you ordered it by mistake'}.",
            {"reason": reason}))
    item = order.items[0]
    original = order.payment_history[0].payment_method_id
    out.append(Request("return", user.user_id, order.order_id, ToolCall(
        name="return_delivered_order_items", arguments={
            "order_id": order.order_id, "item_ids": [item.item_id], "payment_method_id": original}),
        f"Return the {item.name} from your order of the {names}, refunded to the way you paid.", {}))
    product = db.products.get(item.product_id)
    options = [v for v in (product.variants.values() if product else []) if v.available and v.item_id != item.item_id]
    if options:
        new = rng.choice(sorted(options, key=lambda v: v.item_id))
        wanted = ", ".join(f"{k} {v}" for k, v in new.options.items() if item.options.get(k) != v)
        out.append(Request("exchange", user.user_id, order.order_id, ToolCall(
            name="exchange_delivered_order_items", arguments={
                "order_id": order.order_id, "item_ids": [item.item_id], "new_item_ids": [new.item_id],
                "payment_method_id": original}),
            f"Exchange the {item.name} from your order of the {names} for the one with {wanted}; settle any "
            "difference the way you paid.", {}))
    others = sorted(u for u in db.users if u != user.user_id)
    other = rng.choice(others) if others else None
    if other is not None:
        addr = db.users[other].address.model_dump(mode="json")
        out.append(Request("address", user.user_id, order.order_id, ToolCall(
            name="modify_pending_order_address", arguments={"order_id": order.order_id, **addr}),
            f"Ship your order of the {names} to {addr['address1']}, {addr['address2']}, {addr['city']}, "
            f"{addr['state']} {addr['zip']}, {addr['country']} instead.", {}))
    return out


def _item_names(order: Any) -> str:
    names = sorted({i.name for i in order.items})
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]


# -- the Explorer ----------------------------------------------------------------------------------


@dataclass
class Explored:
    path: list[ToolCall] | None  # the shortest allowed path to the goal; None: none found
    states: int = 0
    api_rejections: Counter = field(default_factory=Counter)  # τ²'s exception class -> count
    naive_rejections: Counter = field(default_factory=Counter)  # policy rule -> API-accepted calls it refuses


def explore(world: Any, patches: list[str], candidates: list[ToolCall], goal: Callable[[Any], bool],
            context: dict[str, Any], max_depth: int = 2, beam_width: int = 8) -> Explored:
    """Breadth-first search over `candidates` from the state `patches` build: a step is a
    candidate τ²'s API accepts and the policy (`envs.tau2_policy.check`) allows; states are
    deduplicated by τ²'s hash; the first (shortest) path whose state meets `goal` (a test on
    τ²'s database) is returned, with the rejections met on the way."""
    from envs.tau2_policy import check

    records = touched(world, candidates)
    root = light_env(world, world.db(patches), records)
    out = Explored(path=None)
    if goal(root.environment.tools.db):
        out.path = []
        return out
    seen = {_key(root, records)}
    frontier: list[tuple[Any, list[ToolCall]]] = [(root, [])]
    for _ in range(max_depth):
        nxt: list[tuple[Any, list[ToolCall]]] = []
        for env, path in frontier:
            for call in candidates:
                decision = check(world.domain, env.environment.tools.db, call.name, call.arguments, context)
                child = light_env(world, env.environment.tools.db, records)
                obs = child.call(call)
                if not obs.ok:
                    out.api_rejections[obs.code or "error"] += 1
                    continue
                if not decision.allowed:
                    out.naive_rejections[decision.rule] += 1
                    continue
                h = _key(child, records)
                if h in seen:
                    continue
                seen.add(h)
                out.states += 1
                if goal(child.environment.tools.db):
                    out.path = [*path, call]
                    return out
                nxt.append((child, [*path, call]))
        frontier = nxt[:beam_width]
        if not frontier:
            break
    return out


def touched(world: Any, calls: list[ToolCall]) -> list[tuple[str, str]]:
    """The (table, key) records `calls` may change: their reservation or order and its user
    (payments change a gift card's balance)."""
    db = world.db()
    out: set[tuple[str, str]] = set()
    for c in calls:
        if "reservation_id" in c.arguments and c.arguments["reservation_id"] in db.reservations:
            out |= {("reservations", c.arguments["reservation_id"]),
                    ("users", db.reservations[c.arguments["reservation_id"]].user_id)}
        elif "order_id" in c.arguments and c.arguments["order_id"] in db.orders:
            out |= {("orders", c.arguments["order_id"]), ("users", db.orders[c.arguments["order_id"]].user_id)}
        elif "user_id" in c.arguments:
            out.add(("users", c.arguments["user_id"]))
    return sorted(out)


def light_env(world: Any, db: Any, records: list[tuple[str, str]]) -> Any:
    """A τ² environment on a copy of `db` that copies only `records` (the rest is shared and
    must not be written: the Explorer's candidates write only their own records). τ²'s
    database is 2,000 reservations: a deep copy per search step would take a second."""
    from envs.tau2_world import Tau2Env

    new = db.model_copy()
    tables: dict[str, dict[str, Any]] = {}
    for table, key in records:
        if table not in tables:
            tables[table] = dict(getattr(db, table))
        if key in tables[table]:
            tables[table][key] = tables[table][key].model_copy(deep=True)
    for table, rows in tables.items():
        setattr(new, table, rows)
    return Tau2Env(world, world.environment(db=new))


def _key(env: Any, records: list[tuple[str, str]]) -> str:
    """The search state: the records the candidates can change (the rest never changes)."""
    db = env.environment.tools.db
    return canonical_json([getattr(db, t)[k].model_dump(mode="json") for t, k in records if k in getattr(db, t)])


def effect_goal(world: Any, patches: list[str], call: ToolCall) -> Callable[[Any], bool] | None:
    """The goal a request means: the record as τ²'s API leaves it after `call` (None when the
    API refuses the call itself)."""
    env = light_env(world, world.db(patches), touched(world, [call]))
    if not env.call(call).ok:
        return None
    want = _record(env.environment.tools.db, call)
    return lambda db: _record(db, call) == want


def _record(db: Any, call: ToolCall) -> Any:
    if "reservation_id" in call.arguments:
        r = db.reservations.get(call.arguments["reservation_id"])
    else:
        r = db.orders.get(call.arguments.get("order_id"))
    return None if r is None else r.model_dump(mode="json")


# -- tasks -----------------------------------------------------------------------------------------


def identity(world: Any, user_id: str) -> tuple[dict[str, str], list[ToolCall]]:
    """What the user says to be identified, and the reference's identity lookups."""
    user = world.db().users[user_id]
    if world.domain == "airline":
        return {"user_id": user_id}, [ToolCall(name="get_user_details", arguments={"user_id": user_id})]
    return ({"email": user.email},
            [ToolCall(name="find_user_id_by_email", arguments={"email": user.email}),
             ToolCall(name="get_user_details", arguments={"user_id": user_id})])


def record_read(world: Any, record: str) -> ToolCall:
    if world.domain == "airline":
        return ToolCall(name="get_reservation_details", arguments={"reservation_id": record})
    return ToolCall(name="get_order_details", arguments={"order_id": record})


def build_task(world: Any, method: str, patches: list[str], user_id: str, instruction: str,
               known: dict[str, str], calls: list[ToolCall], outcome: str, facts: list[str],
               nl_assertions: list[str], metadata: dict[str, Any], difficulty: float = 0.0) -> tuple[Task | None, str]:
    """A τ²-world task whose reference `calls` replay on a fresh copy of the initial state
    (every call succeeds and every write is allowed by the policy), carrying its τ² task;
    (None, why) otherwise."""
    from tau2.data_model.tasks import Task as T2Task

    from envs.tau2_policy import check
    from synthesis.tau2 import to_tau2

    env = world.env_on(patches)  # one full copy: the reference must run on τ²'s whole database
    ref = StateRef(world=world.name, seed=0, scale=0, patches=list(patches), state_hash=env.state_hash())
    for call in calls:
        spec = world.tools.get(call.name)
        if spec is None:
            return None, "unknown_tool"
        if spec.write and not check(world.domain, env.environment.tools.db, call.name, call.arguments,
                                    metadata.get("context")).allowed:
            return None, "reference_against_policy"
        if not env.call(call).ok:
            return None, "reference_failed"
    writes = any(world.tools[c.name].write for c in calls)
    if writes != (outcome == "change"):
        return None, "outcome_mismatch"
    basis = ["DB", *(["COMMUNICATE"] if facts else []), *(["ACTION"] if not writes and not facts else [])]
    known_text = {**known, **({"reservation_id": metadata["record"]} if metadata.get("record_known") else {})}
    task = Task(
        world=world.name, method=method, instruction=instruction,
        user=UserScenario(persona="a customer", reason=instruction, known_info=known_text,
                          task_instructions="Give your details when asked. " + (
                              "Confirm the change when the agent lists it." if outcome == "change" else
                              "If the agent cannot do it, accept that and end the conversation.")),
        initial_state=ref, target_state_hash=env.state_hash(), reference_solution=calls,
        verification=Verification(basis=basis, outcome=outcome,  # type: ignore[arg-type]
                                  communicate=[Fact(label=f, any_of=[f]) for f in facts],
                                  nl_assertions=nl_assertions),
        difficulty=difficulty,
        metadata={**{k: v for k, v in metadata.items() if k != "context"}, "tau2_domain": world.domain,
                  **({"tau2_context": metadata["context"]} if metadata.get("context") else {})},
    ).with_id()
    exported = to_tau2(task)
    exported.pop("trajforge", None)
    try:
        T2Task.model_validate(exported)
    except ValueError as exc:
        return None, f"not_a_tau2_task:{type(exc).__name__}"
    task.metadata["tau2_task"] = exported
    return task, ""


def _near_test(world: Any, task: Task, threshold: float) -> bool:
    from synthesis.tau2_tasks import _test_grams

    grams = char_ngrams(task_text(task), SIM_NGRAM)  # the text decontamination compares
    return any(jaccard(grams, g) >= threshold for g in _test_grams(world.domain))


def _keep(result: SynthesisResult, world: Any, task: Task | None, why: str, cfg: SynthesisConfig,
          opts: Tau2SynthOptions) -> bool:
    if task is None:
        result.drops[why] += 1
        return False
    if _near_test(world, task, opts.max_test_similarity):
        result.drops["near_test"] += 1
        return False
    return result.keep(task, cfg.test_fraction)


def _records(world: Any, rng: random.Random) -> Iterator[Any]:
    """The world's reservations or orders in a seeded order."""
    db = world.db()
    table = db.reservations if world.domain == "airline" else db.orders
    ids = sorted(table)
    rng.shuffle(ids)
    for i in ids:
        yield table[i]


def _requests(world: Any, db: Any, record: Any, rng: random.Random) -> list[Request]:
    return airline_requests(db, record, rng) if world.domain == "airline" else retail_requests(db, record, rng)


# -- logic-driven: boundary states, the Explorer, allowed path or refusal --------------------------


def boundary_states(world: Any, record: Any, rng: random.Random) -> list[tuple[str, str, dict[str, Any]]]:
    """(kind, request kind, the database update) pairs that put `record` just inside or just
    outside one of the policy's rules."""
    from envs.tau2_policy import AIRLINE_NOW

    if world.domain == "airline":
        rid = record.reservation_id
        fresh = (AIRLINE_NOW - timedelta(hours=23, minutes=rng.randint(0, 50))).isoformat(timespec="seconds")
        stale = (AIRLINE_NOW - timedelta(hours=25, minutes=rng.randint(0, 50))).isoformat(timespec="seconds")
        plain = {"cabin": "economy", "insurance": "no"}
        return [
            ("booked_within_24h", "cancel", {"reservations": {rid: {**plain, "created_at": fresh}}}),
            ("booked_over_24h", "cancel", {"reservations": {rid: {**plain, "created_at": stale}}}),
            ("insured_covered_reason", "cancel:health",
             {"reservations": {rid: {"cabin": "economy", "insurance": "yes", "created_at": stale}}}),
            ("insured_uncovered_reason", "cancel:change of plan",
             {"reservations": {rid: {"cabin": "economy", "insurance": "yes", "created_at": stale}}}),
            ("basic_economy_flight_change", "change_flights", {"reservations": {rid: {"cabin": "basic_economy"}}}),
            ("basic_economy_cabin_change", "change_cabin", {"reservations": {rid: {"cabin": "basic_economy"}}}),
            ("bags_silver_tier", "add_bags", {"users": {record.user_id: {"membership": "silver"}}}),
            ("bags_gold_tier", "add_bags", {"users": {record.user_id: {"membership": "gold"}}}),
        ]
    oid = record.order_id
    return [
        ("order_pending_cancel", "cancel", {"orders": {oid: {"status": "pending"}}}),
        ("order_processed_cancel", "cancel", {"orders": {oid: {"status": "processed"}}}),
        ("order_pending_address", "address", {"orders": {oid: {"status": "pending"}}}),
        ("order_processed_address", "address", {"orders": {oid: {"status": "processed"}}}),
        ("order_delivered_return", "return", {"orders": {oid: {"status": "delivered"}}}),
        ("order_pending_return", "return", {"orders": {oid: {"status": "pending"}}}),
        ("order_delivered_exchange", "exchange", {"orders": {oid: {"status": "delivered"}}}),
        ("order_processed_exchange", "exchange", {"orders": {oid: {"status": "processed"}}}),
    ]


def _usable(world: Any, record: Any) -> bool:
    """A record a boundary state can be built on: an airline reservation not cancelled whose
    flights have not flown, a retail order with items."""
    from envs.tau2_policy import airline_cancelled, flown

    db = world.db()
    if world.domain == "airline":
        return record.status != "cancelled" and not flown(db, record) and not airline_cancelled(db, record)
    return bool(record.items) and bool(record.payment_history)


@register(LOGIC, options=Tau2SynthOptions, supports=_supports)
def synthesize_logic(cfg: SynthesisConfig, world: Any) -> SynthesisResult:
    """Logic-driven tasks in a τ² world (see the module docstring)."""
    from envs.tau2_policy import check

    opts: Tau2SynthOptions = cfg.method_options()  # type: ignore[assignment]
    rng = random.Random(f"{LOGIC}|{world.name}|{cfg.seed}")
    result = SynthesisResult()
    attempted = 0
    naive: Counter = Counter()
    kinds: Counter = Counter()
    turn = 0
    for record in _records(world, rng):
        if len(result.tasks) >= cfg.n_tasks or attempted >= 6 * cfg.n_tasks + 8:
            break
        if not _usable(world, record):
            continue
        states = boundary_states(world, record, rng)
        kind, wanted, update = states[turn % len(states)]  # the kinds come round in turn
        turn += 1
        attempted += 1
        patches = [canonical_json({"op": "update_db", "data": update})]
        db = world.db(patches)
        rec = (db.reservations if world.domain == "airline" else db.orders)[record.reservation_id if world.domain
                                                                            == "airline" else record.order_id]
        req_kind, _, reason = wanted.partition(":")
        every = _requests(world, db, rec, rng)  # drawn once: the request is one of the Explorer's candidates
        requests = [r for r in every if r.kind == req_kind and (not reason or r.context.get("reason") == reason)]
        if not requests:
            result.drops["no_request"] += 1
            continue
        req = requests[0]
        assert req.call is not None
        goal = effect_goal(world, patches, req.call)
        if goal is None:  # τ²'s API refuses the request itself: the refusal is τ²'s
            decision = check(world.domain, db, req.call.name, req.call.arguments, req.context)
            explored = Explored(path=None)
            explored.api_rejections["api"] += 1
        else:
            candidates = [r.call for r in every if r.call is not None]
            explored = explore(world, patches, candidates, goal, req.context, opts.max_depth, opts.beam_width)
            decision = check(world.domain, db, req.call.name, req.call.arguments, req.context)
            if decision.allowed and not explored.path:  # the policy allows it: a refusal would be wrong
                result.drops["allowed_but_unreached"] += 1
                continue
        naive.update(explored.naive_rejections)
        known, ids = identity(world, req.user_id)
        reads = [*ids, record_read(world, req.record)]
        if explored.path:
            calls, outcome, nl = [*reads, *explored.path], "change", []
        else:
            calls, outcome = reads, "refusal"
            nl = [f"The agent does not carry out the request, because {decision.why}."]
        task, why = build_task(
            world, LOGIC, patches, req.user_id, req.text, {**known, _id_key(world): req.record}, calls, outcome,
            [], nl, {"boundary": kind, "boundary_note": decision.why, "rules": [decision.rule],
                     "request": req.call.model_dump(mode="json"),
                     "naive_rejections": dict(explored.naive_rejections),
                     "api_rejections": dict(explored.api_rejections), "explored_states": explored.states,
                     "path_length": len(explored.path or []), "record": req.record, "context": req.context},
            difficulty=round(0.25 * len(explored.path or []) + 0.5 * bool(explored.naive_rejections), 2))
        if _keep(result, world, task, why, cfg, opts):
            kinds[kind] += 1
    result.stats = {"attempted": attempted, "emitted": len(result.tasks),
                    "yield": round(len(result.tasks) / attempted, 3) if attempted else 0.0,
                    "boundary_kinds": dict(sorted(kinds.items())), "rule_rejections_during_search": dict(naive),
                    "outcomes": dict(Counter(t.verification.outcome for t in result.tasks))}
    return result


def _id_key(world: Any) -> str:
    return "reservation_id" if world.domain == "airline" else "order_id"


# -- constraint-guided: constraints on the target, fuzzy descriptions, the Explorer ----------------


def describe(world: Any, db: Any, record: Any) -> str | None:
    """A description of `record` from its attributes, no id: None unless it fits that one
    record among its user's."""
    if world.domain == "airline":
        user = db.users[record.user_id]
        mine = [db.reservations[r] for r in user.reservations if r in db.reservations]

        def key(r: Any) -> tuple[str, ...]:
            return (r.origin, r.destination, r.flight_type, r.flights[0].date if r.flights else "")

        text = (f"your {record.flight_type.replace('_', ' ')} reservation from {record.origin} to "
                f"{record.destination} departing {record.flights[0].date if record.flights else '?'}")
    else:
        user = db.users[record.user_id]
        mine = [db.orders[o] for o in user.orders if o in db.orders]

        def key(r: Any) -> tuple[str, ...]:
            return tuple(sorted(i.name for i in r.items))

        text = f"your order of the {_item_names(record)}"
    return text if sum(key(r) == key(record) for r in mine) == 1 else None


CONSTRAINT_KINDS = {"airline": ("cancel", "add_bags", "change_cabin", "passenger"),
                    "retail": ("cancel", "return", "exchange", "address")}


@register(CONSTRAINT, options=Tau2SynthOptions, supports=_supports)
def synthesize_constraint(cfg: SynthesisConfig, world: Any) -> SynthesisResult:
    """Constraint-guided tasks in a τ² world (see the module docstring)."""
    opts: Tau2SynthOptions = cfg.method_options()  # type: ignore[assignment]
    rng = random.Random(f"{CONSTRAINT}|{world.name}|{cfg.seed}")
    result = SynthesisResult()
    db = world.db()
    attempted = 0
    kinds = CONSTRAINT_KINDS[world.domain]
    counts: Counter = Counter()
    for record in _records(world, rng):
        if len(result.tasks) >= cfg.n_tasks or attempted >= 6 * cfg.n_tasks + 8:
            break
        if not _usable(world, record):
            continue
        attempted += 1
        # a constraint the record can meet (τ²'s API accepts its write), of the kind drawn least so far
        every = _requests(world, db, record, rng)  # drawn once: the request is one of the Explorer's candidates
        requests = [r for r in every if r.kind in kinds and r.call is not None]
        solvable = [(r, g) for r in requests if (g := effect_goal(world, [], r.call)) is not None]  # type: ignore[arg-type]
        if not solvable:
            result.drops["no_solvable_constraints"] += 1
            continue
        least = min(counts[r.kind] for r, _ in solvable)
        req, goal = rng.choice([(r, g) for r, g in solvable if counts[r.kind] == least])
        kind = req.kind
        assert req.call is not None
        text = describe(world, db, record)
        if text is None:
            result.drops["fuzzy_ambiguous"] += 1
            continue
        explored = explore(world, [], [r.call for r in every if r.call is not None],
                           goal, req.context, opts.max_depth, opts.beam_width)
        if not explored.path:  # the policy forbids every way to the target: not a CoVe task
            result.drops["unsatisfiable_under_policy"] += 1
            continue
        constraint = {"kind": kind, "record": req.record, "fields": _constraint_fields(req.call)}
        instruction = _fuzzy(req.text, text, world, record)
        if req.record in instruction:
            result.drops["id_leak"] += 1
            continue
        known, ids = identity(world, req.user_id)
        calls = [*ids, *_locate(world, db, req.user_id, req.record), *explored.path]
        task, why = build_task(world, CONSTRAINT, [], req.user_id, instruction, known, calls, "change", [], [],
                               {"constraint_kinds": [kind], "fuzzy": {"record": text}, "record": req.record,
                                "context": req.context, "naive_rejections": dict(explored.naive_rejections)},
                               difficulty=0.3)
        if task is not None:
            # in the metadata, not `verification.constraints`: trajforge's constraint verifier
            # reads SQLite worlds; τ²'s database check (the target) stands for the constraint
            task.metadata["constraints"] = [constraint]
            if not _constraints_hold(world, task, goal):
                result.drops["reference_unsatisfied"] += 1
                continue
        if _keep(result, world, task, why, cfg, opts):
            counts[kind] += 1
    result.stats = {"attempted": attempted, "emitted": len(result.tasks),
                    "yield": round(len(result.tasks) / attempted, 3) if attempted else 0.0,
                    "constraint_kinds": dict(sorted(counts.items()))}
    return result


def _constraint_fields(call: ToolCall) -> dict[str, Any]:
    args = {k: v for k, v in call.arguments.items() if k not in ("payment_id", "payment_method_id")}
    return {"tool": call.name, **args}


def _constraints_hold(world: Any, task: Task, goal: Callable[[Any], bool]) -> bool:
    env = light_env(world, world.db(task.initial_state.patches), touched(world, task.reference_solution))
    for call in task.reference_solution:
        env.call(call)
    return bool(goal(env.environment.tools.db))


def _fuzzy(request: str, description: str, world: Any, record: Any) -> str:
    """The request with the record named by its description instead of route or items alone."""
    if world.domain == "airline":
        where = f"your trip from {record.origin} to {record.destination}"
        return request.replace(where, description).replace("Your trip from "
                                                            f"{record.origin} to {record.destination}",
                                                            description[0].upper() + description[1:])
    return request.replace(f"your order of the {_item_names(record)}", description)


def _locate(world: Any, db: Any, user_id: str, record: str) -> list[ToolCall]:
    """The lookups that find a record the user does not name by id: their records' details up
    to the one described."""
    return [record_read(world, record)]


# -- self-play: scripted questions over one user's records -----------------------------------------


def questions(world: Any, db: Any, record: Any, rng: random.Random) -> list[Request]:
    """Questions (and one small write) a user could ask about `record`, with gold calls and answers."""
    from envs.tau2_policy import flight_status, free_bags

    out: list[Request] = []
    if world.domain == "airline":
        user = db.users[record.user_id]
        f = rng.choice(record.flights)
        status = flight_status(db, f.flight_number, f.date)
        out.append(Request("flight_status", user.user_id, record.reservation_id, None,
                           f"Ask what the status of flight {f.flight_number} on {f.date} is.", facts=[status],
                           reads=[ToolCall(name="get_flight_status",
                                           arguments={"flight_number": f.flight_number, "date": f.date})]))
        allowance = free_bags(user.membership, record.cabin) * len(record.passengers)
        out.append(Request("bag_allowance", user.user_id, record.reservation_id, None,
                           f"Ask how many checked bags your reservation {record.reservation_id} includes free "
                           f"for all {len(record.passengers)} passengers together.", facts=[str(allowance)],
                           reads=[record_read(world, record.reservation_id)]))
        certs = [m for m in user.payment_methods.values() if m.source == "certificate"]
        if certs:
            c = rng.choice(certs)
            out.append(Request("certificate", user.user_id, record.reservation_id, None,
                               f"Ask how much is left on your travel certificate ending {c.id[-3:]}.",
                               facts=[f"{float(c.amount):g}"], reads=[]))
    else:
        user = db.users[record.user_id]
        out.append(Request("order_status", user.user_id, record.order_id, None,
                           f"Ask what the status of your order {record.order_id} is.", facts=[record.status],
                           reads=[record_read(world, record.order_id)]))
        tracking = [t for f in record.fulfillments for t in f.tracking_id]
        if tracking:
            out.append(Request("tracking", user.user_id, record.order_id, None,
                               f"Ask for the tracking number of your order {record.order_id}.", facts=[tracking[0]],
                               reads=[record_read(world, record.order_id)]))
        paid = sum(p.amount for p in record.payment_history if p.transaction_type == "payment")
        out.append(Request("order_total", user.user_id, record.order_id, None,
                           f"Ask how much you paid in total for your order {record.order_id}.",
                           facts=[f"{paid:.2f}"], reads=[record_read(world, record.order_id)]))
    return out


GENERATOR_PROMPT = """You write tasks for a customer service agent of τ²-bench's {domain} domain.
Here is one customer's profile and one of their records:
{records}
Write one request this customer could make that the agent solves with the tools below, and the
exact tool calls that solve it. Every argument value of the calls must be written in the
request. Answer in exactly this form:
{example}"""


def model_generations(world: Any, records: list[Any], model_cfg: dict[str, Any], temperature: float,
                      max_tokens: int, seed: int) -> list[str | None]:
    """A model's generations (the self-play tagged form, `data.self_play.Generation.to_text`),
    one per record: the world's tool schemas as the menu, the customer's profile and record in
    the prompt. None where the model failed."""
    import asyncio

    from data.records import Sampling
    from data.self_play import Generation
    from rollout.backends import ModelConfig, build_model
    from rollout.model import ModelError

    model, owned = build_model(ModelConfig.model_validate(model_cfg))
    db = world.db()
    example = Generation(question="<the customer's request>", tools=[{"type": "function", "function": {
        "name": "<tool>", "description": "...", "parameters": {}}}],
        calls=[ToolCall(name="<tool>", arguments={"<argument>": "<value>"})]).to_text()

    async def one(i: int, record: Any) -> str | None:
        user = db.users[record.user_id]
        shown = json.dumps({"customer": user.model_dump(mode="json"), "record": record.model_dump(mode="json")},
                           ensure_ascii=False)[:6000]
        prompt = GENERATOR_PROMPT.format(domain=world.domain, records=shown, example=example)
        try:
            resp = await model.chat([{"role": "user", "content": prompt}], world.tool_schemas(),
                                    Sampling(temperature=temperature, max_tokens=max_tokens, seed=seed * 1000 + i))
        except ModelError:
            return None
        return resp.text or None

    async def main() -> list[str | None]:
        try:
            return list(await asyncio.gather(*(one(i, r) for i, r in enumerate(records))))
        finally:
            if owned:
                await model.aclose()

    return asyncio.run(main())


def _from_generation(world: Any, text: str | None, record: Any) -> tuple[Request | None, str]:
    """A model generation as a request on `record`'s user, or why not: it parses, its gold
    calls are in its menu and τ²'s tools, name every value in the question and have every
    required argument; the checks on the world come with the task."""
    from data.self_play import ParseError
    from rollout.generation import parse_generation, validity

    if text is None:
        return None, "no_generation"
    gen = parse_generation(text)
    if isinstance(gen, ParseError):
        return None, f"format_{gen.reason}"
    if not gen.calls:
        return None, "no_gold_calls"
    if any(c.name not in world.tools for c in gen.calls):
        return None, "gold_not_a_tau2_tool"
    v = validity(gen)
    if not (v.in_menu and v.required):
        return None, "gold_not_in_menu" if not v.in_menu else "missing_required_args"
    if not v.grounded:
        return None, "ungrounded_value"
    if any(c.arguments.get("user_id", record.user_id) != record.user_id for c in gen.calls):
        return None, "cross_user"  # one customer's request
    writes = [c for c in gen.calls if world.tools[c.name].write]
    if len(writes) > 1:
        return None, "more_than_one_write"
    return Request("model", record.user_id, getattr(record, "reservation_id", None) or record.order_id,
                   writes[0] if writes else None, gen.question,
                   reads=[c for c in gen.calls if not world.tools[c.name].write]), ""


@register(SELF_PLAY, options=Tau2SelfPlayOptions, supports=_supports)
def synthesize_self_play(cfg: SynthesisConfig, world: Any) -> SynthesisResult:
    """Self-play tasks in a τ² world from the scripted generator, or a model's (``generator:
    model``; see the module docstring)."""
    from envs.tau2_policy import check

    opts: Tau2SelfPlayOptions = cfg.method_options()  # type: ignore[assignment]
    if opts.generator == "model":
        return _model_self_play(cfg, world, opts)
    rng = random.Random(f"{SELF_PLAY}|{world.name}|{cfg.seed}")
    result = SynthesisResult()
    db = world.db()
    attempted = 0
    leaders: list[frozenset[str]] = []
    kinds: Counter = Counter()
    for record in _records(world, rng):
        if len(result.tasks) >= cfg.n_tasks or attempted >= 6 * cfg.n_tasks + 8:
            break
        attempted += 1
        pool = questions(world, db, record, rng)
        if rng.random() < 0.3 and _usable(world, record):  # a small write now and then, if the policy allows it
            writes = [r for r in _requests(world, db, record, rng) if r.call is not None
                      and check(world.domain, db, r.call.name, r.call.arguments, r.context).allowed]
            pool += writes[:1]
        if not pool:
            result.drops["no_generation"] += 1
            continue
        q = rng.choice(pool)
        grams = char_ngrams(q.text, 3)
        if any(jaccard(grams, lead) >= opts.dedup_similarity for lead in leaders):
            result.drops["near_duplicate"] += 1
            continue
        known, ids = identity(world, q.user_id)
        if q.call is not None:
            calls, outcome = [*ids, record_read(world, q.record), q.call], "change"
            known = {**known, _id_key(world): q.record}
        else:
            calls, outcome = [*ids, *q.reads], "answer"
        task, why = build_task(world, SELF_PLAY, [], q.user_id, q.text, known, calls, outcome, q.facts, [],
                               {"self_play_kind": q.kind, "record": q.record, "context": q.context,
                                "generator": "scripted"})
        if task is not None and q.facts and not _answer_in_results(world, task, q.facts):
            result.drops["answer_not_in_result"] += 1
            continue
        if _keep(result, world, task, why, cfg, opts):
            leaders.append(grams)
            kinds[q.kind] += 1
    result.stats = {"generator": "scripted", "attempted": attempted, "emitted": len(result.tasks),
                    "yield": round(len(result.tasks) / attempted, 3) if attempted else 0.0,
                    "kinds": dict(sorted(kinds.items())),
                    "outcomes": dict(Counter(t.verification.outcome for t in result.tasks))}
    return result


def _answer_in_results(world: Any, task: Task, facts: list[str]) -> bool:
    """Whether every answer appears in what the reference's calls return (the agent can read
    it, and does not need the generator's knowledge) or follows from the policy's table."""
    env = light_env(world, world.db(task.initial_state.patches), touched(world, task.reference_solution))
    seen = " ".join(env.call(c).content for c in task.reference_solution)
    return all(f in seen or task.metadata.get("self_play_kind") == "bag_allowance" for f in facts)


def _model_self_play(cfg: SynthesisConfig, world: Any, opts: Tau2SelfPlayOptions) -> SynthesisResult:
    """Self-play with a model generator: one generation per drawn record, in one batch of
    `4·n + 8` at most; a kept generation's gold (the user's identity lookups first) must
    replay on τ²'s database with its write allowed by the policy. A read-only task has no fact
    to tell (the generation names none): its basis is DB + ACTION (its gold lookups)."""
    if not opts.model:
        raise ValueError("tau2_self_play with generator: model needs options.model (a ModelConfig)")
    rng = random.Random(f"{SELF_PLAY}|model|{world.name}|{cfg.seed}")
    result = SynthesisResult()
    records = []
    for record in _records(world, rng):
        if len(records) >= 4 * cfg.n_tasks + 8:
            break
        records.append(record)
    texts = model_generations(world, records, opts.model, opts.temperature, opts.max_tokens, cfg.seed)
    leaders: list[frozenset[str]] = []
    for record, text in zip(records, texts, strict=True):
        if len(result.tasks) >= cfg.n_tasks:
            break
        req, why = _from_generation(world, text, record)
        if req is None:
            result.drops[why] += 1
            continue
        grams = char_ngrams(req.text, 3)
        if any(jaccard(grams, lead) >= opts.dedup_similarity for lead in leaders):
            result.drops["near_duplicate"] += 1
            continue
        known, ids = identity(world, req.user_id)
        calls = [*ids, *[c for c in req.reads if c not in ids], *([req.call] if req.call else [])]
        task, why = build_task(world, SELF_PLAY, [], req.user_id, req.text, known, calls,
                               "change" if req.call else "answer", [], [],
                               {"self_play_kind": "model", "record": req.record, "generator": "model"})
        if _keep(result, world, task, why, cfg, opts):
            leaders.append(grams)
    result.stats = {"generator": "model", "attempted": len(records), "emitted": len(result.tasks),
                    "yield": round(len(result.tasks) / len(records), 3) if records else 0.0,
                    "outcomes": dict(Counter(t.verification.outcome for t in result.tasks))}
    return result
