"""Constraint sets of the clinic world (CoVe, methods.md §2); the hooks are described in
`envs/constraints.py`, the shared helpers in `envs/cove.py`.

A set is about one patient (who gives their patient id and date of birth, R14): one
request out of booking an open future slot (in network, with the patient's referral where
the plan needs one, an appointment type the provider offers and the age fits, no overlap,
under the limits), cancelling an upcoming appointment at least 24 hours ahead, moving one
to another open slot of the same provider, refilling a prescription that is due, and paying
the unpaid balance; with probability `p_extra` a second request on another record. A set
is kept only if its writes succeed in every order. Descriptions replace slot, appointment
and prescription ids; each matches exactly one record of its scope (slots: the open future
ones, or the provider's for a move; appointments and prescriptions: the patient's).
"""

from __future__ import annotations

import random
import sqlite3
from datetime import date, datetime, timedelta
from typing import Any

from data.records import ToolCall
from envs import cove
from envs import sql as kit
from envs.constraints import Constraint, Fuzzification, FuzzyRef, record_key
from envs.design import Goal

WORLD = "clinic"
IDENTITY_FIELDS = ("patient_id",)  # the patient gives their id (R14)
BASE_KINDS = ["book", "cancel", "reschedule", "refill", "pay"]
DEPENDENT = ["pay_then_book"]  # a request only possible once another is done
KINDS = [*BASE_KINDS, *DEPENDENT]
BALANCE_LIMIT = 150  # R07: no booking while more than this is owed
SPECIALISTS = ("cardiology", "dermatology", "orthopedics")
SPECIALTY_WORDS = {"primary_care": "primary care", "pediatrics": "pediatrics", "cardiology": "cardiology",
                   "dermatology": "dermatology", "orthopedics": "orthopedics"}
TYPE_WORDS = {"annual_physical": "an annual physical", "sick_visit": "a sick visit", "well_child": "a well-child visit",
              "consultation": "a specialist consultation", "follow_up": "a follow-up visit"}


# -- entities -----------------------------------------------------------------------------

def _slot_record(r: dict[str, Any]) -> dict[str, Any]:
    day, time = r["start_at"][:10], r["start_at"][11:16]
    return {"id": r["slot_id"], "provider_id": r["provider_id"], "specialty": r["specialty"],
            "location": r["location"], "provider": r["name"], "status": r["status"], "date": day,
            "part_of_day": cove.part_of_day(time), "time": time}


def _slots(conn: sqlite3.Connection) -> list[dict[str, Any]]:
    """Slots that start after now (their status is an attribute: descriptions scope to open ones)."""
    return [_slot_record(r) for r in kit.rows(conn, "SELECT s.*, p.specialty, p.location, p.name FROM slots s"
                                                     " JOIN providers p USING (provider_id) WHERE s.start_at > ?",
                                               kit.now(conn))]


def _appointments(conn: sqlite3.Connection) -> list[dict[str, Any]]:
    out = []
    for r in kit.rows(conn, "SELECT a.appointment_id, a.patient_id, a.status AS appt_status, s.*, p.specialty,"
                             " p.location, p.name FROM appointments a JOIN slots s USING (slot_id)"
                             " JOIN providers p ON p.provider_id = s.provider_id"):
        rec = _slot_record(r)
        rec.update(id=r["appointment_id"], patient_id=r["patient_id"], status=r["appt_status"])
        out.append(rec)
    return out


ENTITIES = {"slot": _slots, "appointment": _appointments,
            "prescription": cove.view("SELECT * FROM prescriptions", "rx_id", "patient_id", "medication")}


def matching_ids(conn: sqlite3.Connection, entity: str, where: dict[str, Any]) -> list[str]:
    """Ids of the `entity` records whose attributes equal every value in `where`."""
    return cove.matching_ids_in(ENTITIES, conn, entity, where)


def _one(conn: sqlite3.Connection, entity: str, record_id: str) -> dict[str, Any]:
    return cove.one(ENTITIES, conn, entity, record_id)


