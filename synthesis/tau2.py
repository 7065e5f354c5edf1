"""τ²-bench task export and import (methods.md §6).

`to_tau2` writes a `Task` in the shape of τ²-bench's `Task` model::

    {"id", "description": {"purpose", "relevant_policies", "notes"},
     "user_scenario": {"persona", "instructions": {"domain", "reason_for_call",
                       "known_info", "unknown_info", "task_instructions"}},
     "initial_state": null,
     "evaluation_criteria": {"actions": [{"action_id", "requestor", "name", "arguments",
                             "compare_args"}], "reward_basis": ["DB"],
                             "communicate_info": [], "env_assertions": null, "nl_assertions": null},
     "trajforge": {"format", "state": {...}, ...}}

What it is, exactly: the tasks validate against τ²'s `Task` model, but they run on
trajforge's worlds, not in τ²'s domains. The tool names in `actions` are the trajforge
world's (`domain` names that world), and the state a task starts from and is judged
against is trajforge's: the state recipe (world, generator seed and scale, Set Designer
patches, the hash they must produce) and the target state hash and diff are in the
`trajforge` block, which τ²'s loader ignores. `initial_state` is null, so nothing is
applied to a τ² domain database (τ²'s `RetailDB` and the others reject foreign fields), and
`reward_basis: ["DB"]` means trajforge's state check against the target in that block,
which τ²'s environment cannot evaluate. τ²'s `known_info` and `unknown_info` are text, so
they are rendered as lines; the exact mappings are in the block too. `from_tau2` reads an
export back to an equal `Task` (exports of the first format, with the recipe under
`initial_state.initialization_data.agent_data.trajforge_state`, too), and refuses τ²'s own
tasks with what an import of them would need.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from data.records import StateRef, Task, ToolCall, UserScenario

FORMAT = "trajforge-tau2/1"


def _known_text(known: dict[str, str]) -> str | None:
    return "\n".join(f"{k}: {v}" for k, v in known.items()) or None


def _unknown_text(unknown: list[str]) -> str | None:
    return "\n".join(unknown) or None


def to_tau2(task: Task) -> dict[str, Any]:
    """One task in τ²-bench's `Task` shape, to run on trajforge's world (the `trajforge` block
    holds its state recipe and target; see the module docstring)."""
    meta = task.metadata
    rules = meta.get("rules_crossed") or meta.get("rules") or []
    return {
        "id": task.id,
        "description": {
            "purpose": f"{task.method} task in the {task.world} world"
                       + (f" (boundary: {meta['boundary']})" if meta.get("boundary") else ""),
            "relevant_policies": ", ".join(rules) or None,
            "notes": meta.get("boundary_note") or None,
        },
        "user_scenario": {
            "persona": task.user.persona,
            "instructions": {
                "domain": task.world,
                "reason_for_call": task.user.reason,
                "known_info": _known_text(task.user.known_info),
                "unknown_info": _unknown_text(task.user.unknown_info),
                # τ²-bench's task instructions say how to act as well as what to ask for
                "task_instructions": " ".join([task.user.task_instructions, *task.user.reactions]).strip(),
            },
        },
        "initial_state": None,  # the state is trajforge's: see `trajforge.state`
        "evaluation_criteria": {
            "actions": [{"action_id": f"{i}_{c.name}", "requestor": "assistant", "name": c.name,
                         "arguments": c.arguments, "compare_args": None}
                        for i, c in enumerate(task.reference_solution)],
            "reward_basis": ["DB", *(["COMMUNICATE"] if task.verification.communicate else [])],
            "communicate_info": [f.any_of[0] for f in task.verification.communicate],
            "env_assertions": None,
            "nl_assertions": list(task.verification.nl_assertions) or None,
        },
        "trajforge": {
            "format": FORMAT,
            "runs_on": f"trajforge world {task.world!r}",
            "state": task.initial_state.model_dump(),
            "schema_version": task.schema_version,
            "method": task.method,
            "split": task.split,
            "instruction": task.instruction,
            "known_info": task.user.known_info,
            "unknown_info": task.user.unknown_info,
            "task_instructions": task.user.task_instructions,
            "reactions": task.user.reactions,
            "target_state_hash": task.target_state_hash,
            "target_diff": task.target_diff,
            "difficulty": task.difficulty,
            "metadata": task.metadata,
            "call_ids": [c.id for c in task.reference_solution],
            "verification": task.verification.model_dump(mode="json"),
            "dialogue": [t.model_dump(mode="json") for t in task.dialogue],
        },
    }


def from_tau2(data: dict[str, Any]) -> Task:
    """A `Task` from a task this module exported (clear errors for anything else)."""
    if not isinstance(data, dict):
        raise ValueError(f"a τ²-bench task must be a JSON object, got {type(data).__name__}")
    ext = data.get("trajforge")
    if not isinstance(ext, dict) or ext.get("format") != FORMAT:
        raise ValueError(
            f"task {data.get('id')!r} is not a trajforge export: it has no 'trajforge' block (format {FORMAT}). "
            "A trajforge task starts from and is judged against a state of one of trajforge's worlds: a state "
            "recipe (world, generator seed and scale, Set Designer patches, the state hash they produce) and a "
            "target state hash and diff, which τ²-bench tasks do not carry (they run on τ²'s own domain "
            "databases and tools). Importing a τ²-bench task would need a trajforge world of its domain whose "
            "database and tool names match τ²'s, a state recipe that rebuilds τ²'s initial database, and the "
            "target state its gold actions reach; no built-in world has them.")
    try:
        scenario = data["user_scenario"]
        instructions = scenario["instructions"]
        state = ext["state"] if "state" in ext else \
            data["initial_state"]["initialization_data"]["agent_data"]["trajforge_state"]  # first exports
        actions = data["evaluation_criteria"]["actions"] or []
    except (KeyError, TypeError) as exc:
        raise ValueError(f"task {data.get('id')!r} lacks a τ²-bench field: {exc}") from exc
    ids = ext.get("call_ids") or [None] * len(actions)
    if len(ids) != len(actions):
        raise ValueError(f"task {data.get('id')!r}: {len(actions)} actions but {len(ids)} call ids")
    task = Task(
        schema_version=ext["schema_version"],
        id=data["id"],
        world=instructions["domain"],
        method=ext["method"],
        split=ext["split"],
        instruction=ext["instruction"],
        user=UserScenario(
            persona=scenario.get("persona") or "",
            reason=instructions.get("reason_for_call") or "",
            known_info=ext["known_info"],
            unknown_info=ext["unknown_info"],
            task_instructions=ext.get("task_instructions", instructions.get("task_instructions") or ""),
            reactions=ext.get("reactions") or [],
        ),
        initial_state=StateRef(**state),
        target_state_hash=ext["target_state_hash"],
        target_diff=ext["target_diff"],
        reference_solution=[ToolCall(name=a["name"], arguments=a.get("arguments") or {}, id=cid)
                            for a, cid in zip(actions, ids, strict=True)],
        difficulty=ext["difficulty"],
        metadata=ext["metadata"],
        **({"verification": ext["verification"]} if "verification" in ext else {}),
        dialogue=ext.get("dialogue") or [],
    )
    if task.id != task.compute_id():
        raise ValueError(f"task {task.id!r}: its content does not hash to its id (edited after export?)")
    return task


def export_tau2(tasks: Iterable[Task], out: Path | str) -> Path:
    """Write tasks as a τ²-bench `tasks.json` (a JSON list)."""
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps([to_tau2(t) for t in tasks], indent=1, ensure_ascii=False, default=str) + "\n")
    return out


def import_tau2(path: Path | str) -> list[Task]:
    """Read a `tasks.json` written by `export_tau2`."""
    data = json.loads(Path(path).read_text())
    if not isinstance(data, list):
        raise ValueError(f"{path}: a τ²-bench tasks file is a JSON list of tasks")
    return [from_tau2(d) for d in data]


def export_tau2_file(tasks_path: Path | str, out: Path | str) -> Path:
    """`trajforge export-tau2 --tasks PATH --to FILE`: a committed tasks dataset to τ² JSON."""
    from data.store import read_records

    return export_tau2(read_records(tasks_path, kind="tasks"), out)
