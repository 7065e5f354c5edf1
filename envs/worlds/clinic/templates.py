"""Self-play question templates of the clinic world (see `envs/templating.py`); the
world's `design.py` hook `self_play_templates()` returns `TEMPLATES`. Writes are drawn so
that they pass the compiled rules on the base state: bookings are checked against every
booking rule by trying them in a savepoint, cancellations are at least a day ahead, refills
are due, payments within the balance."""

from __future__ import annotations

import random
import sqlite3
from datetime import datetime, timedelta
from typing import Any

from envs.sql import NOW_SQL as NOW
from envs.sql import rows
from envs.templating import Template, pick

Out = tuple[dict[str, Any], str] | None
SPECIALTIES = ["primary_care", "pediatrics", "cardiology", "dermatology", "orthopedics"]
TYPES_BY = {"primary_care": ["annual_physical", "sick_visit", "follow_up"], "pediatrics": ["well_child", "follow_up"]}


def _tries(conn: sqlite3.Connection, sql: str, args: tuple[Any, ...]) -> bool:
    """Whether an INSERT/UPDATE passes the schema's triggers (run in a savepoint, undone)."""
    conn.execute("SAVEPOINT template_try")
    try:
        conn.execute(sql, args)
        return True
    except sqlite3.DatabaseError:
        return False
    finally:
        conn.execute("ROLLBACK TO template_try")
        conn.execute("RELEASE template_try")


def patient(conn: sqlite3.Connection, rng: random.Random) -> Out:
    p = pick(conn, rng, "SELECT * FROM patients")
    if p is None:
        return None
    pid = p["patient_id"]
    return {"patient_id": pid}, rng.choice([f"What is the unpaid balance of patient {pid}?",
                                            f"I'm patient {pid}. Which appointments do I have?"])


def providers(conn: sqlite3.Connection, rng: random.Random) -> Out:
    spec = rng.choice(SPECIALTIES)
    plan = pick(conn, rng, "SELECT * FROM insurance_plans") if rng.random() < 0.5 else None
    if plan is None:
        return {"specialty": spec}, f"Which {spec.replace('_', ' ')} providers work at the clinic?"
    return {"specialty": spec, "plan_id": plan["plan_id"]}, (
        f"Which {spec.replace('_', ' ')} providers take my insurance plan {plan['plan_id']}?")


def provider(conn: sqlite3.Connection, rng: random.Random) -> Out:
    p = pick(conn, rng, "SELECT * FROM providers")
    if p is None:
        return None
    return {"provider_id": p["provider_id"]}, rng.choice([
        f"Which insurance plans does provider {p['provider_id']} accept?",
        f"What kinds of visits does {p['provider_id']} ({p['name']}) offer?"])


def open_slots(conn: sqlite3.Connection, rng: random.Random) -> Out:
    s = pick(conn, rng, f"SELECT * FROM slots WHERE status = 'open' AND start_at > {NOW}")
    if s is None:
        return None
    day = s["start_at"][:10]
    return {"provider_id": s["provider_id"], "date": day}, (f"Does {s['provider_id']} have any open slots on"
                                                             f" {day}?")


def types(conn: sqlite3.Connection, rng: random.Random) -> Out:
    return {}, rng.choice(["What kinds of appointments can I book, and what do they cost?",
                           "List the appointment types with their fees and age limits."])


def appointment(conn: sqlite3.Connection, rng: random.Random) -> Out:
    a = pick(conn, rng, "SELECT * FROM appointments")
    if a is None:
        return None
    aid = a["appointment_id"]
    return {"appointment_id": aid}, rng.choice([f"When is my appointment {aid}?",
                                                f"Who is appointment {aid} with, and what does it cost?"])


def prescription(conn: sqlite3.Connection, rng: random.Random) -> Out:
    rx = pick(conn, rng, "SELECT * FROM prescriptions")
    if rx is None:
        return None
    return {"rx_id": rx["rx_id"]}, rng.choice([f"How many refills are left on prescription {rx['rx_id']}?",
                                               f"When can I next refill {rx['rx_id']}?"])


