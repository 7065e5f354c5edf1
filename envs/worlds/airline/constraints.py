"""Constraint sets of the airline world (CoVe, methods.md §2); the hooks are described in
`envs/constraints.py`.

A set is one booking (flight, cabin, passengers, payment method, insurance) on a scheduled
future flight with room for everyone, paid with a method that covers it, optionally plus
the cancellation of a cancellable reservation, a new baggage count on an active one, or
moving an active (not basic economy) reservation to another scheduled flight on its route
with room for its party. With `kind` (constraint-guided synthesis passes ``KINDS`` in turn)
the extra request is of that kind ("book": none). Two kinds depend on the booking itself
(`envs.cove.ON_NEW`): "book_bags" books, then sets the checked bags of that new
reservation; "book_bags_cancel" does the same and also cancels an older reservation.
Descriptions replace flight, payment and reservation ids; each is checked to match exactly
one record of its scope (flights: all; payments and reservations: the user's).
"""

from __future__ import annotations

import hashlib
import random
import re
import sqlite3
from typing import Any

from data.records import ToolCall
from envs import cove
from envs import sql as kit
from envs.constraints import Constraint, Fuzzification, FuzzyRef, record_key
from envs.design import Goal
from envs.worlds.airline.tools import INSURANCE_PER_PASSENGER, bag_fee, price_column

CABINS = ["basic_economy", "economy", "business"]
CABIN_WORDS = {"basic_economy": "basic economy", "economy": "economy", "business": "business"}
CITY = {"SFO": "San Francisco", "JFK": "New York", "LAX": "Los Angeles", "ORD": "Chicago", "SEA": "Seattle",
        "BOS": "Boston", "DEN": "Denver", "ATL": "Atlanta", "MIA": "Miami", "PHX": "Phoenix"}
_POD_SQL = ("CASE " + " ".join(f"WHEN departure < '{t}' THEN '{w}'" for t, w in cove.PARTS_OF_DAY)
            + " ELSE 'evening' END")
part_of_day = cove.part_of_day  # what _POD_SQL computes, in Python

# Entity views the descriptions' attributes refer to (column -> stated value).
ENTITY_VIEWS: dict[str, str] = {
    "flight": f"SELECT flight_id AS id, origin, destination, date, departure, {_POD_SQL} AS part_of_day FROM flights",
    "payment": "SELECT payment_id AS id, user_id, kind, last4, balance FROM payment_methods",
    "reservation": ("SELECT r.reservation_id AS id, r.user_id, f.origin, f.destination, f.date, r.cabin,"
                    " r.passengers FROM reservations r JOIN flights f ON f.flight_id = r.flight_id"),
}
_IDENT = re.compile(r"^[a-z_]+$")
KINDS = ["book", "cancel", "bags", "change", "book_bags", "book_bags_cancel"]  # booking alone, + an extra, + bags on it
# The user's own reason for checked bags on the booking they are making (a dependent request).
BAG_REASONS = ["you are packing for a long stay", "you are bringing gear that will not fit in the cabin",
               "you would rather not haul everything through the airport", "you are bringing gifts for the family",
               "the carry-on allowance will not be enough this time"]
DEPENDENT = {"book_bags": [], "book_bags_cancel": ["cancel"]}  # kind -> independent extras besides the bags


def _total(flight: dict[str, Any], cabin: str, passengers: int, insurance: bool) -> int:
    return int(flight[price_column(cabin)] * passengers + (INSURANCE_PER_PASSENGER * passengers if insurance else 0))


def _covers(payment: dict[str, Any], amount: int) -> bool:
    return payment["balance"] is None or payment["balance"] >= amount


# -- sampling ----------------------------------------------------------------------------

def _bookable(conn: sqlite3.Connection, user_id: str, passengers: int = 1) -> list[dict[str, Any]]:
    """Scheduled flights after today with `passengers` free seats that the user holds no reservation on."""
    return kit.rows(conn, "SELECT * FROM flights WHERE status = 'scheduled' AND date > date(?) AND seats_available >= ?"
                       " AND flight_id NOT IN (SELECT flight_id FROM reservations WHERE user_id = ?)"
                       " ORDER BY flight_id", kit.now(conn), passengers, user_id)


