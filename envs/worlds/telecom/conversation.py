"""How conversations go in the telecom world (the contract is `envs/conversation.py`)."""

from __future__ import annotations

import sqlite3
from typing import Any

from data.records import Fact, ToolCall
from envs import sql as kit
from envs.conversation import DEFAULT_CLAUSES, Identity, amount_fact, id_fact
from envs.templating import by_table, enum_words, month_words

IDENTITY = Identity(keys=[["user_id"], ["customer_id"]], lookups={"get_customer_details": ["customer_id"]})
USER_FACING_IDS = ["customer_id", "user_id"]  # the account; lines go by phone number, bills by their month
CLAUSES = DEFAULT_CLAUSES
ASK_IDENTITY = [
    "I can help with that. Could you give me your user id (your account id)?",
    "Happy to help. First, what is your user id?",
    "Sure. May I have your user id so I can open your account?",
]
RULE_TERMS = {
    "R01_PLAN_AVAILABLE": ["currently offered", "status `available`"],
    "R02_LINE_LIMIT": ["at most 4 lines", "8 (business accounts)"],
    "R03_OVERDUE_BALANCE": ["overdue bill"],
    "R04_PAYMENT_AMOUNT": ["does not exceed", "still owed"],
    "R05_METHOD_OWNER": ["payment method of the", "same account"],
    "R06_CARD_EXPIRED": ["expired card is declined", "end of its expiry"],
    "R07_LINE_SUSPENDED": ["while a line is suspended", "resume the line first"],
    "R08_SUSPENSION_LIMIT": ["at most twice per calendar year"],
    "R09_ROAMING_PASS": ["roaming pass"],
    "R10_ADDON_LIMIT": ["at most 3 add-ons"],
    "R11_CONTRACT_DOWNGRADE": ["under contract", "lower monthly fee"],
    "R12_DATA_USAGE": ["already used"],
    "R13_TERMINATED_FINAL": ["terminated line cannot be changed"],
}
ALTERNATIVES = {
    "R03_OVERDUE_BALANCE": "Once the overdue bill is paid, I can set that up.",
    "R07_LINE_SUSPENDED": "I can resume the line first, if you like.",
    "R09_ROAMING_PASS": "I can add a roaming pass to the line first.",
    "R11_CONTRACT_DOWNGRADE": "You can move to a cheaper plan once the contract ends.",
    "R13_TERMINATED_FINAL": "I can open a new line for you instead.",
}
# For the scenario writer (user personas, reasons for the call): who a caller is, and why
# they call, keyed by the write tool the request ends in, "answer" (a question only) or
# "transfer" (handed to a human agent). Second person; the request follows the reason.
WHO: list[str] = [
    "a freelance photographer who uses mobile data for everything",
    "a parent who manages the phones of the whole family",
    "a retired postal worker who mostly makes calls and rarely uses data",
    "a university student who streams video on the bus every day",
    "a plumber running a small business with a crew out in the field",
    "a nurse who has to stay reachable during long shifts",
    "a real estate agent who practically lives on the phone",
    "an expat who calls relatives overseas every week",
    "a cautious saver who reads every line of the bill",
    "a long-time customer who has kept the same number for years",
    "a delivery driver who relies on maps all day",
    "a software developer who often travels abroad for work",
    "a grandparent who just got a first smartphone",
    "a café owner who keeps a separate line for the business",
]
REASONS: dict[str, list[str]] = {
    "change_plan": [
        "Your phone habits have shifted a lot since you started working from home.",
        "The plan you picked years ago doesn't really match how that line gets used anymore.",
        "Monthly bills have been on your mind, and the current plan no longer feels right.",
        "A new job changed your commute and the way you use your phone every day.",
        "After looking at your usage over the past few billing cycles, you've been rethinking your "
        "plan.",
        "Ever since he started high school, your son's phone habits have changed a lot.",
        "Money has been shifting around in your household budget, so the phone plan is up for "
        "review.",
        "Comparing notes with a friend over dinner, you realized your plan may not be the best "
        "fit.",
        "Since retiring, your days look completely different, and so does your phone use.",
        "Sorting through old paperwork, you came across your plan details and winced a little.",
        "A big change in your routine has made your current plan feel like a poor fit.",
        "Phone reimbursement rules at your company changed, and your plan choice is back on the "
        "table.",
        "The plan on that line was set up in a rush, and it never quite suited the person using "
        "it.",
    ],
    "add_addon": [
        "Your line has been doing the bare minimum, and you've decided it could do with an extra.",
        "A colleague mentioned an extra she pays for on her line, and it sounded like a smart "
        "idea.",
        "Browsing the carrier's website, you came across an extra that caught your eye.",
        "Your current setup leaves a gap, and it has become hard to ignore.",
        "A change in your routine means your line has to do more than it used to.",
        "Lately your daughter has been asking for a little something extra on her line, and you're "
        "inclined to say yes.",
        "Ever since a friend recommended it, an extra for your line has been on your wish list.",
        "You've got something coming up that your plan alone doesn't quite cover.",
        "Sitting down with the latest bill, you noticed your plan is missing something useful.",
        "New responsibilities at work mean your phone matters more than ever.",
        "Peace of mind is worth paying a little extra for, in your view.",
        "Half-jokingly, your partner keeps teasing about how bare-bones your phone setup is.",
        "With a big change coming up in your life, your phone setup could use a small boost.",
    ],
    "remove_addon": [
        "You're trimming monthly expenses after a tight stretch, and every small charge counts.",
        "Looking over your bill, you noticed an extra you barely remember signing up for.",
        "The reason you added that extra has passed, and it's just sitting on the bill now.",
        "Your spending review turned up a recurring charge that isn't pulling its weight.",
        "An extra on your line overlaps with something you already get elsewhere.",
        "Since your routine changed, an extra on your line goes completely unused.",
        "Money has been tighter since your hours were cut at work.",
        "You agreed to that extra in a store on a whim and have never used it.",
        "Going through your bill line by line, you found a charge that no longer makes sense.",
        "Your partner pointed out an extra on the bill that nobody in the house uses.",
        "Now that things have calmed down, an extra you once relied on feels unnecessary.",
        "Cutting back on subscriptions is your new project, and the phone bill is next on the "
        "list.",
        "Your daughter stopped using the feature that her line has been paying for.",
    ],
    "set_roaming": [
        "Your travel plans have been on your mind, and your phone settings should match them.",
        "A colleague came back from a trip with a shocking phone bill, and now roaming is on your "
        "mind.",
        "Lately, trips abroad have become part of your life, and your line's roaming setting "
        "matters.",
        "Your travel situation has changed, so the roaming setting on your line deserves a look.",
        "Reading the fine print about roaming charges, you realized your line's setting matters.",
        "A school exchange is on your daughter's calendar, and you're thinking about roaming on "
        "her line.",
        "A friend's horror story about roaming charges has been rattling around in your head.",
        "Every so often your job involves trips across the border.",
        "Travel season in your household means checking every setting on the account.",
        "A relative's trip is coming together, and the line they use has to have its settings "
        "sorted.",
        "Last time you traveled, the roaming setting wasn't what you expected, and it was a "
        "hassle.",
        "Border crossings and phone bills have been a sore subject in your family lately.",
        "You're the kind of person who double-checks phone settings whenever travel comes up.",
    ],
    "suspend_line": [
        "A line on your account won't be in use for a while, and paying for idle service seems "
        "pointless.",
        "Your phone won't be in your hands for the foreseeable future.",
        "Life took an unexpected turn, and a line on your account will sit idle for some time.",
        "You'd rather nobody could run up charges on a line while it's out of use.",
        "Things are a bit chaotic right now, and your phone is the last thing you'll be using.",
        "For a stretch of time, your phone will be out of reach and out of use.",
        "Keeping a line live while nobody can use it seems wasteful and risky.",
        "A sudden change of circumstances means the phone on that line is out of the picture for "
        "now.",
        "Security has been on your mind after a stressful stretch, and an unused line feels like a "
        "loose end.",
        "Since the phone on that line won't be around for a while, pausing service seems sensible.",
        "Your household is in the middle of upheaval, and a phone is effectively out of "
        "commission.",
        "You've thought it through, and a temporary break for that line makes more sense than "
        "closing it.",
    ],
    "resume_line": [
        "The situation that put that line on hold has sorted itself out.",
        "Life is back to normal, and that suspended line is the last loose end.",
        "You've gone without that number long enough and miss being reachable on it.",
        "Friends keep complaining that calls to your number go nowhere.",
        "Everything has settled down at home, and the paused line should be working again.",
        "A banking app sends codes only to that number, and going without it has become a real "
        "hassle.",
        "Your work contacts only know the suspended number, and they've started emailing about it.",
        "After some time without it, you're ready to have that line back in service.",
        "The reason for the pause no longer applies, and a dormant line is a nuisance.",
        "Going without your usual number has been more inconvenient than you imagined.",
        "Your routine is back in full swing, and a working phone is part of it.",
        "Deliveries and appointments keep getting missed because that line is still on hold.",
    ],
    "terminate_line": [
        "Since moving in with your family, your father no longer uses his own phone.",
        "Your company now provides a work phone, so the personal line you kept for work is "
        "redundant.",
        "A line on your account has sat unused for ages, and it's time to let it go.",
        "Now on his employer's phone plan, your son won't be using his old line.",
        "Cutting household costs is a priority, and an extra line is an easy place to start.",
        "After a breakup, the line your ex used is still on your account and still costing money.",
        "You've been simplifying your life and no longer see the point of carrying a separate "
        "number.",
        "The line you set up for a tablet never really got used.",
        "After the small business you ran closed its doors, its line is no longer needed.",
        "Since your mother passed away, her line has been sitting on your account.",
        "A move overseas means local phone service makes no sense anymore.",
        "Your teenager now pays for a phone of her own elsewhere, so the old line on your account "
        "can go.",
        "Keeping a backup line seemed clever at first, but it has only added clutter to your bill.",
    ],
    "add_line": [
        "After much debate, you've agreed that your daughter is finally old enough for her own "
        "phone.",
        "A new hire at your business will be out on the road and has to be reachable by phone.",
        "A new tablet came into your household, and it could use its own connection.",
        "You've been keeping work and personal calls on the same phone, and it's become a mess.",
        "Fed up with their old carrier, your partner is moving over to your account.",
        "The nanny your family just hired has to be reachable during the day.",
        "Your son leaves for university soon and has no phone plan of his own.",
        "Starting a side business, you're keen to keep customer calls off your personal number.",
        "Your father finally gave in and agreed to try a mobile phone.",
        "After your old line was closed for good, going without a number has been tough.",
        "Each new driver on your delivery crew has to be reachable on the road.",
        "A separate phone for emergencies in the car has been on your list for a while.",
        "Ever since your mother moved closer, you've been meaning to get her set up on your "
        "account.",
    ],
    "pay_bill": [
        "A reminder about an open bill landed in your inbox this morning.",
        "Your paycheck just arrived, and the phone bill is next on your list.",
        "You noticed an unpaid bill while going through the account, and it's been nagging at your "
        "mind.",
        "Keeping your finances tidy is a habit, and an open phone bill breaks it.",
        "Since you switched banks, the usual way your bill gets paid no longer works.",
        "Before heading off on a trip, you're clearing up anything still owed.",
        "A tax refund came through, and part of it is earmarked for bills.",
        "Your household budget has a little breathing room right now.",
        "After a tough month, you're finally in a position to put money toward your bill.",
        "You're working through a pile of bills at the kitchen table tonight.",
        "Your partner usually handles the phone bill but is away, so it's on your plate.",
        "The balance on your account has been hanging over your head.",
        "Getting your credit score in shape is a goal, and that starts with keeping bills paid.",
    ],
    "answer": [
        "Your data seems to vanish faster than usual, and you're curious where it's going.",
        "A charge on your latest bill doesn't match what you remember signing up for.",
        "You're thinking about traveling soon and wonder what your plan covers.",
        "Before making any changes, you're gathering the facts about your current lines.",
        "Your contract end date has slipped your mind, and you'd rather not guess.",
        "According to your teenager, he hasn't used much data, and you're looking for proof.",
        "A friend asked which plan you're on, and you honestly couldn't say.",
        "Budgeting for the coming months, you're trying to figure out what you owe and when.",
        "You found an old bill in a drawer and can't tell whether it was ever paid.",
        "The carrier's app has been glitchy, so the usual account overview is out of reach.",
        "Your accountant wants a breakdown of business phone costs for the year.",
        "Curious about the newer plans, you're comparing them with what you have now.",
        "Managing the account for the family, you got a question from your mother about her line's "
        "extras.",
    ],
    "transfer": [
        "A charge on your bill looks flat-out wrong, and you're not paying it without a fight.",
        "The fee for closing a line early felt like a punch in the gut, and you're disputing it.",
        "Dropped calls at your home have been a problem for ages, and nobody has fixed it.",
        "Your phone was stolen, and the thief ran up charges you refuse to pay.",
        "You were overcharged for roaming on a trip despite being assured it was included.",
        "A store employee promised a discount that never showed up on your bill.",
        "Someone moved your number to another account without permission, and you're livid.",
        "You've been a loyal customer for ages and feel you deserve some goodwill credit.",
        "Your late father's account is still billing, and sorting it out is beyond a routine "
        "request.",
        "Bills for a line you never opened started arriving, and you suspect fraud.",
        "The last agent you spoke with hung up mid-call, and you're demanding a supervisor.",
        "Your business negotiated special contract terms in person, and the bills don't reflect "
        "them.",
        "A late fee appeared after a payment that you're certain went through on time.",
    ],
}
# Other ways to say the recurring parts of a goal (`synthesis.scenario.rephrase`): a regex
# and its replacements, the first the original wording; groups keep every value.
PHRASINGS: list[tuple[str, list[str]]] = [
    (r"\bpay off the remaining balance of (?=your )",
     ["pay off the remaining balance of ", "clear the remaining balance on ", "settle what is left of ",
      "pay whatever is still owed on "]),
    (r"\bpay the (\d+) still owed on ",
     [r"pay the \1 still owed on ", r"pay the \1 that is still due on ", r"settle the \1 outstanding on ",
      r"clear the \1 left to pay on "]),
    (r"\b(bill|bill for [A-Z][a-z]+ \d{4}) with (your (?:card|bank account))\b",
     [r"\1 with \2", r"\1 using \2", r"\1, paying with \2", r"\1 from \2"]),
    (r" \(you would rather use (.+?) if it is accepted\)",
     [r"; \1 would be better for you if it is accepted",
      r"; you would like to use \1, if it is accepted",
      r"; you'd rather pay with \1 if it is accepted"]),
    (r"\badd (the [^;]+?) to your\b", [r"add \1 to your", r"put \1 on your", r"get \1 added to your"]),
    (r"\bremove (the [^;]+?) from your\b",
     [r"remove \1 from your", r"drop \1 from your", r"take \1 off your", r"get rid of \1 on your"]),
    (r"\b(?P<verb>switch|move) (your [^;]+?) to (?=the )",
     [r"\g<verb> \2 to ", r"move \2 over to ", r"change \2 to ", r"have \2 switched to "]),
    (r" \(you would prefer the (.+?) plan if you can still get it\)",
     [r"; the \1 plan would be better for you if you can still get it",
      r"; you have your heart set on the \1 plan, if it can still be had",
      r"; if the \1 plan is still available, you would rather have that one"]),
    (r"\b(?P<on>switch on roaming on|switch roaming on for) your\b",
     [r"\g<on> your", r"turn on roaming for your", r"enable roaming on your",
      r"get roaming switched on for your"]),
    (r"\bopen a new line on (?=the )",
     ["open a new line on ", "add a new line on ", "start a new line on ", "get a new line on "]),
    (r"\bclose (your [^;]+?) for good\b",
     [r"close \1 for good", r"close \1 permanently", r"shut down \1 for good", r"cancel \1 permanently"]),
    (r"\breactivate (?=your )", ["reactivate ", "resume service on ", "turn back on "]),
    (r"; and ", ["; and ", "; you also want to ", "; on top of that, you want to ", ", and you also want to "]),
]


