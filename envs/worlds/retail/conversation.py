"""How conversations go in the retail world (the contract is `envs/conversation.py`)."""

from __future__ import annotations

import sqlite3
from typing import Any

from data.records import Fact, ToolCall
from envs import sql as kit
from envs.conversation import DEFAULT_CLAUSES, Identity, amount_fact, id_fact
from envs.templating import count_of
from envs.worlds.retail.design import item_phrase, payment_phrase

IDENTITY = Identity(keys=[["email"], ["name", "zip code"]],
                    lookups={"find_customer_by_email": ["email"],
                             "find_customer_by_name_zip": ["first_name", "last_name", "zip_code"]},
                    account=["customer_id"])  # the account id the tools take, never asked for
USER_FACING_IDS = ["customer_id", "order_id", "return_id", "exchange_id"]  # account, order and case numbers
CLAUSES = DEFAULT_CLAUSES
ASK_IDENTITY = [
    "I can help with that. Could you tell me the email address on your account?",
    "Happy to help. First, what is the email address of your account?",
    "Sure. To find your account, may I have your email address?",
]
RULE_TERMS = {
    "R01_CANCEL_PENDING": ["only `pending` orders can be cancelled", "pending"],
    "R02_STOCK": ["in stock"],
    "R03_PAYMENT_OWNER": ["must belong to the customer who owns the order"],
    "R04_GIFT_BALANCE": ["must cover the whole amount"],
    "R05_RETURN_WINDOW": ["30 days"],
    "R06_DELIVERED_ONLY": ["only from `delivered` orders", "delivered"],
    "R07_ITEM_QUANTITY": ["not yet returned or exchanged"],
    "R08_SAME_PRODUCT": ["of the same product"],
    "R09_REFUND_DESTINATION": ["original payment method", "gift card of the same customer"],
    "R10_LINE_QUANTITY": ["between 1 and 5 units"],
    "R11_ADDRESS_CHANGE": ["`pending` or `processed`", "shipped or delivered"],
    "R12_CANCELLED_FINAL": ["a cancelled order is final"],
}
ALTERNATIVES = {
    "R08_SAME_PRODUCT": "You can return the item and place a new order for the other product.",
    "R01_CANCEL_PENDING": "Once it is delivered, you can return the items within 30 days.",
    "R10_LINE_QUANTITY": "I can place the order with up to 5 units of it.",
}
# For the scenario writer (user personas, reasons for the call): who a caller is, and why
# they call, keyed by the write tool the request ends in, "answer" (a question only) or
# "transfer" (handed to a human agent). Second person; the request follows the reason.
WHO: list[str] = [
    "a college student furnishing a first apartment on a budget",
    "a busy parent who orders most household things online",
    "a retired engineer who reads every product description twice",
    "a freelance designer who works from a tiny home office",
    "a marathon runner who goes through gear quickly",
    "a new homeowner who is still unpacking boxes",
    "a nurse who shops online during breaks between shifts",
    "a high school teacher who buys supplies for the classroom",
    "a generous gift-giver who always shops at the last minute",
    "an avid hiker who plans trips far ahead",
    "a small business owner who equips a handful of employees",
    "a grandparent who is still getting used to shopping online",
    "a remote worker who is picky about their desk setup",
    "a home cook who loves trying new kitchen gadgets",
]
REASONS: dict[str, list[str]] = {
    "place_order": [
        "Your sister's birthday is coming up fast, and you've finally settled on a gift.",
        "The old one finally gave out after years of daily use, and you're done making do.",
        "Browsing the catalog during lunch, you found exactly what you'd been hunting for.",
        "A friend raved about something from this store, and you decided to try it yourself.",
        "You're starting a new job soon and are getting yourself ready for it.",
        "Your teenage son keeps dropping hints, and you've decided to surprise him.",
        "After a long stretch of putting it off, you're finally treating yourself.",
        "The gift exchange at your office is coming up, and you drew a coworker who is hard to "
        "shop for.",
        "You saw something similar at a friend's place and couldn't stop thinking about it.",
        "Your niece just graduated, and you want to send her something she'll actually use.",
        "A coworker showed you theirs in a meeting, and you've wanted one ever since.",
        "Your anniversary is next week, and you've finally picked out the present.",
        "The one you borrowed from a neighbour went back, and you miss having it around.",
    ],
    # an order of several items or units (`reason_key`): none of these is a single gift
    "place_order:several": [
        "Since moving into a new apartment, you've been slowly filling the gaps in your household.",
        "Your daughter is heading off to college, and her checklist still has gaps.",
        "Getting ready to host your in-laws, you noticed your home is missing some of the basics.",
        "Payday just arrived, and the wish list you've been building is calling your name.",
        "The holidays are coming, and you're getting the gift shopping for the family done early.",
        "Your office asked you to restock the break room, and the budget is on you this time.",
        "A long weekend with friends at a rented cabin is coming up, and you offered to bring the "
        "supplies.",
        "Your kids outgrew half their things over the summer, and school starts soon.",
        "You're finally redoing the spare room, and a few pieces are still missing.",
        "The community center where you volunteer needs supplies, and you said you'd handle it.",
        "Your twins' birthday party is this weekend, and you're picking up the last of what you "
        "need.",
        "A sale caught your eye, and it seemed smart to stock up while prices are low.",
        "Your roommate and you split the shopping this month, and it is your turn to order.",
    ],
    "cancel_pending_order": [
        "Right after you checked out, a wave of buyer's remorse hit hard.",
        "You had second thoughts soon after placing an order and would rather it never ship.",
        "Looking over the confirmation email, something about that order just doesn't sit right "
        "anymore.",
        "Your roommate saw the order confirmation and pointed out a problem with it.",
        "Going through your recent purchases, you spotted an order that should not go ahead.",
        "A chat with your partner over dinner made it clear that a recent order should not go "
        "ahead.",
        "The order confirmation landed in your inbox, and your stomach dropped a little.",
        "Tidying up your budget, you found an order that never should have gone through.",
        "Your spending app flagged a recent purchase, and looking at it again, it was a misstep.",
        "Hours after ordering, you realized the purchase was not such a great idea after all.",
        "Your mother saw what you ordered and raised an eyebrow, and she had a point.",
        "After a late-night shopping session, you woke up uneasy about what you'd ordered.",
        "Checking your bank app over coffee, you frowned at a purchase from this store.",
    ],
    "modify_order_address": [
        "You're moving house sooner than planned, and deliveries to the old place would go astray.",
        "Porch thefts have been happening on your street, so home deliveries feel risky right now.",
        "Your elderly father is recovering from surgery, and you're staying at his place to help "
        "out.",
        "The building you live in is being renovated, and the mailroom is closed for now.",
        "You realized the order still carries an address you'd rather not use for this delivery.",
        "Since it's a surprise gift, having it show up at home would spoil everything.",
        "A long work assignment keeps your apartment empty for a while, so nobody would be there "
        "to receive it.",
        "Your roommate situation changed suddenly, and you've moved in with a friend across town.",
        "Deliveries to your home keep getting left out in the rain, and you've had enough of it.",
        "You've started house-sitting for your aunt and will be staying there for a while.",
        "Your new lease starts sooner than expected, and you'd rather everything arrive at the new "
        "place.",
        "The package is meant for your brother, and it makes more sense to send it straight to "
        "him.",
        "While double-checking the order, you noticed the shipping address has a mistake in it.",
    ],
    "return_item": [
        "It arrived, and in person it looks nothing like the photos on the site.",
        "After trying it out at home, you found it just doesn't suit your needs.",
        "Your sister bought the same thing as a present, so now the household has a duplicate.",
        "The quality felt cheaper than you expected for the price you paid.",
        "Since the delivery it has been sitting in its box, and you've realized it isn't needed.",
        "Your partner took one look at it and vetoed it on the spot.",
        "Money is tight after an unexpected car repair, and this purchase is an easy thing to "
        "undo.",
        "You were excited when it arrived, but the excitement faded quickly after trying it.",
        "Shortly after it arrived, you found something better suited to your needs somewhere else.",
        "The finish has a flaw that's impossible to ignore every time you look at it.",
        "Your plans for it fell through, so it has no real purpose in your home now.",
        "Honestly, it was an impulse buy, and the impulse has worn off.",
        "Nobody in your household has touched it since it came out of the box.",
    ],
    "exchange_item": [
        "You like the product itself, but the version you picked turned out to be the wrong "
        "choice.",
        "Next to everything else in your home, the variant you chose looks out of place.",
        "Your partner loves the item but strongly prefers a different version of it.",
        "You ordered in a hurry and clicked the wrong option without noticing.",
        "After trying it out, you're sure another variant of the same thing fits your routine "
        "better.",
        "The gift was a hit, but your niece wishes it were a slightly different version.",
        "A friend has the same product in another variant, and seeing them side by side changed "
        "your mind.",
        "Nothing is wrong with it, but the version you received isn't quite right for the way you "
        "use it.",
        "You second-guessed your choice at checkout and regret not going with your first instinct.",
        "Reading the reviews again, you learned that another variant suits your needs better.",
        "The version you got clashes with the rest of your setup at home.",
        "Your roommate pointed out that a different variant would make far more sense for how you "
        "live.",
        "Since it arrived, it's clear the product is great but the specific option is off.",
    ],
    "answer": [
        "A package you were expecting hasn't shown up, and you're wondering where it is.",
        "Your credit card statement shows a charge from this store that you can't quite place.",
        "Before buying something similar, you're curious what your earlier order cost.",
        "A vague delivery notice on your door left more questions than answers.",
        "Your memory of what exactly you ordered is a little fuzzy, and the email is long gone.",
        "You're organizing receipts for your records, and some details are missing.",
        "The tracking page hasn't updated in a while, and you're getting a bit anxious.",
        "Every evening your spouse asks about something you ordered, and you've run out of "
        "guesses.",
        "Out of habit, you're double-checking your account before the end of the month.",
        "Your accountant wants a record of your recent purchases for a business expense claim.",
        "Something on your account page doesn't look the way you remember it.",
        "Halfway through planning a party, you're checking on the things you bought for it.",
        "You're settling an argument with your brother about what you actually paid.",
    ],
    "transfer": [
        "A package marked delivered never reached your doorstep, and you're tired of waiting "
        "around.",
        "Your last order showed up crushed, and you're convinced the store owes some kind of "
        "compensation.",
        "The price dropped right after you bought, and you feel entitled to the difference.",
        "A delivery driver was rude on your doorstep, and you're not letting it go.",
        "An item you sent back ages ago still hasn't been refunded, and your patience has run out.",
        "Chat bots have been going in circles with your issue, and you're done being polite about "
        "it.",
        "The product broke well outside the return window, and you think the store should stand "
        "behind it.",
        "Your account was charged for something you never ordered, and you're alarmed.",
        "A promotion advertised in an email didn't apply at checkout, and you feel misled.",
        "You're furious that a return was refused over what feels like a technicality.",
        "Someone else seems to have used your account, and you're worried about its security.",
        "Buying in bulk for your whole office goes well beyond what a normal order allows.",
        "After a frustrating run of broken promises from the store, you're demanding to speak with "
        "someone senior.",
    ],
}
# Other ways to say the recurring parts of a goal (`synthesis.scenario.rephrase`): a regex
# and its replacements, the first the original wording; groups keep every value.
PHRASINGS: list[tuple[str, list[str]]] = [
    (r"\border (\d+ units?) of ",
     [r"order \1 of ", r"buy \1 of ", r"place an order for \1 of ", r"get \1 of "]),
    (r", paying with ", [", paying with ", ", charged to ", ", and pay with ", ", using "]),
    (r" \(you would prefer (.+?) if there are enough in stock; otherwise this one is fine\)",
     [r"; \1 would be better for you if there are enough in stock, but otherwise this one is fine",
      r"; you had your eye on \1, if enough are in stock; otherwise this one is fine",
      r"; ideally you would get \1 instead, if enough are in stock, but if not, this one will do"]),
    (r" \(you would rather pay with (.+?) if possible\)",
     [r"; if possible, you'd rather pay with \1 instead",
      r"; you would like to pay with \1, if that works",
      r"; \1 would be your first choice for paying, if possible"]),
    (r"\bcancel (your [^;]+?) because you ",
     [r"cancel \1 because you ", r"cancel \1, as you ", r"call off \1 since you ",
      r"have \1 cancelled because you "]),
    (r"\bhave (your [^;]+?) shipped to ([^;]+?) instead\b",
     [r"have \1 shipped to \2 instead", r"get \1 sent to \2 instead",
      r"change the shipping address of \1 to \2", r"redirect \1 to \2"]),
    (r"\breturn (\d+ units?|the \d+ remaining units|all the units) of ",
     [r"return \1 of ", r"send back \1 of ", r"ship back \1 of "]),
    (r", with the refund going to ",
     [", with the refund going to ", ", refunded to ", ", with the money going back to ",
      ", and have the refund sent to "]),
    (r" \(you would rather get it on (.+?) if that is allowed\)",
     [r"; if that is allowed, you'd rather have the refund on \1 instead",
      r"; you would like the money back on \1, if that is allowed",
      r"; \1 would be better for you for the refund, if that is allowed"]),
    (r"\bexchange (\d+ units? of )?(?=the )", [r"exchange \1", r"swap \1", r"trade in \1"]),
    (r", settling any price difference with ",
     [", settling any price difference with ", ", with any price difference settled using ",
      ", and settle any difference in price with "]),
    (r"; if that is not possible, you do not want anything else changed",
     ["; if that is not possible, you do not want anything else changed",
      "; if that can't be done, you don't want any other changes made",
      "; if it turns out not to be possible, everything else should stay as it is",
      "; should that not be possible, you want nothing else changed"]),
    (r"; and ", ["; and ", "; you also want to ", "; on top of that, you want to ", ", and you also want to "]),
]


