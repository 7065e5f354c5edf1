"""Synthesis hooks of the airline world (see `envs/design.py` for the contract)."""

from __future__ import annotations

import random
import sqlite3
from datetime import timedelta
from typing import Any

from data.records import ToolCall
from envs import sql as kit
from envs.design import Goal, Variant, changes_by_row
from envs.state import CellChange

KINDS = [
    "seats_exact", "seats_short", "balance_exact", "balance_short",
    "cancel_inside_window", "cancel_outside_window", "bags_at_limit", "change_seats_exact",
]
# The write tools each kind's goal calls (none: the right outcome is a refusal); logic-
# driven synthesis schedules kinds by it so every write tool is some task's target.
KIND_WRITES: dict[str, list[str]] = {
    "seats_exact": ["book_reservation"], "seats_short": ["book_reservation"], "balance_exact": ["book_reservation"],
    "balance_short": ["book_reservation"], "cancel_inside_window": ["cancel_reservation"], "cancel_outside_window": [],
    "bags_at_limit": ["update_baggage"], "change_seats_exact": ["change_flight"],
}
PERSONAS = {"seats_short": "mismatch", "balance_short": "boundary", "cancel_outside_window": "boundary",
            "seats_exact": "boundary", "balance_exact": "boundary", "bags_at_limit": "novice",
            "cancel_inside_window": "entangled", "change_seats_exact": "boundary"}
CABIN_WORDS = {"basic_economy": "basic economy", "economy": "economy", "business": "business"}


def _future_pairs(conn: sqlite3.Connection) -> list[tuple[dict, dict]]:
    """(flight, substitute) pairs: two scheduled future flights on the same route."""
    today = kit.now_dt(conn).date().isoformat()
    flights = kit.rows(conn, "SELECT * FROM flights WHERE status = 'scheduled' AND date > ? ORDER BY flight_id", today)
    by_route: dict[tuple[str, str], list[dict]] = {}
    for f in flights:
        by_route.setdefault((f["origin"], f["destination"]), []).append(f)
    return [(a, b) for fs in by_route.values() for a, b in zip(fs, fs[1:], strict=False)]


def variants(conn: sqlite3.Connection, rng: random.Random, n: int, kinds: list[str] | None = None) -> list[Variant]:
    """`n` boundary-adjacent variants of the state, cycling through the boundary kinds (or
    through `kinds`, in that order, when given)."""
    cycle = KINDS if kinds is None else kinds
    if set(cycle) - set(KINDS) or not cycle:
        raise ValueError(f"unknown kind(s) {sorted(set(cycle) - set(KINDS))}; kinds are {KINDS}")
    users = kit.rows(conn, "SELECT * FROM users ORDER BY user_id")
    with_gift = kit.rows(conn, "SELECT DISTINCT u.* FROM users u JOIN payment_methods p USING (user_id)"
                            " WHERE p.kind = 'gift_card' ORDER BY user_id")
    pairs = _future_pairs(conn)
    out: list[Variant] = []
    attempts = 0
    while len(out) < n and attempts < 20 * n:
        kind = cycle[attempts % len(cycle)]
        attempts += 1
        pool = with_gift if kind.startswith("balance") and with_gift else users
        v = _make(kind, conn, rng, rng.choice(pool), rng.choice(pairs))
        if v is not None:
            out.append(v)
    return out