def book(conn: sqlite3.Connection, rng: random.Random) -> Out:
    people = rows(conn, "SELECT * FROM patients WHERE balance_due <= 150")
    slots = rows(conn, f"SELECT s.*, p.specialty FROM slots s JOIN providers p USING (provider_id)"
                       f" WHERE s.status = 'open' AND s.start_at > {NOW} AND p.specialty IN"
                       " ('primary_care', 'pediatrics')")
    if not people or not slots:
        return None
    for _ in range(20):
        p, s = rng.choice(people), rng.choice(slots)
        t = rng.choice(TYPES_BY[s["specialty"]])
        sql = ("INSERT INTO appointments (appointment_id, patient_id, slot_id, type_code, status, fee, booked_at)"
               f" VALUES ('probe', ?, ?, ?, 'scheduled', 0, {NOW})")
        if _tries(conn, sql, (p["patient_id"], s["slot_id"], t)):
            args = {"patient_id": p["patient_id"], "slot_id": s["slot_id"], "appointment_type": t}
            return args, rng.choice([
                f"I'm patient {p['patient_id']}. Please book slot {s['slot_id']} as a {t.replace('_', ' ')}.",
                f"Book a {t} in slot {s['slot_id']} for patient {p['patient_id']}.",
            ])
    return None


def _ahead(conn: sqlite3.Connection, hours: int) -> str:
    (now,) = conn.execute("SELECT value FROM meta WHERE key = 'now'").fetchone()
    return (datetime.fromisoformat(now) + timedelta(hours=hours)).strftime("%Y-%m-%d %H:%M:%S")


def cancel(conn: sqlite3.Connection, rng: random.Random) -> Out:
    a = pick(conn, rng, "SELECT a.* FROM appointments a JOIN slots s USING (slot_id) WHERE a.status = 'scheduled'"
                        " AND s.start_at >= ?", _ahead(conn, 24))
    if a is None:
        return None
    return {"appointment_id": a["appointment_id"], "accept_late_fee": False}, rng.choice([
        f"Please cancel my appointment {a['appointment_id']}.",
        f"I can't make it to appointment {a['appointment_id']}; cancel it, please."])


def reschedule(conn: sqlite3.Connection, rng: random.Random) -> Out:
    appts = rows(conn, "SELECT a.*, s.provider_id FROM appointments a JOIN slots s USING (slot_id)"
                       f" WHERE a.status = 'scheduled' AND a.reschedule_count < 2 AND s.start_at > {NOW}")
    rng.shuffle(appts)
    for a in appts[:10]:
        targets = rows(conn, f"SELECT * FROM slots WHERE provider_id = ? AND status = 'open' AND start_at > {NOW}",
                       a["provider_id"])
        rng.shuffle(targets)
        for s in targets[:5]:
            if _tries(conn, "UPDATE appointments SET slot_id = ? WHERE appointment_id = ?",
                      (s["slot_id"], a["appointment_id"])):
                return {"appointment_id": a["appointment_id"], "new_slot_id": s["slot_id"]}, (
                    f"Please move my appointment {a['appointment_id']} to slot {s['slot_id']}.")
    return None


def refill(conn: sqlite3.Connection, rng: random.Random) -> Out:
    rx = pick(conn, rng, "SELECT * FROM prescriptions WHERE refills_remaining >= 1 AND expires_on >= date(" + NOW
              + ") AND date(last_fill_date, '+' || (days_supply - 7) || ' days') <= date(" + NOW + ")")
    if rx is None:
        return None
    return {"rx_id": rx["rx_id"]}, rng.choice([f"Please refill my prescription {rx['rx_id']}.",
                                               f"I'm running low on {rx['medication']}: refill {rx['rx_id']}."])


def pay(conn: sqlite3.Connection, rng: random.Random) -> Out:
    p = pick(conn, rng, "SELECT * FROM patients WHERE balance_due > 0")
    if p is None:
        return None
    amount = p["balance_due"] if rng.random() < 0.7 else max(1, p["balance_due"] // 2)
    return {"patient_id": p["patient_id"], "amount": amount}, (f"I'm patient {p['patient_id']} and want to pay"
                                                               f" {amount} of my balance with the card on file.")


def transfer(conn: sqlite3.Connection, rng: random.Random) -> Out:
    a = pick(conn, rng, "SELECT * FROM appointments")
    if a is None:
        return None
    summary = f"Patient {a['patient_id']} disputes the fee of appointment {a['appointment_id']}"
    return {"summary": summary}, f'Let me talk to a person. Please pass on: "{summary}".'


TEMPLATES: dict[str, Template] = {
    "get_patient_details": patient,
    "search_providers": providers,
    "get_provider_details": provider,
    "find_open_slots": open_slots,
    "list_appointment_types": types,
    "get_appointment_details": appointment,
    "get_prescription_details": prescription,
    "book_appointment": book,
    "cancel_appointment": cancel,
    "reschedule_appointment": reschedule,
    "refill_prescription": refill,
    "pay_balance": pay,
    "transfer_to_human_agents": transfer,
}