def _sample_booking(conn: sqlite3.Connection, rng: random.Random, user_id: str) -> Constraint | None:
    flights = _bookable(conn, user_id)
    if not flights:
        return None
    flight = rng.choice(flights)
    passengers = rng.choice([p for p in (1, 1, 2, 2, 3) if p <= flight["seats_available"]])
    cabin = rng.choice(CABINS)
    insurance = rng.random() < 0.3
    amount = _total(flight, cabin, passengers, insurance)
    payments = [p for p in kit.rows(conn, "SELECT * FROM payment_methods WHERE user_id = ? ORDER BY payment_id", user_id)
                if _covers(p, amount)]
    if not payments:
        return None
    payment = rng.choice(payments)
    return Constraint(kind="book", fields={
        "user_id": user_id, "flight_id": flight["flight_id"], "cabin": cabin, "passengers": passengers,
        "payment_id": payment["payment_id"], "insurance": insurance})


def _sample_cancel(conn: sqlite3.Connection, rng: random.Random, user_id: str) -> Constraint | None:
    """An active reservation R06 lets the user cancel (within 24 h, business, insured or flight
    cancelled by the airline) on a flight that has not departed (R12)."""
    rows = kit.rows(conn, "SELECT r.reservation_id FROM reservations r JOIN flights f ON f.flight_id = r.flight_id"
                       " WHERE r.user_id = ? AND r.status = 'active' AND f.status <> 'departed' AND ("
                       "  r.cabin = 'business' OR r.insurance = 1 OR f.status = 'cancelled'"
                       "  OR (julianday(?) - julianday(r.created_at)) * 24 <= 24) ORDER BY r.reservation_id",
                 user_id, kit.now(conn))
    if not rows:
        return None
    return Constraint(kind="cancel", fields={"user_id": user_id, "reservation_id": rng.choice(rows)["reservation_id"]})


def _bag_options(conn: sqlite3.Connection, reservation_id: str) -> tuple[int, list[int]]:
    """(current bags, valid new totals near it): within R10, fee covered by the payment."""
    r = kit.rows(conn, "SELECT r.*, u.membership, p.balance FROM reservations r JOIN users u ON u.user_id = r.user_id"
                    " JOIN payment_methods p ON p.payment_id = r.payment_id WHERE r.reservation_id = ?",
              reservation_id)[0]
    out = []
    for bags in (r["bags"] + 1, r["bags"] + 2, r["bags"] - 1):
        if bags < 0 or bags > 3 * r["passengers"]:
            continue
        delta = bag_fee(r["membership"], r["passengers"], bags) - bag_fee(r["membership"], r["passengers"], r["bags"])
        if r["total_paid"] + delta < 0 or (r["balance"] is not None and r["balance"] < delta):
            continue
        out.append(bags)
    return r["bags"], out


def _sample_bags(conn: sqlite3.Connection, rng: random.Random, user_id: str) -> Constraint | None:
    rows = kit.rows(conn, "SELECT r.reservation_id FROM reservations r JOIN flights f ON f.flight_id = r.flight_id"
                       " WHERE r.user_id = ? AND r.status = 'active' AND f.status IN ('scheduled', 'delayed')"
                       " ORDER BY r.reservation_id", user_id)
    rng.shuffle(rows)
    for row in rows:
        _, options = _bag_options(conn, row["reservation_id"])
        if options:
            return Constraint(kind="bags", fields={"user_id": user_id, "reservation_id": row["reservation_id"],
                                                   "total_bags": rng.choice(options)})
    return None


