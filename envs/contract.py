"""The world contract: every hook a world folder may define, declared once and checked.

A hook is a module-level name of one of a world folder's hook modules that the framework
reads: ``design.py``, ``conversation.py``, ``probes.py``, ``constraints.py`` and
``generator.py`` for a SQLite world, ``seeds.py`` for a workspace world. The protocols
below (`DesignHooks`, `ConversationHooks`, ...) declare them: a method is a callable hook
(its parameters after ``self`` are the positional arguments the framework passes), an
annotated attribute a constant (its type is its shape, the ``Annotated`` text its doc).
`HOOKS` is read off the protocols; `hooks_table` renders them for
``docs/authoring-a-world.md``.

`check_world(world)` runs when a world is registered and when it is loaded
(`envs.registry`). It raises `WorldContractError` naming the hook when

- a required hook of a module that exists is missing (``design.py`` without ``variants``);
- a hook has the wrong shape (a callable that cannot take its arguments, a constant of the
  wrong type: ``KIND_WRITES = ["book"]`` where a dict is declared);
- a public name the module itself defines (a ``def``, a class or an assignment; imports and
  names with a leading underscore are never hooks) is not one of that module's hooks but
  is the same name in other case (``kind_writes``) or, written in the same case (UPPER
  constants, lower functions), close to one (difflib ratio >= 0.8: ``KIND_WRITE``,
  ``variant``): a misspelled hook would be silently ignored;
- a function the module defines has the exact name of another module's callable hook
  (``audit_mutations`` in ``design.py``): it would be ignored there too.

Any other name (helpers, word lists, constants) is the module's own business. A helper
whose name must stay close to a hook's gets a leading underscore.

`hook(module, name, default)` is the one way the framework reads a hook: it accepts only
names the contract declares for that module, so a typo in the framework fails as well.
`Identity` is the world's identity vocabulary (see its docstring).
"""

from __future__ import annotations

import ast
import difflib
import inspect
import random
import sqlite3
import typing
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Annotated, Any, Protocol

from data.records import Fact, ToolCall
from envs.design import Goal, Variant
from envs.loader import load_module

# -- the identity vocabulary ------------------------------------------------------------------------

# The names an account id goes by in a schema or a tool (a read tool taking one of them alone
# is an identity lookup, a column of one of them says whose record a row is).
ACCOUNT_KEYS = ("user_id", "customer_id", "patient_id", "member_id", "account_id")
# What anyone may call their account id, whatever the world names it.
GENERIC_ACCOUNT_KEYS = ("user_id", "customer_id", "account_id")


def key_noun(key: str) -> str:
    """How a known-info key is said: "user_id" -> "user id", "date_of_birth" -> "date of birth"."""
    return key.replace("_", " ").strip()


@dataclass(frozen=True)
class Identity:
    """How a user identifies themselves: the one identity vocabulary of a world, from which
    the agent's identity question (`question`), the scripted user's answers
    (`rollout.user.asks_for`) and the policy verifier's identity checks all derive.

    `keys`: alternatives, each a set of known-info keys that together identify the user (an
    email, or first name + last name + zip code); `lookups`: the read tools that establish
    the identity, each with the arguments that must carry a value the user gave; `confirm`:
    fields of the identity record the user must also state (a date of birth); `account`: the
    names of the user's own account id in this world's tools and known info (None: those of
    `keys` and the lookups' arguments that are `ACCOUNT_KEYS`); `nouns`: how a key is said,
    where not its words ("member_id": "library card number")."""

    keys: list[list[str]] = field(default_factory=lambda: [["user_id"]])
    lookups: dict[str, list[str]] = field(default_factory=dict)  # tool -> its identifying arguments
    confirm: list[str] = field(default_factory=list)
    account: list[str] | None = None
    nouns: dict[str, str] = field(default_factory=dict)

    def account_keys(self) -> tuple[str, ...]:
        """The world's names of the user's own account id (declared, else derived)."""
        if self.account is not None:
            return tuple(self.account)
        found = [k for ks in self.keys for k in ks] + [a for args in self.lookups.values() for a in args]
        return tuple(dict.fromkeys(k for k in found if k in ACCOUNT_KEYS))

    def own_ids(self) -> tuple[str, ...]:
        """Every name the user's account id may be asked or passed by: the world's own plus the
        generic ones ("user id", "customer id", "account id"). A write's argument of one of
        them names the user, so its announcement need not say it."""
        return tuple(dict.fromkeys([*self.account_keys(), *GENERIC_ACCOUNT_KEYS]))

    def noun(self, key: str) -> str:
        return self.nouns.get(key) or key_noun(key)

    def question(self) -> str:
        """The agent's identity question for the first key set ("Could you give me your member id?")."""
        first = (self.keys or [["user_id"]])[0]
        return "Could you give me your " + " and ".join(self.noun(k) for k in first) + "?"

    def asked_by(self, key: str) -> set[str]:
        """Words a question for the known-info `key` may use besides its own: the nouns of
        every name of the account id when `key` is one, and a declared noun."""
        words = {self.noun(key)} - {key_noun(key)}
        if key in self.own_ids():
            words |= {self.noun(k) for k in self.own_ids()} | {key_noun(k) for k in self.own_ids()}
        return words