def lookup(keys: list[str], known: dict[str, Any]) -> ToolCall | None:
    """The identity lookup of a customer who identifies with `keys`: by email, or by name and
    zip code (the name split at its first space into first and last name)."""
    if keys == ["email"] and known.get("email"):
        return ToolCall(name="find_customer_by_email", arguments={"email": str(known["email"])})
    if keys == ["name", "zip code"] and known.get("name") and known.get("zip code"):
        first, _, last = str(known["name"]).strip().partition(" ")
        if first and last:
            return ToolCall(name="find_customer_by_name_zip",
                            arguments={"first_name": first, "last_name": last, "zip_code": str(known["zip code"])})
    return None


def mentions(conn: sqlite3.Connection, table: str, row: dict[str, Any]) -> list[str]:
    """How a record is named to a customer."""
    if table == "payment_methods":
        return {"credit_card": [row["last4"] or ""], "gift_card": ["gift card"], "paypal": ["PayPal"]}[row["kind"]]
    if table == "variants":
        v = kit.one(conn, "SELECT p.name FROM variants v JOIN products p USING (product_id) WHERE variant_id = ?",
                    row["variant_id"])
        return [v["name"]]
    if table == "orders":
        return [row["order_id"]]
    return []


def phrase(conn: sqlite3.Connection, table: str, row: dict[str, Any]) -> str | None:
    """How a customer names a record in a request: an item by its product and options, a
    product by its name, a payment method by its card digits or kind."""
    if table == "variants":
        return item_phrase(conn, row["variant_id"])
    if table == "products":
        return f"the {row['name']}"
    if table == "payment_methods":
        return payment_phrase(conn, row["payment_id"]).replace("your ", "my ", 1)
    return None


