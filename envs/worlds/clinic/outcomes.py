"""The clinic's explorer and projection hooks (see `envs/design.py`; re-exported by `design.py`):
the write calls the explorer tries around a variant's focus, and what a reached state means
to the patient (`describe`, `goal_score`)."""

from __future__ import annotations

import json
import sqlite3
from datetime import datetime
from typing import Any

from data.records import ToolCall
from envs import sql as kit
from envs.design import Goal, Variant, changes_by_row
from envs.state import CellChange
from envs.worlds.clinic.constraints import SPECIALTY_WORDS

# -- explorer hooks ---------------------------------------------------------------------------------


def candidate_calls(conn: sqlite3.Connection, focus: dict[str, Any]) -> list[ToolCall]:
    """Write calls with arguments drawn from the focus records (and the database)."""
    pid = focus["patient_id"]
    calls: list[ToolCall] = []
    if focus.get("pay"):
        row = kit.row(conn, "SELECT balance_due FROM patients WHERE patient_id = ?", pid)
        if row and row["balance_due"] > 0:
            calls.append(ToolCall(name="pay_balance", arguments={"patient_id": pid, "amount": row["balance_due"]}))
    for aid in focus.get("appointment_ids", []):
        appt = kit.row(conn, "SELECT * FROM appointments WHERE appointment_id = ?", aid)
        if appt is None or appt["status"] != "scheduled":
            continue
        for accept in (False, True):
            calls.append(ToolCall(name="cancel_appointment",
                                  arguments={"appointment_id": aid, "accept_late_fee": accept}))
        for slot in focus.get("move_slots", []):
            if slot != appt["slot_id"]:
                calls.append(ToolCall(name="reschedule_appointment",
                                      arguments={"appointment_id": aid, "new_slot_id": slot}))
    for slot in focus.get("slot_ids", []):
        for type_code in focus.get("type_codes", []):
            for ref in [None, *focus.get("referral_ids", [])]:
                args: dict[str, Any] = {"patient_id": pid, "slot_id": slot, "appointment_type": type_code}
                if ref is not None:
                    args["referral_id"] = ref
                calls.append(ToolCall(name="book_appointment", arguments=args))
    for rx in focus.get("rx_ids", []):
        calls.append(ToolCall(name="refill_prescription", arguments={"rx_id": rx}))
    return calls


def lookup_calls(focus: dict[str, Any]) -> list[ToolCall]:
    return [ToolCall(name="get_patient_details", arguments={"patient_id": focus["patient_id"]})]


# -- user-perspective projection --------------------------------------------------------------------


def when_words(at: datetime) -> str:
    return f"{at:%A} {at:%Y-%m-%d} at {at:%H:%M}"


def _type_words(conn: sqlite3.Connection, type_code: str) -> str:
    (name,) = conn.execute("SELECT name FROM appointment_types WHERE type_code = ?", (type_code,)).fetchone()
    name = name[0].lower() + name[1:]
    return ("an " if name[0] in "aeiou" else "a ") + name


def _provider_words(conn: sqlite3.Connection, provider_id: str) -> str:
    p = kit.row(conn, "SELECT * FROM providers WHERE provider_id = ?", provider_id)
    assert p is not None
    return f"{p['name']} ({SPECIALTY_WORDS[p['specialty']]})"


def _slot_time(conn: sqlite3.Connection, slot_id: str) -> str:
    s = kit.row(conn, "SELECT start_at FROM slots WHERE slot_id = ?", slot_id)
    assert s is not None
    return when_words(datetime.fromisoformat(s["start_at"]))


def slot_words(conn: sqlite3.Connection, slot_id: str, type_code: str) -> str:
    s = kit.row(conn, "SELECT * FROM slots WHERE slot_id = ?", slot_id)
    assert s is not None
    return (f"{_type_words(conn, type_code)} with {_provider_words(conn, s['provider_id'])} on "
            f"{when_words(datetime.fromisoformat(s['start_at']))}")


def _outcomes(changes: list[CellChange]) -> dict[str, list[Any]] | None:
    """Primary outcomes of a change (side effects in slots, referrals, balances implied), or
    None when the change is not something a patient would ask for."""
    out: dict[str, list[Any]] = {"pay": [], "cancel": [], "move": [], "book": [], "refill": []}
    for key, cols in changes_by_row(changes, "appointments").items():
        aid = json.loads(key)[0]
        op = next(iter(cols.values())).op
        if op == "insert":
            if cols["status"].after != "scheduled":
                return None  # booked and cancelled again
            out["book"].append((aid, cols["slot_id"].after, cols["type_code"].after, cols["referral_id"].after))
        elif op == "update" and "status" in cols and "slot_id" not in cols and cols["status"].after == "cancelled":
            out["cancel"].append((aid, (cols["late_fee"].after if "late_fee" in cols else 0)))
        elif op == "update" and "slot_id" in cols and "status" not in cols:
            out["move"].append((aid, cols["slot_id"].before, cols["slot_id"].after))
        else:
            return None
    for cols in changes_by_row(changes, "fills").values():
        out["refill"].append(cols["rx_id"].after)
    for cols in changes_by_row(changes, "payments").values():
        out["pay"].append(cols["amount"].after)
    return out