# -- the protocols -------------------------------------------------------------------------------------


class DesignHooks(Protocol):
    """design.py: how logic-driven synthesis designs tasks (types in `envs/design.py`)."""

    KIND_WRITES: Annotated[Mapping[str, Sequence[str]],
                           "boundary kind -> the write tools its goal calls; with `variants(..., kinds=)`, "
                           "logic-driven synthesis draws first the kinds that cover a write no task has"]

    def variants(self, conn: sqlite3.Connection, rng: random.Random, n: int) -> list[Variant]:
        """Boundary-adjacent initial states (SQL patches, focus, rules); may also take ``kinds=``."""
        ...

    def candidate_calls(self, conn: sqlite3.Connection, focus: dict[str, Any]) -> list[ToolCall]:
        """Write calls around the focus, on both sides of a limit, for the Explorer's search."""
        ...

    def lookup_calls(self, focus: dict[str, Any]) -> list[ToolCall]:
        """The reads a careful agent makes first."""
        ...

    def describe(self, changes: list[Any], before: sqlite3.Connection, after: sqlite3.Connection,
                 variant: Variant) -> Goal | None:
        """A reached state change as the user would state it (None: not unambiguously)."""
        ...

    def goal_score(self, changes: list[Any], variant: Variant) -> float:
        """Prefers the goal that sits on the planted boundary."""
        ...

    def self_play_templates(self) -> Mapping[str, Callable[..., Any]]:
        """Per-tool self-play templates (`envs/templating.py`); others use the generic one."""
        ...


