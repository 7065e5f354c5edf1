"""Tools of the clinic world. Reads return records; writes change the database and the
schema's triggers enforce the policy (a broken rule raises `<RULE_ID>: message`)."""

from __future__ import annotations

import sqlite3
from datetime import date, datetime
from typing import Literal

from envs import sql as kit
from envs.stock_tools import transfer_tool
from envs.tools import ToolError, tool

Specialty = Literal["primary_care", "pediatrics", "cardiology", "dermatology", "orthopedics"]
TypeCode = Literal["annual_physical", "sick_visit", "well_child", "consultation", "follow_up"]
SPECIALISTS = ("cardiology", "dermatology", "orthopedics")


def offers(type_row: dict, specialty: str) -> bool:
    """Whether a provider of `specialty` offers an appointment type."""
    by = type_row["offered_by"]
    return by in ("any", specialty) or (by == "specialist" and specialty in SPECIALISTS)


def visit_fee(db: sqlite3.Connection, patient_id: str, type_code: str) -> int:
    """The plan's copay for an insured patient, the type's full fee for a self-pay one."""
    row = kit.row(db, "SELECT i.copay FROM patients p LEFT JOIN insurance_plans i ON i.plan_id = p.plan_id"
                   " WHERE p.patient_id = ?", patient_id)
    if row and row["copay"] is not None:
        return int(row["copay"])
    (fee,) = db.execute("SELECT fee FROM appointment_types WHERE type_code = ?", (type_code,)).fetchone()
    return int(fee)


def _accepted_plans(db: sqlite3.Connection, provider_id: str) -> list[str]:
    """The insurance plans in whose network the provider is."""
    return [r["plan_id"] for r in kit.rows(
        db, "SELECT plan_id FROM provider_plans WHERE provider_id = ? ORDER BY plan_id", provider_id)]


@tool()
def get_patient_details(db: sqlite3.Connection, patient_id: str) -> dict:
    """Get a patient's profile: date of birth, insurance plan, unpaid balance, referrals,
    appointment ids and prescriptions.

    Args:
        patient_id: The patient's id, e.g. "mia_li_1003".
    """
    p = kit.fetch(db, "patients", "patient_id", patient_id, "patient")
    p["plan"] = kit.row(db, "SELECT * FROM insurance_plans WHERE plan_id = ?", p["plan_id"]) if p["plan_id"] else None
    p["referrals"] = kit.rows(db, "SELECT * FROM referrals WHERE patient_id = ? ORDER BY referral_id", patient_id)
    p["appointments"] = [r["appointment_id"] for r in kit.rows(
        db, "SELECT appointment_id FROM appointments WHERE patient_id = ? ORDER BY appointment_id", patient_id)]
    p["prescriptions"] = kit.rows(
        db, "SELECT rx_id, medication, dosage, refills_remaining FROM prescriptions WHERE patient_id = ?"
            " ORDER BY rx_id", patient_id)
    return p


@tool()
def search_providers(db: sqlite3.Connection, specialty: Specialty, plan_id: str | None = None) -> list:
    """List the providers of a specialty, with the insurance plans each accepts; with
    `plan_id`, only the providers in that plan's network.

    Args:
        specialty: One of primary_care, pediatrics, cardiology, dermatology, orthopedics.
        plan_id: Optional insurance plan id to filter by, e.g. "hmo_carepoint".
    """
    providers = kit.rows(db, "SELECT * FROM providers WHERE specialty = ? ORDER BY name", specialty)
    out = []
    for p in providers:
        p["accepted_plans"] = _accepted_plans(db, p["provider_id"])
        if plan_id is None or plan_id in p["accepted_plans"]:
            out.append(p)
    return out


@tool()
def get_provider_details(db: sqlite3.Connection, provider_id: str) -> dict:
    """Get one provider: name, specialty, location, accepted insurance plans and the
    appointment types they offer.

    Args:
        provider_id: The provider's id, e.g. "dr_kim_104".
    """
    p = kit.fetch(db, "providers", "provider_id", provider_id, "provider")
    p["accepted_plans"] = _accepted_plans(db, provider_id)
    types = kit.rows(db, "SELECT * FROM appointment_types ORDER BY type_code")
    p["appointment_types"] = [t["type_code"] for t in types if offers(t, p["specialty"])]
    return p