def _pay(conn: sqlite3.Connection, payment_id: str) -> str:
    return payment_phrase(conn, payment_id).replace("your ", "the ", 1)


def _items(conn: sqlite3.Connection, variant_ids: list[str], quantities: list[int]) -> tuple[str, int]:
    words, total = [], 0
    for v, q in zip(variant_ids, quantities, strict=True):
        price = kit.one(conn, "SELECT price FROM variants WHERE variant_id = ?", v)["price"]
        total += price * int(q)
        words.append(f"{q} × {item_phrase(conn, v)[4:]} at {price} each")
    return ", ".join(words), total


def action(conn: sqlite3.Connection, call: ToolCall) -> list[str]:
    """Realisations of the plan for one write, with the amounts it moves."""
    a = call.arguments
    if call.name == "place_order":
        items, total = _items(conn, list(a["variant_ids"]), list(a["quantities"]))
        pay = _pay(conn, a["payment_id"])
        return [f"place an order for {items}, {total} in total, charged to {pay}",
                f"order {items} for a total of {total}, paid with {pay}"]
    if call.name == "cancel_pending_order":
        o = kit.one(conn, "SELECT * FROM orders WHERE order_id = ?", a["order_id"])
        pay = _pay(conn, o["payment_id"])
        return [f"cancel order {o['order_id']} ({a['reason']}) and refund its {o['total']} to {pay}",
                f"cancel {o['order_id']}; the {o['total']} you paid goes back to {pay}"]
    if call.name == "modify_order_address":
        return [f"change the shipping address of order {a['order_id']} to {a['address']}",
                f"ship order {a['order_id']} to {a['address']} instead"]
    if call.name == "return_item":
        line = kit.one(conn, "SELECT * FROM order_items WHERE order_id = ? AND variant_id = ?", a["order_id"],
                       a["variant_id"])
        refund = line["unit_price"] * int(a["quantity"])
        item = item_phrase(conn, a["variant_id"])
        pay = _pay(conn, a["refund_payment_id"])
        return [f"return {a['quantity']} × {item[4:]} from order {a['order_id']} and refund {refund} to {pay}",
                f"process the return of {count_of(a['quantity'], 'unit')} of {item} from {a['order_id']}: {refund} back"
                f" to {pay}"]
    if call.name == "exchange_item":
        line = kit.one(conn, "SELECT * FROM order_items WHERE order_id = ? AND variant_id = ?", a["order_id"],
                       a["variant_id"])
        new = kit.one(conn, "SELECT price FROM variants WHERE variant_id = ?", a["new_variant_id"])
        diff = (new["price"] - line["unit_price"]) * int(a["quantity"])
        pay = _pay(conn, a["payment_id"])
        money = (f"the difference of {diff} is charged to {pay}" if diff > 0 else
                 f"the difference of {-diff} is refunded to {pay}" if diff < 0 else
                 f"at no price difference, so nothing is charged to {pay}")
        return [f"exchange {a['quantity']} × {item_phrase(conn, a['variant_id'])[4:]} in order {a['order_id']} for "
                f"{item_phrase(conn, a['new_variant_id'])[4:]}; {money}"]
    return [call.name.replace("_", " ")]


