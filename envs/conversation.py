"""How a world's conversations with its users go: who the user is and how they identify
themselves, the working rules of the policy that a `policy` verifier checks over a
trajectory ("clauses"), how records and actions are said to a user, and what the user must
be told after a change. `verifiers/policy.py` and `verifiers/communicate.py` judge by it;
`synthesis/dialogue.py` writes reference conversations with it.

A world's folder may hold a ``conversation.py`` with:

- ``IDENTITY``: an `Identity` (`envs/contract.py`: the known-info keys a user identifies
  with, the lookups that establish who they are, fields they must confirm such as a date of
  birth, the names of their account id); the agent's default question, the scripted user's
  answers and the policy verifier's identity checks all derive from it;
- ``CLAUSES``: the clause names (`CLAUSES` below) its policy states;
- ``RULE_TERMS``: rule id -> phrases of the policy that state the rule (a refusal must say one);
- ``ALTERNATIVES``: rule id -> what the agent may offer instead (optional);
- ``ASK_IDENTITY``: realisations of the agent's identity question;
- ``mentions(conn, table, row) -> list[str]``: how a record is named to a user (a flight's
  number, a card's last digits), used to tell whether an announcement names a write's records;
- ``action(conn, call) -> list[str]``: realisations of "what I am about to do" for a write;
- ``facts(before, after, call, result) -> list[Fact]``: what the user must be told after a
  successful write (ids created, amounts charged or refunded, new dates);
- ``report(conn, call, result, facts) -> list[str]``: realisations of what a write did, saying
  its facts (a realisation that misses one is not used);
- ``grounding(conn, call, known) -> list[ToolCall]``: reads that show a write's ids;
- ``USER_FACING_IDS``: the id columns a real user knows and may say (their account id, a
  reservation code); once declared, every other single-column ``*_id`` key of the world's
  tables is internal (payment, slot, flight-instance, plan and add-on codes) and must never appear in
  what a task tells the user (`leaked_ids`).
- ``phrase(conn, table, row) -> str | None``: how a user names a record in a sentence, without
  its internal id ("your credit card ending in 1885", "flight HAT012 on May 14", "the
  Unlimited plan"), used to say a generated request in a user's words (`user_words`);
  without it, a record's first `mentions` name is used;
- ``lookup(keys, known) -> ToolCall | None``: the identity lookup of a user who identifies
  with the known-info `keys` (one of ``IDENTITY.keys``: by name and zip code rather than by
  email, say), its arguments from their `known` info (`identity_lookup`).

Every hook has a generic fallback here, so a world without the file still gets checked.
The hooks and their shapes are declared in `envs/contract.py`, which checks a world's file
when the world is registered.
Text helpers (`mentions_value`, `is_affirmative`, `claims_success`, ...) are deterministic.
"""

from __future__ import annotations

import json
import re
import sqlite3
from dataclasses import dataclass
from datetime import date
from functools import lru_cache
from types import ModuleType
from typing import Any

from data.records import Fact, ToolCall
from envs.contract import ACCOUNT_KEYS, Identity, declared, hook
from envs.dialogue_acts import (  # noqa: F401  (the text checks' home; re-exported for their users)
    asks_confirmation,
    claims_change,
    claims_success,
    is_affirmative,
    is_decline,
    reply_act,
    signals_refusal,
    states_rule,
)
from envs.loader import load_module
from envs.state import primary_key, tables
from envs.tools import ToolSpec

# The working rules a policy can state, in the order the policy verifier checks them.
CLAUSES = {
    "identity": "the user is identified (a lookup with what they said) before the first write",
    "confirm_identity": "the user confirms the identity fields the policy names (e.g. date of birth) before the first write",
    "grounded_arguments": "every record id or amount in a write appeared earlier, in a user message or a tool result",
    "announce_and_confirm": "each write follows an agent message stating it with its values and a user reply that confirms it",
    "no_write_after_decline": "no write after the user declined, unless they confirmed again",
}
DEFAULT_CLAUSES = ["identity", "grounded_arguments", "announce_and_confirm", "no_write_after_decline"]


