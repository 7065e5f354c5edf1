"""The Architect (LOGIGEN, methods.md §1): compile a natural-language policy into a world.

A `ChatModel` answers three structured requests (JSON objects):

1. **tables and rules**: ``{"tables": ["CREATE TABLE ..."], "rules": [{"id": "R01_NAME",
   "statement": "...", "enforcement": "trigger" | "check" | "foreign_key", "sql": [...]}]}``;
   a trigger raises ``RAISE(ABORT, 'R01_NAME: message')``, a CHECK is named
   ``CONSTRAINT R01_NAME CHECK (...)`` inside its table, a foreign-key rule names its
   ``"table"``, ``"column"`` and ``"references": "parent(column)"``;
2. **tools**: ``{"tools": [...]}`` in the shape of `envs/spec_world.py` (typed parameters,
   read or write, the SQL each tool runs);
3. **probes**: ``{"fixture": ["INSERT ..."], "probes": [{"rule", "violating": {"name",
   "arguments"}, "valid": {...}}]}``: one violating and one valid call per rule.

Then **check → repair → verify**: the schema is loaded statement by statement into real
SQLite, the tools are generated and loaded, the fixture is inserted and every probe runs
through `Env.call` (the violating call must be rejected with exactly its rule id, the valid
call must pass). Every failure (an SQL error, a wrong rule id, a probe that passes when it
should not) goes back to the model with its error text; the model answers with corrected
entries only, merged by rule id / tool name / probe rule. After `max_rounds` failed rounds
`ArchitectError` lists what still fails. A compiled domain is written as a world folder
(policy.md, schema.sql, tools.py, generator.py, design.py, probes.py, spec.json) that
`envs.world.World` loads and `envs.registry.register_world` registers.
"""

from __future__ import annotations

import asyncio
import json
import keyword
import re
import shutil
import sqlite3
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from data.records import Sampling
from envs.loader import forget, load_module
from envs.probes import ProbeSet, from_module, run_probes
from envs.rules import RULE_ID
from envs.spec_world import FK_REF, write_target
from envs.world import World
from rollout.model import ChatModel, ChatResponse

RULE_ID_FULL = re.compile(r"^R\d+_[A-Z0-9_]+$")
IDENT = re.compile(r"^[a-z_][a-z0-9_]*$")
PY_TYPES = {"string": "str", "integer": "int", "number": "float", "boolean": "bool"}

SYSTEM = """You are the Architect of an executable tool-use environment. You compile a
natural-language policy into SQLite: tables, rules enforced by the database, tools and
probes. Reply with exactly one JSON object and nothing else.
Rule ids look like R01_SHORT_NAME. A rule is enforced as
- "trigger": BEFORE triggers with SELECT RAISE(ABORT, '<RULE_ID>: <message>');
- "check": a named CHECK inside its table: CONSTRAINT <RULE_ID> CHECK (...);
- "foreign_key": a REFERENCES clause; give "table", "column" and "references": "parent(column)".
AFTER triggers (no rule id) apply side effects. The current time is the row key='now' of
a table meta(key TEXT PRIMARY KEY, value TEXT NOT NULL).
Tools: {"name", "description", "write": true|false, "parameters": [{"name", "type":
"string|integer|number|boolean", "description", "source": "table.column"}], "sql": [statements
using :param placeholders], "returns": "SELECT ... using :params" or null}. Tool descriptions
state each rule the tool is subject to. Name a parameter like the column it fills."""

ASK_SCHEMA = """Policy of the domain "{name}":

{policy}

Step 1 of 3. Reply {{"tables": ["CREATE TABLE ...", ...], "rules": [{{"id": "R01_...",
"statement": "the rule in one sentence", "enforcement": "trigger|check|foreign_key",
"sql": ["CREATE TRIGGER ...", ...]}}, ...]}}. Compile every rule of the policy; include the
meta table and AFTER triggers for side effects (as rules' sql or a rule-less entry)."""

ASK_TOOLS = """Step 2 of 3. Reply {"tools": [...]}: the read tools an agent needs to look
records up and the write tools that change the state (their SQL is checked by the rules)."""

ASK_PROBES = """Step 3 of 3. Reply {"fixture": ["INSERT ...", ...], "probes": [{"rule":
"R01_...", "violating": {"name": "<tool>", "arguments": {...}}, "valid": {"name": "<tool>",
"arguments": {...}}}, ...]}: a small fixture (including meta 'now') and, for every rule, a
call that the rule must reject and a call one step away that must pass on the fixture."""

