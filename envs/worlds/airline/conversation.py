"""How conversations go in the airline world (the contract is `envs/conversation.py`)."""

from __future__ import annotations

import sqlite3
from typing import Any

from data.records import Fact, ToolCall
from envs import sql as kit
from envs.conversation import DEFAULT_CLAUSES, Identity, amount_fact, date_forms, id_fact
from envs.worlds.airline.tools import (
    BAG_FEE,
    FREE_BAGS,
    INSURANCE_PER_PASSENGER,
    bag_fee,
    price_column,
)

IDENTITY = Identity(keys=[["user_id"]], lookups={"get_user_details": ["user_id"]})
USER_FACING_IDS = ["user_id", "reservation_id"]  # a user knows their account id and booking codes
CLAUSES = DEFAULT_CLAUSES
ASK_IDENTITY = [
    "I can help with that. Could you give me your user id?",
    "Happy to help. First, what is your user id?",
    "Sure. May I have your user id so I can look up your account?",
]
# Phrases of the policy (policy.md) that state each rule: a refusal must say one of them.
RULE_TERMS = {
    "R01_FLIGHT_BOOKABLE": ["only flights with status `scheduled`", "scheduled"],
    "R02_SEATS": ["free seats"],
    "R03_PAYMENT_OWNER": ["must belong to the user"],
    "R04_BALANCE": ["must cover the whole amount"],
    "R05_PASSENGERS": ["between 1 and 5 passengers"],
    "R06_CANCEL_WINDOW": ["within 24", "24 hours"],
    "R07_CANCELLED_FINAL": ["cannot be changed or reactivated"],
    "R08_BASIC_NO_CHANGE": ["basic economy reservations cannot change flights"],
    "R09_SAME_ROUTE": ["keeps the origin and the destination"],
    "R10_BAG_LIMIT": ["at most 3 checked bags per passenger"],
    "R11_NO_DUPLICATE": ["two active reservations on the same flight"],
    "R12_DEPARTED": ["have departed cannot be changed or cancelled"],
}
ALTERNATIVES = {
    "R06_CANCEL_WINDOW": "I can change the flight instead, if that helps.",
    "R02_SEATS": "I can look for another flight on the same route.",
    "R04_BALANCE": "You could pay with another of your payment methods.",
    "R10_BAG_LIMIT": "You can bring up to 3 checked bags per passenger.",
}
CABIN = {"basic_economy": "basic economy", "economy": "economy", "business": "business"}


def mentions(conn: sqlite3.Connection, table: str, row: dict[str, Any]) -> list[str | tuple[str, ...]]:
    """How a record is named to a user (a flight by its number and date)."""
    if table == "flights":
        return [(row["flight_number"], row["date"])]
    if table == "payment_methods":
        return [row["last4"]] if row["kind"] == "credit_card" and row["last4"] else [row["kind"].replace("_", " ")]
    if table == "reservations":
        return [row["reservation_id"]]
    return []


def phrase(conn: sqlite3.Connection, table: str, row: dict[str, Any]) -> str | None:
    """How a user names a record in a request: a flight by its number and date, a payment
    method by its card digits (a gift card or certificate by its balance when they hold more
    than one)."""
    if table == "flights":
        return f"flight {row['flight_number']} on {date_forms(row['date'])[1]}"
    if table == "payment_methods":
        kind = row["kind"].replace("_", " ")
        if row["kind"] == "credit_card":
            return f"my credit card ending in {row['last4']}"
        same = kit.count(conn, "payment_methods", user_id=row["user_id"], kind=row["kind"])
        return f"my {kind}" if same == 1 else f"my {kind} with a balance of {row['balance']}"
    return None


def _flight(conn: sqlite3.Connection, flight_id: str) -> dict[str, Any]:
    return kit.one(conn, "SELECT * FROM flights WHERE flight_id = ?", flight_id)


def flight_words(flight: dict[str, Any]) -> str:
    day = date_forms(flight["date"])[1]
    return f"flight {flight['flight_number']} from {flight['origin']} to {flight['destination']} on {day} at {flight['departure']}"


def payment_words(conn: sqlite3.Connection, payment_id: str) -> str:
    p = kit.one(conn, "SELECT * FROM payment_methods WHERE payment_id = ?", payment_id)
    if p["kind"] == "credit_card":
        return f"the credit card ending in {p['last4']}"
    return f"the {p['kind'].replace('_', ' ')} (balance {p['balance']})"


def _reservation(conn: sqlite3.Connection, rid: str) -> dict[str, Any]:
    return kit.one(conn, "SELECT r.*, u.membership FROM reservations r JOIN users u USING (user_id)"
                         " WHERE reservation_id = ?", rid)