@dataclass
class Conversation:
    """A world's conversation contract, with the generic fallbacks filled in."""

    world: str
    identity: Identity
    clauses: list[str]
    rule_terms: dict[str, list[str]]
    alternatives: dict[str, str]
    ask_identity: list[str]
    module: ModuleType | None
    user_facing_ids: list[str] | None = None  # None: the world declares none, ids go unchecked

    def hook(self, name: str) -> Any:
        """The world's ``conversation.py`` hook `name` (None without it); only names the world
        contract declares for ``conversation.py`` (`envs.contract.hook`)."""
        return hook(self.module, name) if self.module is not None else _declared(name)


def _declared(name: str) -> None:
    declared(name, "conversation.py")  # a name the contract does not declare fails without the file too
    return None


def conversation(world: Any) -> Conversation:
    """The conversation contract of `world` (its ``conversation.py``, else the defaults)."""
    return _conversation(world.name, str(getattr(world, "folder", "")))


def default_identity(world_name: str) -> Identity:
    """For a world without ``IDENTITY``: the user identifies with an account id (a read tool's
    argument named like one), established by the read tools that take it."""
    from envs.registry import get_world

    tools = getattr(get_world(world_name), "tools", {})
    lookups = {t.name: [p] for t in tools.values() if not t.write
               for p in t.params if p in ACCOUNT_KEYS and len(t.params) == 1}
    keys = sorted({p for ps in lookups.values() for p in ps})
    return Identity(keys=[[k] for k in keys] or [["user_id"]], lookups=lookups)


def world_identity(name: str) -> Identity | None:
    """The identity vocabulary of the registered world `name` (None: no such world)."""
    from envs.registry import get_world

    try:
        world = get_world(name)
    except KeyError:
        return None
    return conversation(world).identity


@lru_cache(maxsize=64)
def _conversation(name: str, folder: str) -> Conversation:
    from pathlib import Path

    path = Path(folder) / "conversation.py" if folder else None
    module = load_module(path, name) if path is not None and path.exists() else None
    def g(key: str, default: Any) -> Any:
        if module is None:
            _declared(key)
            return default
        return hook(module, key, default)

    clauses = list(g("CLAUSES", DEFAULT_CLAUSES))
    unknown = sorted(set(clauses) - set(CLAUSES))
    if unknown:
        raise ValueError(f"world {name!r} declares unknown clauses {unknown}; known: {sorted(CLAUSES)}")
    identity = g("IDENTITY", None) or default_identity(name)
    # without ASK_IDENTITY the agent asks for the world's first identity key set ("your member id")
    ask = identity.question()
    return Conversation(world=name, identity=identity, clauses=clauses,
                        rule_terms=dict(g("RULE_TERMS", {})), alternatives=dict(g("ALTERNATIVES", {})),
                        ask_identity=list(g("ASK_IDENTITY", [ask])), module=module,
                        user_facing_ids=g("USER_FACING_IDS", None))


# -- ids a user never says ---------------------------------------------------------------------

_TOKEN = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.#/-]*[A-Za-z0-9]")