ASK_REPAIR = """The compiled domain failed its checks (round {round} of {rounds}):
{errors}

Reply with one JSON object holding only the corrected entries: any of "tables" (the full
list), "rules" (replaced by id), "tools" (replaced by name), "fixture" (the full list),
"probes" (replaced by rule)."""


class ArchitectError(RuntimeError):
    """The model's domain still failed its checks after the last repair round."""

    def __init__(self, message: str, errors: list[str], rounds: int) -> None:
        super().__init__(message)
        self.errors = errors
        self.rounds = rounds


@dataclass
class ArchitectConfig:
    max_rounds: int = 4  # check rounds (the first compile plus up to max_rounds - 1 repairs)
    sampling: Sampling = field(default_factory=lambda: Sampling(temperature=0.2, max_tokens=4096))


@dataclass
class ArchitectResult:
    folder: Path
    spec: dict[str, Any]
    rounds: int  # check rounds run (1 = the first compile passed)
    history: list[list[str]]  # the errors of each failed round
    rules: list[str]


def parse_reply(text: str) -> dict[str, Any]:
    """The JSON object in a model reply (a ```json fence or surrounding prose is allowed)."""
    fenced = re.search(r"```(?:json)?\s*(.*?)```", text, re.DOTALL)
    body = fenced.group(1) if fenced else text
    start, end = body.find("{"), body.rfind("}")
    if start < 0 or end < start:
        raise ValueError("the reply holds no JSON object")
    value = json.loads(body[start:end + 1])
    if not isinstance(value, dict):
        raise ValueError("the reply is not a JSON object")
    return value


def _entry_key(entry: Any, ident: str, index: int) -> Any:
    return entry.get(ident) if isinstance(entry, dict) else ("#", index)


def merge(spec: dict[str, Any], patch: dict[str, Any]) -> dict[str, Any]:
    """Apply a repair reply: lists replaced whole (tables, fixture) or by key (rules by id,
    tools by name, probes by rule)."""
    out = json.loads(json.dumps(spec))
    for key in ("tables", "fixture"):
        if key in patch:
            out[key] = list(patch[key])
    for key, ident in (("rules", "id"), ("tools", "name"), ("probes", "rule")):
        if key not in patch:
            continue
        if not isinstance(patch[key], list) or not isinstance(out.get(key, []), list):
            out[key] = patch[key]  # reported by the shape check
            continue
        entries = {_entry_key(e, ident, i): e for i, e in enumerate(out.get(key, []))}
        for i, e in enumerate(patch[key]):
            entries[_entry_key(e, ident, -1 - i)] = e
        out[key] = list(entries.values())
    return out


# -- checks --------------------------------------------------------------------------------


def _shape_errors(spec: dict[str, Any]) -> list[str]:
    errors: list[str] = []
    for key in ("tables", "rules", "tools", "fixture", "probes"):
        if not isinstance(spec.get(key), list):
            errors.append(f"spec: '{key}' must be a list")
    for key in ("rules", "tools", "probes"):
        if isinstance(spec.get(key), list) and not all(isinstance(e, dict) for e in spec[key]):
            errors.append(f"spec: every entry of '{key}' must be a JSON object")
    if isinstance(spec.get("tables"), list) and not all(isinstance(e, str) for e in spec["tables"]):
        errors.append("spec: every entry of 'tables' must be an SQL string")
    if errors:
        return errors
    for r in spec["rules"]:
        rid = r.get("id")
        if not isinstance(rid, str) or not RULE_ID_FULL.match(rid):
            errors.append(f"rule {rid!r}: id must look like R01_SHORT_NAME")
        if r.get("enforcement") not in ("trigger", "check", "foreign_key"):
            errors.append(f"rule {rid}: enforcement must be trigger, check or foreign_key")
        if r.get("enforcement") == "foreign_key" and not (
                r.get("table") and r.get("column") and FK_REF.match(str(r.get("references", "")))):
            errors.append(f"rule {rid}: a foreign_key rule needs table, column and references 'parent(column)'")
    for t in spec["tools"]:
        name = t.get("name")
        if not isinstance(name, str) or not IDENT.match(name) or keyword.iskeyword(name):
            errors.append(f"tool {name!r}: name must be a lower-case identifier")
            continue
        for p in t.get("parameters") or []:
            pname = p.get("name")
            if not isinstance(pname, str) or not IDENT.match(pname) or keyword.iskeyword(pname) or pname == "db":
                errors.append(f"tool {name}: parameter name {pname!r} is not a valid identifier")
            if p.get("type") not in PY_TYPES:
                errors.append(f"tool {name}: parameter {pname} has type {p.get('type')!r}; use {sorted(PY_TYPES)}")
        if t.get("write") and not t.get("sql"):
            errors.append(f"tool {name}: a write tool needs 'sql' statements")
        if not t.get("write") and not t.get("returns"):
            errors.append(f"tool {name}: a read tool needs a 'returns' query")
    return errors