def _sample_change(conn: sqlite3.Connection, rng: random.Random, user_id: str) -> Constraint | None:
    """An active reservation that may change flights (not basic economy, R08; not departed,
    R12) moved to another scheduled future flight on the same route (R09, R01) with seats
    for its party (R02) that the user holds nothing on; a fare difference charged to a
    gift card or certificate must be covered by its balance."""
    rows = kit.rows(conn, "SELECT r.*, f.origin, f.destination, p.balance FROM reservations r"
                       " JOIN flights f ON f.flight_id = r.flight_id JOIN payment_methods p ON p.payment_id = r.payment_id"
                       " WHERE r.user_id = ? AND r.status = 'active' AND r.cabin <> 'basic_economy'"
                       " AND f.status IN ('scheduled', 'delayed') ORDER BY r.reservation_id", user_id)
    rng.shuffle(rows)
    for r in rows:
        old = kit.rows(conn, "SELECT * FROM flights WHERE flight_id = ?", r["flight_id"])[0]
        column = price_column(r["cabin"])
        options = [f for f in kit.rows(
            conn, "SELECT * FROM flights WHERE origin = ? AND destination = ? AND status = 'scheduled'"
                  " AND date > date(?) AND seats_available >= ? AND flight_id <> ? AND flight_id NOT IN"
                  " (SELECT flight_id FROM reservations WHERE user_id = ? AND status = 'active') ORDER BY flight_id",
            r["origin"], r["destination"], kit.now(conn), r["passengers"], r["flight_id"], user_id)
            if r["balance"] is None or r["balance"] >= (f[column] - old[column]) * r["passengers"]]
        if options:
            return Constraint(kind="change", fields={"user_id": user_id, "reservation_id": r["reservation_id"],
                                                     "new_flight_id": rng.choice(options)["flight_id"]})
    return None


EXTRAS = {"cancel": _sample_cancel, "bags": _sample_bags, "change": _sample_change}


def _shares_balance(conn: sqlite3.Connection, booking: Constraint, extra: Constraint) -> bool:
    """Whether both writes draw on one gift card or certificate (then order would matter)."""
    row = conn.execute("SELECT p.payment_id, p.balance FROM reservations r JOIN payment_methods p"
                       " ON p.payment_id = r.payment_id WHERE r.reservation_id = ?",
                       (extra["reservation_id"],)).fetchone()
    return row is not None and row[0] == booking["payment_id"] and row[1] is not None


def _bags_on_new(conn: sqlite3.Connection, rng: random.Random, booking: Constraint) -> Constraint | None:
    """Checked bags on the reservation `booking` creates (a dependent request): the id its
    write mints and a total the fare rules and the payment allow once it is booked."""
    call = write_call(booking)
    rid = cove.created_id(conn, "airline", [call], "reservations", "reservation_id")
    if rid is None:
        return None
    with cove.applied(conn, "airline", [call]) as ok:
        options = [b for b in _bag_options(conn, rid)[1] if b > 0] if ok else []
    if not options:
        return None
    return Constraint(kind="bags", fields={"user_id": booking["user_id"], "reservation_id": rid,
                                           "total_bags": rng.choice(options), cove.ON_NEW: 0})


def _sample_dependent(conn: sqlite3.Connection, rng: random.Random, users: list[str],
                      kind: str) -> list[Constraint]:
    """A booking, bags on that new booking, and the kind's independent extras (a
    cancellation of an older reservation), all writes succeeding in that order."""
    for uid in users:
        extras = [EXTRAS[k](conn, rng, uid) for k in DEPENDENT[kind]]
        if any(e is None for e in extras):
            continue
        booking = _sample_booking(conn, rng, uid)
        if booking is None or any(_shares_balance(conn, booking, e) for e in extras if e is not None):
            continue
        bags = _bags_on_new(conn, rng, booking)
        if bags is None:
            continue
        out = [booking, bags, *(e for e in extras if e is not None)]
        if cove.trial(conn, "airline", [write_call(c) for c in out]):
            return out
    return []


def sample_constraints(conn: sqlite3.Connection, rng: random.Random, p_extra: float = 0.6,
                       kind: str | None = None) -> list[Constraint]:
    """A constraint set for one user, solvable by construction: a booking, plus (with
    probability `p_extra`, or as `kind` says when given) a cancellation, a baggage change or
    a flight change. Empty when nothing fits."""
    users = [r["user_id"] for r in kit.rows(conn, "SELECT user_id FROM users ORDER BY user_id")]
    rng.shuffle(users)
    extra_kind = rng.choice(["cancel", "bags"]) if rng.random() < p_extra else None  # drawn either way
    if kind is not None:
        if kind not in KINDS:
            raise ValueError(f"unknown kind {kind!r}; kinds are {KINDS}")
        if kind in DEPENDENT:
            return _sample_dependent(conn, rng, users, kind)
        extra_kind = None if kind == "book" else kind
    for wanted in ([extra_kind, None] if extra_kind else [None]):
        for uid in users:
            extra = None
            if wanted is not None:
                extra = EXTRAS[wanted](conn, rng, uid)
                if extra is None:
                    continue
            booking = _sample_booking(conn, rng, uid)
            if booking is None or (extra is not None and _shares_balance(conn, booking, extra)):
                continue
            if extra is not None and extra.kind == "change" and not cove.solvable_in_any_order(
                    conn, "airline", [], [write_call(booking), write_call(extra)]):
                continue  # the booking takes the seats the move needs, or the other way round
            return [booking] if extra is None else [booking, extra]
    return []


