"""How conversations go in the airline world (the contract is `envs/conversation.py`)."""

from __future__ import annotations

import sqlite3
from typing import Any

from data.records import Fact, ToolCall
from envs import sql as kit
from envs.conversation import DEFAULT_CLAUSES, Identity, amount_fact, date_forms, id_fact
from envs.worlds.airline.design import payment_phrase
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
# For the scenario writer (user personas, reasons for the call): who a caller is, and why
# they call, keyed by the write tool the request ends in, "answer" (a question only) or
# "transfer" (handed to a human agent). Second person; the request follows the reason.
WHO: list[str] = [
    "a consultant who flies most weeks for work",
    "a retired teacher who travels to see family a few times a year",
    "a graduate student on a tight budget heading to an academic conference",
    "a nurse who plans every trip around a rotating shift schedule",
    "a small business owner who books travel for their own team",
    "a parent juggling school runs who rarely has time to plan a trip",
    "a software engineer who works remotely and travels on a whim",
    "a recent retiree who finally has time to visit old friends",
    "a touring musician who is used to hauling equipment around",
    "a wedding photographer who often travels for jobs on short notice",
    "an anxious first-time flyer who wants every detail spelled out",
    "a frequent flyer who knows airline rules better than most agents",
    "a college student going home between terms",
    "an executive assistant who arranges trips for a demanding boss",
    "a grandparent who flies out to help whenever a grandchild is born",
]
REASONS: dict[str, list[str]] = {
    "book_reservation": [
        "Your cousin's wedding invitation finally arrived, and the celebration is far enough away "
        "that driving is out of the question.",
        "A job interview came through after weeks of waiting, and the company asked to meet in "
        "person.",
        "You've been promising an old college friend a visit for ages and finally found a free "
        "stretch.",
        "Your manager just approved a trip to see a client who prefers to talk face to face.",
        "After a long stretch without a break, you're treating yourself to the getaway you've been "
        "dreaming about.",
        "Grandma's big birthday party is coming up, and the whole family expects everyone to be "
        "there.",
        "A conference you've followed for years opened registration, and your talk proposal was "
        "accepted.",
        "Ever since your sister had her baby, you've been itching to go meet your new niece.",
        "A bonus came through after a good quarter at work, and a trip feels well earned.",
        "While scrolling the news over breakfast, you spotted fares that looked too good to "
        "ignore.",
        "Members of your running club signed up for a race out of town, and you're not about to "
        "miss it.",
        "Your new job starts soon in another city, and you're flying out to hunt for an apartment.",
        "The university your son is starting at holds an orientation that parents are encouraged "
        "to attend.",
    ],
    # a booking for several passengers (`reason_key`): nobody here travels alone
    "book_reservation:group": [
        "The kids' school break is around the corner, and the family finally agreed on where "
        "to go.",
        "Your parents' anniversary is a big one this year, and the family is flying in together "
        "to celebrate.",
        "Your book club has talked about a trip together for years, and this time everyone said "
        "yes.",
        "Your company is sending a small team to a trade show, and you drew the job of booking "
        "everyone's seats.",
        "A family reunion is being held on the other side of the country, and your household is "
        "going together.",
        "Your best friend's wedding is coming up, and the people in your party all want to be "
        "on the same flight.",
        "Your kids have been begging to see their grandparents, and you finally found dates that "
        "work for everyone.",
        "Your youth soccer team made it to an out-of-town tournament, and you're booking for the "
        "group.",
        "You and your partner are taking some friends along for a long-overdue getaway.",
        "A long weekend is coming up, and your household wants to spend it somewhere warm.",
        "Your extended family is gathering for a milestone birthday, and you offered to handle "
        "the flights for your side.",
        "The choir you sing in was invited to perform at a festival, and a few of you are "
        "flying there together.",
        "Your in-laws invited the whole family to stay with them, and it is your turn to sort out "
        "the travel.",
    ],
    "cancel_reservation": [
        "The conference you were flying out for just got called off by the organizers.",
        "Your doctor advised against travel while you recover from a minor surgery.",
        "A family emergency came up at home, and leaving right now simply isn't possible anymore.",
        "Work dumped an urgent project on your desk, so the trip no longer fits into your "
        "schedule.",
        "The friend you planned to visit got called away for work, so the whole plan fell through.",
        "You booked in a hurry after a tense phone call and now regret the whole idea.",
        "Money has been tight since your car broke down, and the trip feels like a luxury now.",
        "Your dog fell ill and the sitter backed out, so leaving home is off the table.",
        "The couple whose wedding you were attending decided to postpone it indefinitely.",
        "Since you booked, your company froze all non-essential travel until further notice.",
        "A nasty flu is making its way through your household, and nobody is in shape to travel.",
        "Your team lost in the qualifiers, so the tournament trip is no longer happening.",
        "After thinking it over, you decided to drive instead and spend the money on something "
        "else.",
    ],
    "update_baggage": [
        "Your packing plans have shifted since you booked, and the luggage on the reservation no "
        "longer matches them.",
        "You've rethought what's coming along on this trip after checking the weather forecast at "
        "your destination.",
        "Plans at the other end of the trip changed, which changes how much luggage makes sense to "
        "bring.",
        "Now that the trip is getting close, you've finally sat down and figured out what to pack.",
        "Your travel companions compared notes on luggage, and the booking no longer reflects what "
        "they decided.",
        "Laying everything out on the bed made it clear that your luggage estimate was off.",
        "Since booking, the purpose of your trip has changed, and so has what you're bringing.",
        "Checking the baggage rules after booking, you realized the luggage on your reservation "
        "isn't what you expected.",
        "Your daughter kept changing her mind about what she's packing, and she has finally "
        "settled it.",
        "A long talk with your travel partner settled how much luggage is really worth taking "
        "along.",
        "Paying attention to the fees for once, you went over what's actually going in the hold.",
        "After a trial run at packing, you have a clearer picture of the luggage this trip calls "
        "for.",
        "Honestly, the luggage on your booking was a rough guess made in a hurry at checkout.",
    ],
    "change_flight": [
        "Your plans shifted after the meeting at your destination was moved around.",
        "A scheduling conflict popped up at work, and your current flight no longer lines up with "
        "it.",
        "The event you're travelling for changed its timing, so the booked flight fits poorly now.",
        "Childcare at home only works out at certain times, and the flight you booked falls "
        "outside them.",
        "Your host's schedule got reshuffled, and arriving on your current flight no longer suits "
        "them.",
        "A specialist appointment you'd waited ages for landed right on top of your travel plans.",
        "Project deadlines got rearranged by your manager, which throws off the timing of your "
        "trip.",
        "Looking at your calendar again, you noticed the trip clashes with a family commitment.",
        "A friend's wedding rehearsal got rescheduled, and your current flight now sits awkwardly "
        "against it.",
        "After a chat with your travel companion, the current flight timing just doesn't feel "
        "right.",
        "Something came up at home that makes your original timing impractical.",
        "Your ground transport at the other end fell through, so the flight you picked no longer "
        "makes sense.",
        "Since booking, the hotel you wanted could only hold a room that doesn't match your "
        "arrival.",
    ],
    "answer": [
        "You're putting together a travel checklist and can't remember the details of your "
        "booking.",
        "Your partner asked about the trip details, and the confirmation email is nowhere to be "
        "found.",
        "Before requesting time off, you're double-checking what your upcoming reservation "
        "actually says.",
        "A friend mentioned that airlines sometimes shuffle schedules, and now you're a little "
        "nervous about your trip.",
        "Your expense report is due, and the finance team wants to know what the ticket cost.",
        "Out of curiosity, you've been wondering what your membership level actually includes.",
        "Planning ahead for another trip, you're weighing options on a route you fly often.",
        "The booking email landed in your spam folder, and most of it is unreadable.",
        "Mom keeps calling to ask when you land, and you honestly don't remember.",
        "Packing starts soon, and you're not sure what luggage your booking already includes.",
        "Company travel policy just changed, and you're checking how your existing booking looks.",
        "A coworker is flying the same route soon and asked what the schedule options look like.",
        "Reconciling your card statement, you spotted a charge from the airline that you can't "
        "place.",
    ],
    "transfer": [
        "Your last trip was a mess of delays, and the way staff handled it still makes your blood "
        "boil.",
        "You were promised compensation for a cancelled flight ages ago, and nothing has arrived.",
        "Your suitcase came back damaged after a flight, and you're determined to get someone to "
        "pay for it.",
        "A gate agent was rude to your elderly father, and you're not letting it slide.",
        "The airline's rules blocked something you consider perfectly reasonable, and you're ready "
        "to escalate.",
        "You've spent ages going back and forth with automated messages and have lost all "
        "patience.",
        "Medical equipment you travel with calls for special handling that a regular booking can't "
        "arrange.",
        "A refund from an earlier trip never showed up on your statement, and your patience is "
        "gone.",
        "Something in an inflight meal made your son ill, and you're filing a formal complaint.",
        "A seat you paid extra for was given to someone else, and you're still fuming about it.",
        "Your employer is organizing a large team trip that goes far beyond a normal booking.",
        "A charge on your card looks like a duplicate, and you're convinced the airline owes money "
        "back.",
        "Stranded overnight at a connecting airport, you ended up paying for a hotel out of "
        "pocket.",
    ],
}
# Other ways to say the recurring parts of a goal (`synthesis.scenario.rephrase`): a regex
# and its replacements, the first the original wording; groups keep every value.
PHRASINGS: list[tuple[str, list[str]]] = [
    (r"\bbook (\d+) (passengers?) in ([a-z ]+?) on ",
     [r"book \1 \2 in \3 on ", r"reserve \3 for \1 \2 on ", r"get \1 \2 booked in \3 on ",
      r"arrange \3 travel for \1 \2 on ", r"book \3 for \1 \2 on "]),
    (r", paying with ",
     [", paying with ", ", charged to ", ", using ", ", with the payment going on "]),
    (r", without travel insurance",
     [", without travel insurance", ", and no travel insurance", ", skipping the travel insurance",
      ", with no insurance added"]),
    (r", with travel insurance",
     [", with travel insurance", ", and add travel insurance", ", insured", ", including travel insurance"]),
    (r" \(you would prefer (.+?) if it has room for everyone, otherwise the other one is fine\)",
     [r"; \1 would be better for you if it still has room for everyone, but otherwise the first one is fine",
      r"; you are hoping for \1, if everyone still fits on it; otherwise the first one is fine",
      r"; ideally it would be \1, as long as everyone fits on it; if not, the first one will do"]),
    (r" \(you would rather use (.+?) if its balance covers it\)",
     [r"; \1 would be your first choice for paying, as long as its balance covers it",
      r"; you would like to use up \1 first, if its balance is enough",
      r"; if \1 has enough left on it, you'd rather pay with that"]),
    (r"\bcancel your reservation (\w+)\b(?! and get)",
     [r"cancel your reservation \1", r"call off your booking \1", r"cancel booking \1",
      r"have your reservation \1 cancelled"]),
    (r"\bcancel your reservation (\w+) and get your money back\b",
     [r"cancel your reservation \1 and get your money back", r"cancel booking \1 and get a refund",
      r"call off reservation \1 and have the fare refunded"]),
    (r"\bmove your reservation (\w+) to ",
     [r"move your reservation \1 to ", r"switch your booking \1 onto ", r"change reservation \1 to ",
      r"rebook your reservation \1 on "]),
    (r"\bhave (\d+) (checked bags?) in total on your reservation (\w+)",
     [r"have \1 \2 in total on your reservation \3", r"end up with \1 \2 in total on booking \3",
      r"make it \1 \2 in total on reservation \3"]),
    (r"; and ", ["; and ", ". You also want to ", "; after that, ", ". Besides that, you want to "]),
]

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
        return payment_phrase(conn, row["payment_id"]).replace("your ", "my ", 1)
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
        allowance = ("no free bags" if free == 0 else "the 1 free one" if free == 1 else f"the {free} free ones")
        per_bag = f"{BAG_FEE} per bag" + (" beyond " + allowance if free else ", with " + allowance)
        cost = (f"that is {delta} extra ({per_bag}), charged to "
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
    (payment methods come with the user's details, the identity lookup). A reservation that
    does not exist yet (one an earlier write of the same conversation books) is shown by
    that write's result instead."""
    a = call.arguments
    out: list[ToolCall] = []
    if "reservation_id" in a and conn.execute("SELECT 1 FROM reservations WHERE reservation_id = ?",
                                              (a["reservation_id"],)).fetchone():
        out.append(ToolCall(name="get_reservation_details", arguments={"reservation_id": a["reservation_id"]}))
    for key in ("flight_id", "new_flight_id"):
        if key in a:
            f = _flight(conn, a[key])
            out.append(ToolCall(name="search_flights", arguments={
                "origin": f["origin"], "destination": f["destination"], "date": f["date"]}))
    return out


def preference(conn: sqlite3.Connection, call: ToolCall, wanted: dict[str, Any]) -> tuple[list[ToolCall], str] | None:
    """When a booking does not take the user's preferred flight or payment: the read that
    shows why, and the sentence that says so before the plan."""
    a = call.arguments
    if call.name != "book_reservation":
        return None
    flight_id, pay_id = wanted.get("preferred_flight"), wanted.get("preferred_payment")
    if flight_id and flight_id != a.get("flight_id"):
        f = _flight(conn, flight_id)
        seats = f["seats_available"]
        read = ToolCall(name="search_flights", arguments={"origin": f["origin"], "destination": f["destination"],
                                                          "date": f["date"]})
        return [read], (f"{flight_words(f)[:1].upper()}{flight_words(f)[1:]} has only {seats} seat"
                        f"{'s' if seats != 1 else ''} left, not enough for {a['passengers']} passengers.")
    if pay_id and pay_id != a.get("payment_id"):
        p = kit.one(conn, "SELECT * FROM payment_methods WHERE payment_id = ?", pay_id)
        return [], (f"Your {p['kind'].replace('_', ' ')} has a balance of {p['balance']:g}, which does not"
                    " cover this booking.")
    return None


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
                f"{result['reservation_id']} is set to {n} checked bag{'s' if n != 1 else ''}"
                + (", at no extra cost." if money == "at no extra cost" else f", and {money}.")]
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


def reason_key(call: ToolCall) -> str | None:
    """The ``REASONS`` key for `call` when its own tool's bank would not fit: a booking of
    two or more passengers takes the group bank."""
    if call.name == "book_reservation" and int(call.arguments.get("passengers") or 1) >= 2:
        return "book_reservation:group"
    return None
