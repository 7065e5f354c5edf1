"""How conversations go in the clinic world (the contract is `envs/conversation.py`)."""

from __future__ import annotations

import sqlite3
from typing import Any

from data.records import Fact, ToolCall
from envs import sql as kit
from envs.conversation import DEFAULT_CLAUSES, Identity, amount_fact, date_forms, id_fact
from envs.templating import article, by_table, count_of

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
# For the scenario writer (user personas, reasons for the call): who a caller is, and why
# they call, keyed by the write tool the request ends in, "answer" (a question only) or
# "transfer" (handed to a human agent). Second person; the request follows the reason.
WHO: list[str] = [
    "a busy parent who juggles appointments around school pickups",
    "a retired bus driver managing a few long-term health conditions",
    "a college student who rarely sees a doctor",
    "a night-shift warehouse worker with little free time during the day",
    "a marathon runner nursing a string of recurring injuries",
    "a new patient who just moved to the area",
    "a self-employed carpenter who hates taking time off work",
    "an office manager who plans everything weeks in advance",
    "a high school teacher who can only come in after classes",
    "an elderly widower who relies on his daughter for rides",
    "a software engineer who tends to put off checkups",
    "a caregiver who also looks after an aging parent",
    "a restaurant cook who works irregular hours",
    "a recent retiree determined to stay on top of their health",
]
REASONS: dict[str, list[str]] = {
    "book_appointment": [
        "You've been putting off seeing a doctor for a while, and your partner finally won the "
        "argument.",
        "Your schedule finally has some breathing room, so health matters are moving up the list.",
        "After a friend's health scare, taking care of yourself feels more urgent than before.",
        "Work just quieted down, which makes this a rare chance to get things done.",
        "Your mother keeps asking whether you've seen anyone yet, and the honest answer is no.",
        "Something health-related has been on your mind, and you'd rather get it looked at "
        "properly.",
        "You promised yourself at the start of the year to stay on top of your health.",
        "Having just moved to the area, you're setting up care with a clinic close to home.",
        "Your sister keeps nagging about booking a visit, and she has a point.",
        "The clinic sent a reminder letter, and it's been sitting on your counter ever since.",
        "With a busy stretch coming at work, getting a visit in beforehand just makes sense.",
        "Being proactive about health is a new habit you're trying hard to keep.",
        "Taking a morning off work is finally possible, so a visit is worth fitting in.",
    ],
    "cancel_appointment": [
        "A mandatory meeting your boss scheduled lands right on top of your appointment.",
        "Your car broke down, and getting to the clinic isn't realistic right now.",
        "Thinking it over calmly, the appointment no longer seems necessary at all.",
        "A family emergency came up out of town, and you'll be away for a while.",
        "Childcare arrangements fell apart, and nobody else can watch the kids.",
        "You've decided to see a provider closer to your new home.",
        "Money is tight at the moment, and the cost of the visit is hard to justify.",
        "The appointment clashes with your son's school play, and you refuse to miss it.",
        "Work shifts got reshuffled, and the appointment now falls in the middle of one.",
        "Everyone at home came down with a stomach bug, and leaving the house isn't happening.",
        "After talking it over with your family, you'd rather hold off on this visit.",
        "Travel for work came up unexpectedly and will keep your calendar full for weeks.",
        "Your ride to the clinic fell through, and public transport won't get there in time.",
    ],
    "reschedule_appointment": [
        "A work meeting got moved right on top of your visit, so the timing no longer works.",
        "Your kids' school schedule changed, and the current slot clashes with pickup.",
        "The provider is great, but the time you booked has become awkward.",
        "A relative announced a surprise visit, and it overlaps with your appointment.",
        "Your shift pattern changed at work, and the booked time now lands in the middle of a "
        "shift.",
        "The bus you rely on changed its timetable, making the booked time tricky to reach.",
        "Something came up that makes the original time impossible to keep.",
        "A deadline got moved, and the day of your appointment is now chaos.",
        "Your daughter is your ride, and her availability has changed since you booked.",
        "After booking, you realized the slot conflicts with another commitment.",
        "The timing of your visit felt fine at first, but now it squeezes everything else.",
        "An exam you're taking got rescheduled, and now it clashes with the visit.",
        "Lately the calendar has been a mess, and the current appointment time just doesn't fit "
        "anymore.",
    ],
    "refill_prescription": [
        "Your supply is running low, and you'd rather not go without.",
        "You're heading out of town soon and don't want to run out while away.",
        "Checking your medicine cabinet, you realized your supply won't last much longer.",
        "A reminder on your phone went off about your medication, right on schedule.",
        "Your doctor made it clear that skipping doses is a bad idea.",
        "Last time you let it lapse, you felt awful for days.",
        "A busy stretch at work is coming, and sorting medication early takes a worry off your "
        "plate.",
        "Your partner spotted the nearly empty package on the counter.",
        "With the usual routine thrown off by a move, your medication almost slipped your mind.",
        "Staying ahead of your medication is a habit you take seriously.",
        "The care planner on your fridge says it's time to reorder your medication.",
        "Running out at an inconvenient time happened before, and you're not letting it repeat.",
    ],
    "pay_balance": [
        "A statement from the clinic arrived in the mail, and the balance is hard to ignore.",
        "Your paycheck came through, and medical bills are high on your list.",
        "Unpaid bills weigh on your mind, and the clinic balance is among them.",
        "You'd rather deal with the clinic balance before it grows any further.",
        "A little extra money came in from a side job, so the clinic bill is getting attention.",
        "Before booking anything else, you're tidying up what you owe the clinic.",
        "Now that the paperwork has settled, the remaining amount on your account is clear.",
        "Your spouse normally handles medical bills, but this time it's your turn.",
        "Getting your finances in order is your project for the month.",
        "You just noticed the balance while checking your patient account online.",
        "An old clinic bill has been quietly nagging at your conscience.",
        "Money is finally less tight, and paying down medical debt feels like progress.",
    ],
    "answer": [
        "You can't remember when your next appointment is, and the reminder card is lost.",
        "HR at work wants to know when you'll be out for a medical visit.",
        "Before planning a trip, you're checking what's on your medical calendar.",
        "A charge on your bank statement from the clinic doesn't ring a bell.",
        "Your pharmacist asked about your prescription, and you couldn't answer.",
        "You're comparing providers at the clinic before making any decision.",
        "When your daughter asked which doctor you're seeing, you drew a blank.",
        "Organizing your medical paperwork, you noticed some gaps in your records.",
        "The balance on your account seems higher than expected, and you're curious why.",
        "Planning your schedule ahead, you'd rather have the appointment details straight.",
        "Between all the bottles in the cabinet, you've lost track of your prescriptions.",
        "A friend recommended a doctor at the clinic, and you're curious about availability.",
    ],
    "transfer": [
        "A late-cancellation fee landed on your account, and you think it's completely unfair.",
        "Your last visit felt rushed and dismissive, and you're filing a complaint about it.",
        "The clinic and your insurer keep blaming each other over a bill, and you're caught in the "
        "middle.",
        "You were charged for a visit that never took place.",
        "Your medical records are needed by a new specialist elsewhere, and nobody has sent them.",
        "Front-desk staff were short with your mother at her last visit, and you're upset.",
        "The pharmacy desk handed over the wrong dose last time, and your trust is gone.",
        "Test results were promised ages ago, and nobody has called back.",
        "Your long-time doctor left the clinic, and the handover has been a mess.",
        "A billing mistake sent your account to a collections agency, and you're furious.",
        "An exception to a clinic rule matters a great deal in your situation, and you won't take "
        "no for an answer.",
        "Someone at the clinic discussed your health where others could hear, and you're shaken.",
        "Hours spent in the waiting room last time pushed your patience past its limit.",
    ],
}
# Other ways to say the recurring parts of a goal (`synthesis.scenario.rephrase`): a regex
# and its replacements, the first the original wording; groups keep every value.
PHRASINGS: list[tuple[str, list[str]]] = [
    (r"\bpay (?:off your outstanding|your whole unpaid) balance of (\d+)\b",
     [r"\g<0>", r"pay off the full \1 you owe", r"clear your entire balance of \1",
      r"settle the whole \1 you still owe"]),
    (r" with (your|the) card on file\b",
     [r" with \1 card on file", r" using \1 card on file", r", charged to \1 card on file",
      r" from \1 card on file"]),
    (r"\bcancel (your [a-z ]*?appointment)\b", [r"cancel \1", r"call off \1", r"drop \1"]),
    (r"; you do not want to pay a late-cancellation fee",
     ["; you do not want to pay a late-cancellation fee", "; you are not willing to pay a late-cancellation fee",
      "; you don't want to be charged a late-cancellation fee", ", but you won't pay a late-cancellation fee"]),
    (r", and you accept the late-cancellation fee if one applies",
     [", and you accept the late-cancellation fee if one applies",
      ", and you are fine with paying the late-cancellation fee if one applies",
      ", accepting the late-cancellation fee if there is one",
      "; if a late-cancellation fee applies, you accept it"]),
    (r"\bmove (your [a-z ]*?appointment)\b", [r"move \1", r"reschedule \1", r"change \1", r"shift \1"]),
    (r" with the same provider(?=[.;]|$)",
     [" with the same provider", ", keeping the same provider", ", staying with the same provider",
      " and keep the same provider"]),
    (r"\bbook (?=an? )", ["book ", "schedule ", "set up ", "make an appointment for "]),
    (r" \(you would prefer (.+?) with the same provider if it is possible, otherwise this time is fine\)",
     [r"; \1 with the same provider would be better for you if it is possible, but otherwise this time is fine",
      r"; you were hoping for \1 with the same provider, but if that cannot be done, this time works",
      r"; ideally you would have \1 with the same provider instead, but if that is not possible, this time is"
      r" fine"]),
    (r" \(you would prefer (.+?) if they take your insurance, otherwise this provider is fine\)",
     [r"; \1 would be better for you if they take your insurance, but otherwise this provider is fine",
      r"; you were hoping to see \1, as long as they take your insurance; otherwise this provider is fine",
      r"; if \1 takes your insurance, you'd rather see them, but otherwise this provider is fine"]),
    (r" \(you asked for (an? [^;()]+?); if that is not possible, this type of visit is fine\)",
     [r"; \1 is what you asked for, but if that is not possible, this type of visit is fine",
      r"; you were hoping for \1, though this type of visit will do if that cannot be arranged",
      r"; you would rather have \1, but if that is not possible, this type of visit is fine"]),
    (r"\brefill (your [\w-]+ prescription)\b",
     [r"refill \1", r"get a refill of \1", r"order a refill of \1", r"get \1 refilled"]),
    (r"; and ", ["; and ", "; you also want to ", "; on top of that, you want to ", ", and you also want to "]),
]


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


