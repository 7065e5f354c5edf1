"""τ²-bench export/import (synthesis/tau2.py).

Tasks of trajforge's own worlds round-trip to equal `Task` records under their own domain
names (`trajforge_<world>`), which τ² cannot run or grade; tasks of τ²'s worlds export into
τ²'s own domains, where τ²'s evaluator scores the reference 1.0 and a no-op 0 on a write
task; τ²'s own tasks import; `export-tau2` reads a tasks dataset or a release. The τ² parts
skip without the `tau2` extra."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pyarrow as pa
import pytest

from data import store
from data.records import Task, ToolCall
from envs.registry import get_world, list_worlds
from envs.world import World
from synthesis.base import SynthesisConfig, get_method
from synthesis.tau2 import (
    FORMAT,
    export_tau2,
    export_tau2_file,
    from_tau2,
    import_tau2,
    initial_state_of,
    tasks_of,
    to_tau2,
)

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # no network when τ² imports litellm


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


def test_an_own_world_export_has_its_own_domain(world_tasks: dict[str, list[Task]]) -> None:
    task = world_tasks["airline"][0]
    d = json.loads(json.dumps(to_tau2(task)))
    assert d["id"] == task.id
    assert set(d["description"]) == {"purpose", "relevant_policies", "notes"}
    instr = d["user_scenario"]["instructions"]
    assert set(instr) == {"domain", "reason_for_call", "known_info", "unknown_info", "task_instructions"}
    # not τ²'s airline: τ² would run it against its own database and tools
    assert instr["domain"] == "trajforge_airline" and isinstance(instr["known_info"], str)
    assert f"user_id: {task.user.known_info['user_id']}" in instr["known_info"]
    crit = d["evaluation_criteria"]
    assert crit["reward_basis"] == ["DB", "COMMUNICATE"] and crit["communicate_info"]
    assert [(a["name"], a["arguments"]) for a in crit["actions"]] == \
        [(c.name, c.arguments) for c in task.reference_solution]
    assert len({a["action_id"] for a in crit["actions"]}) == len(crit["actions"])
    assert d["initial_state"] is None  # the state is trajforge's, in the block
    assert d["trajforge"]["format"] == FORMAT and d["trajforge"]["world"] == "airline"
    assert d["trajforge"]["state"] == task.initial_state.model_dump()
    assert "not a τ² domain" in d["trajforge"]["runs_on"]


def test_export_from_a_tasks_dataset_and_from_a_release(world_tasks: dict[str, list[Task]], tmp_path: Path) -> None:
    tasks = world_tasks["telecom"]
    path = store.write_records(tmp_path, "tasks", "tasks", tasks, store.Lineage())
    out = export_tau2_file(path, tmp_path / "tau2" / "tasks.json")
    assert [t.id for t in import_tau2(out)] == [t.id for t in tasks]
    # an rl release: every row carries its full task (two rows of the first task: one export)
    run = tmp_path / "run"
    schema = pa.schema([("task", pa.string())])
    with store.DatasetWriter(run / "releases", "rl", "rl", schema, 1) as w:
        w.write_rows([{"task": t.model_dump_json()} for t in [tasks[0], *tasks]])
        rl = w.commit(store.Lineage())
    # LATEST.json names the release where the producing machine kept it: not here
    store.write_pointer(run / "releases", {"releases": {"rl": "/elsewhere/releases/rl/v1"}})
    for source in (rl, run / "releases" / "rl", run / "releases", run):
        assert [t.id for t in tasks_of(source)] == [t.id for t in tasks], source
    with pytest.raises(ValueError, match="no tasks dataset or rl release"):
        list(tasks_of(tmp_path / "nothing"))


def test_exports_of_the_first_format_still_import(world_tasks: dict[str, list[Task]]) -> None:
    task = world_tasks["airline"][0]
    old = json.loads(json.dumps(to_tau2(task)))
    ext = old["trajforge"]
    ext["format"] = "trajforge-tau2/1"
    old["user_scenario"]["instructions"]["domain"] = ext.pop("world")
    ext["call_ids"] = [c["id"] for c in ext.pop("calls")]
    for k in ("persona", "reason"):
        ext.pop(k)
    old["initial_state"] = {"initialization_data": {"agent_data": {"trajforge_state": ext.pop("state")},
                                                    "user_data": None},
                            "initialization_actions": None, "message_history": None}
    assert from_tau2(old) == task


# One of τ²-bench's telecom tasks, in its shape (abridged): no trajforge block, and a domain
# without a trajforge world (the user has tools too).
TAU2_TELECOM_TASK = {
    "id": "t0",
    "description": {"purpose": "Fix mobile data", "relevant_policies": None, "notes": None},
    "user_scenario": {"persona": None, "instructions": {
        "domain": "telecom", "reason_for_call": "Your mobile data is not working.",
        "known_info": "You are John Smith.", "unknown_info": None, "task_instructions": "."}},
    "initial_state": None,
    "evaluation_criteria": {"actions": [], "communicate_info": [], "nl_assertions": None, "reward_basis": ["DB"]},
}


def test_foreign_and_edited_tasks_are_refused(world_tasks: dict[str, list[Task]]) -> None:
    d = to_tau2(world_tasks["clinic"][0])
    foreign = {k: v for k, v in d.items() if k != "trajforge"}
    with pytest.raises(ValueError, match="'trajforge_clinic'.*no 'trajforge' block"):
        from_tau2(foreign)
    with pytest.raises(ValueError, match="domain 'telecom' has no trajforge world"):
        from_tau2(TAU2_TELECOM_TASK)
    edited = json.loads(json.dumps(d))
    edited["trajforge"]["calls"][-1]["arguments"]["injected"] = 1
    with pytest.raises(ValueError, match="does not hash to its id"):
        from_tau2(edited)
    with pytest.raises(ValueError, match="JSON object"):
        from_tau2([])  # type: ignore[arg-type]


def test_state_patches_become_taus_initial_state() -> None:
    from data.records import canonical_json

    patches = [canonical_json({"op": "update_db", "data": {"users": {}}}),
               canonical_json({"op": "call", "env_type": "assistant", "func_name": "f", "arguments": {"a": 1}})]
    assert initial_state_of(patches) == {
        "initialization_data": {"agent_data": {"users": {}}, "user_data": None},
        "initialization_actions": [{"env_type": "assistant", "func_name": "f", "arguments": {"a": 1}}],
        "message_history": None}
    assert initial_state_of([]) is None
    with pytest.raises(ValueError, match="no place"):
        initial_state_of(list(reversed(patches)))


# -- τ²'s worlds: exports that τ²'s own runtime runs -------------------------------------------------


def _gold_messages(task: Task, calls: list[ToolCall] | None = None) -> list[dict]:
    from verifiers.tau2_reward import reference_messages

    return reference_messages(task, calls)


@pytest.fixture(scope="module")
def retail_tasks() -> list[Task]:
    """Two τ² retail train tasks as trajforge tasks: one that writes, then one that does not."""
    pytest.importorskip("tau2")
    from envs.tau2_world import task_from_tau2, tau2_tasks

    world = get_world("tau2_retail")
    out: dict[bool, Task] = {}
    for t2 in tau2_tasks("retail", "train"):
        task = task_from_tau2(world, t2)
        out.setdefault(task.target_state_hash != task.initial_state.state_hash, task)
        if len(out) == 2:
            return [out[True], out[False]]
    raise AssertionError("no retail write and read-only train tasks")


def _synthesized(task: Task) -> Task:
    """The task as another method would make it in a τ² world: no τ² task to copy."""
    meta = {k: v for k, v in task.metadata.items() if k != "tau2_task"}
    return task.model_copy(update={"metadata": meta, "method": "logic_driven", "id": ""}).with_id()


def _score(exported: dict, task: Task, calls: list[ToolCall] | None = None) -> float:
    from tau2.data_model.tasks import Task as T2Task

    from verifiers.tau2_reward import tau2_reward

    t2 = T2Task.model_validate(json.loads(json.dumps(exported)))
    return tau2_reward(t2, _gold_messages(task, calls), domain=exported["user_scenario"]["instructions"]["domain"]).reward


@pytest.mark.slow  # a τ² or whole-flow integration test: make test runs it, the fast tier does not
def test_tau2_world_exports_run_in_taus_domain(retail_tasks: list[Task]) -> None:
    writes, reads = retail_tasks
    for task in (writes, _synthesized(writes), reads, _synthesized(reads)):
        d = to_tau2(task)
        assert d["user_scenario"]["instructions"]["domain"] == "retail"
        assert {a["name"] for a in d["evaluation_criteria"]["actions"]} <= set(get_world("tau2_retail").tools)
        assert from_tau2(json.loads(json.dumps(d))) == task  # and back
        assert _score(d, task) == 1.0, task.method  # τ²'s evaluator, on τ²'s database
    world = get_world("tau2_retail")
    for task in (writes, _synthesized(writes)):  # doing nothing (or only looking) fails a write task
        looks = [c for c in task.reference_solution if not world.tools[c.name].write]
        assert _score(to_tau2(task), task, []) == 0.0
        assert _score(to_tau2(task), task, looks) == 0.0
    basis = to_tau2(_synthesized(reads))["evaluation_criteria"]["reward_basis"]
    assert basis == reads.verification.basis  # τ²'s own basis travels with the task


def test_a_read_only_task_without_a_basis_needs_its_actions(retail_tasks: list[Task]) -> None:
    _, reads = retail_tasks
    bare = _synthesized(reads).model_copy(update={"id": ""})
    bare = bare.model_copy(update={"verification": bare.verification.model_copy(
        update={"basis": [], "communicate": []})}).with_id()
    d = to_tau2(bare)
    assert d["evaluation_criteria"]["reward_basis"] == ["DB", "ACTION"]
    assert _score(d, bare) == 1.0 and _score(d, bare, []) == 0.0


def test_own_world_exports_cannot_be_graded_by_tau2(world_tasks: dict[str, list[Task]], tmp_path: Path) -> None:
    pytest.importorskip("tau2")
    from tau2.data_model.tasks import Task as T2Task

    from synthesis.tau2 import register_with_tau2
    from verifiers.tau2_reward import tau2_reward

    task = world_tasks["airline"][0]
    d = to_tau2(task)
    with pytest.raises(KeyError, match="trajforge_airline"):
        tau2_reward(T2Task.model_validate(d), [{"role": "user", "content": "hi"}],
                    domain=d["user_scenario"]["instructions"]["domain"])
    path = export_tau2([task], tmp_path / "own.json")
    with pytest.raises(ValueError, match="not τ²'s"):
        register_with_tau2(path)


def test_taus_own_tasks_import_and_exports_register_as_task_sets(retail_tasks: list[Task], tmp_path: Path) -> None:
    from tau2.registry import registry

    from envs.tau2_world import task_from_tau2, tau2_tasks
    from synthesis.tau2 import register_with_tau2

    writes, _ = retail_tasks
    raw = writes.metadata["tau2_task"]
    assert from_tau2(json.loads(json.dumps(raw))) == writes  # τ²'s own train task, as τ² wrote it
    test = tau2_tasks("retail", "test")[0]
    imported = from_tau2(test.model_dump(mode="json"))
    assert imported.split == "test" and imported == task_from_tau2(get_world("tau2_retail"), test, split="test")
    path = export_tau2([writes, _synthesized(writes)], tmp_path / "mine.json")
    sets = register_with_tau2(path, name=f"trajforge_{tmp_path.name}")
    assert list(sets) == ["retail"]
    loaded = registry.get_tasks_loader(sets["retail"])()
    assert [t.id for t in loaded] == [writes.id, _synthesized(writes).id]
