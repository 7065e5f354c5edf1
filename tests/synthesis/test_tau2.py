"""τ²-bench export/import: tasks of every registered tool-use world round-trip to equal
`Task` records, the JSON has τ²-bench's task shape, and foreign or edited tasks are refused."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from data import store
from data.records import Task
from envs.registry import get_world, list_worlds
from envs.world import World
from synthesis.base import SynthesisConfig, get_method
from synthesis.tau2 import export_tau2, export_tau2_file, from_tau2, import_tau2, to_tau2


def _tool_use_worlds() -> list[str]:
    return [n for n in list_worlds() if isinstance(get_world(n), World) and (get_world(n).folder / "schema.sql").exists()]


@pytest.fixture(scope="module")
def world_tasks() -> dict[str, list[Task]]:
    return {name: get_method("logic_driven")(SynthesisConfig(world=name, n_tasks=3, seed=5), get_world(name)).tasks
            for name in _tool_use_worlds()}


def test_every_tool_use_world_round_trips(world_tasks: dict[str, list[Task]], tmp_path: Path) -> None:
    assert {"airline", "telecom", "clinic"} <= set(world_tasks)
    assert "terminal" not in world_tasks
    for name, tasks in world_tasks.items():
        assert tasks, name
        path = export_tau2(tasks, tmp_path / f"{name}.json")
        back = import_tau2(path)
        assert [t.model_dump() for t in back] == [t.model_dump() for t in tasks], name
        assert all(t.id == t.compute_id() for t in back)


def test_export_has_the_tau2_task_shape(world_tasks: dict[str, list[Task]]) -> None:
    task = world_tasks["airline"][0]
    d = json.loads(json.dumps(to_tau2(task)))
    assert d["id"] == task.id
    assert set(d["description"]) == {"purpose", "relevant_policies", "notes"}
    instr = d["user_scenario"]["instructions"]
    assert set(instr) == {"domain", "reason_for_call", "known_info", "unknown_info", "task_instructions"}
    assert instr["domain"] == "airline" and isinstance(instr["known_info"], str)
    assert f"user_id: {task.user.known_info['user_id']}" in instr["known_info"]
    crit = d["evaluation_criteria"]
    assert crit["reward_basis"] == ["DB", "COMMUNICATE"] and crit["communicate_info"]
    assert [(a["name"], a["arguments"]) for a in crit["actions"]] == \
        [(c.name, c.arguments) for c in task.reference_solution]
    assert len({a["action_id"] for a in crit["actions"]}) == len(crit["actions"])
    # the state is trajforge's: nothing for a τ² domain database to apply (or reject)
    assert d["initial_state"] is None
    assert d["trajforge"]["state"] == task.initial_state.model_dump()
    assert d["trajforge"]["runs_on"] == "trajforge world 'airline'"


def test_export_from_a_committed_tasks_dataset(world_tasks: dict[str, list[Task]], tmp_path: Path) -> None:
    tasks = world_tasks["telecom"]
    path = store.write_records(tmp_path, "tasks", "tasks", tasks, store.Lineage())
    out = export_tau2_file(path, tmp_path / "tau2" / "tasks.json")
    assert [t.id for t in import_tau2(out)] == [t.id for t in tasks]


def test_exports_of_the_first_format_still_import(world_tasks: dict[str, list[Task]]) -> None:
    task = world_tasks["airline"][0]
    old = json.loads(json.dumps(to_tau2(task)))
    old["initial_state"] = {"initialization_data": {"agent_data": {"trajforge_state": old["trajforge"].pop("state")},
                                                    "user_data": None},
                            "initialization_actions": None, "message_history": None}
    assert from_tau2(old) == task


# One of τ²-bench's own retail tasks, in its shape (abridged): no trajforge block.
TAU2_RETAIL_TASK = {
    "id": "0",
    "description": {"purpose": "Exchange two items", "relevant_policies": None, "notes": None},
    "user_scenario": {"persona": None, "instructions": {
        "domain": "retail", "reason_for_call": "You want to exchange a keyboard.",
        "known_info": "You are Yusuf Rossi in zip code 19122.", "unknown_info": None,
        "task_instructions": "You are detail-oriented."}},
    "initial_state": None,
    "evaluation_criteria": {"actions": [{"action_id": "0_0", "name": "find_user_id_by_name_zip", "arguments": {
        "first_name": "Yusuf", "last_name": "Rossi", "zip": "19122"}, "info": None}],
        "communicate_info": [], "nl_assertions": None, "reward_basis": ["DB"]},
}


def test_foreign_and_edited_tasks_are_refused(world_tasks: dict[str, list[Task]]) -> None:
    d = to_tau2(world_tasks["clinic"][0])
    foreign = {k: v for k, v in d.items() if k != "trajforge"}
    for task in (foreign, TAU2_RETAIL_TASK):
        with pytest.raises(ValueError, match="not a trajforge export") as err:
            from_tau2(task)
        # the error says why (trajforge tasks are states of its worlds) and what an import would need
        assert "state recipe" in str(err.value) and "target state" in str(err.value)
        assert "whose database and tool names match τ²'s" in str(err.value)
    edited = json.loads(json.dumps(d))
    edited["evaluation_criteria"]["actions"][-1]["arguments"]["injected"] = 1
    with pytest.raises(ValueError, match="does not hash to its id"):
        from_tau2(edited)
    with pytest.raises(ValueError, match="JSON object"):
        from_tau2([])  # type: ignore[arg-type]