def facts(before: sqlite3.Connection, after: sqlite3.Connection, call: ToolCall, result: Any) -> list[Fact]:
    """What the customer must hear: the new order number, the money charged or refunded."""
    a = call.arguments
    if call.name == "place_order":
        return [id_fact("order number", result["order_id"]), amount_fact("amount charged", result["total"])]
    if call.name == "cancel_pending_order":
        return [amount_fact("amount refunded", result["total"])]
    if call.name == "modify_order_address":
        return [Fact(label="new address", any_of=[result["address"]], kind="text")]
    if call.name == "return_item":
        new = [r for r in result["returns"] if r["variant_id"] == a["variant_id"]][-1]
        return [id_fact("return id", new["return_id"]), amount_fact("amount refunded", new["amount"])]
    if call.name == "exchange_item":
        new = [r for r in result["exchanges"] if r["variant_id"] == a["variant_id"]][-1]
        diff = new["price_difference"]
        money = [amount_fact("amount charged" if diff > 0 else "amount refunded", diff)] if diff else []
        return [id_fact("exchange id", new["exchange_id"]), *money]
    return []


def report(conn: sqlite3.Connection, call: ToolCall, result: Any, facts: list[Fact]) -> list[str]:
    a = call.arguments
    if call.name == "place_order":
        return [f"Your order {result['order_id']} is placed: {result['total']} was charged to {_pay(conn, result['payment_id'])}.",
                f"Order {result['order_id']} is placed and pending; the total of {result['total']} "
                f"was charged to {_pay(conn, result['payment_id'])}."]
    if call.name == "cancel_pending_order":
        return [f"Order {result['order_id']} is cancelled and {result['total']} is refunded to "
                f"{_pay(conn, result['payment_id'])}."]
    if call.name == "modify_order_address":
        return [f"Order {result['order_id']} will now ship to {result['address']}."]
    said = {f.label: f.any_of[0] for f in facts}
    if call.name == "return_item":
        amount = said.get("amount refunded", "the price paid")
        pay = _pay(conn, a["refund_payment_id"])
        return [f"The return {said.get('return id', '')} is registered and {amount} will be refunded to {pay}.",
                f"Your return number is {said.get('return id', '')}; {amount} will be refunded to {pay}."]
    if call.name == "exchange_item":
        money = next((f"{f.any_of[0]} was {'charged to' if 'charged' in f.label else 'refunded to'} "
                      f"{_pay(conn, a['payment_id'])}" for f in facts if f.kind == "amount"),
                     "there is no price difference")
        return [f"The exchange {said.get('exchange id', '')} is registered; {money}.",
                f"Your exchange number is {said.get('exchange id', '')}; {money}."]
    return []