# -- fuzzification -------------------------------------------------------------------------

def matching_ids(conn: sqlite3.Connection, entity: str, where: dict[str, Any]) -> list[str]:
    """Ids of the `entity` records whose attributes equal every value in `where`."""
    if not all(_IDENT.match(c) for c in where):
        raise ValueError(f"bad attribute names {sorted(where)}")
    cond = " AND ".join(f"{c} IS ?" for c in where) or "1"
    sql = f"SELECT id FROM ({ENTITY_VIEWS[entity]}) WHERE {cond} ORDER BY id"
    return [r[0] for r in conn.execute(sql, tuple(where.values())).fetchall()]


def _record(conn: sqlite3.Connection, entity: str, record_id: str) -> dict[str, Any]:
    rows = kit.rows(conn, f"SELECT * FROM ({ENTITY_VIEWS[entity]}) WHERE id = ?", record_id)
    if not rows:
        raise KeyError(f"{entity} {record_id!r} not found")
    return rows[0]


def _unique(conn: sqlite3.Connection, slot: str, entity: str, record_id: str, ladder: list[dict[str, Any]],
            text: Any) -> FuzzyRef:
    """The first description on `ladder` (attributes growing) that matches only the record."""
    return cove.unique_ref(slot, entity, record_id, ladder, text, lambda where: matching_ids(conn, entity, where))


def _place(code: str) -> str:
    return f"{CITY[code]} ({code})" if code in CITY else code


def flight_text(where: dict[str, Any]) -> str:
    pod = f"{where['part_of_day']} " if "part_of_day" in where else ""
    text = f"the {pod}flight from {where['origin']} to {where['destination']} on {cove.date_words(where['date'])}"
    return text + (f" departing at {where['departure']}" if "departure" in where else "")


def payment_text(where: dict[str, Any]) -> str:
    kind = where["kind"]
    if kind == "credit_card":
        return "your credit card" + (f" ending in {where['last4']}" if "last4" in where else "")
    name = "gift card" if kind == "gift_card" else "travel certificate"
    return f"your {name}" + (f" with a balance of {where['balance']}" if "balance" in where else "")


def reservation_text(where: dict[str, Any]) -> str:
    return cove.worded("the reservation for your trip", where, origin=lambda c: f" from {_place(c)}",
                       destination=lambda c: f" to {_place(c)}", date=lambda d: f" on {cove.date_words(d)}",
                       cabin=lambda c: f" in {CABIN_WORDS[c]}",
                       passengers=lambda n: f" for {n} passenger{'s' if n != 1 else ''}")


def describe_flight(conn: sqlite3.Connection, rng: random.Random, slot: str, flight_id: str) -> FuzzyRef:
    """Route and date, then the part of the day, then the departure time (among all flights)."""
    rec = _record(conn, "flight", flight_id)
    base = {"origin": rec["origin"], "destination": rec["destination"], "date": rec["date"]}
    ladder = [base, {**base, "part_of_day": rec["part_of_day"]},
              {**base, "part_of_day": rec["part_of_day"], "departure": rec["departure"]}]
    return _unique(conn, slot, "flight", flight_id, ladder[rng.choice([0, 0, 1]):], flight_text)


def describe_payment(conn: sqlite3.Connection, rng: random.Random, slot: str, payment_id: str) -> FuzzyRef:
    """The kind, then the card's last four digits or the balance (among the user's methods)."""
    rec = _record(conn, "payment", payment_id)
    extra = "last4" if rec["kind"] == "credit_card" else "balance"
    return _unique(conn, slot, "payment", payment_id,
                   cove.cumulative({"user_id": rec["user_id"]}, rec, ["kind", extra]), payment_text)