class ConversationHooks(Protocol):
    """conversation.py: how conversations go (`envs/conversation.py`); every hook optional."""

    IDENTITY: Annotated[Identity, "the identity vocabulary: keys, lookups, confirm fields, account id names"]
    CLAUSES: Annotated[Sequence[str], "the working rules the policy states, checked by the policy verifier"]
    RULE_TERMS: Annotated[Mapping[str, Sequence[str]], "rule id -> phrases of the policy that state it"]
    ALTERNATIVES: Annotated[Mapping[str, str], "rule id -> what the agent may offer instead"]
    ASK_IDENTITY: Annotated[Sequence[str], "realisations of the agent's identity question (default: "
                                           "`Identity.question`)"]
    USER_FACING_IDS: Annotated[Sequence[str], "id columns a user knows and may say; every other `*_id` "
                                              "key is internal"]
    WHO: Annotated[Sequence[str], "who the users are, for personas"]
    REASONS: Annotated[Mapping[str, Sequence[str]], "tool (or `reason_key`) -> why a user wants it"]
    PHRASINGS: Annotated[Sequence[tuple[str, Sequence[str]]],
                         "(regex, [replacement, ...]): other ways to say a goal, keeping every group"]

    def mentions(self, conn: sqlite3.Connection, table: str, row: dict[str, Any]) -> list[Any]:
        """How a record is named to a user (a flight's number, a card's last digits)."""
        ...

    def phrase(self, conn: sqlite3.Connection, table: str, row: dict[str, Any]) -> str | None:
        """How a user names a record in a sentence, without its internal id."""
        ...

    def action(self, conn: sqlite3.Connection, call: ToolCall) -> list[str]:
        """Realisations of "what I am about to do" for a write."""
        ...

    def facts(self, before: sqlite3.Connection, after: sqlite3.Connection, call: ToolCall,
              result: Any) -> list[Fact]:
        """What the user must be told after a successful write."""
        ...

    def report(self, conn: sqlite3.Connection, call: ToolCall, result: Any, facts: list[Fact]) -> list[str]:
        """Realisations of what a write did, saying its facts."""
        ...

    def grounding(self, conn: sqlite3.Connection, call: ToolCall, known: dict[str, Any]) -> list[ToolCall]:
        """Reads that show a write's ids."""
        ...

    def preference(self, conn: sqlite3.Connection, call: ToolCall, wanted: dict[str, Any]) -> Any:
        """(reads, sentence) showing why a preference the write does not take could not be met."""
        ...

    def lookup(self, keys: list[str], known: dict[str, Any]) -> ToolCall | None:
        """The identity lookup of a user who identifies with `keys`, from their known info."""
        ...

    def reason_key(self, call: ToolCall) -> str | None:
        """A finer `REASONS` key for a write ("book_reservation:group")."""
        ...


class ProbeHooks(Protocol):
    """probes.py: per compiled rule, a call that must be rejected and one that must pass."""

    FIXTURE: Annotated[str, "SQL run on the empty schema: the probes' state"]
    PROBES: Annotated[Mapping[str, tuple[Any, Any]], "rule id -> (violating call, valid call)"]
    MORE_PROBES: Annotated[Sequence[tuple[str, Any, Any]], "more (rule id, violating call, valid call)"]
    MORE_VIOLATIONS: Annotated[Sequence[tuple[str, Any]], "more (rule id, violating call) without a valid twin"]


class ConstraintHooks(Protocol):
    """constraints.py: constraint-guided synthesis and verification (`envs/constraints.py`)."""

    KINDS: Annotated[Sequence[str], "constraint kinds, cycled when `sample_constraints` takes ``kind=``"]
    IDENTITY_FIELDS: Annotated[Sequence[str], "constraint fields the user knows and may say (default: user_id)"]

    def sample_constraints(self, conn: sqlite3.Connection, rng: random.Random) -> list[Any]:
        """A constraint set solvable by construction; may also take ``kind=`` and ``p_extra=``."""
        ...

    def fuzzify(self, conn: sqlite3.Connection, constraints: list[Any], rng: random.Random) -> Any:
        """Unique vague descriptions of the constraints' ids (a `Fuzzification`)."""
        ...

    def matching_ids(self, conn: sqlite3.Connection, entity: str, where: dict[str, Any]) -> list[str]:
        """The records a description's attributes match."""
        ...

    def goal(self, constraints: list[Any], fuzzy: dict[str, Any]) -> Goal:
        """The user's instruction, from the descriptions only."""
        ...

    def reference_calls(self, conn: sqlite3.Connection, constraints: list[Any]) -> list[ToolCall]:
        """Reads, then the writes that satisfy the set."""
        ...

    def check(self, conn_initial: sqlite3.Connection, conn_final: sqlite3.Connection,
              constraints: list[Any]) -> tuple[list[bool], list[dict[str, Any]]]:
        """Outcome checks, each detail naming the record that satisfies it."""
        ...

    def audit_mutations(self, conn: sqlite3.Connection, constraints: list[Any],
                        reference: list[ToolCall]) -> Mapping[str, list[ToolCall]]:
        """Known-bad variants of the reference (wrong item, an extra write)."""
        ...

    def known_identity(self, conn: sqlite3.Connection, constraints: list[Any]) -> Mapping[str, str]:
        """What the user authenticates with, when not a constraint field (an email)."""
        ...