@tool()
def find_open_slots(db: sqlite3.Connection, provider_id: str, date: str) -> list:
    """List a provider's open slots on one date (YYYY-MM-DD) that start after the current
    time, with start time and length in minutes.

    Args:
        provider_id: The provider's id.
        date: The date as YYYY-MM-DD.
    """
    kit.fetch(db, "providers", "provider_id", provider_id, "provider")
    try:
        day = _parse_date(date)
    except ValueError as exc:
        raise ToolError("BAD_VALUE", f"date must be YYYY-MM-DD, got {date!r}") from exc
    return kit.rows(
        db, "SELECT slot_id, start_at, duration_min FROM slots WHERE provider_id = ? AND date(start_at) = ?"
            " AND status = 'open' AND start_at > ? ORDER BY start_at",
        provider_id, day, kit.now(db))


def _parse_date(value: str) -> str:
    return date.fromisoformat(value.strip()).isoformat()


@tool()
def list_appointment_types(db: sqlite3.Connection) -> list:
    """List the appointment types: who offers them, full fee (self-pay), late-cancellation
    fee and the age range (in years on the visit date)."""
    return kit.rows(db, "SELECT * FROM appointment_types ORDER BY type_code")


@tool()
def get_appointment_details(db: sqlite3.Connection, appointment_id: str) -> dict:
    """Get an appointment: provider, start time, type, status, fee, referral used, times
    rescheduled and any late-cancellation fee charged.

    Args:
        appointment_id: The appointment id, e.g. "A0300121".
    """
    a = kit.fetch(db, "appointments", "appointment_id", appointment_id, "appointment")
    a.pop("fee_accepted", None)
    slot = kit.row(db, "SELECT s.start_at, s.duration_min, s.provider_id, p.name AS provider_name, p.specialty"
                    " FROM slots s JOIN providers p ON p.provider_id = s.provider_id WHERE s.slot_id = ?",
                a["slot_id"])
    a.update(slot or {})
    return a


@tool()
def get_prescription_details(db: sqlite3.Connection, rx_id: str) -> dict:
    """Get a prescription: medication, refills remaining, last fill date, days of supply,
    expiry date, the earliest date a refill is allowed, and its fills through this desk.

    Args:
        rx_id: The prescription id, e.g. "RX010032".
    """
    rx = kit.fetch(db, "prescriptions", "rx_id", rx_id, "prescription")
    (rx["earliest_refill_date"],) = db.execute(
        "SELECT date(?, '+' || ? || ' days')", (rx["last_fill_date"], rx["days_supply"] - 7)).fetchone()
    rx["fills"] = kit.rows(db, "SELECT fill_id, filled_on FROM fills WHERE rx_id = ? ORDER BY fill_id", rx_id)
    return rx




@tool(write=True)
def book_appointment(
    db: sqlite3.Connection,
    patient_id: str,
    slot_id: str,
    appointment_type: TypeCode,
    referral_id: str | None = None,
) -> dict:
    """Book an open slot for a patient. The slot must be open and in the future (R01), the
    provider must accept the patient's plan (R02), a specialist visit on a plan that
    requires referrals needs the patient's valid referral for that specialty (R03), the
    patient's age must fit the type (R04), no overlap with their other appointments (R05),
    at most 3 upcoming appointments (R06) and an unpaid balance of at most 150 (R07).
    The provider must offer the appointment type.

    Args:
        patient_id: The patient's id.
        slot_id: The slot to book (from find_open_slots).
        appointment_type: One of annual_physical, sick_visit, well_child, consultation, follow_up.
        referral_id: The patient's referral for the specialty, only when their plan requires one.
    """
    kit.fetch(db, "patients", "patient_id", patient_id, "patient")
    slot = kit.need(kit.row(db, "SELECT s.*, p.specialty FROM slots s JOIN providers p USING (provider_id)"
                          " WHERE s.slot_id = ?", slot_id), "slot", slot_id)
    kind = kit.fetch(db, "appointment_types", "type_code", appointment_type, "appointment type")
    if not offers(kind, slot["specialty"]):
        raise ToolError("TYPE_NOT_OFFERED", f"a {slot['specialty']} provider does not offer {appointment_type}")
    if referral_id is not None:
        kit.fetch(db, "referrals", "referral_id", referral_id, "referral")
    content = {"patient_id": patient_id, "slot_id": slot_id}  # minted from the content: order-free
    aid = kit.mint_id("A", content, kit.count(db, "appointments", **content), length=7)
    db.execute(
        "INSERT INTO appointments (appointment_id, patient_id, slot_id, type_code, referral_id, status, fee,"
        " booked_at) VALUES (?, ?, ?, ?, ?, 'scheduled', ?, ?)",
        (aid, patient_id, slot_id, appointment_type, referral_id, visit_fee(db, patient_id, appointment_type),
         kit.now(db)),
    )
    return get_appointment_details(db, aid)