def mentions(conn: sqlite3.Connection, table: str, row: dict[str, Any]) -> list[str]:
    if table == "lines":
        return [row["phone_number"], row["phone_number"][-4:]]
    if table == "plans":
        return [row["name"]]
    if table == "addons":
        return [row["name"]]
    if table == "payment_methods":
        return [row["last4"]] if row.get("last4") else [row["kind"].replace("_", " ")]
    if table == "bills":
        return [row["period"], month_words(row["period"]), row["bill_id"]]
    return []


# How a customer names a record in a request: a line by its phone number, a plan or an add-on by
# its name, a payment method by its kind and last digits, a bill by its month.
phrase = by_table(
    lines=lambda conn, row: str(row["phone_number"]),
    plans=lambda conn, row: f"the {row['name']} plan",
    addons=lambda conn, row: f"the {row['name']} add-on",
    payment_methods=lambda conn, row: f"my {enum_words(row['kind'])} ending in {row['last4']}",
    bills=lambda conn, row: f"my {month_words(row['period'])} bill",
)


def _line(conn: sqlite3.Connection, line_id: str) -> dict[str, Any]:
    return kit.one(conn, "SELECT l.*, p.name AS plan_name FROM lines l JOIN plans p USING (plan_id) WHERE line_id = ?",
                   line_id)


