"""Shard parts: the Parquet file one shard of a stage wrote, and a reference to it.

A stage's shard (a few tasks' rollouts, their verdicts, their curated rows) writes its rows
to one part, `ROOT/<stage>/<key[:2]>/<key>.parquet`, named by the shard's content key (see
`pipelines.keys`), with its small figures beside it in `<key>.json`. The flow passes
`PartRef`s between stages instead of records, so no process but the shard's ever holds the
shard's rows, and a committed dataset is the set of its stage's parts
(`store.DatasetWriter.adopt`).

ROOT is a local folder (`<out>/parts`: parts are written to a temporary file and renamed
into place after their sidecar) or an fsspec URL (`s3://bucket/parts`, `file:///nfs/parts`)
that every worker of a cluster reaches (the part is uploaded first, its sidecar last, as the
marker: object stores have no rename). Either way a shard killed mid-write leaves no part
that counts: `find` treats a part without a readable sidecar, or whose row count differs
from the sidecar's, as absent.

Every part carries its SHA-256 in its sidecar. `find` recomputes it, so a part altered on
disk after it was written (a flipped byte, a truncated copy) is a miss and its shard is
computed again, never read; a reader given a `PartRef` checks it too (`verify`) and raises
`CorruptPartError` on a mismatch. A part written by a failed shard (`meta["incomplete"]`,
e.g. trajectories that ended on a model-server error) is never a hit either.
"""

from __future__ import annotations

import hashlib
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


class CorruptPartError(RuntimeError):
    """A part's bytes are not the ones its sidecar's checksum names."""


@dataclass(frozen=True)
class PartRef:
    """One shard's part: its file, row count and figures (`meta`, small and JSON-typed),
    whether it was already there (a resumed or repeated shard), and its SHA-256."""

    path: str
    rows: int
    meta: dict[str, Any] = field(default_factory=dict)
    cached: bool = False
    sha256: str = ""


def is_url(path: Path | str) -> bool:
    return "://" in str(path)


def _fs(url: str) -> tuple[Any, str]:
    import fsspec

    return fsspec.core.url_to_fs(url)


def part_path(root: Path | str, stage: str, key: str) -> str:
    """Where the part of `key` lives (a local path, or a URL under a URL root)."""
    if is_url(root):
        return f"{str(root).rstrip('/')}/{stage}/{key[:2]}/{key}.parquet"
    return str(Path(root) / stage / key[:2] / f"{key}.parquet")


def _sidecar(path: str) -> str:
    return path[: -len(".parquet")] + ".json"


def open_part(path: str) -> Any:
    """A `pq.ParquetFile` of a part, local or at a URL."""
    if is_url(path):
        fs, p = _fs(path)
        return pq.ParquetFile(fs.open(p, "rb"))
    return pq.ParquetFile(path)


def _read_text(path: str) -> str:
    if is_url(path):
        fs, p = _fs(path)
        return fs.cat_file(p).decode()
    return Path(path).read_text()


def sha256_of(path: str) -> str:
    """The SHA-256 of a part's bytes (local or at a URL)."""
    h = hashlib.sha256()
    if is_url(path):
        fs, p = _fs(path)
        f = fs.open(p, "rb")
    else:
        f = open(path, "rb")  # noqa: SIM115  (closed below)
    with f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def find(root: Path | str, stage: str, key: str) -> PartRef | None:
    """The part of `key` if it is complete and intact (file and sidecar readable, the file's
    checksum the sidecar's, not marked incomplete), else None: its shard is computed again."""
    path = part_path(root, stage, key)
    try:
        side = json.loads(_read_text(_sidecar(path)))
        digest = sha256_of(path)
        rows = open_part(path).metadata.num_rows
    except (OSError, ValueError):
        return None
    meta = side.get("meta") or {}
    if side.get("rows") != rows or side.get("sha256") != digest or meta.get("incomplete"):
        return None
    return PartRef(path, rows, meta, cached=True, sha256=digest)


def verify(ref: PartRef) -> None:
    """Raise `CorruptPartError` unless the part's bytes still have the checksum it was
    written with (a ref without one, from an older writer, is not checked)."""
    if ref.sha256 and (found := sha256_of(ref.path)) != ref.sha256:
        raise CorruptPartError(f"part {ref.path} was altered after it was written "
                               f"(sha256 {found[:12]}…, written {ref.sha256[:12]}…); rerun to recompute it")


def remove(ref: PartRef) -> None:
    """Delete a part and its sidecar (a stage's temporary parts, once written on)."""
    for path in (ref.path, _sidecar(ref.path)):
        if is_url(path):
            fs, p = _fs(path)
            if fs.exists(p):
                fs.rm(p)
        else:
            Path(path).unlink(missing_ok=True)


def _write_tables(where: Any, schema: pa.Schema, tables: Iterable[pa.Table]) -> int:
    rows = 0
    with pq.ParquetWriter(where, schema, compression="zstd") as w:
        for table in tables:
            if not table.schema.equals(schema):
                table = table.cast(schema)
            if table.num_rows:
                w.write_table(table, row_group_size=ROW_GROUP_ROWS)
                rows += table.num_rows
    return rows


def write(root: Path | str, stage: str, key: str, schema: pa.Schema, tables: Iterable[pa.Table],
          meta: dict[str, Any] | None = None) -> PartRef:
    """Write `tables` (cast to `schema`, in row groups of at most `ROW_GROUP_ROWS`) as the
    part of `key`, atomically; `meta` goes to its sidecar."""
    path = part_path(root, stage, key)
    if is_url(path):
        fs, p = _fs(path)
        fs.makedirs(p.rsplit("/", 1)[0], exist_ok=True)
        if fs.exists(_sidecar(p)):
            fs.rm(_sidecar(p))  # the marker goes first: a rewrite half-done is absent
        with fs.open(p, "wb") as f:
            rows = _write_tables(f, schema, tables)
        digest = sha256_of(path)
        fs.pipe_file(_sidecar(p), json.dumps({"rows": rows, "sha256": digest, "meta": meta or {}},
                                             default=str).encode())
        return PartRef(path, rows, meta or {}, sha256=digest)
    local = Path(path)
    local.parent.mkdir(parents=True, exist_ok=True)
    tmp = local.with_name(f".{local.name}.{uuid.uuid4().hex[:8]}.tmp")
    try:
        rows = _write_tables(tmp, schema, tables)
        with open(tmp, "rb") as f:
            os.fsync(f.fileno())
        digest = sha256_of(str(tmp))
        write_json_atomic(_sidecar(path), {"rows": rows, "sha256": digest, "meta": meta or {}})
        os.replace(tmp, local)
    finally:
        tmp.unlink(missing_ok=True)
    return PartRef(path, rows, meta or {}, sha256=digest)


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


def iter_batches(path: PartRef | Path | str, columns: Sequence[str] | None = None,
                 batch_rows: int = ROW_GROUP_ROWS) -> Iterator[pa.Table]:
    """A part's rows as tables of at most `batch_rows` rows (a `PartRef`'s checksum checked
    first)."""
    if isinstance(path, PartRef):
        verify(path)
        path = path.path
    pf = open_part(str(path))
    for batch in pf.iter_batches(batch_size=batch_rows, columns=list(columns) if columns else None):
        yield pa.Table.from_batches([batch])


def read_records(ref: PartRef | Path | str, kind: str) -> list[Any]:
    """The typed records of a part."""
    _, _, from_row = CODECS[kind]
    return [from_row(r) for t in iter_batches(ref) for r in t.to_pylist()]


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