def schema_sql(spec: dict[str, Any]) -> str:
    """The schema script: tables, then every rule's statements under a comment naming it."""
    parts = [f"-- {spec.get('name', 'world')}: compiled by the Architect from policy.md.\n"]
    parts += [s.strip().rstrip(";") + ";\n" for s in spec["tables"]]
    for r in spec["rules"]:
        if r.get("enforcement") == "foreign_key":
            parts.append(f"-- {r['id']}: foreign key {r['table']}.{r['column']} references {r['references']}\n")
        else:
            parts.append(f"-- {r['id']}: {r.get('statement', '')}\n")
        parts += [s.strip().rstrip(";") + ";\n" for s in r.get("sql") or []]
    return "\n".join(parts)


def _load_schema(spec: dict[str, Any]) -> tuple[sqlite3.Connection, list[str], set[str]]:
    """Load tables and rule statements one at a time: (db, errors, rules whose SQL failed)."""
    conn = sqlite3.connect(":memory:")
    conn.execute("PRAGMA foreign_keys = ON")
    errors: list[str] = []
    broken: set[str] = set()
    for sql in spec["tables"]:
        try:
            conn.execute(sql)
        except sqlite3.Error as exc:
            errors.append(f"table statement failed: {exc} in: {sql.strip()[:200]}")
    for r in spec["rules"]:
        for sql in r.get("sql") or []:
            try:
                conn.execute(sql)
            except sqlite3.Error as exc:
                errors.append(f"rule {r['id']}: SQL error: {exc} in: {sql.strip()[:300]}")
                broken.add(r["id"])
    return conn, errors, broken


def _compiled_errors(spec: dict[str, Any], conn: sqlite3.Connection, broken: set[str]) -> list[str]:
    """Each rule is compiled where it says: raised by a trigger, named by a CHECK, or a real FK."""
    errors: list[str] = []
    objects = conn.execute("SELECT type, name, tbl_name, sql FROM sqlite_master WHERE sql IS NOT NULL").fetchall()
    trigger_sql = " ".join(s for t, _, _, s in objects if t == "trigger")
    table_sql = " ".join(s for t, _, _, s in objects if t == "table")
    for r in spec["rules"]:
        rid, how = r["id"], r.get("enforcement")
        if rid in broken:
            continue
        if how == "trigger":
            raised = set(re.findall(r"RAISE\s*\(\s*ABORT\s*,\s*'(R\d+_[A-Z0-9_]+)\s*:", " ".join(r.get("sql") or [])))
            if rid not in raised:
                errors.append(f"rule {rid}: its triggers raise {sorted(raised) or 'no rule id'}, "
                              f"expected RAISE(ABORT, '{rid}: ...')")
            elif rid not in trigger_sql:
                errors.append(f"rule {rid}: no trigger in the schema raises it")
        elif how == "check":
            if not re.search(rf"CONSTRAINT\s+{rid}\s+CHECK", table_sql, re.IGNORECASE):
                errors.append(f"rule {rid}: no table has CONSTRAINT {rid} CHECK (...)")
        elif how == "foreign_key":
            m = FK_REF.match(r["references"])
            fks = conn.execute(f'PRAGMA foreign_key_list("{r["table"]}")').fetchall()
            if m is None or not any(f[3] == r["column"] and f[2] == m.group(1) for f in fks):
                errors.append(f"rule {rid}: table {r['table']} has no foreign key {r['column']} -> {r['references']}")
    ids = [r["id"] for r in spec["rules"]]
    for rid in sorted({x for x in ids if ids.count(x) > 1}):
        errors.append(f"rule {rid}: declared more than once")
    stray = set(RULE_ID.findall(trigger_sql + " " + table_sql)) - set(ids)
    for rid in sorted(stray):
        errors.append(f"rule id {rid} is raised or named in the schema but not declared as a rule")
    return errors