class GeneratorHooks(Protocol):
    """generator.py: the seeded base state."""

    def generate(self, conn: sqlite3.Connection, seed: int, scale: int) -> None:
        """Fill the empty schema; the same seed and scale give the same state."""
        ...

    def synthetic_values(self, conn: sqlite3.Connection) -> Any:
        """The generated text of a state (release hygiene leaves it alone); default: every text cell."""
        ...


class SeedHooks(Protocol):
    """seeds.py (workspace worlds): task seeds and skills for terminal synthesis."""

    SEEDS: Annotated[Mapping[str, Callable[..., Any]], "seed name -> (rng) -> TaskSpec"]
    SKILLS: Annotated[Mapping[str, Callable[..., Any]], "domain -> (rng) -> primitive skills"]

    def compose_skills(self, domain: str, rng: random.Random, k: int) -> Any:
        """A task chaining `k` primitive skills of `domain`."""
        ...


# -- hooks, read off the protocols ------------------------------------------------------------------------


@dataclass(frozen=True)
class HookModule:
    """A hook module of a world folder: its file, protocol, required hooks and world kind."""

    file: str
    protocol: type
    required: tuple[str, ...] = ()
    world_kind: str = "sql"  # "sql" (`envs.world.World`) or "workspace"


MODULES: tuple[HookModule, ...] = (
    HookModule("design.py", DesignHooks, ("variants", "candidate_calls", "lookup_calls", "describe", "goal_score")),
    HookModule("conversation.py", ConversationHooks),
    HookModule("probes.py", ProbeHooks, ("FIXTURE", "PROBES")),
    HookModule("constraints.py", ConstraintHooks,
               ("sample_constraints", "fuzzify", "matching_ids", "goal", "reference_calls", "check")),
    HookModule("generator.py", GeneratorHooks, ("generate",)),
    HookModule("seeds.py", SeedHooks, ("SEEDS", "SKILLS", "compose_skills"), "workspace"),
)


@dataclass(frozen=True)
class Hook:
    """One hook: its name, module file, shape (`params` for a callable, `type` for a constant)."""

    name: str
    module: str
    doc: str
    required: bool
    params: tuple[str, ...] | None = None  # a callable: the positional arguments it is given
    type: Any = None  # a constant: its declared type

    @property
    def callable(self) -> bool:
        return self.params is not None

    def shape(self) -> str:
        if self.params is not None:
            return f"{self.name}({', '.join(self.params)})"
        return _type_text(self.type)

    def problem(self, value: Any) -> str | None:
        """Why `value` does not have this hook's shape (None when it does)."""
        if self.params is not None:
            if not callable(value):
                return f"is {type(value).__name__}, not a callable {self.shape()}"
            try:
                inspect.signature(value).bind(*[None] * len(self.params))
            except TypeError:
                return f"cannot be called as {self.shape()} (its signature: {_signature(value)})"
            except ValueError:  # a builtin without a signature
                return None
            return None
        why = _type_problem(value, self.type)
        return f"is {_short(value)}, not {_type_text(self.type)} ({why})" if why else None


def _signature(fn: Any) -> str:
    try:
        return f"{getattr(fn, '__name__', 'callable')}{inspect.signature(fn)}"
    except (TypeError, ValueError):
        return "unknown"


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _type_text(tp: Any) -> str:
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if tp is Any:
        return "any"
    if origin is None:
        return getattr(tp, "__name__", str(tp))
    name = {Mapping: "dict", Sequence: "list"}.get(origin, getattr(origin, "__name__", str(origin)))
    if origin is tuple and args and args[-1] is not Ellipsis:
        return "(" + ", ".join(_type_text(a) for a in args) + ")"
    if origin in (Callable, typing.Callable):  # type: ignore[comparison-overlap]
        return "callable"
    return f"{name}[{', '.join(_type_text(a) for a in args)}]"