# -- sampling ----------------------------------------------------------------------------

def _offers(type_row: dict[str, Any], specialty: str) -> bool:
    by = type_row["offered_by"]
    return by in ("any", specialty) or (by == "specialist" and specialty in SPECIALISTS)


def _age_ok(dob: str, day: str, min_age: int, max_age: int) -> bool:
    b, d = date.fromisoformat(dob), date.fromisoformat(day)

    def birthday(years: int) -> date:
        try:
            return b.replace(year=b.year + years)
        except ValueError:  # 29 February, as SQLite's date(dob, '+N years') rolls it
            return date(b.year + years, 3, 1)

    return birthday(min_age) <= d < birthday(max_age + 1)


def _book(conn: sqlite3.Connection, rng: random.Random, patient: dict[str, Any], avoid: set[str]) -> Constraint | None:
    if patient["balance_due"] > BALANCE_LIMIT:
        return None
    pid = patient["patient_id"]
    plan = kit.rows(conn, "SELECT * FROM insurance_plans WHERE plan_id = ?", patient["plan_id"])
    needs_referral = bool(plan and plan[0]["requires_referral"])
    network = {r[0] for r in conn.execute("SELECT provider_id FROM provider_plans WHERE plan_id = ?",
                                          (patient["plan_id"],))} if plan else None
    referrals = {r["specialty"]: r for r in kit.rows(conn, "SELECT * FROM referrals WHERE patient_id = ?"
                                                            " AND visits_used < visits_allowed", pid)}
    types = kit.rows(conn, "SELECT * FROM appointment_types ORDER BY type_code")
    slots = [s for s in _slots(conn) if s["status"] == "open" and s["id"] not in avoid
             and (network is None or s["provider_id"] in network)]
    rng.shuffle(slots)
    for s in slots[:30]:
        ref = None
        if needs_referral and s["specialty"] in SPECIALISTS:
            r = referrals.get(s["specialty"])
            if r is None or r["expires_on"] < s["date"]:
                continue
            ref = r["referral_id"]
        fits = [t["type_code"] for t in types if _offers(t, s["specialty"])
                and _age_ok(patient["date_of_birth"], s["date"], t["min_age"], t["max_age"])]
        if not fits:
            continue
        c = Constraint(kind="book", fields={"patient_id": pid, "slot_id": s["id"], "appointment_type": rng.choice(fits),
                                            "referral_id": ref})
        if cove.trial(conn, WORLD, [write_call(c)]):
            return c
    return None


def _upcoming(conn: sqlite3.Connection, pid: str, min_hours: float) -> list[dict[str, Any]]:
    """The patient's scheduled appointments starting at least `min_hours` from now."""
    limit = (datetime.fromisoformat(kit.now(conn)) + timedelta(hours=min_hours)).strftime("%Y-%m-%d %H:%M:%S")
    return kit.rows(conn, "SELECT a.*, s.provider_id, s.start_at FROM appointments a JOIN slots s USING (slot_id)"
                           " WHERE a.patient_id = ? AND a.status = 'scheduled' AND s.start_at >= ?"
                           " ORDER BY a.appointment_id", pid, limit)