def _make(kind: str, conn: sqlite3.Connection, rng: random.Random, user: dict, pair: tuple[dict, dict]) -> Variant | None:
    uid = user["user_id"]
    flight, substitute = pair
    pms = kit.rows(conn, "SELECT * FROM payment_methods WHERE user_id = ? ORDER BY payment_id", uid)
    gift = next((p for p in pms if p["kind"] == "gift_card"), None)
    card = next(p for p in pms if p["kind"] == "credit_card")
    passengers = rng.choice([1, 2])
    focus: dict[str, Any] = {"user_id": uid, "flight_ids": [flight["flight_id"], substitute["flight_id"]],
                             "passengers": passengers, "cabins": ["economy"], "reservation_ids": []}
    seat = lambda fid, k: f"UPDATE flights SET seats_available = {k} WHERE flight_id = {kit.q(fid)}"  # noqa: E731
    roomy = seat(substitute["flight_id"], max(substitute["seats_available"], passengers + 3))
    if kind in ("seats_exact", "seats_short"):
        k = passengers if kind == "seats_exact" else passengers - 1
        if kind == "seats_short" and passengers == 1:
            focus["passengers"] = passengers = 2
            k = 1
        focus["passengers"] = passengers
        patches = [seat(flight["flight_id"], k), roomy]
        pref = {"preferred_flight": flight["flight_id"]} if kind == "seats_short" else {}
        return Variant(kind, patches, focus, ["R02_SEATS"], PERSONAS[kind],
                       f"{flight['flight_id']} has {k} seat(s) for {passengers} passenger(s)", pref)
    if kind in ("balance_exact", "balance_short"):
        if gift is None:
            return None
        total = flight["price_economy"] * passengers
        balance = total if kind == "balance_exact" else total - 1
        patches = [f"UPDATE payment_methods SET balance = {balance} WHERE payment_id = {kit.q(gift['payment_id'])}",
                   seat(flight["flight_id"], max(flight["seats_available"], passengers + 2))]
        focus["flight_ids"] = [flight["flight_id"]]
        focus["payment_ids"] = [gift["payment_id"], card["payment_id"]]
        pref = {"preferred_payment": gift["payment_id"]} if kind == "balance_short" else {}
        return Variant(kind, patches, focus, ["R04_BALANCE"], PERSONAS[kind],
                       f"gift card balance {balance} for a {total} booking", pref)
    # Reservation-based boundaries: give the user an active economy reservation on `flight`.
    hours = {"cancel_inside_window": 23, "cancel_outside_window": 25, "bags_at_limit": 60,
             "change_seats_exact": 60}[kind]
    created = (kit.now_dt(conn) - timedelta(hours=hours)).strftime("%Y-%m-%d %H:%M:%S")
    rid = f"RX{rng.randrange(16**4):04X}"
    bags = 3 * passengers - 1 if kind == "bags_at_limit" else 0
    price = flight["price_economy"] * passengers
    patches = [
        seat(flight["flight_id"], max(flight["seats_available"], passengers + 1)),
        "INSERT INTO reservations (reservation_id, user_id, flight_id, cabin, passengers, payment_id, insurance,"
        f" bags, total_paid, status, created_at) VALUES ({kit.q(rid)}, {kit.q(uid)}, {kit.q(flight['flight_id'])}, 'economy',"
        f" {passengers}, {kit.q(card['payment_id'])}, 0, {bags}, {price}, 'active', {kit.q(created)})",
    ]
    focus.update(reservation_ids=[rid], flight_ids=[flight["flight_id"], substitute["flight_id"]])
    if kind == "change_seats_exact":  # the later flight on the route has exactly the seats the party needs
        patches.append(seat(substitute["flight_id"], passengers))
        return Variant(kind, patches, focus, ["R02_SEATS", "R09_SAME_ROUTE"], PERSONAS[kind],
                       f"reservation {rid} on {flight['flight_id']}; {substitute['flight_id']} has {passengers}"
                       f" seat(s) for {passengers} passenger(s)", preference={"wants_change": rid})
    rules = {"cancel_inside_window": ["R06_CANCEL_WINDOW"], "cancel_outside_window": ["R06_CANCEL_WINDOW"],
             "bags_at_limit": ["R10_BAG_LIMIT"]}[kind]
    return Variant(kind, patches, focus, rules, PERSONAS[kind], f"reservation {rid} booked {hours}h ago, {bags} bags",
                   allow_no_change=kind == "cancel_outside_window",
                   preference={"wants_cancel": rid} if kind.startswith("cancel") else {"wants_bags": rid})


def candidate_calls(conn: sqlite3.Connection, focus: dict[str, Any]) -> list[ToolCall]:
    """Write calls with arguments drawn from the database around the focus records."""
    uid = focus["user_id"]
    pms = [p["payment_id"] for p in kit.rows(conn, "SELECT payment_id FROM payment_methods WHERE user_id = ?", uid)]
    if focus.get("payment_ids"):
        pms = [p for p in pms if p in focus["payment_ids"]]
    calls = [
        ToolCall(name="book_reservation", arguments={
            "user_id": uid, "flight_id": fid, "cabin": cabin, "passengers": focus["passengers"],
            "payment_id": pid, "insurance": ins})
        for fid in focus["flight_ids"] for cabin in focus["cabins"] for pid in pms for ins in (False, True)
    ]
    reservations = kit.rows(
        conn, "SELECT reservation_id, bags, flight_id FROM reservations WHERE user_id = ? AND status = 'active'"
        " ORDER BY reservation_id", uid)
    for r in reservations:
        if r["reservation_id"] not in focus.get("reservation_ids", []) and r["flight_id"] not in focus["flight_ids"]:
            continue
        rid = r["reservation_id"]
        calls.append(ToolCall(name="cancel_reservation", arguments={"reservation_id": rid}))
        for bags in {r["bags"] + 1, max(r["bags"] - 1, 0)} - {r["bags"]}:
            calls.append(ToolCall(name="update_baggage", arguments={"reservation_id": rid, "total_bags": bags}))
        for fid in focus["flight_ids"]:
            if fid != r["flight_id"]:
                calls.append(ToolCall(name="change_flight", arguments={"reservation_id": rid, "new_flight_id": fid}))
    return calls


def lookup_calls(focus: dict[str, Any]) -> list[ToolCall]:
    return [ToolCall(name="get_user_details", arguments={"user_id": focus["user_id"]})]


def _flight_phrase(conn: sqlite3.Connection, fid: str) -> str:
    f = kit.rows(conn, "SELECT * FROM flights WHERE flight_id = ?", fid)[0]
    return f"flight {f['flight_number']} from {f['origin']} to {f['destination']} on {f['date']} at {f['departure']}"