def _type_problem(value: Any, tp: Any) -> str | None:
    """Why `value` is not of the declared type `tp` (None when it is); one level of items deep."""
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if tp is Any:
        return None
    if origin in (Callable, typing.Callable):  # type: ignore[comparison-overlap]
        return None if callable(value) else "not callable"
    if origin is None:
        return None if isinstance(value, tp) else f"a {type(value).__name__}"
    if origin is Mapping:
        if not isinstance(value, Mapping):
            return f"a {type(value).__name__}"
        for k, v in value.items():
            why = _type_problem(k, args[0]) or _type_problem(v, args[1])
            if why:
                return f"entry {k!r}: {why}"
        return None
    if origin is Sequence or (origin is tuple and args and args[-1] is Ellipsis):
        if isinstance(value, (str, bytes)) or not isinstance(value, (list, tuple)):
            return f"a {type(value).__name__}"
        for i, item in enumerate(value):
            why = _type_problem(item, args[0])
            if why:
                return f"item {i}: {why}"
        return None
    if origin is tuple:
        if not isinstance(value, (list, tuple)) or len(value) != len(args):
            return f"not a {len(args)}-tuple"
        for i, (item, a) in enumerate(zip(value, args, strict=True)):
            why = _type_problem(item, a)
            if why:
                return f"part {i}: {why}"
        return None
    return None


def _hooks_of(mod: HookModule) -> list[Hook]:
    proto = mod.protocol
    out: list[Hook] = []
    hints = typing.get_type_hints(proto, include_extras=True)
    for name, tp in hints.items():
        doc = " ".join(str(m) for m in getattr(tp, "__metadata__", ()))
        out.append(Hook(name, mod.file, doc, name in mod.required, type=typing.get_args(tp)[0]))
    for name, fn in vars(proto).items():
        if name.startswith("_") or not inspect.isfunction(fn):
            continue
        params = tuple(list(inspect.signature(fn).parameters)[1:])
        doc = " ".join((fn.__doc__ or "").split())
        out.append(Hook(name, mod.file, doc, name in mod.required, params=params))
    return out


HOOKS: tuple[Hook, ...] = tuple(h for m in MODULES for h in _hooks_of(m))
_BY_FILE: dict[str, dict[str, Hook]] = {m.file: {h.name: h for h in HOOKS if h.module == m.file} for m in MODULES}


def hook_names(module_file: str | None = None) -> list[str]:
    """The hooks the contract declares (for one module file, e.g. "design.py")."""
    return [h.name for h in HOOKS if module_file is None or h.module == module_file]


def declared(name: str, module_file: str | None = None) -> Hook:
    """The declared hook `name` (of `module_file`); KeyError, with the nearest names, otherwise."""
    pool = _BY_FILE.get(module_file or "", {}) if module_file in _BY_FILE else {h.name: h for h in HOOKS}
    if name in pool:
        return pool[name]
    near = difflib.get_close_matches(name, list(pool), n=1, cutoff=0.6)
    where = f" of {module_file}" if module_file in _BY_FILE else ""
    raise KeyError(f"{name!r} is no hook{where} the world contract declares"
                   + (f"; did you mean {near[0]!r}?" if near else ""))


def hook(module: ModuleType | None, name: str, default: Any = None) -> Any:
    """The world hook `name` of `module` (a world folder's module, None when the world has
    no such file), else `default`. Only hooks the contract declares for that module's file
    are accepted (`declared`), so a misspelled name in the caller fails."""
    file = Path(getattr(module, "__file__", None) or "").name if module is not None else None
    declared(name, file if file in _BY_FILE else None)
    return getattr(module, name, default) if module is not None else default


# -- checking a world ------------------------------------------------------------------------------------


class WorldContractError(ValueError):
    """A world folder breaks its contract; `problems` lists each, `hooks` the names involved."""

    def __init__(self, world: str, problems: list[tuple[str, str]]) -> None:
        self.world = world
        self.problems = [text for _, text in problems]
        self.hooks = [name for name, _ in problems]
        super().__init__(f"world {world!r} breaks the world contract (envs/contract.py, "
                         f"docs/authoring-a-world.md): " + "; ".join(self.problems))


