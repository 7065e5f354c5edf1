"""Token-exact turn records in trajectories: Parquet round trip, and version-1 data
(without the column) still reads."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

from data import store
from data.records import TRAJECTORY_SCHEMA_VERSION, Sampling, Trajectory, TurnTokens
from data.schema import TRAJECTORY_SCHEMA, trajectory_from_row, trajectory_to_row

LIN = store.Lineage(config_hash="abc", code_version="test")


def _traj(i: int, tokens: bool) -> Trajectory:
    turns = []
    if tokens:
        turns = [
            TurnTokens(
                turn=1,
                message_index=2,
                prompt_token_ids=[1, 2, 3],
                completion_token_ids=[7, 8],
                completion_logprobs=[-0.125, -2.0000001],
                prompt_logprobs=[None, -1.5, -0.25],
                finish_reason="stop",
            ),
            TurnTokens(turn=2, message_index=4, completion_token_ids=[9], finish_reason="length"),
        ]
    return Trajectory(
        id=f"traj-{i}",
        task_id="task-1",
        trial=i,
        model="m",
        sampling=Sampling(seed=i),
        messages=[{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}],
        termination="user_stop",
        turn_tokens=turns,
    )


def test_turn_tokens_roundtrip(tmp_path: Path) -> None:
    trajs = [_traj(0, True), _traj(1, False)]
    assert trajs[0].schema_version == TRAJECTORY_SCHEMA_VERSION == 4
    path = store.write_records(tmp_path, "trajectories", "trajectories", trajs, LIN)
    back = store.read_records(path, "trajectories")
    assert [t.model_dump() for t in back] == [t.model_dump() for t in trajs]
    assert back[0].turn_tokens[0].prompt_logprobs == [None, -1.5, -0.25]
    table = store.read_table(path)
    assert table.schema.field("turn_tokens").type == TRAJECTORY_SCHEMA.field("turn_tokens").type


@pytest.mark.parametrize("version", [1, 2])
def test_older_versions_still_read(tmp_path: Path, version: int) -> None:
    """Datasets written before schema version 3 (no `reference` column: the flag sat in
    metadata) and before version 2 (no turn_tokens column either) read back, upgraded."""
    dropped = {"reference", "turn_tokens"} if version == 1 else {"reference"}
    old_schema = pa.schema([f for f in TRAJECTORY_SCHEMA if f.name not in dropped])
    row = trajectory_to_row(_traj(3, version == 2))
    for name in dropped:
        row.pop(name)
    row["schema_version"] = version
    row["metadata"] = '{"reference":true,"strategy":"s"}'
    with store.DatasetWriter(tmp_path, "old", "trajectories", old_schema, version, version="v1") as w:
        w.write_rows([row])
        path = w.commit(LIN)
    (back,) = store.read_records(path, "trajectories")
    assert back.schema_version == TRAJECTORY_SCHEMA_VERSION and back.id == "traj-3"
    assert back.reference is True and back.metadata == {"strategy": "s"}
    assert len(back.turn_tokens) == (2 if version == 2 else 0)


def test_newer_version_is_refused() -> None:
    row = trajectory_to_row(_traj(4, False))
    row["schema_version"] = TRAJECTORY_SCHEMA_VERSION + 1
    with pytest.raises(ValueError, match="newer than this code"):
        trajectory_from_row(row)