def _tool_errors(spec: dict[str, Any], conn: sqlite3.Connection) -> list[str]:
    """Every tool statement compiles against the schema (EXPLAIN, with its parameters bound)."""
    errors: list[str] = []
    for t in spec["tools"]:
        args = {p["name"]: None for p in t.get("parameters") or []}
        for sql in [*(t.get("sql") or []), *([t["returns"]] if t.get("returns") else [])]:
            try:
                conn.execute("EXPLAIN " + sql, args)
            except (sqlite3.Error, sqlite3.ProgrammingError) as exc:
                errors.append(f"tool {t['name']}: SQL error: {exc} in: {sql.strip()[:300]}")
        for sql in t.get("sql") or []:
            if write_target(sql) is None:
                errors.append(f"tool {t['name']}: statement is not an INSERT, UPDATE or DELETE: {sql.strip()[:120]}")
    return errors


def _probe_errors(spec: dict[str, Any], folder: Path, broken: set[str]) -> list[str]:
    """Run the probes through `Env.call` on the written world."""
    errors: list[str] = []
    declared = {r["id"] for r in spec["rules"]}
    probed = {p.get("rule") for p in spec["probes"]}
    for rid in sorted(declared - probed):
        errors.append(f"rule {rid}: has no probe")
    for rid in sorted(probed - declared):
        errors.append(f"probe for {rid}: no such rule")
    forget(folder)  # the folder was written again this round
    world = World(name=f"architect_check_{folder.name}", folder=folder)
    try:
        probes = from_module(load_module(folder / "probes.py", world.name))
        tools = world.tools
    except Exception as exc:  # generated code that does not load is a spec error
        return [*errors, f"generated tools or probes do not load: {type(exc).__name__}: {exc}"]
    for p in probes.probes:
        for call in (p.violating, p.valid):
            if call is not None and call.name not in tools:
                errors.append(f"probe for {p.rule}: no tool named {call.name!r}")
    try:
        report = run_probes(world, ProbeSet(probes.fixture, [p for p in probes.probes if p.rule not in broken
                                                             and p.violating.name in tools
                                                             and (p.valid is None or p.valid.name in tools)]))
    except sqlite3.Error as exc:
        return [*errors, f"fixture failed: {exc}"]
    for r in report.failures():
        errors.append(f"probe for {r.probe.rule}: {r.detail}")
    return errors


# -- writing a world folder -------------------------------------------------------------------


def _doc(text: str) -> str:
    return " ".join(str(text).replace("\\", "/").replace('"""', "'''").split())


def tools_py(spec: dict[str, Any]) -> str:
    """A `tools.py` with one typed, documented function per tool spec."""
    fk_rules = [{k: r[k] for k in ("id", "table", "column", "references")}
                for r in spec["rules"] if r.get("enforcement") == "foreign_key"]
    lines = [f'"""Tools of the {spec.get("name", "compiled")} world, generated by the Architect from spec.json."""',
             "", "from __future__ import annotations", "", "import sqlite3", "from typing import Any, Literal",
             "", "from envs.spec_world import run_tool", "from envs.tools import tool", "",
             f"SPECS: dict[str, dict[str, Any]] = {{t['name']: t for t in {spec['tools']!r}}}",
             f"FK_RULES: list[dict[str, Any]] = {fk_rules!r}", ""]
    for t in spec["tools"]:
        params = t.get("parameters") or []
        sig = ["db: sqlite3.Connection"]
        for p in sorted(params, key=lambda p: "default" in p):
            tp = PY_TYPES[p["type"]]
            if p.get("enum"):
                tp = f"Literal[{', '.join(repr(v) for v in p['enum'])}]"
            sig.append(f"{p['name']}: {tp}" + (f" = {p['default']!r}" if "default" in p else ""))
        lines += ["", f"@tool(write={bool(t.get('write'))})",
                  f"def {t['name']}({', '.join(sig)}) -> Any:", f'    """{_doc(t.get("description", t["name"]))}']
        if params:
            lines += ["", "    Args:"] + [f"        {p['name']}: {_doc(p.get('description', p['name']))}" for p in params]
        arg_dict = ", ".join(f"{p['name']!r}: {p['name']}" for p in params)
        lines += ['    """', f"    args = {{{arg_dict}}}",
                  f"    return run_tool(db, SPECS[{t['name']!r}], args, FK_RULES)", ""]
    return "\n".join(lines)