def _plan(conn: sqlite3.Connection, plan_id: str) -> dict[str, Any]:
    return kit.one(conn, "SELECT * FROM plans WHERE plan_id = ?", plan_id)


def _addon(conn: sqlite3.Connection, addon_id: str) -> dict[str, Any]:
    return kit.one(conn, "SELECT * FROM addons WHERE addon_id = ?", addon_id)


def _method(conn: sqlite3.Connection, method_id: str) -> str:
    m = kit.one(conn, "SELECT * FROM payment_methods WHERE method_id = ?", method_id)
    return f"the {enum_words(m['kind'])} ending in {m['last4']}" if m["last4"] else f"the {enum_words(m['kind'])}"


def action(conn: sqlite3.Connection, call: ToolCall) -> list[str]:
    a = call.arguments
    if call.name == "add_line":
        p = _plan(conn, a["plan_id"])
        return [f"open a new line on the {p['name']} plan ({p['monthly_fee']} a month)",
                f"add a new line to your account on {p['name']}, at {p['monthly_fee']} a month"]
    if call.name == "pay_bill":
        b = kit.one(conn, "SELECT * FROM bills WHERE bill_id = ?", a["bill_id"])
        return [f"pay {a['amount']} towards your {b['period']} bill with {_method(conn, a['method_id'])}",
                f"charge {a['amount']} to {_method(conn, a['method_id'])} for the {b['period']} bill"]
    line = _line(conn, a["line_id"])
    phone = line["phone_number"]
    if call.name == "change_plan":
        p = _plan(conn, a["plan_id"])
        return [f"move the line {phone} from {line['plan_name']} to the {p['name']} plan ({p['monthly_fee']} a month)",
                f"switch {phone} to {p['name']}, which costs {p['monthly_fee']} a month"]
    if call.name in ("add_addon", "remove_addon"):
        ad = _addon(conn, a["addon_id"])
        verb = "add" if call.name == "add_addon" else "remove"
        return [f"{verb} the {ad['name']} add-on ({ad['monthly_fee']} a month) {'to' if verb == 'add' else 'from'} "
                f"the line {phone}"]
    if call.name == "set_roaming":
        return [f"switch roaming {'on' if a['enabled'] else 'off'} for the line {phone}"]
    if call.name == "suspend_line":
        return [f"suspend the line {phone} ({str(a['reason']).replace('_', ' ')})"]
    if call.name == "resume_line":
        return [f"resume the line {phone}"]
    if call.name == "terminate_line":
        return [f"terminate the line {phone} for good"]
    return [call.name.replace("_", " ")]