def internal_id_columns(conn: sqlite3.Connection, user_facing: list[str]) -> list[tuple[str, str]]:
    """(table, column) of every single-column ``*_id`` primary key not in `user_facing`."""
    out = []
    for (table,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name"):
        keys = [r[1] for r in conn.execute(f'PRAGMA table_info("{table}")') if r[5]]
        if len(keys) == 1 and keys[0].endswith("_id") and keys[0] not in user_facing:
            out.append((table, keys[0]))
    return out


def leaked_ids(world: Any, conn: sqlite3.Connection, texts: list[str]) -> list[str]:
    """The world-internal ids (see `internal_id_columns`) that `texts` state verbatim; none
    for a world that does not declare `USER_FACING_IDS` (e.g. one compiled from a policy)."""
    facing = conversation(world).user_facing_ids
    if facing is None:
        return []
    columns = internal_id_columns(conn, list(facing))
    tokens = sorted({t.strip(".#/-") for text in texts for t in _TOKEN.findall(text or "")
                     if any(c.isdigit() or c == "_" for c in t)})
    return [tok for tok in tokens if any(
        conn.execute(f'SELECT 1 FROM "{table}" WHERE "{col}" = ? LIMIT 1', (tok,)).fetchone()
        for table, col in columns)]


def _norm_key(key: str) -> str:
    return key.strip().lower().replace(" ", "_")


def record_phrase(conv: Conversation, conn: sqlite3.Connection, table: str, row: dict[str, Any]) -> str | None:
    """How a user names a record (the world's `phrase` hook, else its first `mentions` name)."""
    hook = conv.hook("phrase")
    if callable(hook):
        return hook(conn, table, row)
    names = conv.hook("mentions")
    found = names(conn, table, row) if callable(names) else []
    first = found[0] if found else None
    return " ".join(str(p) for p in first) if isinstance(first, tuple) else (str(first) if first else None)


def user_words(world: Any, conn: sqlite3.Connection, text: str) -> str:
    """`text` with every world-internal id it states (`leaked_ids`) replaced by how a user
    names that record (`record_phrase`); an id without a phrase stays, for the leak check."""
    conv = conversation(world)
    for tok in leaked_ids(world, conn, [text]):
        found = record_of(conn, tok)
        words = record_phrase(conv, conn, *found) if found is not None else None
        if words:
            text = re.sub(r"(?<![A-Za-z0-9_])" + re.escape(tok) + r"(?![A-Za-z0-9_])", lambda _m, w=words: w, text)
    return text


def identity_values(conv: Conversation, keys: list[str], account: dict[str, Any], account_key: str) -> dict[str, str]:
    """The known info of the account holder `account` (a row of the world's account table)
    for the identity key set `keys`: each key read from the column of its name (a "name" from
    first and last name, a "zip code" from ``zip``, another account-id name from the account's
    key); {} when a key has no column."""
    out: dict[str, str] = {}
    for key in keys:
        k = _norm_key(key)
        if k in account and account[k] is not None:
            out[key] = str(account[k])
        elif k == "name" and account.get("first_name") and account.get("last_name"):
            out[key] = f"{account['first_name']} {account['last_name']}"
        elif (col := next((c for c in account if k.startswith(c + "_") and account[c] is not None), None)):
            out[key] = str(account[col])
        elif k in ACCOUNT_KEYS:
            out[key] = str(account[account_key])
        else:
            return {}
    return out


def identity_lookup(conv: Conversation, keys: list[str], known: dict[str, Any]) -> ToolCall | None:
    """The identity lookup of a user who identifies with the known-info `keys` (one of
    `IDENTITY.keys`), with arguments from their `known` info: the world's `lookup` hook, else
    the lookup whose identifying arguments are those keys (confirm fields aside); None when
    the world names none or the user does not know them."""
    hook = conv.hook("lookup")
    if callable(hook):
        return hook(list(keys), dict(known))
    norm = {_norm_key(k): str(v) for k, v in known.items()}
    want = sorted(_norm_key(k) for k in keys if _norm_key(k) not in {_norm_key(c) for c in conv.identity.confirm})
    for tool, args in conv.identity.lookups.items():
        if sorted(args) == want and all(a in norm for a in args):
            return ToolCall(name=tool, arguments={a: norm[a] for a in args})
    return None


# -- arguments that must be grounded ---------------------------------------------------------------

_AMOUNT_PARAM = re.compile(r"amount|price|balance|fee|total", re.I)


def grounded_params(spec: ToolSpec) -> list[str]:
    """The arguments of a write that name records or amounts: strings that are not enums
    (ids, addresses, free text the user gave) and numbers named like amounts."""
    out = []
    for name, prop in spec.parameters.get("properties", {}).items():
        kind = prop.get("type")
        free_text = kind == "string" and "enum" not in prop
        amount = kind in ("integer", "number") and bool(_AMOUNT_PARAM.search(name))
        id_list = kind == "array" and prop.get("items", {}).get("type") == "string"
        if free_text or amount or id_list:
            out.append(name)
    return out


def argument_values(value: Any) -> list[str]:
    """The leaf values of an argument as text (list items one by one)."""
    if isinstance(value, list):
        return [v for x in value for v in argument_values(x)]
    if isinstance(value, bool) or value is None:
        return []
    return [str(value)]


def record_of(conn: sqlite3.Connection, value: str) -> tuple[str, dict[str, Any]] | None:
    """(table, row) of the record whose one-column primary key is `value`, if any."""
    for table in tables(conn):
        pk = primary_key(conn, table)
        if len(pk) != 1 or table.startswith("_") or table in ("meta", "ledger"):
            continue
        cur = conn.execute(f'SELECT * FROM "{table}" WHERE "{pk[0]}" = ?', (value,))
        row = cur.fetchone()
        if row is not None:
            return table, dict(zip([d[0] for d in cur.description], row, strict=True))
    return None


def value_mentions(conv: Conversation, conn: sqlite3.Connection, value: str) -> list[str | tuple[str, ...]]:
    """Ways a user may be told about `value`: the value itself, plus how its record is named
    (the world's `mentions` hook; a tuple is a name made of parts that must all be said, such
    as a flight's number and its date)."""
    out: list[str | tuple[str, ...]] = [value]
    found = record_of(conn, value)
    hook = conv.hook("mentions")
    if found is not None and callable(hook):
        out += [m for m in hook(conn, *found) if m]
    return out


# -- text -----------------------------------------------------------------------------------------

_NUMBER = re.compile(r"(?<![\w.])[-+]?\$?\d[\d,]*(?:\.\d+)?(?![\w])")
_MONTHS = ["january", "february", "march", "april", "may", "june", "july", "august", "september", "october",
           "november", "december"]
_DATE_WORDS = re.compile(r"\b(" + "|".join(m[:3] for m in _MONTHS) + r")[a-z]*\.?\s+(\d{1,2})(?:st|nd|rd|th)?(?:,?\s+(\d{4}))?",
                         re.I)
_DAY_MONTH = re.compile(r"\b(\d{1,2})(?:st|nd|rd|th)?\s+(?:of\s+)?(" + "|".join(m[:3] for m in _MONTHS)
                        + r")[a-z]*\.?(?:,?\s+(\d{4}))?", re.I)
_ISO = re.compile(r"\b(\d{4})-(\d{2})-(\d{2})\b")
_NUMERIC_DATE = re.compile(r"(?<![\d/.-])(\d{1,2})[/.-](\d{1,2})[/.-](\d{4})(?![\d/-]|\.\d)")
_YEAR_FIRST = re.compile(r"(?<![\d/.-])(\d{4})[/.](\d{1,2})[/.](\d{1,2})(?![\d/-]|\.\d)")


@lru_cache(maxsize=512)  # a conversation's text is checked for many values in a row
def normalize(text: str) -> str:
    """Lower-cased, commas inside numbers dropped, whitespace collapsed."""
    text = re.sub(r"(?<=\d),(?=\d{3}\b)", "", text or "")
    return " ".join(text.lower().split())


@lru_cache(maxsize=512)
def numbers_in(text: str) -> frozenset[float]:
    out = set()
    for m in _NUMBER.finditer(text or ""):
        raw = m.group(0).replace("$", "").replace(",", "")
        try:
            out.add(float(raw))
        except ValueError:
            continue
    return frozenset(out)


@lru_cache(maxsize=512)
def dates_in(text: str) -> frozenset[str]:
    """Dates written in the text, as 'MM-DD' and 'YYYY-MM-DD' where a year is given: ISO,
    month names ("May 13", "13th of May"), and numbers (05/13/1990, 13.05.1990, 1990/05/13;
    a numeric date that reads both ways, 03/05/1990, gives both)."""
    out: set[str] = set()
    for y, mo, d in _ISO.findall(text or ""):
        out |= {f"{mo}-{d}", f"{y}-{mo}-{d}"}
    for y, mo, d in _YEAR_FIRST.findall(text or ""):
        out |= {f"{int(mo):02d}-{int(d):02d}", f"{y}-{int(mo):02d}-{int(d):02d}"}
    for a, b, y in _NUMERIC_DATE.findall(text or ""):  # 03/05/1990: month first, or day first where that reads
        for mo, d in ((int(a), int(b)), (int(b), int(a))):
            if 1 <= mo <= 12 and 1 <= d <= 31:
                out |= {f"{mo:02d}-{d:02d}", f"{y}-{mo:02d}-{d:02d}"}
    for mon, d, y in _DATE_WORDS.findall(text or ""):
        mm = [m[:3] for m in _MONTHS].index(mon.lower()[:3]) + 1
        out.add(f"{mm:02d}-{int(d):02d}")
        if y:
            out.add(f"{y}-{mm:02d}-{int(d):02d}")
    for d, mon, y in _DAY_MONTH.findall(text or ""):
        mm = [m[:3] for m in _MONTHS].index(mon.lower()[:3]) + 1
        out.add(f"{mm:02d}-{int(d):02d}")
        if y:
            out.add(f"{y}-{mm:02d}-{int(d):02d}")
    return frozenset(out)


_ISO_VALUE = re.compile(r"^\d{4}-\d{2}-\d{2}")


def mentions_name(text: str, name: str | tuple[str, ...]) -> bool:
    """Whether `text` names a record by `name` (every part of a tuple said)."""
    parts = name if isinstance(name, tuple) else (name,)
    return all(mentions_value(text, p) for p in parts)


def mentions_value(text: str, value: str) -> bool:
    """Whether `text` states `value`: numbers compare as numbers (520 = $520.00 = 520,00 is
    not), dates in any common form (2026-05-13 = May 13), anything else as a case-insensitive
    substring not inside a longer word."""
    value = str(value).strip()
    if not value:
        return False
    if re.fullmatch(r"[-+]?\$?\d[\d,]*(?:\.\d+)?", value):
        return float(value.replace("$", "").replace(",", "")) in numbers_in(text)
    if _ISO_VALUE.match(value):
        iso = value[:10]
        found = dates_in(text)
        return iso in found or iso[5:] in found
    pattern = r"(?<![a-z0-9])" + re.escape(normalize(value)) + r"(?![a-z0-9])"
    return re.search(pattern, normalize(text)) is not None


def said_alone(text: str, value: str) -> bool:
    """Whether `text` states `value` as a value of its own: not only inside a longer code
    (``AC100027`` inside ``bill_AC100027_2026-05`` is not the user saying their account); an
    id may be said with spaces or dashes inside it ("AC 100 027"); numbers and dates compare
    as `mentions_value` compares them."""
    v = normalize(str(value).strip())
    if not v:
        return False
    if re.fullmatch(r"[-+]?\$?\d[\d,]*(?:\.\d+)?", v) or _ISO_VALUE.match(v):
        return mentions_value(text, value)
    body = r"[\s-]?".join(re.escape(c) for c in v) if v.isalnum() else re.escape(v)
    return re.search(r"(?<![a-z0-9_])" + body + r"(?![a-z0-9_])", normalize(text)) is not None


def date_forms(iso: str) -> list[str]:
    """'2026-05-13' and 'May 13': how a date may be told."""
    d = date.fromisoformat(iso[:10])
    return [iso[:10], f"{_MONTHS[d.month - 1].title()} {d.day}"]


def tool_result(content: str) -> Any:
    """A tool message's JSON (None when it is not JSON)."""
    try:
        return json.loads(content)
    except (TypeError, ValueError):
        return None


def is_error_result(content: str) -> bool:
    body = tool_result(content)
    return isinstance(body, dict) and "error" in body and "code" in body


# -- facts ----------------------------------------------------------------------------------------

def amount_fact(label: str, amount: float) -> Fact:
    text = f"{abs(amount):g}" if float(amount).is_integer() else f"{abs(amount):.2f}"
    return Fact(label=label, any_of=[text], kind="amount")


def id_fact(label: str, value: str) -> Fact:
    return Fact(label=label, any_of=[str(value)], kind="id")


def rule_fact(conv: Conversation, rule: str) -> Fact:
    """The refusal's reason: one of the policy's phrases for `rule` (its `RULE_TERMS`)."""
    terms = conv.rule_terms.get(rule)
    if not terms:
        raise KeyError(f"world {conv.world!r} states no RULE_TERMS for {rule}")
    return Fact(label=f"the rule {rule}", any_of=list(terms), kind="rule")


def write_facts(conv: Conversation, before: sqlite3.Connection, after: sqlite3.Connection, call: ToolCall,
                result: Any) -> list[Fact]:
    """What the user must be told after a successful write (the world's `facts` hook)."""
    hook = conv.hook("facts")
    return list(hook(before, after, call, result)) if callable(hook) else []