def preference(conn: sqlite3.Connection, call: ToolCall, wanted: dict[str, Any]) -> tuple[list[ToolCall], str] | None:
    """When an order does not take the customer's preferred item or payment method, or a
    return cannot be refunded where they asked: the read that shows why, and the sentence
    that says so before the plan."""
    a = call.arguments
    if call.name == "return_item" and (dest := wanted.get("preferred_refund")) and dest != a.get("refund_payment_id"):
        order = kit.one(conn, "SELECT * FROM orders WHERE order_id = ?", a["order_id"])
        said = _pay(conn, dest)
        return ([ToolCall(name="get_order_details", arguments={"order_id": a["order_id"]})],
                f"A return is refunded to the order's original payment method, or to a gift card of yours;"
                f" {said} did not pay for order {order['order_id']}, so the refund cannot go there.")
    if call.name != "place_order":
        return None
    vid, pay_id = wanted.get("preferred_variant"), wanted.get("preferred_payment")
    if vid and vid not in a.get("variant_ids", []):
        v = kit.one(conn, "SELECT v.*, p.name FROM variants v JOIN products p USING (product_id) WHERE variant_id = ?",
                    vid)
        q = max(a.get("quantities") or [1])
        return ([ToolCall(name="get_product_details", arguments={"product_id": v["product_id"]})],
                f"The {item_phrase(conn, vid)[4:]} you preferred has only {v['stock']} in stock, not enough"
                f" for {q}.")
    if pay_id and pay_id != a.get("payment_id"):
        p = kit.one(conn, "SELECT * FROM payment_methods WHERE payment_id = ?", pay_id)
        if p["customer_id"] != a.get("customer_id"):
            return [], ("The gift card you mentioned belongs to your other account, and an order can only be paid"
                        " with a payment method of the account that places it.")
        return [], f"Your {p['kind'].replace('_', ' ')} has a balance of {p['balance']:g}, which does not cover this order."
    return None