def action(conn: sqlite3.Connection, call: ToolCall) -> list[str]:
    """Realisations of the plan for one write, with the amounts it moves."""
    a = call.arguments
    if call.name == "book_reservation":
        f = _flight(conn, a["flight_id"])
        pax = int(a["passengers"])
        total = f[price_column(a["cabin"])] * pax + (INSURANCE_PER_PASSENGER * pax if a.get("insurance") else 0)
        seats = f"{pax} {CABIN[a['cabin']]} seat{'s' if pax > 1 else ''}"
        ins = "with travel insurance" if a.get("insurance") else "without travel insurance"
        pay = payment_words(conn, a["payment_id"])
        return [f"book {seats} on {flight_words(f)}, {ins}, for a total of {total} charged to {pay}",
                f"reserve {seats} on {flight_words(f)} ({ins}); the total is {total}, paid with {pay}"]
    if call.name == "cancel_reservation":
        r = _reservation(conn, a["reservation_id"])
        f = _flight(conn, r["flight_id"])
        pay = payment_words(conn, r["payment_id"])
        return [f"cancel reservation {r['reservation_id']} ({flight_words(f)}) and refund {r['total_paid']} to {pay}",
                f"cancel {r['reservation_id']} on {flight_words(f)}; the {r['total_paid']} you paid goes back to {pay}"]
    if call.name == "update_baggage":
        r = _reservation(conn, a["reservation_id"])
        n = int(a["total_bags"])
        delta = bag_fee(r["membership"], r["passengers"], n) - bag_fee(r["membership"], r["passengers"], r["bags"])
        free = FREE_BAGS[r["membership"]] * r["passengers"]
        cost = (f"that is {delta} extra ({BAG_FEE} per bag beyond the {free} free one(s)), charged to "
                f"{payment_words(conn, r['payment_id'])}" if delta > 0 else
                f"{-delta} goes back to {payment_words(conn, r['payment_id'])}" if delta < 0 else "at no extra cost")
        return [f"set reservation {r['reservation_id']} to {n} checked bag{'s' if n != 1 else ''}; {cost}",
                f"change the checked bags on {r['reservation_id']} from {r['bags']} to {n}, {cost}"]
    if call.name == "change_flight":
        r = _reservation(conn, a["reservation_id"])
        old, new = _flight(conn, r["flight_id"]), _flight(conn, a["new_flight_id"])
        col = price_column(r["cabin"])
        delta = (new[col] - old[col]) * r["passengers"]
        pay = payment_words(conn, r["payment_id"])
        cost = (f"the fare difference of {delta} is charged to {pay}" if delta > 0 else
                f"the fare difference of {-delta} is refunded to {pay}" if delta < 0 else "the fare is the same")
        return [f"move reservation {r['reservation_id']} to {flight_words(new)}; {cost}",
                f"change {r['reservation_id']} from {old['flight_number']} on {date_forms(old['date'])[1]} to "
                f"{flight_words(new)}, and {cost}"]
    return [f"{call.name.replace('_', ' ')}"]


def facts(before: sqlite3.Connection, after: sqlite3.Connection, call: ToolCall, result: Any) -> list[Fact]:
    """What the user must hear after a write: the new reservation id, the money moved."""
    a = call.arguments
    if call.name == "book_reservation":
        return [id_fact("new reservation id", result["reservation_id"]),
                amount_fact("amount charged", result["total_paid"])]
    if call.name == "cancel_reservation":
        return [amount_fact("amount refunded", result["total_paid"])]
    if call.name in ("update_baggage", "change_flight"):
        old = kit.one(before, "SELECT total_paid FROM reservations WHERE reservation_id = ?", a["reservation_id"])
        delta = result["total_paid"] - old["total_paid"]
        out = [amount_fact("amount charged" if delta > 0 else "amount refunded", delta)] if delta else []
        if call.name == "change_flight":
            out.append(id_fact("new flight", result["flight"]["flight_number"]))
        else:
            out.append(Fact(label="checked bags", any_of=[str(result["bags"])], kind="count"))
        return out
    return []


def grounding(conn: sqlite3.Connection, call: ToolCall, known: dict[str, str]) -> list[ToolCall]:
    """The reads that show a write's ids: flights by search, reservations by their details
    (payment methods come with the user's details, the identity lookup)."""
    a = call.arguments
    out: list[ToolCall] = []
    if "reservation_id" in a:
        out.append(ToolCall(name="get_reservation_details", arguments={"reservation_id": a["reservation_id"]}))
    for key in ("flight_id", "new_flight_id"):
        if key in a:
            f = _flight(conn, a[key])
            out.append(ToolCall(name="search_flights", arguments={
                "origin": f["origin"], "destination": f["destination"], "date": f["date"]}))
    return out


def _money(facts: list[Fact], conn: sqlite3.Connection, payment_id: str) -> str:
    for f in facts:
        if f.kind == "amount":
            verb = "charged to" if "charged" in f.label else "refunded to"
            return f"{f.any_of[0]} was {verb} {payment_words(conn, payment_id)}"
    return "at no extra cost"


def report(conn: sqlite3.Connection, call: ToolCall, result: Any, facts: list[Fact]) -> list[str]:
    """Realisations of what was done, with the ids and amounts the user must hear."""
    if call.name == "update_baggage":
        n = result["bags"]
        money = _money(facts, conn, result["payment_id"])
        return [f"Reservation {result['reservation_id']} now has {n} checked bag{'s' if n != 1 else ''}; {money}.",
                f"{result['reservation_id']} is set to {n} checked bag{'s' if n != 1 else ''}, and {money}."]
    if call.name == "change_flight":
        money = _money(facts, conn, result["payment_id"]).replace("at no extra cost", "the fare is unchanged")
        return [f"Reservation {result['reservation_id']} is now on {flight_words(result['flight'])}; {money}.",
                f"I moved {result['reservation_id']} to {flight_words(result['flight'])}, and {money}."]
    if call.name == "book_reservation":
        words = f"{flight_words(result['flight'])}, {result['total_paid']} charged to {payment_words(conn, result['payment_id'])}"
        return [f"Your reservation {result['reservation_id']} is confirmed: {words}.",
                f"You are booked under reservation {result['reservation_id']} on {words}."]
    if call.name == "cancel_reservation":
        pay = payment_words(conn, result["payment_id"])
        return [f"Reservation {result['reservation_id']} is cancelled and {result['total_paid']} is refunded to {pay}.",
                f"I cancelled {result['reservation_id']}; the refund of {result['total_paid']} goes to {pay}."]
    return []