def _probe_call(call: Any) -> dict[str, Any]:
    if not isinstance(call, dict) or not isinstance(call.get("name"), str):
        raise ValueError(f"a probe call must be {{'name': ..., 'arguments': {{...}}}}, got {call!r}")
    return {"name": call["name"], "arguments": dict(call.get("arguments") or {})}


def probes_py(spec: dict[str, Any]) -> str:
    fixture = "\n".join(s.strip().rstrip(";") + ";" for s in spec["fixture"])
    probes = {p["rule"]: (_probe_call(p["violating"]), _probe_call(p["valid"])) for p in spec["probes"]}
    return "\n".join([
        '"""Rule probes of the compiled world (see envs/probes.py): fixture rows, then per rule a call',
        'that must be rejected with exactly its rule id and a call that must pass."""', "",
        "from data.records import ToolCall", "",
        f"FIXTURE = {fixture!r}", "",
        f"_RAW = {probes!r}",
        "PROBES = {rule: (ToolCall(**bad), ToolCall(**good)) for rule, (bad, good) in _RAW.items()}", ""])


GENERATOR_PY = '''"""Seed rows of the compiled world: the fixture the Architect's probes ran on (a few rows;
`seed` and `scale` do not change them)."""

import sqlite3
from pathlib import Path

from envs.loader import load_module

_PROBES = load_module(Path(__file__).with_name("probes.py"), __name__)


def generate(conn: sqlite3.Connection, seed: int, scale: int) -> None:
    statement = ""
    for line in _PROBES.FIXTURE.splitlines(keepends=True):
        statement += line
        if sqlite3.complete_statement(statement):
            conn.execute(statement)
            statement = ""
'''

DESIGN_PY = '''"""Synthesis hooks of the compiled world: the generic spec hooks (envs/spec_world.py)."""

from pathlib import Path

from envs.spec_world import SpecDesign

_DESIGN = SpecDesign.from_folder(Path(__file__).parent)
variants = _DESIGN.variants
candidate_calls = _DESIGN.candidate_calls
lookup_calls = _DESIGN.lookup_calls
describe = _DESIGN.describe
goal_score = _DESIGN.goal_score
'''