def facts(before: sqlite3.Connection, after: sqlite3.Connection, call: ToolCall, result: Any) -> list[Fact]:
    a = call.arguments
    if call.name == "add_line":
        return [id_fact("new phone number", result["phone_number"])]
    if call.name == "pay_bill":
        return [amount_fact("amount paid", a["amount"])]
    if call.name == "change_plan":
        return [id_fact("new plan", result["plan"]["name"]), amount_fact("monthly fee", result["plan"]["monthly_fee"])]
    if call.name == "add_addon":
        added = next(x for x in result["addons"] if x["addon_id"] == a["addon_id"])
        return [id_fact("add-on", added["name"]), amount_fact("monthly fee", added["monthly_fee"])]
    if call.name == "remove_addon":
        ad = kit.one(before, "SELECT name FROM addons WHERE addon_id = ?", a["addon_id"])
        return [id_fact("add-on removed", ad["name"])]
    if call.name in ("suspend_line", "resume_line"):
        return [Fact(label="line status", any_of=[result["status"]], kind="text")]
    if call.name == "set_roaming":
        return [Fact(label="roaming", any_of=["on" if result["roaming_enabled"] else "off"], kind="text")]
    if call.name == "terminate_line":
        sql = "SELECT bill_id, amount FROM bills WHERE kind = 'early_termination' ORDER BY bill_id"
        new = [b for b in kit.rows(after, sql) if b["bill_id"] not in {x["bill_id"] for x in kit.rows(before, sql)}]
        return [amount_fact("early termination fee", new[0]["amount"])] if new else []
    return []