def describe_reservation(conn: sqlite3.Connection, rng: random.Random, slot: str, reservation_id: str) -> FuzzyRef:
    """The destination or the date first, then the other, origin, cabin and passengers
    (among the user's reservations, cancelled ones included)."""
    rec = _record(conn, "reservation", reservation_id)
    first = rng.choice(["destination", "date"])
    order = [first, "date" if first == "destination" else "destination", "origin", "cabin", "passengers"]
    return _unique(conn, slot, "reservation", reservation_id,
                   cove.cumulative({"user_id": rec["user_id"]}, rec, order), reservation_text)


def fuzzify(conn: sqlite3.Connection, constraints: list[Constraint], rng: random.Random) -> Fuzzification:
    """Unique descriptions for every id in the set, keyed "c<i>.<field>"; raises
    `FuzzifyError` when the most specific description still matches two or more records."""

    def flight(s: str, v: str) -> FuzzyRef:
        return describe_flight(conn, rng, s, v)

    def fields(c: Constraint) -> dict[str, cove.Describe] | None:
        if c.kind == "book":
            return {"flight_id": flight, "payment_id": lambda s, v: describe_payment(conn, rng, s, v)}
        if cove.ON_NEW in c.fields:
            return {}  # the booking the user is making: "that booking"
        if c.kind not in ("cancel", "bags", "change"):
            return None
        found: dict[str, cove.Describe] = {"reservation_id": lambda s, v: describe_reservation(conn, rng, s, v)}
        return {**found, "new_flight_id": flight} if c.kind == "change" else found

    return cove.fuzzification(constraints, fields)


def goal(constraints: list[Constraint], fuzzy: dict[str, str]) -> Goal:
    """The user's goal from the descriptions (never the ids) and the non-identifying fields."""
    parts: list[str] = []
    known: dict[str, str] = {}
    unknown: list[str] = []
    for i, c in enumerate(constraints):
        known["user_id"] = c["user_id"]
        if c.kind == "book":
            flight, payment = fuzzy[f"c{i}.flight_id"], fuzzy[f"c{i}.payment_id"]
            n = c["passengers"]
            parts.append(f"book {n} passenger{'s' if n > 1 else ''} in {CABIN_WORDS[c['cabin']]} on {flight},"
                         f" paying with {payment}, {'with' if c['insurance'] else 'without'} travel insurance")
            known.update({"flight": cove.mine(flight), "payment method": cove.mine(payment), "cabin": CABIN_WORDS[c["cabin"]],
                          "passengers": str(n), "insurance": "yes" if c["insurance"] else "no"})
            unknown += ["the flight id", "the payment method id", "the price"]
        elif c.kind == "cancel":
            res = fuzzy[f"c{i}.reservation_id"]
            parts.append(f"cancel {res} and get your money back")
            known["reservation"] = cove.mine(res)
            unknown.append("the reservation id")
        elif c.kind == "bags" and cove.ON_NEW in c.fields:
            n = c["total_bags"]
            why = BAG_REASONS[int(hashlib.sha256(c["reservation_id"].encode()).hexdigest(), 16) % len(BAG_REASONS)]
            parts.append(f"have {n} checked bag{'s' if n != 1 else ''} in total on that new booking, since {why}")
            known["bags on the new booking"] = str(n)
        elif c.kind == "bags":
            res, n = fuzzy[f"c{i}.reservation_id"], c["total_bags"]
            parts.append(f"have {n} checked bag{'s' if n != 1 else ''} in total on {res}")
            known.update({"reservation": cove.mine(res), "bags": str(n)})
            unknown.append("the reservation id")
        elif c.kind == "change":
            res, flight = fuzzy[f"c{i}.reservation_id"], fuzzy[f"c{i}.new_flight_id"]
            parts.append(f"move {res} to {flight}")
            known.update({"reservation to move": cove.mine(res), "new flight": flight})
            unknown += ["the reservation id", "the flight id", "the fare difference"]
        else:
            raise ValueError(f"unknown constraint kind {c.kind!r}")
    return cove.wants(parts, "travel plans", known, unknown)


# -- reference and checks ------------------------------------------------------------------