@tool(write=True)
def cancel_appointment(db: sqlite3.Connection, appointment_id: str, accept_late_fee: bool = False) -> dict:
    """Cancel a scheduled appointment and reopen its slot. Less than 24 hours before the
    start, the type's late-cancellation fee is added to the patient's balance and the call
    needs accept_late_fee=true (R08); not for appointments that are no longer scheduled or
    have started (R09). A referral visit used by the appointment is given back.

    Args:
        appointment_id: The appointment to cancel.
        accept_late_fee: The patient agreed to pay the late-cancellation fee if one applies.
    """
    kit.fetch(db, "appointments", "appointment_id", appointment_id, "appointment")
    db.execute("UPDATE appointments SET status = 'cancelled', fee_accepted = ? WHERE appointment_id = ?",
               (int(accept_late_fee), appointment_id))
    return get_appointment_details(db, appointment_id)


@tool(write=True)
def reschedule_appointment(db: sqlite3.Connection, appointment_id: str, new_slot_id: str) -> dict:
    """Move a scheduled appointment to another open future slot (R01) of the same provider,
    at most twice per appointment (R10). The new time must fit the patient's age (R04),
    not overlap their other appointments (R05) and be within the referral's validity
    (R03); started or closed appointments cannot move (R09). No fee.

    Args:
        appointment_id: The appointment to move.
        new_slot_id: The open slot to move it to.
    """
    appt = kit.fetch(db, "appointments", "appointment_id", appointment_id, "appointment")
    kit.fetch(db, "slots", "slot_id", new_slot_id, "slot")
    kit.set_new(db, "appointments", "appointment_id", appointment_id, "slot_id", new_slot_id, appt["slot_id"],
                "the appointment is already in this slot")
    return get_appointment_details(db, appointment_id)


@tool(write=True)
def refill_prescription(db: sqlite3.Connection, rx_id: str) -> dict:
    """Refill a prescription today. Needs refills remaining (R11), today on or after 7 days
    before the current supply runs out (R12) and on or before the expiry date (R13).
    Uses one refill.

    Args:
        rx_id: The prescription to refill.
    """
    kit.fetch(db, "prescriptions", "rx_id", rx_id, "prescription")
    today = datetime.fromisoformat(kit.now(db)).date().isoformat()
    (n,) = db.execute("SELECT COUNT(*) FROM fills WHERE rx_id = ?", (rx_id,)).fetchone()
    db.execute("INSERT INTO fills (fill_id, rx_id, filled_on) VALUES (?, ?, ?)",
               (f"{rx_id}-F{n + 1}", rx_id, today))
    return get_prescription_details(db, rx_id)


@tool(write=True)
def pay_balance(db: sqlite3.Connection, patient_id: str, amount: int) -> dict:
    """Charge a payment to the patient's card on file and reduce their unpaid balance. The
    amount must be positive and at most the balance.

    Args:
        patient_id: The patient's id.
        amount: The amount to pay (whole currency units).
    """
    p = kit.fetch(db, "patients", "patient_id", patient_id, "patient")
    if amount <= 0 or amount > p["balance_due"]:
        raise ToolError("BAD_VALUE", f"amount must be between 1 and the balance due ({p['balance_due']})")
    content = {"patient_id": patient_id, "amount": amount}
    db.execute("INSERT INTO payments (payment_id, patient_id, amount, paid_at) VALUES (?, ?, ?, ?)",
               (kit.mint_id("PAY", content, kit.count(db, "payments", **content), length=7), patient_id, amount,
                kit.now(db)))
    return {"patient_id": patient_id, "paid": amount, "card_last4": p["card_last4"],
            "balance_due": p["balance_due"] - amount}


transfer_to_human_agents = transfer_tool("patient")