def grounding(conn: sqlite3.Connection, call: ToolCall, known: dict[str, str]) -> list[ToolCall]:
    """Reads that show a call's ids: the order's details (not of an order the conversation
    is placing: its own write's result shows it), and the products of new items (a product
    by its category's list)."""
    a = call.arguments
    out: list[ToolCall] = []
    if "order_id" in a and conn.execute("SELECT 1 FROM orders WHERE order_id = ?", (a["order_id"],)).fetchone():
        out.append(ToolCall(name="get_order_details", arguments={"order_id": a["order_id"]}))
    if "product_id" in a:  # a product read: the product is shown by its category's list
        row = kit.one(conn, "SELECT category FROM products WHERE product_id = ?", a["product_id"])
        out.append(ToolCall(name="list_products", arguments={"category": row["category"]}))
    variants = list(a.get("variant_ids") or []) + ([a["new_variant_id"]] if a.get("new_variant_id") else [])
    for v in variants:
        row = kit.one(conn, "SELECT p.product_id, p.category FROM variants v JOIN products p USING (product_id)"
                            " WHERE variant_id = ?", v)
        out.append(ToolCall(name="list_products", arguments={"category": row["category"]}))
        out.append(ToolCall(name="get_product_details", arguments={"product_id": row["product_id"]}))
    return out


def reason_key(call: ToolCall) -> str | None:
    """The ``REASONS`` key for `call` when its own tool's bank would not fit: an order of
    several items or several units of one takes the "several" bank (the plain bank speaks
    of one thing: a gift, a replacement)."""
    if call.name == "place_order":
        quantities = [int(q) for q in call.arguments.get("quantities") or [1]]
        if len(quantities) > 1 or sum(quantities) > 1:
            return "place_order:several"
    return None