def _sample(kind: str, conn: sqlite3.Connection, rng: random.Random, patient: dict[str, Any],
            avoid: set[str]) -> Constraint | None:
    """One constraint of `kind` for `patient` on records outside `avoid` (ids)."""
    pid = patient["patient_id"]
    if kind == "book":
        return _book(conn, rng, patient, avoid)
    if kind == "pay":
        if patient["balance_due"] <= 0 or "balance" in avoid:
            return None
        return Constraint(kind="pay", fields={"patient_id": pid, "amount": patient["balance_due"]})
    if kind == "refill":
        today = kit.now(conn)[:10]
        rxs = [r for r in kit.rows(conn, "SELECT * FROM prescriptions WHERE patient_id = ? AND refills_remaining >= 1"
                                          " AND expires_on >= ? AND date(last_fill_date, '+' || (days_supply - 7)"
                                          " || ' days') <= ? ORDER BY rx_id", pid, today, today)
               if r["rx_id"] not in avoid]
        return Constraint(kind="refill", fields={"patient_id": pid, "rx_id": rng.choice(rxs)["rx_id"]}) if rxs else None
    appts = [a for a in _upcoming(conn, pid, 24) if a["appointment_id"] not in avoid]
    rng.shuffle(appts)
    for a in appts:
        if kind == "cancel":
            return Constraint(kind="cancel", fields={"patient_id": pid, "appointment_id": a["appointment_id"]})
        if a["reschedule_count"] >= 2:
            continue
        targets = [s for s in _slots(conn) if s["provider_id"] == a["provider_id"] and s["status"] == "open"
                   and s["id"] not in avoid]
        rng.shuffle(targets)
        for s in targets[:8]:
            c = Constraint(kind="reschedule", fields={"patient_id": pid, "appointment_id": a["appointment_id"],
                                                      "new_slot_id": s["id"]})
            if cove.trial(conn, WORLD, [write_call(c)]):
                return c
    return None


def _touched(c: Constraint) -> set[str]:
    ids = {str(v) for k, v in c.fields.items() if k.endswith("_id") and k not in ("patient_id", "referral_id")}
    if c.kind == "pay":
        ids.add("balance")
    return ids


def _pay_then_book(conn: sqlite3.Connection, rng: random.Random, patient: dict[str, Any], kind: str) -> list[Constraint]:
    """For a patient who owes more than `BALANCE_LIMIT` (R07 refuses them a booking): paying
    the whole balance, then a booking that the payment makes possible (``after``)."""
    if patient["balance_due"] <= BALANCE_LIMIT:
        return []
    pay = Constraint(kind="pay", fields={"patient_id": patient["patient_id"], "amount": patient["balance_due"]})
    with cove.applied(conn, WORLD, [write_call(pay)]) as ok:
        paid = kit.one(conn, "SELECT * FROM patients WHERE patient_id = ?", patient["patient_id"]) if ok else None
        book = _book(conn, rng, paid, set()) if paid else None
    if book is None:
        return []
    book = Constraint(kind="book", fields={**book.fields, cove.AFTER: 0})
    out = [pay, book]
    return out  # kept if its writes succeed in this order (cove.constraint_sampler)


sample_constraints = cove.constraint_sampler(
    WORLD, lambda conn: kit.rows(conn, "SELECT * FROM patients ORDER BY patient_id"),
    BASE_KINDS, DEPENDENT, _pay_then_book, _sample, _touched, lambda c: write_call(c),  # write_call: below
    owner="patient", other="another record")


# -- fuzzification -------------------------------------------------------------------------

def _when(where: dict[str, Any]) -> str:
    text = ""
    if "date" in where:
        d = date.fromisoformat(where["date"])
        text += f" on {cove.WEEKDAYS[d.weekday()]} {cove.date_words(where['date'])}"
    if "part_of_day" in where:
        text += f" in the {where['part_of_day']}" if where["part_of_day"] != "midday" else " around midday"
    if "time" in where:
        text += f" at {where['time']}"
    return text


def slot_text(where: dict[str, Any]) -> str:
    text = f"an open {SPECIALTY_WORDS[where['specialty']]} slot" if "specialty" in where else "the open slot"
    return cove.worded(text + _when(where), where, location=" at the {} clinic", provider=" with {}")


def appointment_text(where: dict[str, Any]) -> str:
    spec = f"{SPECIALTY_WORDS[where['specialty']]} " if "specialty" in where else ""
    text = f"your {spec}appointment" + _when(where)
    return text + (f" with {where['provider']}" if "provider" in where else "")


def prescription_text(where: dict[str, Any]) -> str:
    return f"your {where['medication']} prescription"