def defined_names(path: Path) -> dict[str, bool]:
    """Public names a module file defines at top level (not its imports) -> whether a ``def``."""
    tree = ast.parse(path.read_text(), filename=str(path))
    out: dict[str, bool] = {}
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            out[node.name] = not isinstance(node, ast.ClassDef)
            continue
        targets = (node.targets if isinstance(node, ast.Assign)
                   else [node.target] if isinstance(node, (ast.AnnAssign, ast.AugAssign)) else [])
        for t in targets:
            for n in ast.walk(t):
                if isinstance(n, ast.Name):
                    out.setdefault(n.id, False)
    return {k: v for k, v in out.items() if not k.startswith("_")}


def _case(name: str) -> str:
    """UPPER (constants), lower (functions) or Mixed (classes, type aliases)."""
    return "upper" if name.isupper() else "lower" if name.islower() else "mixed"


_CALLABLE_ELSEWHERE: dict[str, str] = {h.name: h.module for h in HOOKS if h.callable}


def module_problems(module: ModuleType, file: str, path: Path) -> list[tuple[str, str]]:
    """(hook name, problem) of one hook module against its protocol."""
    hooks = _BY_FILE[file]
    out: list[tuple[str, str]] = []
    for h in hooks.values():
        if not hasattr(module, h.name):
            if h.required:
                out.append((h.name, f"{file} lacks {h.name}, a required hook ({h.shape()}: {h.doc})"))
            continue
        why = h.problem(getattr(module, h.name))
        if why:
            out.append((h.name, f"{file} hook {h.name} {why}"))
    lowered = {name.lower(): name for name in hooks}
    for name, is_def in defined_names(path).items():
        if name in hooks:
            continue
        near = [lowered[name.lower()]] if name.lower() in lowered else difflib.get_close_matches(
            name, [h for h in hooks if _case(h) == _case(name)], n=1, cutoff=0.8)
        if near:
            out.append((name, f"{file} defines {name}, which is no hook; did you mean {near[0]}?"))
        elif is_def and _CALLABLE_ELSEWHERE.get(name, file) != file:
            out.append((name, f"{file} defines {name}, a hook of {_CALLABLE_ELSEWHERE[name]}, not of {file}"))
    return out


def check_world(world: Any) -> None:
    """Check every hook module of `world`'s folder against the contract (see the module
    docstring); raises `WorldContractError` naming each offending hook."""
    folder = Path(world.folder)
    kind = "workspace" if getattr(world, "kind", None) == "workspace" else "sql"
    problems: list[tuple[str, str]] = []
    for mod in MODULES:
        path = folder / mod.file
        if mod.world_kind != kind or not path.exists():
            continue
        problems += module_problems(load_module(path, world.name), mod.file, path)
    if problems:
        raise WorldContractError(world.name, problems)


# -- the documentation ------------------------------------------------------------------------------------

DOC_START = "<!-- hooks:start -->"
DOC_END = "<!-- hooks:end -->"


def hooks_table() -> str:
    """The markdown table of every hook, as `docs/authoring-a-world.md` shows it."""
    lines = ["| module | hook | shape | required | what it is |", "|---|---|---|---|---|"]
    for h in HOOKS:
        shape = h.shape().replace("|", "\\|")
        lines.append(f"| `{h.module}` | `{h.name}` | `{shape}` | {'yes' if h.required else ''} | "
                     f"{h.doc.replace('|', '/')} |")
    return "\n".join(lines)


def doc_section(text: str) -> str | None:
    """The generated part of a document (between `DOC_START` and `DOC_END`), if it has one."""
    if DOC_START not in text or DOC_END not in text:
        return None
    return text.split(DOC_START, 1)[1].split(DOC_END, 1)[0].strip("\n")


def with_hooks_table(text: str) -> str:
    """`text` with its generated part replaced by the current `hooks_table`."""
    head, rest = text.split(DOC_START, 1)
    return f"{head}{DOC_START}\n{hooks_table()}\n{DOC_END}{rest.split(DOC_END, 1)[1]}"