def payment_phrase(conn: sqlite3.Connection, pid: str) -> str:
    """The payment method as its owner names it (`conn`: the state before the change, so a
    balance is the one the user knows): a card by its last digits, a gift card or
    certificate by its balance when the user holds more than one; never the internal id."""
    p = kit.rows(conn, "SELECT * FROM payment_methods WHERE payment_id = ?", pid)[0]
    kind = p["kind"].replace("_", " ")
    if p["kind"] == "credit_card":
        return f"your credit card ending in {p['last4']}"
    same = kit.count(conn, "payment_methods", user_id=p["user_id"], kind=p["kind"])
    return f"your {kind}" if same == 1 else f"your {kind} with a balance of {p['balance']}"


def describe(changes: list[CellChange], before: sqlite3.Connection, after: sqlite3.Connection,
             variant: Variant) -> Goal | None:
    """User-perspective projection of a change to the reservations (side effects implied)."""
    uid = variant.focus["user_id"]
    parts: list[str] = []
    known = {"user_id": uid}
    rows = changes_by_row(changes, "reservations")
    for key, cols in rows.items():
        op = next(iter(cols.values())).op
        if op == "insert":
            new = {c: ch.after for c, ch in cols.items()}
            if new["status"] != "active":
                return None  # booked and cancelled again: nothing a user would ask for
            pax = new["passengers"]
            text = (f"book {pax} passenger{'s' if pax > 1 else ''} in {CABIN_WORDS[new['cabin']]} on "
                    f"{_flight_phrase(after, new['flight_id'])}, paying with {payment_phrase(before, new['payment_id'])}, "
                    f"{'with' if new['insurance'] else 'without'} travel insurance")
            if new["bags"]:
                text += f" and {new['bags']} checked bag{'s' if new['bags'] > 1 else ''}"
            pref_flight = variant.preference.get("preferred_flight")
            if pref_flight and pref_flight != new["flight_id"]:
                text += (f" (you would prefer {_flight_phrase(after, pref_flight)} if it has room for everyone,"
                         " otherwise the other one is fine)")
            pref_pay = variant.preference.get("preferred_payment")
            if pref_pay and pref_pay != new["payment_id"]:
                text += f" (you would rather use {payment_phrase(before, pref_pay)} if its balance covers it)"
            parts.append(text)
        elif op == "update":
            rid = key.strip('[]"')
            known[f"reservation {rid}"] = rid
            if "status" in cols:
                parts.append(f"cancel your reservation {rid}")
                continue
            if "flight_id" in cols:
                parts.append(f"move your reservation {rid} to {_flight_phrase(after, cols['flight_id'].after)}")
            if "bags" in cols:
                parts.append(f"have {cols['bags'].after} checked bags in total on your reservation {rid}")
        else:
            return None
    if not parts:
        if not variant.allow_no_change:
            return None
        rid = variant.preference.get("wants_cancel")
        known[f"reservation {rid}"] = rid
        return Goal(
            instruction=f"You want to cancel your reservation {rid} and get your money back.",
            reason="plans changed", known_info=known,
            unknown_info=["whether the reservation can still be cancelled"],
        )
    instruction = "You want to " + "; and ".join(parts) + "."
    return Goal(instruction=instruction, reason="travel plans", known_info=known)


def goal_score(changes: list[CellChange], variant: Variant) -> float:
    """Prefer goals that act on the boundary records the variant planted."""
    rows = changes_by_row(changes, "reservations")
    if not rows:
        return 3.0 if variant.allow_no_change else 0.0
    score = 0.0
    for cols in rows.values():
        values = {c: ch.after for c, ch in cols.items()}
        if variant.kind in ("seats_exact",) and values.get("flight_id") == variant.focus["flight_ids"][0]:
            score += 2
        if variant.kind == "seats_short" and values.get("flight_id") == variant.focus["flight_ids"][1]:
            score += 2
        if variant.kind == "balance_exact" and values.get("payment_id") == variant.focus["payment_ids"][0]:
            score += 2
        if variant.kind == "balance_short" and values.get("payment_id") == variant.focus["payment_ids"][1]:
            score += 2
        if variant.kind == "cancel_inside_window" and values.get("status") == "cancelled":
            score += 2
        if (variant.kind == "change_seats_exact" and "flight_id" in cols and cols["flight_id"].op == "update"
                and values["flight_id"] == variant.focus["flight_ids"][1]):
            score += 2
        if variant.kind == "bags_at_limit" and "bags" in cols and cols["bags"].op == "update":
            score += 2 if values["bags"] > cols["bags"].before else 0
        if values.get("insurance") in (0, False):
            score += 0.5
        if variant.kind == "change_seats_exact" and next(iter(cols.values())).op == "insert":
            score -= 1  # the user asks to move a trip, not to book another one
    return score


def self_play_templates() -> dict[str, Any]:
    """Self-play (Tool-R0) question templates per tool (see `envs/templating.py`); they
    live in `templates.py` beside this file."""
    from envs.worlds.airline.templates import TEMPLATES

    return dict(TEMPLATES)