def describe_slot(conn: sqlite3.Connection, rng: random.Random, slot: str, slot_id: str,
                  provider_id: str | None = None) -> FuzzyRef:
    """Among the open future slots (of the provider, for a move): the specialty, date and
    part of the day, then the location, the time, the provider's name."""
    rec = _one(conn, "slot", slot_id)
    if provider_id is not None:
        scope = {"provider_id": provider_id, "status": "open"}
        order = ["date", "part_of_day", "time"]
    else:
        scope = {"status": "open", "specialty": rec["specialty"], "date": rec["date"]}
        order = ["part_of_day", "location", "time", "provider"]
        if rng.random() < 0.5:
            order = ["part_of_day", "time", "location", "provider"]
    return cove.unique_ref(slot, "slot", slot_id, cove.cumulative(scope, rec, order), slot_text,
                           lambda w: matching_ids(conn, "slot", w))


def describe_appointment(conn: sqlite3.Connection, slot: str, appointment_id: str) -> FuzzyRef:
    """The specialty, then the date, the part of the day, the time (among the patient's
    appointments, past and cancelled ones included)."""
    return cove.described(ENTITIES, conn, slot, "appointment", appointment_id, "patient_id",
                          ["specialty", "date", "part_of_day", "time", "provider"], appointment_text)


def describe_prescription(conn: sqlite3.Connection, slot: str, rx_id: str) -> FuzzyRef:
    """The medication (among the patient's prescriptions)."""
    return cove.described(ENTITIES, conn, slot, "prescription", rx_id, "patient_id", ["medication"],
                          prescription_text)


def fuzzify(conn: sqlite3.Connection, constraints: list[Constraint], rng: random.Random) -> Fuzzification:
    """Unique descriptions for every id in the set, keyed "c<i>.<field>"; raises
    `FuzzifyError` when the most specific description still matches two or more records."""

    def fields(c: Constraint) -> dict[str, cove.Describe] | None:
        if c.kind == "book":
            return {"slot_id": lambda s, v: describe_slot(conn, rng, s, v)}
        if c.kind == "cancel":
            return {"appointment_id": lambda s, v: describe_appointment(conn, s, v)}
        if c.kind == "reschedule":
            provider = _one(conn, "appointment", c["appointment_id"])["provider_id"]
            return {"appointment_id": lambda s, v: describe_appointment(conn, s, v),
                    "new_slot_id": lambda s, v: describe_slot(conn, rng, s, v, provider)}
        if c.kind == "refill":
            return {"rx_id": lambda s, v: describe_prescription(conn, s, v)}
        return {} if c.kind == "pay" else None

    return cove.fuzzification(constraints, fields)


def goal(constraints: list[Constraint], fuzzy: dict[str, str]) -> Goal:
    """The user's goal from the descriptions (never the ids but the patient's own)."""
    parts: list[str] = []
    known = cove.KnownInfo({"patient_id": constraints[0]["patient_id"]})
    unknown: set[str] = set()
    for i, c, f in known.requests(constraints, fuzzy):
        if c.kind == "book":
            parts.append(f"book {TYPE_WORDS[c['appointment_type']]} in {f['slot_id']}")
            known.update({"slot": f["slot_id"], "visit type": TYPE_WORDS[c["appointment_type"]]})
            unknown |= {"the slot id", "the provider id"}
        elif c.kind == "cancel":
            parts.append(f"cancel {f['appointment_id']}")
            known["appointment"] = cove.mine(f["appointment_id"])
            unknown.add("the appointment id")
        elif c.kind == "reschedule":
            parts.append(f"move {f['appointment_id']} to {f['new_slot_id']} with the same provider")
            known.update({"appointment": cove.mine(f["appointment_id"]), "new time": f["new_slot_id"]})
            unknown |= {"the appointment id", "the slot id"}
        elif c.kind == "refill":
            parts.append(f"refill {f['rx_id']}")
            known["prescription"] = cove.mine(f["rx_id"])
            unknown.add("the prescription id")
        elif c.kind == "pay" and any(d.fields.get(cove.AFTER) == i for d in constraints):
            parts.append(f"first pay off your whole unpaid balance of {c['amount']} with the card on file, since"
                         f" you were told the clinic will not book a visit while more than {BALANCE_LIMIT} is owed")
            known["amount"] = str(c["amount"])
        elif c.kind == "pay":
            parts.append(f"pay your whole unpaid balance of {c['amount']} with the card on file")
            known["amount"] = str(c["amount"])
        else:
            raise ValueError(f"unknown constraint kind {c.kind!r}")
    return cove.wants(parts, "your care at the clinic", known, unknown)