def _book_call(c: Constraint) -> ToolCall:
    return ToolCall(name="book_reservation", arguments={
        "user_id": c["user_id"], "flight_id": c["flight_id"], "cabin": c["cabin"],
        "passengers": c["passengers"], "payment_id": c["payment_id"], "insurance": bool(c["insurance"])})


# kind -> the write tool and its arguments (each the constraint's field of that name), or the call.
_WRITES: cove.Calls = {
    "book": _book_call,
    "cancel": ("cancel_reservation", "reservation_id"),
    "bags": ("update_baggage", "reservation_id", "total_bags"),
    "change": ("change_flight", "reservation_id", "new_flight_id"),
}


def write_call(c: Constraint) -> ToolCall:
    """The one write that satisfies `c`."""
    return cove.call_of(c, _WRITES)


def reference_calls(conn: sqlite3.Connection, constraints: list[Constraint]) -> list[ToolCall]:
    """Look the user and the records up (as P1 asks), then one write per constraint."""

    def search(flight_id: str) -> ToolCall:
        f = _record(conn, "flight", flight_id)
        return ToolCall(name="search_flights", arguments={"origin": f["origin"], "destination": f["destination"],
                                                          "date": f["date"]})

    def reads(c: Constraint) -> list[ToolCall]:
        if c.kind == "book":
            return [search(c["flight_id"])]
        if cove.ON_NEW in c.fields:  # a new booking's details come with its own write's result
            return []
        details = ToolCall(name="get_reservation_details", arguments={"reservation_id": c["reservation_id"]})
        return [details, search(c["new_flight_id"])] if c.kind == "change" else [details]

    account = ToolCall(name="get_user_details", arguments={"user_id": constraints[0]["user_id"]})
    return cove.reference_calls(constraints, [account], reads, write_call)


_reservation = kit.lookup("reservations", "reservation_id")


def check(conn_initial: sqlite3.Connection, conn_final: sqlite3.Connection,
          constraints: list[Constraint]) -> tuple[list[bool], list[dict[str, Any]]]:
    """Each constraint on the final state; a detail names the satisfying record.

    - book: an active reservation of the user with exactly that flight, cabin, passengers,
      payment method and insurance exists, and its id did not exist initially;
    - cancel: the reservation was active initially and is cancelled now;
    - bags: the reservation is active with exactly `total_bags` checked bags (for bags on a
      new booking, ``on_new``: the reservation that satisfied the booking);
    - change: the reservation is active on `new_flight_id` (it was on another flight).
    """
    initial_ids = {r[0] for r in conn_initial.execute("SELECT reservation_id FROM reservations")}
    satisfied: list[bool] = []
    details: list[dict[str, Any]] = []
    records: list[str | None] = []
    for c in constraints:
        record: str | None = None
        if c.kind == "book":
            rows = kit.rows(conn_final, "SELECT reservation_id FROM reservations WHERE user_id = ? AND flight_id = ?"
                                     " AND cabin = ? AND passengers = ? AND payment_id = ? AND insurance = ?"
                                     " AND status = 'active' ORDER BY reservation_id",
                         c["user_id"], c["flight_id"], c["cabin"], c["passengers"], c["payment_id"],
                         int(bool(c["insurance"])))
            new = [r["reservation_id"] for r in rows if r["reservation_id"] not in initial_ids]
            record = new[0] if new else None
            reason = "booked" if record else "no new active reservation with that flight, cabin, passengers, " \
                                             "payment method and insurance"
        elif c.kind == "cancel":
            before, after = _reservation(conn_initial, c["reservation_id"]), _reservation(conn_final, c["reservation_id"])
            ok = bool(before and after and before["status"] == "active" and after["status"] == "cancelled")
            record = c["reservation_id"] if ok else None
            reason = "cancelled" if ok else f"status is {after['status'] if after else 'missing'}"
        elif c.kind == "bags":
            rid = cove.target(c, "reservation_id", records)
            after = _reservation(conn_final, rid) if rid else None
            ok = bool(after and after["status"] == "active" and after["bags"] == c["total_bags"])
            record = rid if ok else None
            reason = "bags set" if ok else (f"{after['bags']} bags, status {after['status']}" if after else
                                            "the new booking was not made" if rid is None else "missing")
        elif c.kind == "change":
            before, after = _reservation(conn_initial, c["reservation_id"]), _reservation(conn_final, c["reservation_id"])
            ok = bool(before and after and after["status"] == "active"
                      and after["flight_id"] == c["new_flight_id"] != before["flight_id"])
            record = c["reservation_id"] if ok else None
            reason = "flight changed" if ok else (f"on {after['flight_id']}, status {after['status']}" if after
                                                  else "missing")
        else:
            raise ValueError(f"unknown constraint kind {c.kind!r}")
        satisfied.append(record is not None)
        records.append(record)
        details.append({"kind": c.kind, "satisfied": record is not None, "reason": reason,
                        "record": {"table": "reservations", "key": record_key([record])} if record else None})
    return satisfied, details