def write_world(spec: dict[str, Any], folder: Path) -> Path:
    """Write a spec as a world folder (replacing the folder's files)."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "policy.md").write_text(spec.get("policy", "").strip() + "\n\n## Compiled rules\n\n" + "".join(
        f"- **{r['id']}** *(enforced)*: {r.get('statement', '')}\n" for r in spec["rules"]))
    (folder / "schema.sql").write_text(schema_sql(spec))
    (folder / "tools.py").write_text(tools_py(spec))
    (folder / "probes.py").write_text(probes_py(spec))
    (folder / "generator.py").write_text(GENERATOR_PY)
    (folder / "design.py").write_text(DESIGN_PY)
    (folder / "spec.json").write_text(json.dumps(spec, indent=2, sort_keys=True) + "\n")
    return folder


def check(spec: dict[str, Any], scratch: Path) -> list[str]:
    """Every problem of a spec: shape, schema SQL, compiled rule ids, tool SQL, probes."""
    errors = _shape_errors(spec)
    if errors:
        return errors
    conn, errors, broken = _load_schema(spec)
    try:
        errors += _compiled_errors(spec, conn, broken)
        errors += _tool_errors(spec, conn)
        for sql in spec["fixture"]:
            if not isinstance(sql, str):
                errors.append(f"fixture: entries must be SQL strings, got {sql!r}")
    finally:
        conn.close()
    if any(e.startswith(("table statement", "tool ", "fixture")) for e in errors):
        return errors  # probes cannot run on a broken schema or broken tools
    # Probes run without the rules whose SQL failed (reported above), so the rest is checked.
    runnable = {**spec, "rules": [{**r, "sql": []} if r["id"] in broken else r for r in spec["rules"]]}
    try:
        write_world(runnable, scratch)
    except (ValueError, KeyError, TypeError) as exc:
        return [*errors, f"probes: {exc}"]
    return errors + _probe_errors(spec, scratch, broken)


class ReplayModel:
    """A `ChatModel` that answers with recorded replies in order (JSON objects are sent as a
    fenced block) and keeps the prompts it was given: for tests, benchmarks and replaying a
    compile without a model server."""

    name = "architect-replay"

    def __init__(self, replies: list[dict[str, Any] | str], repeat_last: bool = False) -> None:
        self.replies = list(replies)
        self.repeat_last = repeat_last
        self.prompts: list[str] = []

    async def chat(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]],
                   sampling: Sampling) -> ChatResponse:
        self.prompts.append(messages[-1]["content"])
        if not self.replies:
            raise RuntimeError("the replay model has no reply left")
        reply = self.replies[0] if self.repeat_last and len(self.replies) == 1 else self.replies.pop(0)
        text = reply if isinstance(reply, str) else "```json\n" + json.dumps(reply) + "\n```"
        return ChatResponse(text=text)

    async def aclose(self) -> None:
        return None


# -- the loop ---------------------------------------------------------------------------------


async def _ask(model: ChatModel, messages: list[dict[str, Any]], prompt: str, sampling: Sampling,
               ) -> tuple[dict[str, Any], str | None]:
    messages.append({"role": "user", "content": prompt})
    resp = await model.chat(messages, [], sampling)
    messages.append({"role": "assistant", "content": resp.text})
    try:
        return parse_reply(resp.text), None
    except (ValueError, json.JSONDecodeError) as exc:
        return {}, f"the reply was not a JSON object: {exc}"


async def compile_domain_async(model: ChatModel, name: str, policy: str, out: Path | str,
                               cfg: ArchitectConfig | None = None) -> ArchitectResult:
    """Compile `policy` into a world folder at `out` (see the module docstring)."""
    cfg = cfg or ArchitectConfig()
    if not IDENT.match(name):
        raise ValueError(f"world name {name!r} must be a lower-case identifier")
    if not policy.strip():
        raise ValueError("the policy is empty")
    if cfg.max_rounds < 1:
        raise ValueError("max_rounds must be at least 1")
    messages: list[dict[str, Any]] = [{"role": "system", "content": SYSTEM}]
    spec: dict[str, Any] = {"name": name, "policy": policy.strip()}
    reply_errors: list[str] = []
    for prompt in (ASK_SCHEMA.format(name=name, policy=policy.strip()), ASK_TOOLS, ASK_PROBES):
        part, err = await _ask(model, messages, prompt, cfg.sampling)
        spec.update({k: v for k, v in part.items() if k in ("tables", "rules", "tools", "fixture", "probes")})
        if err:
            reply_errors.append(err)
    history: list[list[str]] = []
    with tempfile.TemporaryDirectory(prefix="trajforge-architect-") as tmp:
        for round_ in range(1, cfg.max_rounds + 1):
            errors = reply_errors + check(spec, Path(tmp) / f"round{round_}")
            reply_errors = []
            if not errors:
                target = Path(out)
                staging = target.with_name(target.name + ".staging")
                shutil.rmtree(staging, ignore_errors=True)
                write_world(spec, staging)
                shutil.rmtree(target, ignore_errors=True)
                staging.rename(target)
                return ArchitectResult(target, spec, round_, history, sorted(r["id"] for r in spec["rules"]))
            history.append(errors)
            if round_ == cfg.max_rounds:
                break
            prompt = ASK_REPAIR.format(round=round_, rounds=cfg.max_rounds,
                                       errors="\n".join(f"- {e}" for e in errors))
            patch, err = await _ask(model, messages, prompt, cfg.sampling)
            if err:
                reply_errors.append(err)
            spec = merge(spec, patch)
    last = history[-1]
    raise ArchitectError(
        f"the domain {name!r} still fails {len(last)} check(s) after {cfg.max_rounds} round(s): "
        + "; ".join(last[:5]) + (" ..." if len(last) > 5 else ""), last, cfg.max_rounds)


def compile_domain(model: ChatModel, name: str, policy: str, out: Path | str,
                   cfg: ArchitectConfig | None = None) -> ArchitectResult:
    """Synchronous `compile_domain_async` (runs its own event loop)."""
    return asyncio.run(compile_domain_async(model, name, policy, out, cfg))