def _slot_phrase(conn: sqlite3.Connection, row: dict[str, Any]) -> str:
    s = _slot(conn, row["slot_id"])
    return f"the {when(s['start_at'])} slot with {s['provider']}"


# How a patient names a record in a request: a slot by its provider and time, a provider or an
# insurance plan by its name, a referral by its specialty.
phrase = by_table(
    slots=_slot_phrase,
    providers=lambda conn, row: str(row["name"]),
    insurance_plans=lambda conn, row: f"the {row['name']} plan",
    referrals=lambda conn, row: f"my {row['specialty'].replace('_', ' ')} referral",
)


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
        return [f"book {article(kind)} with {s['provider']} on {when(s['start_at'])}{ref}; the visit costs {fee}",
                f"schedule {article(kind)} with {s['provider']} for {when(s['start_at'])}{ref}, at a cost of {fee}"]
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
        return [f"refill your {rx['medication']} prescription ({rx['rx_id']}) today; that uses "
                + ("your last remaining refill" if rx["refills_remaining"] == 1 else
                   f"one of your {rx['refills_remaining']} remaining refills")]
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
        left = result["refills_remaining"]
        return [f"Your {result['medication']} is refilled; {count_of(left, 'refill')} {'remains' if left == 1 else 'remain'}."]
    if call.name == "pay_balance":
        return [f"The payment of {result['paid']} went through; your balance is now {result['balance_due']}."]
    return []