def known_identity(conn: sqlite3.Connection, constraints: list[Constraint]) -> dict[str, str]:
    """The date of birth the patient confirms (R14), beside the patient id of the goal."""
    (dob,) = conn.execute("SELECT date_of_birth FROM patients WHERE patient_id = ?",
                          (constraints[0]["patient_id"],)).fetchone()
    return {"date of birth": dob}


# -- reference and checks ------------------------------------------------------------------

def _book_call(c: Constraint) -> ToolCall:
    f = c.fields
    args = {"patient_id": f["patient_id"], "slot_id": f["slot_id"], "appointment_type": f["appointment_type"]}
    if f.get("referral_id"):
        args["referral_id"] = f["referral_id"]
    return ToolCall(name="book_appointment", arguments=args)


# kind -> the write tool and its arguments (each the constraint's field of that name), or the call.
_WRITES: cove.Calls = {
    "book": _book_call,
    "cancel": ("cancel_appointment", "appointment_id"),
    "reschedule": ("reschedule_appointment", "appointment_id", "new_slot_id"),
    "refill": ("refill_prescription", "rx_id"), "pay": ("pay_balance", "patient_id", "amount"),
}
# kind -> the read that shows the record it changes (a booking reads the provider's open slots).
_READS: cove.Calls = {
    "cancel": ("get_appointment_details", "appointment_id"),
    "reschedule": ("get_appointment_details", "appointment_id"),
    "refill": ("get_prescription_details", "rx_id"),
}


def write_call(c: Constraint) -> ToolCall:
    """The one write that satisfies `c`."""
    return cove.call_of(c, _WRITES)


def reference_calls(conn: sqlite3.Connection, constraints: list[Constraint]) -> list[ToolCall]:
    """Look the patient and the records up (R14), then one write per constraint."""

    def reads(c: Constraint) -> list[ToolCall]:
        if c.kind == "book":
            s = _one(conn, "slot", c["slot_id"])
            return [ToolCall(name="find_open_slots", arguments={"provider_id": s["provider_id"], "date": s["date"]})]
        return [cove.call_of(c, _READS)] if c.kind in _READS else []

    account = ToolCall(name="get_patient_details", arguments={"patient_id": constraints[0]["patient_id"]})
    return cove.reference_calls(constraints, [account], reads, write_call)


_appt = kit.lookup("appointments", "appointment_id")