def report(conn: sqlite3.Connection, call: ToolCall, result: Any, facts: list[Fact]) -> list[str]:
    a = call.arguments
    if call.name == "add_line":
        return [f"Your new line {result['phone_number']} is active on {result['plan']['name']}."]
    if call.name == "pay_bill":
        return [f"The payment of {a['amount']} went through; {result.get('amount_owed', 0)} is left on that bill."
                if "amount_owed" in result else f"The payment of {a['amount']} went through."]
    if call.name == "change_plan":
        return [f"The line {result['phone_number']} is now on {result['plan']['name']}, at "
                f"{result['plan']['monthly_fee']} a month."]
    if call.name == "add_addon":
        ad = next(x for x in result["addons"] if x["addon_id"] == a["addon_id"])
        return [f"{ad['name']} is now on the line {result['phone_number']}, at {ad['monthly_fee']} a month."]
    if call.name == "remove_addon":
        return [f"The add-on {facts[0].any_of[0]} is removed from the line {result['phone_number']}."] if facts else []
    if call.name in ("suspend_line", "resume_line"):
        return [f"The line {result['phone_number']} is now {result['status']}."]
    if call.name == "set_roaming":
        return [f"Roaming is now {'on' if result['roaming_enabled'] else 'off'} for {result['phone_number']}."]
    if call.name == "terminate_line":
        fee = f" An early termination fee of {facts[0].any_of[0]} is billed." if facts else ""
        return [f"The line {result['phone_number']} is terminated.{fee}"]
    return []


