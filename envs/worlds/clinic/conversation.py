"""How conversations go in the clinic world (the contract is `envs/conversation.py`)."""

from __future__ import annotations

import sqlite3
from typing import Any

from data.records import Fact, ToolCall
from envs import sql as kit
from envs.conversation import DEFAULT_CLAUSES, Identity, amount_fact, date_forms, id_fact

IDENTITY = Identity(keys=[["patient_id", "date_of_birth"]], lookups={"get_patient_details": ["patient_id"]},
                    confirm=["date_of_birth"])
USER_FACING_IDS = ["patient_id", "appointment_id", "rx_id"]  # the patient file, bookings and prescription numbers
CLAUSES = [*DEFAULT_CLAUSES[:1], "confirm_identity", *DEFAULT_CLAUSES[1:]]
ASK_IDENTITY = [
    "I can help with that. Could you give me your patient id and your date of birth?",
    "Of course. First, what are your patient id and date of birth?",
    "Happy to help. To find your records, may I have your patient id and your date of birth?",
]
RULE_TERMS = {
    "R01_SLOT_OPEN": ["only an open slot that starts after the current time"],
    "R02_IN_NETWORK": ["accept their insurance plan"],
    "R03_REFERRAL": ["needs the patient's own referral", "referral"],
    "R04_AGE_RANGE": ["under 18", "18 and older"],
    "R05_NO_OVERLAP": ["times overlap"],
    "R06_ACTIVE_LIMIT": ["at most 3 upcoming scheduled appointments"],
    "R07_BALANCE_HOLD": ["more than 150"],
    "R08_LATE_CANCEL": ["less than 24 hours"],
    "R09_LOCKED": ["can no longer be cancelled or rescheduled"],
    "R10_RESCHEDULE": ["rescheduled at most twice", "same provider"],
    "R11_REFILLS_LEFT": ["refills remaining", "new prescription"],
    "R12_REFILL_TOO_EARLY": ["7 days before the current supply runs out"],
    "R13_RX_EXPIRED": ["through its expiry date"],
}
ALTERNATIVES = {
    "R07_BALANCE_HOLD": "Once the balance is paid down to 150, I can book it.",
    "R11_REFILLS_LEFT": "Your provider can write you a new prescription.",
    "R10_RESCHEDULE": "I can cancel it and book a new appointment instead.",
}


def mentions(conn: sqlite3.Connection, table: str, row: dict[str, Any]) -> list[str]:
    if table == "slots":
        return [(row["start_at"][:10], row["start_at"][11:16])]
    if table == "appointments":
        return [row["appointment_id"]]
    if table == "prescriptions":
        return [row["medication"], row["rx_id"]]
    if table == "referrals":
        return [row["specialty"], "referral"]
    if table == "providers":
        return [row["name"]]
    return []


def phrase(conn: sqlite3.Connection, table: str, row: dict[str, Any]) -> str | None:
    """How a patient names a record in a request: a slot by its provider and time, a provider
    or an insurance plan by its name, a referral by its specialty."""
    if table == "slots":
        s = _slot(conn, row["slot_id"])
        return f"the {when(s['start_at'])} slot with {s['provider']}"
    if table == "providers":
        return str(row["name"])
    if table == "insurance_plans":
        return f"the {row['name']} plan"
    if table == "referrals":
        return f"my {row['specialty'].replace('_', ' ')} referral"
    return None


def _slot(conn: sqlite3.Connection, slot_id: str) -> dict[str, Any]:
    return kit.one(conn, "SELECT s.*, p.name AS provider, p.specialty FROM slots s JOIN providers p USING (provider_id)"
                         " WHERE slot_id = ?", slot_id)


def when(start_at: str) -> str:
    return f"{date_forms(start_at)[1]} at {start_at[11:16]}"