def check(conn_initial: sqlite3.Connection, conn_final: sqlite3.Connection,
          constraints: list[Constraint]) -> tuple[list[bool], list[dict[str, Any]]]:
    """Each constraint on the final state; a detail names the satisfying record.

    - book: a new scheduled appointment of the patient in that slot, of that type;
    - cancel: the appointment was scheduled and is cancelled now;
    - reschedule: the appointment is scheduled in the new slot now;
    - refill: a new fill of the prescription;
    - pay: one new payment of exactly the amount.
    """
    satisfied: list[bool] = []
    details: list[dict[str, Any]] = []
    for c in constraints:
        f = c.fields
        table, record = "appointments", None
        if c.kind == "book":
            new = cove.new_ids(conn_initial, conn_final, "appointments", "appointment_id",
                       {"patient_id": f["patient_id"], "slot_id": f["slot_id"], "type_code": f["appointment_type"],
                        "status": "scheduled"})
            record = new[0] if new else None
            reason = "booked" if record else "no new appointment of that type in that slot"
        elif c.kind in ("cancel", "reschedule"):
            before, after = _appt(conn_initial, f["appointment_id"]), _appt(conn_final, f["appointment_id"])
            if c.kind == "cancel":
                ok = bool(before and after and before["status"] == "scheduled" and after["status"] == "cancelled")
            else:
                ok = bool(before and after and after["status"] == "scheduled" and after["slot_id"] == f["new_slot_id"]
                          != before["slot_id"])
            record = f["appointment_id"] if ok else None
            reason = c.kind + "d" if ok else (f"status {after['status']}, slot {after['slot_id']}" if after else "missing")
        elif c.kind == "refill":
            table = "fills"
            new = cove.new_ids(conn_initial, conn_final, "fills", "fill_id", {"rx_id": f["rx_id"]})
            record = new[0] if len(new) == 1 else None
            reason = "refilled" if record else f"{len(new)} new fills of the prescription"
        elif c.kind == "pay":
            table = "payments"
            new = cove.new_ids(conn_initial, conn_final, "payments", "payment_id",
                       {"patient_id": f["patient_id"], "amount": f["amount"]})
            record = new[0] if new else None
            reason = "paid" if record else "no new payment of that amount"
        else:
            raise ValueError(f"unknown constraint kind {c.kind!r}")
        satisfied.append(record is not None)
        details.append({"kind": c.kind, "satisfied": record is not None, "reason": reason,
                        "record": {"table": table, "key": record_key([record])} if record else None})
    return satisfied, details


# -- known-bad variants for the verifier audit --------------------------------------------------

def audit_mutations(conn: sqlite3.Connection, constraints: list[Constraint],
                    reference: list[ToolCall]) -> dict[str, list[ToolCall]]:
    """Variants of `reference` that must fail and whose writes all succeed: a wrong slot or
    appointment type, a wrong target appointment or prescription, a wrong amount, one extra
    (unrelated, successful) write. A case is left out when the state offers no such call."""
    audit = cove.Audit(conn, WORLD, reference)
    offer = audit.offer
    touched = set().union(*(_touched(c) for c in constraints))
    pid = constraints[0]["patient_id"]
    for c, swap in audit.writes(constraints, write_call):
        f = c.fields
        if c.kind in ("book", "reschedule"):
            key = "slot_id" if c.kind == "book" else "new_slot_id"
            current = _one(conn, "slot", f[key])
            near = sorted((s for s in _slots(conn) if s["status"] == "open" and s["id"] not in touched
                           and s["provider_id"] == current["provider_id"]), key=lambda s: s["id"])
            for s in near[:6]:
                offer("wrong_item", swap(**{key: s["id"]}))
            if c.kind == "book":
                for t in ("follow_up", "sick_visit", "consultation", "annual_physical", "well_child"):
                    if t != f["appointment_type"]:
                        offer("wrong_type", swap(appointment_type=t))
        if c.kind in ("cancel", "reschedule"):
            for a in _upcoming(conn, pid, 24):
                if a["appointment_id"] not in touched:
                    offer("wrong_target", swap(appointment_id=a["appointment_id"]))
        elif c.kind == "refill":
            for r in ENTITIES["prescription"](conn):
                if r["patient_id"] == pid and r["id"] != f["rx_id"]:
                    offer("wrong_target", swap(rx_id=r["id"]))
        elif c.kind == "pay" and f["amount"] > 1:
            offer("wrong_amount", swap(amount=f["amount"] - 1))
    # An extra write: a refill, a part payment or another booking no constraint asks for.
    for r in ENTITIES["prescription"](conn):
        if r["patient_id"] == pid and r["id"] not in touched:
            offer("extra_write", [*reference, ToolCall(name="refill_prescription", arguments={"rx_id": r["id"]})])
    if "balance" not in touched:
        offer("extra_write", [*reference, ToolCall(name="pay_balance", arguments={"patient_id": pid, "amount": 1})])
    if "extra_write" not in audit.out:
        patient = kit.rows(conn, "SELECT * FROM patients WHERE patient_id = ?", pid)[0]
        extra = _book(conn, random.Random(0), patient, touched)
        if extra is not None:
            offer("extra_write", [*reference, write_call(extra)])
    return audit.out
