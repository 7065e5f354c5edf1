"""Stated facts: every amount, id and date the agent tells the user must be supported.

An assistant message's text is read for the facts it states (`stated`):

- dates, in any form `envs.conversation.dates_in` reads (2026-05-13, May 13, 05/13/2026);
- ids: tokens with letters and digits, four characters or more ("HAT123", "#W2378156",
  "AC100027"), not times, ordinals or sizes ("10am", "3rd", "20GB");
- amounts and other numbers, once dates, ids and times are taken out: every number above 10,
  and any number that a money word (a currency sign, fee, charge, refund, discount, total,
  credit, balance, cost, price...) within three words of its clause, or a percent sign,
  goes with.

A fact is supported (`unsupported` returns those that are not) when what came before the
message shows it (an amount said with a money word must have been shown as money: under a
tool result's price, balance, fee... key, or in the words of the user or the policy): the system prompt (the policy's own numbers), the user's messages and the
tool results so far, and what the verifier knows the conversation must establish (the
task's facts to communicate, the amounts the trajectory's writes moved, read from the
world's ledger). An amount may also be the sum or difference of two of the amounts moved,
their total, or, where the agent speaks of a balance (balance, remaining, left,
owed), an amount moved taken from or added to a money figure a tool result gave (a card's
balance after the charge),
or the sum of all the writes moved (a total over two items). A
fact the agent invents (a fee nobody charged, a discount no tool gave, a reservation id no
result returned) is unsupported wherever it appears: in a plan, a report or an answer.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from itertools import combinations
from typing import Any

from envs.conversation import dates_in, normalize, numbers_in, tool_result
from verifiers.communicate import message_text

_MONTH = r"(?:jan|feb|mar|apr|may|jun|jul|aug|sep|sept|oct|nov|dec)[a-z]*\.?"
_DATE_SPANS = re.compile(
    r"\b\d{4}-\d{1,2}-\d{1,2}(?:[T ]\d{1,2}:\d{2}(?::\d{2})?)?\b|\b\d{1,2}[/.-]\d{1,2}[/.-]\d{4}\b|\b\d{4}[/.]\d{1,2}[/.]\d{1,2}\b|"
    rf"\b{_MONTH}\s+\d{{1,2}}(?:st|nd|rd|th)?(?:,?\s+\d{{4}})?\b|"
    rf"\b\d{{1,2}}(?:st|nd|rd|th)?\s+(?:of\s+)?{_MONTH}(?:,?\s+\d{{4}})?\b",
    re.I)
_CARD = re.compile(r"\b(?:ending|ends) (?:in|with):? #?(\d{2,6})\b|\blast (?:four|4)(?: digits)?:? (\d{4})\b", re.I)
_MONTH_OF_YEAR = re.compile(r"\b\d{4}-\d{1,2}\b")  # "the 2026-05 bill": a month, no amount
_TIME = re.compile(r"\b\d{1,2}(?::\d{2})+\s*(?:[ap]\.?m\.?)?|\b\d{1,2}\s*[ap]\.?m\.?(?![a-z])", re.I)
_ID = re.compile(r"#?[A-Za-z0-9][A-Za-z0-9_#-]*[A-Za-z0-9]")
_NOT_ID = re.compile(r"^\d+(?:st|nd|rd|th|am|pm|[a-z]{1,3})$|^[a-z]+-\d+$", re.I)  # 3rd, 10am, 20gb, covid-19
_NUMBER = re.compile(r"(?<![\w.])([-+]?\$?\d[\d,]*(?:\.\d+)?)(\s*%)?(?![\w])")
_MONEY = re.compile(r"\$|€|£|\b(?:usd|dollars?|fees?|charged?|charges|refund(?:ed|s)?|discount(?:ed|s)?|total|credit(?:ed|s)?|"
                    r"balance|cost(?:s)?|price[ds]?|paid|pay(?:ment)?|amount|owe[ds]?|due|penalty|compensation|"
                    r"voucher|surcharge|rebate|cashback|bill(?:ed)?|copay|deposit)\b", re.I)


@dataclass(frozen=True)
class Fact:
    """One fact a message states."""

    kind: str  # "amount", "id" or "date"
    text: str  # as written
    value: str  # the number, the id (lower case) or the date (YYYY-MM-DD or MM-DD)
    context: str = ""  # the words around an amount in its clause


def _is_id(token: str) -> bool:
    t = token.lstrip("#")
    return (len(t) >= 4 and any(c.isdigit() for c in t) and any(c.isalpha() for c in t)
            and not _NOT_ID.match(t))


@lru_cache(maxsize=4096)
def stated(text: str) -> tuple[Fact, ...]:
    """The dates, ids and amounts `text` states (see the module docstring)."""
    facts: list[Fact] = []
    rest = text or ""
    for m in _DATE_SPANS.finditer(rest):
        for d in sorted(dates_in(m.group(0))):
            if len(d) == 10 or not any(x.endswith(d) and len(x) == 10 for x in dates_in(m.group(0))):
                facts.append(Fact("date", m.group(0), d))
    rest = _MONTH_OF_YEAR.sub(" ", _TIME.sub(" ", _DATE_SPANS.sub(" ", rest)))
    for m in _CARD.finditer(rest):  # "ending in 0647": a card's digits, an id rather than an amount
        digits = m.group(1) or m.group(2)
        facts.append(Fact("id", digits, digits))
    rest = _CARD.sub(" ", rest)
    for m in _ID.finditer(rest):
        if _is_id(m.group(0)):
            facts.append(Fact("id", m.group(0), normalize(m.group(0).lstrip("#"))))
    rest = _ID.sub(lambda m: " " if _is_id(m.group(0)) else m.group(0), rest)
    for m in _NUMBER.finditer(rest):
        raw = m.group(1).replace("$", "").replace(",", "")
        try:
            value = abs(float(raw))
        except ValueError:
            continue
        before = re.split(r"[,;.!?:()]\s", rest[max(0, m.start() - 40): m.start()])[-1].split()[-3:]
        after = re.split(r"[,;.!?:()]\s|[,;.!?:]$", rest[m.end(): m.end() + 40])[0].split()[:3]
        window = " ".join(before + [m.group(0)] + after)
        if value > 10 or m.group(2) or _MONEY.search(window):
            facts.append(Fact("amount", m.group(0).strip(), f"{value:g}", window.lower()))
    return tuple(facts)


class Support:
    """What a conversation has shown so far, grown message by message."""

    def __init__(self, known: Iterable[str] = (), amounts: Iterable[float] = ()) -> None:
        self.texts: list[str] = []
        self.numbers: set[float] = set()
        self.dates: set[str] = set()
        self.yearless: set[str] = set()  # dates shown without a year ("May 12"), as MM-DD
        self.amounts = {round(abs(a), 2) for a in amounts}
        self.money: set[float] = set()  # money figures: under a tool result's money keys, or said in words
        self._derived: set[float] | None = None
        for t in known:
            self.add(t)

    def add(self, text: str, role: str = "user") -> None:
        """Count `text` as shown. A tool result's money figures (the numbers under a price,
        balance, fee... key) may be combined with what the writes moved (`balance_after`);
        no other shown number is added up (a conversation's many numbers would make any
        small sum, and so any invented fee)."""
        if not text:
            return
        norm, found, money, dates = _read(text, role == "tool")
        self.texts.append(norm)
        self.numbers |= found
        self.money |= money
        self.dates |= dates
        self.yearless |= {d for d in dates if len(d) == 5} - {d[5:] for d in dates if len(d) == 10}
        self._derived = None

    @property
    def derived(self) -> set[float]:
        """The sums and differences of two amounts the writes moved, and the sum of all."""
        if self._derived is None:
            out = {round(sum(self.amounts), 2)}
            for a, b in combinations(sorted(self.amounts), 2):
                out.add(round(a + b, 2))
                out.add(round(abs(a - b), 2))
            self._derived = out
        return self._derived

    def balance_after(self, value: float) -> bool:
        """Whether `value` is a money figure a tool result gave, less or plus what a write
        moved (a card's balance after the charge)."""
        return any(abs(round(n - a, 2)) == value or round(n + a, 2) == value for a in self.amounts for n in self.money)

    def supports(self, fact: Fact) -> bool:
        if fact.kind == "date":
            full = {d for d in self.dates if len(d) == 10}
            if len(fact.value) == 10:
                return fact.value in full or fact.value[5:] in self.yearless
            # a date said without its year is of these days: a shown date years back (a
            # customer's start date, a birthday) does not support "it arrives on August 7"
            recent = int(max(d[:4] for d in full)) - 1 if full else 0
            return fact.value in self.yearless or any(d[5:] == fact.value and int(d[:4]) >= recent for d in full)
        if fact.kind == "id":
            pattern = _word(fact.value)
            return any(fact.value in t and pattern.search(t) for t in self.texts)
        value = round(float(fact.value), 2)
        if value in self.amounts or value in self.money:
            return True
        if value in self.numbers and not _MONEY.search(fact.context):
            return True  # a count or a size any result shows; money must be shown as money
        digits = fact.value.split(".")[0]
        if (len(digits) >= 4 and float(fact.value).is_integer()
                and any(digits in t and _digits(digits).search(t) for t in self.texts)):
            return True  # said inside a longer code: a card's last four digits
        if value in self.derived:
            return True
        return bool(_BALANCE.search(fact.context)) and self.balance_after(value)


@lru_cache(maxsize=8192)  # the policy, tool results and replies recur across a run's trajectories
def _read(text: str, tool: bool) -> tuple[str, frozenset[float], frozenset[float], frozenset[str]]:
    """(normalized text, numbers, money figures, dates) of one message."""
    found = frozenset(round(abs(x), 2) for x in numbers_in(text))
    body = tool_result(text) if tool else None
    money = frozenset(_money_values(body)) if isinstance(body, (dict, list)) else found
    return normalize(text), found, money, dates_in(text)


_BALANCE = re.compile(r"balance|remain|left|leav|keeps?|still|outstanding|owe", re.I)
_MONEY_KEY = re.compile(r"price|balance|amount|total|paid|fee|cost|charge|refund|credit|owed|due|rate|fare|copay",
                        re.I)


def _money_values(body: Any, key: str = "") -> set[float]:
    """The numbers of a JSON tool result that sit under a money key (at any depth)."""
    if isinstance(body, dict):
        return {x for k, v in body.items() for x in _money_values(v, str(k))}
    if isinstance(body, list):
        return {x for v in body for x in _money_values(v, key)}
    if isinstance(body, (int, float)) and not isinstance(body, bool) and _MONEY_KEY.search(key):
        return {round(abs(float(body)), 2)}
    return set()


@lru_cache(maxsize=4096)
def _word(value: str) -> re.Pattern[str]:
    return re.compile(r"(?<![a-z0-9])" + re.escape(value) + r"(?![a-z0-9])")


@lru_cache(maxsize=4096)
def _digits(value: str) -> re.Pattern[str]:
    return re.compile(rf"(?<!\d){value}(?!\d)")


def unsupported(messages: Sequence[dict[str, Any]], known: Iterable[str] = (),
                amounts: Iterable[float] = ()) -> list[tuple[int, Fact]]:
    """(message index, fact) of every fact an assistant message states that nothing before it
    supports (`known`: texts the verifier knows to be true; `amounts`: what the writes moved)."""
    support = Support(known, amounts)
    out: list[tuple[int, Fact]] = []
    for i, m in enumerate(messages):
        text = message_text(m)
        if m.get("role") == "assistant":
            out += [(i, f) for f in stated(text) if not support.supports(f)]
            # what the agent said stays its own claim; it is not support for later messages
        else:
            support.add(text, str(m.get("role")))
    return out