# -- known-bad variants for the verifier audit --------------------------------------------------

def audit_mutations(conn: sqlite3.Connection, constraints: list[Constraint],
                    reference: list[ToolCall]) -> dict[str, list[ToolCall]]:
    """Variants of `reference` that must fail and whose writes all succeed: the booking on a
    wrong flight, in a wrong cabin, with a wrong payment method; a wrong bag count; one extra
    (unrelated, successful) booking. A case is left out when the state offers no such call."""
    out: dict[str, list[ToolCall]] = {}

    def swap(old: ToolCall, new: ToolCall) -> list[ToolCall]:
        return [new if call is old else call for call in reference]

    targets = {c["flight_id"] for c in constraints if c.kind == "book"}
    for c in constraints:
        old = next((call for call in reference if call.key() == write_call(c).key()), None)
        if old is None:
            continue
        if c.kind == "book":
            uid, pax, ins = c["user_id"], c["passengers"], bool(c["insurance"])
            flight = kit.rows(conn, "SELECT * FROM flights WHERE flight_id = ?", c["flight_id"])[0]
            payments = kit.rows(conn, "SELECT * FROM payment_methods WHERE user_id = ? ORDER BY payment_id", uid)
            pay = next(p for p in payments if p["payment_id"] == c["payment_id"])
            others = [f for f in _bookable(conn, uid, pax) if f["flight_id"] not in targets
                      and _covers(pay, _total(f, c["cabin"], pax, ins))]
            others.sort(key=lambda f: ((f["origin"], f["destination"]) != (flight["origin"], flight["destination"]),
                                       f["flight_id"]))
            if others:
                out["wrong_flight"] = swap(old, ToolCall(name=old.name, arguments={
                    **old.arguments, "flight_id": others[0]["flight_id"]}))
            cabins = sorted((cab for cab in CABINS if cab != c["cabin"]
                             and _covers(pay, _total(flight, cab, pax, ins))), key=lambda cab: flight[price_column(cab)])
            if cabins:
                out["wrong_cabin"] = swap(old, ToolCall(name=old.name, arguments={**old.arguments, "cabin": cabins[0]}))
            alt = [p for p in payments if p["payment_id"] != c["payment_id"]
                   and _covers(p, _total(flight, c["cabin"], pax, ins))]
            if alt:
                out["wrong_payment"] = swap(old, ToolCall(name=old.name, arguments={
                    **old.arguments, "payment_id": alt[0]["payment_id"]}))
            card = next(p["payment_id"] for p in payments if p["kind"] == "credit_card")
            spare = [f for f in _bookable(conn, uid, 1) if f["flight_id"] not in targets]
            if spare and "extra_write" not in out:
                out["extra_write"] = [*reference, ToolCall(name="book_reservation", arguments={
                    "user_id": uid, "flight_id": spare[-1]["flight_id"], "cabin": "basic_economy",
                    "passengers": 1, "payment_id": card, "insurance": False})]
        elif c.kind == "bags":
            creating = [write_call(constraints[c[cove.ON_NEW]])] if cove.ON_NEW in c.fields else []
            with cove.applied(conn, "airline", creating):
                _, options = _bag_options(conn, c["reservation_id"])
            wrong = [b for b in options if b != c["total_bags"]]
            if wrong:
                out["wrong_bag_count"] = swap(old, ToolCall(name=old.name, arguments={
                    **old.arguments, "total_bags": wrong[0]}))
    return out
