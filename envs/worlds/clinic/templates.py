"""Self-play question templates of the clinic world (see `envs/templating.py`); the
world's `design.py` hook `self_play_templates()` returns `TEMPLATES`. Writes are drawn so
that they pass the compiled rules on the base state: bookings are checked against every
booking rule by trying them in a savepoint, cancellations are at least a day ahead, refills
are due, payments within the balance. Each is drawn from one patient's records and the shared
providers and slots; reads state the answer the patient must hear."""

from __future__ import annotations

import random
import sqlite3
from datetime import datetime, timedelta
from typing import Any

from envs.sql import NOW_SQL as NOW
from envs.sql import rows
from envs.templating import (
    Out,
    Question,
    Template,
    article,
    ask,
    each,
    enum_words,
    insist_on,
    pick,
    told,
)

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
    def questions(p: dict[str, Any], pid: str) -> list[Question]:
        appts = [r["appointment_id"] for r in rows(conn, "SELECT appointment_id FROM appointments"
                                                         " WHERE patient_id = ? ORDER BY appointment_id", pid)]
        options = [(f"What is my unpaid balance? I'm patient {pid}.",
                    [told("balance due", p["balance_due"], "amount")])]
        if 1 <= len(appts) <= 3:
            options.append((f"I'm patient {pid}. Which appointments do I have?", each("appointment id", appts, "id")))
        return options
    return ask(conn, rng, "SELECT * FROM patients", "patient_id", questions)


def providers(conn: sqlite3.Connection, rng: random.Random) -> Out:
    spec = rng.choice(SPECIALTIES)
    plan = pick(conn, rng, "SELECT i.* FROM insurance_plans i JOIN patients p USING (plan_id)"
                           ) if rng.random() < 0.5 else None  # the plan of the patient
    sql = "SELECT name FROM providers p WHERE specialty = ?"
    found = (rows(conn, sql + " ORDER BY name", spec) if plan is None else
             rows(conn, sql + " AND EXISTS (SELECT 1 FROM provider_plans pp WHERE pp.provider_id = p.provider_id"
                              " AND pp.plan_id = ?) ORDER BY name", spec, plan["plan_id"]))
    if not found or len(found) > 3:
        return None
    facts = each("provider", [f["name"] for f in found])
    if plan is None:
        return {"specialty": spec}, f"Which {spec.replace('_', ' ')} providers work at the clinic?", facts
    return {"specialty": spec, "plan_id": plan["plan_id"]}, (
        f"Which {spec.replace('_', ' ')} providers take my insurance, {plan['plan_id']}?"), facts


def provider(conn: sqlite3.Connection, rng: random.Random) -> Out:
    return ask(conn, rng, "SELECT * FROM providers", "provider_id", lambda p, pid: [
        (f"Which specialty does {pid} practise?", [told("specialty", p["specialty"])]),
        (f"Where does {pid} see patients?", [told("location", p["location"])])])


def open_slots(conn: sqlite3.Connection, rng: random.Random) -> Out:
    s = pick(conn, rng, f"SELECT * FROM slots WHERE status = 'open' AND start_at > {NOW}")
    if s is None:
        return None
    day = s["start_at"][:10]
    times = [r["start_at"][11:16] for r in rows(conn, f"SELECT start_at FROM slots WHERE provider_id = ? AND"
                                                      f" date(start_at) = ? AND status = 'open' AND start_at > {NOW}"
                                                      " ORDER BY start_at", s["provider_id"], day)]
    if len(times) > 3:
        return None
    return {"provider_id": s["provider_id"], "date": day}, (f"At what times does {s['provider_id']} have open"
                                                             f" slots on {day}?"), each("open slot", times)


def types(conn: sqlite3.Connection, rng: random.Random) -> Out:
    t = pick(conn, rng, "SELECT * FROM appointment_types")
    if t is None:
        return None
    name = article(t["name"].lower())
    return {}, rng.choice([f"What does {name} cost at the clinic without insurance?",
                           f"What is the full fee of {name}?"]), [told("fee", t["fee"], "amount")]


def appointment(conn: sqlite3.Connection, rng: random.Random) -> Out:
    return ask(conn, rng, "SELECT a.*, s.start_at, p.name AS provider FROM appointments a JOIN slots s"
                          " USING (slot_id) JOIN providers p USING (provider_id)", "appointment_id", lambda a, aid: [
        (f"On which day is my appointment {aid}?", [told("date", a["start_at"][:10], "date")]),
        (f"Who is my appointment {aid} with?", [told("provider", a["provider"])]),
        (f"What is the status of my appointment {aid}?", [told("status", a["status"])])])


def prescription(conn: sqlite3.Connection, rng: random.Random) -> Out:
    rx = pick(conn, rng, "SELECT * FROM prescriptions")
    if rx is None:
        return None
    return {"rx_id": rx["rx_id"]}, rng.choice([f"How many refills are left on my prescription {rx['rx_id']}?",
                                               f"How many more refills can I get on {rx['rx_id']}?"]), [
        told("refills left", rx["refills_remaining"], "count")]


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
                f"I'm patient {p['patient_id']}. Please book {s['slot_id']} as {article(enum_words(t))}.",
                f"Book {article(enum_words(t))} in {s['slot_id']} for me, patient {p['patient_id']}.",
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
                    f"Please move my appointment {a['appointment_id']} to {s['slot_id']}.")
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
    """A disputed fee, which the tools cannot change, and the patient insists: the policy's
    case for a human agent (R16)."""
    return insist_on(conn, rng, "SELECT * FROM appointments", lambda a: [
        (f"The fee of my appointment {a['appointment_id']} is wrong and I want it changed",
         f"Patient {a['patient_id']} disputes the fee of appointment {a['appointment_id']}")],
        "If you cannot, I insist on talking to a person; please pass on")


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