def action(conn: sqlite3.Connection, call: ToolCall) -> list[str]:
    from envs.worlds.clinic.tools import visit_fee

    a = call.arguments
    if call.name == "book_appointment":
        s = _slot(conn, a["slot_id"])
        fee = visit_fee(conn, a["patient_id"], a["appointment_type"])
        kind = str(a["appointment_type"]).replace("_", " ")
        ref = " using your referral" if a.get("referral_id") else ""
        return [f"book a {kind} with {s['provider']} on {when(s['start_at'])}{ref}; the visit costs {fee}",
                f"schedule a {kind} with {s['provider']} for {when(s['start_at'])}{ref}, at a cost of {fee}"]
    if call.name == "cancel_appointment":
        appt = kit.one(conn, "SELECT a.*, t.late_cancel_fee FROM appointments a JOIN appointment_types t"
                             " USING (type_code) WHERE appointment_id = ?", a["appointment_id"])
        s = _slot(conn, appt["slot_id"])
        fee = (f"; as it is less than 24 hours away, a late-cancellation fee of {appt['late_cancel_fee']} is added to "
               "your balance" if a.get("accept_late_fee") else "")
        return [f"cancel your appointment {appt['appointment_id']} with {s['provider']} on {when(s['start_at'])}{fee}"]
    if call.name == "reschedule_appointment":
        appt = kit.one(conn, "SELECT * FROM appointments WHERE appointment_id = ?", a["appointment_id"])
        old, new = _slot(conn, appt["slot_id"]), _slot(conn, a["new_slot_id"])
        return [f"move appointment {appt['appointment_id']} from {when(old['start_at'])} to {when(new['start_at'])} "
                f"with {new['provider']}, at no cost"]
    if call.name == "refill_prescription":
        rx = kit.one(conn, "SELECT * FROM prescriptions WHERE rx_id = ?", a["rx_id"])
        return [f"refill your {rx['medication']} prescription ({rx['rx_id']}) today; that uses one of your "
                f"{rx['refills_remaining']} remaining refills"]
    if call.name == "pay_balance":
        p = kit.one(conn, "SELECT * FROM patients WHERE patient_id = ?", a["patient_id"])
        return [f"charge {a['amount']} to your card on file ending in {p['card_last4']}, which leaves a balance "
                f"of {p['balance_due'] - int(a['amount'])}"]
    return [call.name.replace("_", " ")]


def facts(before: sqlite3.Connection, after: sqlite3.Connection, call: ToolCall, result: Any) -> list[Fact]:
    if call.name == "book_appointment":
        return [id_fact("appointment id", result["appointment_id"]), amount_fact("visit fee", result["fee"])]
    if call.name == "cancel_appointment":
        return [amount_fact("late-cancellation fee", result["late_fee"])] if result.get("late_fee") else []
    if call.name == "reschedule_appointment":
        return [Fact(label="new appointment time", any_of=[result["start_at"][:10]], kind="date")]
    if call.name == "refill_prescription":
        return [Fact(label="refills left", any_of=[str(result["refills_remaining"])], kind="count")]
    if call.name == "pay_balance":
        return [amount_fact("amount paid", result["paid"]), amount_fact("remaining balance", result["balance_due"])]
    return []


def report(conn: sqlite3.Connection, call: ToolCall, result: Any, facts: list[Fact]) -> list[str]:
    if call.name == "book_appointment":
        return [f"Your appointment {result['appointment_id']} is booked with {result['provider_name']} on "
                f"{when(result['start_at'])}; the visit costs {result['fee']}."]
    if call.name == "cancel_appointment":
        fee = f" A late-cancellation fee of {result['late_fee']} was added to your balance." if result.get("late_fee") else ""
        return [f"Appointment {result['appointment_id']} is cancelled.{fee}"]
    if call.name == "reschedule_appointment":
        return [f"Appointment {result['appointment_id']} is now on {when(result['start_at'])} with "
                f"{result['provider_name']}."]
    if call.name == "refill_prescription":
        return [f"Your {result['medication']} is refilled; {result['refills_remaining']} refills remain."]
    if call.name == "pay_balance":
        return [f"The payment of {result['paid']} went through; your balance is now {result['balance_due']}."]
    return []


def grounding(conn: sqlite3.Connection, call: ToolCall, known: dict[str, str]) -> list[ToolCall]:
    a = call.arguments
    out: list[ToolCall] = []
    if "appointment_id" in a:
        out.append(ToolCall(name="get_appointment_details", arguments={"appointment_id": a["appointment_id"]}))
    for key in ("slot_id", "new_slot_id"):
        if key in a:
            s = _slot(conn, a[key])
            if key == "slot_id":
                out.append(ToolCall(name="search_providers", arguments={"specialty": s["specialty"]}))
            out.append(ToolCall(name="find_open_slots", arguments={"provider_id": s["provider_id"],
                                                                   "date": s["start_at"][:10]}))
    if "rx_id" in a:
        out.append(ToolCall(name="get_prescription_details", arguments={"rx_id": a["rx_id"]}))
    return out