def preference(conn: sqlite3.Connection, call: ToolCall, wanted: dict[str, Any]) -> tuple[list[ToolCall], str] | None:
    """When a booking does not take the patient's preferred slot, provider or visit type: the
    read that shows why, and the sentence that says so before the plan."""
    a = call.arguments
    if call.name != "book_appointment":
        return None
    patient = kit.one(conn, "SELECT * FROM patients WHERE patient_id = ?", a["patient_id"])
    slot_id, provider_id = wanted.get("preferred_slot"), wanted.get("preferred_provider")
    if slot_id and slot_id != a.get("slot_id"):
        s = _slot(conn, slot_id)
        day = s["start_at"][:10]
        if s["status"] != "open":
            return ([ToolCall(name="find_open_slots", arguments={"provider_id": s["provider_id"], "date": day})],
                     f"The {when(s['start_at'])} slot with {s['provider']} is no longer open.")
        referral = kit.row(conn, "SELECT * FROM referrals WHERE referral_id = ?", a.get("referral_id"))
        if referral is not None and referral["expires_on"] < day:
            return [], (f"Your referral expires on {date_forms(referral['expires_on'])[1]}, before the visit on "
                        f"{when(s['start_at'])}.")
        clash = kit.row(conn, "SELECT a.appointment_id, s.start_at FROM appointments a JOIN slots s USING (slot_id)"
                              " WHERE a.patient_id = ? AND a.status = 'scheduled' AND date(s.start_at) = ?"
                              " ORDER BY s.start_at", a["patient_id"], day)
        if clash is not None:
            return ([ToolCall(name="get_appointment_details", arguments={"appointment_id": clash["appointment_id"]})],
                    f"The {when(s['start_at'])} slot overlaps your appointment {clash['appointment_id']} at "
                    f"{clash['start_at'][11:16]}.")
        return None
    if provider_id and provider_id != _slot(conn, a["slot_id"])["provider_id"]:
        p = kit.one(conn, "SELECT * FROM providers WHERE provider_id = ?", provider_id)
        return ([ToolCall(name="get_provider_details", arguments={"provider_id": provider_id})],
                f"{p['name']} does not accept your insurance plan.")
    if wanted.get("wanted_type") and wanted["wanted_type"] != a.get("appointment_type") and patient:
        t = kit.one(conn, "SELECT * FROM appointment_types WHERE type_code = ?", wanted["wanted_type"])
        return [], (f"{article(t['name'].lower()).capitalize()} is only for patients aged {t['min_age']} to {t['max_age']}, which"
                    " you are not on the day of the visit.")
    return None


def grounding(conn: sqlite3.Connection, call: ToolCall, known: dict[str, str]) -> list[ToolCall]:
    """The reads that show a call's ids: appointments and prescriptions by their details,
    providers by a search of their specialty, slots by the provider's open slots that day."""
    a = call.arguments
    out: list[ToolCall] = []
    if "appointment_id" in a:
        out.append(ToolCall(name="get_appointment_details", arguments={"appointment_id": a["appointment_id"]}))
    if "provider_id" in a:  # a provider read: the provider is shown by a search of their specialty
        p = kit.one(conn, "SELECT specialty FROM providers WHERE provider_id = ?", a["provider_id"])
        out.append(ToolCall(name="search_providers", arguments={"specialty": p["specialty"]}))
    for key in ("slot_id", "new_slot_id"):
        if key in a:
            s = _slot(conn, a[key])
            out.append(ToolCall(name="search_providers", arguments={"specialty": s["specialty"]}))
            out.append(ToolCall(name="find_open_slots", arguments={"provider_id": s["provider_id"],
                                                                   "date": s["start_at"][:10]}))
    if "rx_id" in a:
        out.append(ToolCall(name="get_prescription_details", arguments={"rx_id": a["rx_id"]}))
    return out
