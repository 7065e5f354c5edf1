"""Shard parts: the Parquet file one shard of a stage wrote, and a reference to it.

A stage's shard (a few tasks' rollouts, their verdicts, their curated rows) writes its rows
to one part, `ROOT/<stage>/<key[:2]>/<key>.parquet`, named by the shard's content key (see
`pipelines.keys`), with its small figures beside it in `<key>.json`. The flow passes
`PartRef`s between stages instead of records, so no process but the shard's ever holds the
shard's rows, and a committed dataset is the set of its stage's parts
(`store.DatasetWriter.adopt`).

A part is written to a temporary file and renamed into place after its sidecar, so a shard
killed mid-write leaves no part; `find` treats a part without a readable sidecar as absent.
"""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from data.atomic import write_json_atomic
from data.schema import CODECS, table_from_rows

ROW_GROUP_ROWS = 1_000


@dataclass(frozen=True)
class PartRef:
    """One shard's part: its file, row count and figures (`meta`, small and JSON-typed), and
    whether it was already there (a resumed or repeated shard)."""

    path: str
    rows: int
    meta: dict[str, Any] = field(default_factory=dict)
    cached: bool = False


def part_path(root: Path | str, stage: str, key: str) -> Path:
    return Path(root) / stage / key[:2] / f"{key}.parquet"


def _sidecar(path: Path) -> Path:
    return path.with_suffix(".json")


def find(root: Path | str, stage: str, key: str) -> PartRef | None:
    """The part of `key` if it is complete (file and sidecar readable), else None."""
    path = part_path(root, stage, key)
    try:
        side = json.loads(_sidecar(path).read_text())
        rows = pq.ParquetFile(path).metadata.num_rows
    except (OSError, ValueError):
        return None
    if side.get("rows") != rows:
        return None
    return PartRef(str(path), rows, side.get("meta") or {}, cached=True)


def write(root: Path | str, stage: str, key: str, schema: pa.Schema, tables: Iterable[pa.Table],
          meta: dict[str, Any] | None = None) -> PartRef:
    """Write `tables` (cast to `schema`, in row groups of at most `ROW_GROUP_ROWS`) as the
    part of `key`, atomically; `meta` goes to its sidecar."""
    path = part_path(root, stage, key)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex[:8]}.tmp")
    rows = 0
    try:
        with pq.ParquetWriter(tmp, schema, compression="zstd") as w:
            for table in tables:
                if not table.schema.equals(schema):
                    table = table.cast(schema)
                if table.num_rows:
                    w.write_table(table, row_group_size=ROW_GROUP_ROWS)
                    rows += table.num_rows
        with open(tmp, "rb") as f:
            os.fsync(f.fileno())
        write_json_atomic(_sidecar(path), {"rows": rows, "meta": meta or {}})
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    return PartRef(str(path), rows, meta or {})


def write_rows(root: Path | str, stage: str, key: str, schema: pa.Schema, rows: Sequence[dict[str, Any]],
               meta: dict[str, Any] | None = None) -> PartRef:
    """`write` from plain row dicts, converted `ROW_GROUP_ROWS` at a time."""
    return write(root, stage, key, schema,
                 (table_from_rows(list(rows[i:i + ROW_GROUP_ROWS]), schema)
                  for i in range(0, len(rows), ROW_GROUP_ROWS)), meta)


def write_records(root: Path | str, stage: str, key: str, kind: str, records: Sequence[Any],
                  meta: dict[str, Any] | None = None) -> PartRef:
    """`write` of typed records (`kind` in tasks/trajectories/verdicts)."""
    schema, to_row, _ = CODECS[kind]
    return write_rows(root, stage, key, schema, [to_row(r) for r in records], meta)


def iter_batches(path: Path | str, columns: Sequence[str] | None = None,
                 batch_rows: int = ROW_GROUP_ROWS) -> Iterator[pa.Table]:
    """A part's rows as tables of at most `batch_rows` rows."""
    pf = pq.ParquetFile(path)
    for batch in pf.iter_batches(batch_size=batch_rows, columns=list(columns) if columns else None):
        yield pa.Table.from_batches([batch])


def read_records(ref: PartRef | Path | str, kind: str) -> list[Any]:
    """The typed records of a part."""
    path = ref.path if isinstance(ref, PartRef) else ref
    _, _, from_row = CODECS[kind]
    return [from_row(r) for t in iter_batches(path) for r in t.to_pylist()]


def sum_stats(items: Iterable[dict[str, Any]], max_list: int = 10) -> dict[str, Any]:
    """Figures of several shards as one: numbers add (booleans: any), dicts merge key by key
    the same way, lists (examples) concatenate up to `max_list` items, and any other value
    (a name, a config) is the first shard's."""
    out: dict[str, Any] = {}
    for item in items:
        for k, v in item.items():
            if k not in out:
                out[k] = sum_stats([v], max_list) if isinstance(v, dict) else (list(v) if isinstance(v, list) else v)
                continue
            cur = out[k]
            if isinstance(v, bool) and isinstance(cur, bool):
                out[k] = cur or v
            elif isinstance(v, int | float) and isinstance(cur, int | float) and not isinstance(cur, bool):
                out[k] = cur + v
            elif isinstance(v, dict) and isinstance(cur, dict):
                out[k] = sum_stats([cur, v], max_list)
            elif isinstance(v, list) and isinstance(cur, list):
                out[k] = (cur + v)[:max_list]
    return out