def describe(changes: list[CellChange], before: sqlite3.Connection, after: sqlite3.Connection,
             variant: Variant) -> Goal | None:
    """User-perspective projection of a change: payments, cancellations, moves, bookings,
    refills, in that order; ids of slots, providers, referrals and prescriptions never
    appear (the patient knows names, times and their own appointment ids)."""
    pid = variant.focus["patient_id"]
    patient = kit.row(before, "SELECT * FROM patients WHERE patient_id = ?", pid)
    outcomes = _outcomes(changes)
    if patient is None or outcomes is None:
        return None
    known = {"patient_id": pid, "date_of_birth": patient["date_of_birth"]}
    pref = variant.preference
    parts: list[str] = []
    for amount in outcomes["pay"]:
        if amount == patient["balance_due"]:
            parts.append(f"pay off your outstanding balance of {amount} with your card on file")
        else:
            parts.append(f"pay {amount} of your outstanding balance with your card on file")
    for aid, late_fee in outcomes["cancel"]:
        appt = kit.row(before, "SELECT * FROM appointments WHERE appointment_id = ?", aid)
        assert appt is not None
        known[f"appointment {aid}"] = aid
        text = (f"cancel your appointment {aid} ({slot_words(before, appt['slot_id'], appt['type_code'])})")
        text += (", and you accept the late-cancellation fee if one applies" if late_fee
                 else "; you do not want to pay a late-cancellation fee")
        if pref.get("give_up") == aid:
            text += " (you are giving it up to make room for a new appointment)"
        if pref.get("wants_move") == aid:
            text += ("; you would rather move it, but if it cannot be moved, cancelling it and booking the"
                     " new time is fine")
        parts.append(text)
    for aid, old, new in outcomes["move"]:
        appt = kit.row(before, "SELECT * FROM appointments WHERE appointment_id = ?", aid)
        assert appt is not None
        known[f"appointment {aid}"] = aid
        parts.append(f"move your appointment {aid} ({slot_words(before, old, appt['type_code'])}) to "
                     f"{_slot_time(after, new)} with the same provider")
    for _aid, slot, type_code, referral in outcomes["book"]:
        text = "book " + slot_words(after, slot, type_code)
        if referral is not None:
            (specialty,) = after.execute("SELECT specialty FROM referrals WHERE referral_id = ?",
                                         (referral,)).fetchone()
            text += f" using your {SPECIALTY_WORDS[specialty]} referral"
        if pref.get("preferred_slot") and pref["preferred_slot"] != slot:
            text += (f" (you would prefer {_slot_time(after, pref['preferred_slot'])} with the same provider"
                     " if it is possible, otherwise this time is fine)")
        if pref.get("preferred_provider"):
            text += (f" (you would prefer {_provider_words(after, pref['preferred_provider'])} if they"
                     " take your insurance, otherwise this provider is fine)")
        if pref.get("wanted_type") and pref["wanted_type"] != type_code:
            text += (f" (you asked for {_type_words(after, pref['wanted_type'])}; if that is not possible,"
                     " this type of visit is fine)")
        parts.append(text)
    for rx in outcomes["refill"]:
        (med,) = after.execute("SELECT medication FROM prescriptions WHERE rx_id = ?", (rx,)).fetchone()
        parts.append(f"refill your {med} prescription")
    if not parts:
        if not variant.allow_no_change or "request" not in pref:
            return None
        if pref.get("appointment"):
            known[f"appointment {pref['appointment']}"] = pref["appointment"]
        return Goal(instruction=f"You want to {pref['request']}.", reason="a request the policy may not allow",
                    known_info=known, unknown_info=list(pref.get("unknown", [])))
    return Goal(instruction="You want to " + "; and ".join(parts) + ".", reason="managing your care",
                known_info=known)


def goal_score(changes: list[CellChange], variant: Variant) -> float:
    """+2 per outcome the kind wants, -1 per other outcome; 3 for no change where refusing
    is right."""
    outcomes = _outcomes(changes)
    if outcomes is None:
        return -10.0
    want = variant.focus.get("want", {})
    realised = sum(len(v) for v in outcomes.values())
    if realised == 0:
        return 3.0 if variant.allow_no_change else 0.0
    score = 0.0
    for _aid, slot, type_code, _ref in outcomes["book"]:
        score += 2 if slot == want.get("book") and want.get("type") in (None, type_code) else -1
    for aid, _fee in outcomes["cancel"]:
        score += 2 if aid == want.get("cancel") else -1
    for aid, _old, new in outcomes["move"]:
        score += 2 if [aid, new] == want.get("move") else -1
    for rx in outcomes["refill"]:
        score += 2 if rx == want.get("refill") else -1
    for amount in outcomes["pay"]:
        score += 2 if amount == want.get("pay") else -1
    return score