def preference(conn: sqlite3.Connection, call: ToolCall, wanted: dict[str, Any]) -> tuple[list[ToolCall], str] | None:
    """When a write does not take what the customer would rather have (an expired card, a
    retired plan, their old terminated number): the read that shows why, and the sentence,
    in the policy's terms, that says so before the plan."""
    a = call.arguments
    if call.name == "pay_bill" and (mid := wanted.get("preferred_method")) and mid != a.get("method_id"):
        m = kit.one(conn, "SELECT * FROM payment_methods WHERE method_id = ?", mid)
        said = _method(conn, mid)
        return ([ToolCall(name="get_customer_details", arguments={"customer_id": m["customer_id"]})],
                f"{said[:1].upper()}{said[1:]} expired at the end of {m['expires']}, and an expired card is"
                " declined.")
    if call.name == "change_plan" and (pid := wanted.get("preferred_plan")) and pid != a.get("plan_id"):
        return ([ToolCall(name="list_plans", arguments={"include_retired": True})],
                f"The {_plan(conn, pid)['name']} plan is retired: customers already on it may keep it, but"
                " nobody can move to it.")
    if call.name == "add_line" and (number := wanted.get("old_number")):
        return ([ToolCall(name="find_line_by_number", arguments={"phone_number": number})],
                f"Your old line {number} was terminated, and a terminated line cannot be reactivated;"
                " you need a new line.")
    return None


def grounding(conn: sqlite3.Connection, call: ToolCall, known: dict[str, str]) -> list[ToolCall]:
    """The reads that show a write's ids; a line an earlier write of the conversation opens
    is shown by that write's result instead."""
    a = call.arguments
    out: list[ToolCall] = []
    if "line_id" in a and conn.execute("SELECT 1 FROM lines WHERE line_id = ?", (a["line_id"],)).fetchone():
        out.append(ToolCall(name="get_line_details", arguments={"line_id": a["line_id"]}))
    if "plan_id" in a:
        out.append(ToolCall(name="list_plans", arguments={}))
    if "addon_id" in a and call.name == "add_addon":
        out.append(ToolCall(name="list_addons", arguments={}))
    if "bill_id" in a:
        out.append(ToolCall(name="get_bill_details", arguments={"bill_id": a["bill_id"]}))
    return out
