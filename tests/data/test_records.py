"""Typed records across layers: the task's verification block, and readers of older versions."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pytest

from data import store
from data.records import TASK_SCHEMA_VERSION, Fact, Task, Verification
from data.schema import TASK_SCHEMA, task_from_row, task_to_row

LIN = store.Lineage(config_hash="c", code_version="v", parents=[])


def test_verification_round_trips_through_parquet(tasks: list[Task], tmp_path: Path) -> None:
    task = tasks[0].model_copy(update={"verification": Verification(
        basis=["DB", "COMMUNICATE"], outcome="change", nl_assertions=["The agent booked it."],
        communicate=[Fact(label="new reservation id", any_of=["R1A2B3"], kind="id")])})
    path = store.write_records(tmp_path, "tasks", "tasks", [task], LIN)
    (back,) = store.read_records(path, "tasks")
    assert back == task and back.verification.communicate[0].kind == "id"
    assert store.read_table(path).schema.field("verification").type == pa.string()


def test_version_1_rows_are_upgraded(tasks: list[Task], tmp_path: Path) -> None:
    """Version 1 kept the verification block in metadata; its rows (no `verification`
    column) and its task JSON (rl releases) read as version 2."""
    row = task_to_row(tasks[0])
    row.pop("verification")
    row.pop("dialogue")
    row["schema_version"] = 1
    row["metadata"] = json.dumps({"boundary": "b", "reward_basis": ["DB", "COMMUNICATE"],
                                  "communicate_info": ["R1A2B3", 520], "verifier": "state_equivalence",
                                  "constraints": [{"kind": "book", "fields": {"flight_id": "F1"}}],
                                  "fail_to_pass": ["t::a"], "nl_assertions": ["polite"]})
    old_schema = pa.schema([f for f in TASK_SCHEMA if f.name not in ("verification", "dialogue")])
    with store.DatasetWriter(tmp_path, "old", "tasks", old_schema, 1, version="v1") as w:
        w.write_rows([row])
        path = w.commit(LIN)
    (back,) = store.read_records(path, "tasks")
    v = back.verification
    assert back.schema_version == TASK_SCHEMA_VERSION and back.metadata == {"boundary": "b"}
    assert v.basis == ["DB", "COMMUNICATE"] and v.verifier == "state_equivalence"
    assert [(f.label, f.any_of) for f in v.communicate] == [("R1A2B3", ["R1A2B3"]), ("520", ["520"])]
    assert v.constraints == [{"kind": "book", "fields": {"flight_id": "F1"}}]
    assert v.fail_to_pass == ["t::a"] and v.nl_assertions == ["polite"]
    as_json = json.loads(json.dumps({**task_to_row(tasks[0]), "schema_version": 1}))
    as_json.pop("verification")
    as_json.pop("dialogue")
    assert task_from_row(as_json).verification == Verification()


def test_newer_task_version_is_refused(tasks: list[Task]) -> None:
    row = task_to_row(tasks[0])
    row["schema_version"] = TASK_SCHEMA_VERSION + 1
    with pytest.raises(ValueError, match="newer than this code"):
        task_from_row(row)


def test_unknown_verification_keys_are_errors(tasks: list[Task]) -> None:
    with pytest.raises(ValueError, match="reward_basis"):
        Verification.model_validate({"reward_basis": ["DB"]})


def test_rollout_key_leaves_transport_out(tasks: list[Task]) -> None:
    """Retry, timeout and endpoint settings change how requests travel, not what the model
    answers: cached rollouts survive them. The model, its sampling and its options do not."""
    from pipelines.config import load_config
    from pipelines.keys import rollout_key

    def key(**options: object) -> str:
        return rollout_key(load_config(None, {"rollout.model": {"kind": "openai", "name": "q", "options": options}}),
                           tasks[:2])

    base = key()
    assert key(max_retries=9, backoff_base_s=2.0, backoff_max_s=60.0, timeout_s=5.0,
               base_urls=["http://a:1/v1", "http://b:1/v1"], breaker_failures=2) == base
    assert key(logprobs=True) != base and key(extra_body={"top_k": 5}) != base


def test_trajectories_of_one_world_hold_one_copy_of_the_tool_schemas() -> None:
    """Equal tool lists are one object whichever way a trajectory is made (constructed, read
    back from JSON); a different list stays its own, and the records are unchanged."""
    from data.records import Trajectory

    tools = [{"type": "function", "function": {"name": "get_user", "parameters": {"type": "object"}}}]
    a = Trajectory(task_id="t", trial=0, model="m", tools=[dict(x) for x in tools])
    b = Trajectory.model_validate_json(a.model_dump_json())
    c = Trajectory(task_id="t", trial=1, model="m", tools=[{**tools[0], "type": "other"}])
    assert a.tools is b.tools and a.tools == tools and b == a
    assert c.tools is not a.tools and c.tools[0]["type"] == "other"


def test_packed_tasks_give_back_the_same_tasks(tasks: list[Task], tmp_path: Path) -> None:
    """A run's driver holds its task shards packed: the same tasks come back (by index, slice,
    iteration, after pickling, joined), in a fraction of the memory, and a dataset's tasks
    read one at a time (`store.iter_records`) are those read at once."""
    import pickle
    import tracemalloc

    from data.records import PackedTasks

    packed = PackedTasks(tasks)
    assert len(packed) == len(tasks) and packed.ids == [t.id for t in tasks]
    assert list(packed) == tasks and packed[1] == tasks[1] and packed[1:3] == tasks[1:3]
    assert list(pickle.loads(pickle.dumps(packed))) == tasks
    joined = PackedTasks.concat([PackedTasks(tasks[:2]), PackedTasks(tasks[2:])])
    assert list(joined) == tasks and joined.ids == packed.ids
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        held = [t.model_copy(deep=True) for t in tasks]
        objects = tracemalloc.get_traced_memory()[0] - before
        before = tracemalloc.get_traced_memory()[0]
        again = PackedTasks(held)
        packed_bytes = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert len(again) == len(held) and packed_bytes * 4 < objects, (packed_bytes, objects)
    path = store.write_records(tmp_path, "tasks", "tasks", tasks, store.Lineage(config_hash="x"))
    assert list(store.iter_records(path, "tasks")) == store.read_records(path, "tasks") == tasks
