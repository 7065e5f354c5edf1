"""Versioned Parquet datasets with a manifest, lineage and atomic commits.

Layout of one dataset version::

    ROOT/<name>/<version>/
        data/part-00000.parquet ...
        manifest.json        schema version, files [{path, sha256, rows}], lineage, stats
        README.md            dataset card
        _SUCCESS             written last; readers refuse a folder without it

A writer fills a hidden staging folder beside the target and renames it into place, so
a reader sees either nothing or the whole version. Versions are immutable.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import subprocess
import uuid
from collections.abc import Iterable, Iterator, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from pydantic import BaseModel, Field

from data.atomic import write_atomic, write_json_atomic
from data.crash import crashpoint
from data.schema import CODECS, empty_table, table_from_rows

MANIFEST_VERSION = 1
SUCCESS = "_SUCCESS"
MANIFEST = "manifest.json"


class DatasetError(RuntimeError):
    """A dataset is missing, incomplete, corrupted or of an unknown schema."""


class FileEntry(BaseModel):
    path: str
    sha256: str
    rows: int
    bytes: int


class Lineage(BaseModel):
    config_hash: str = ""
    code_version: str = ""
    parents: list[str] = Field(default_factory=list)  # paths (or ids) of input datasets
    run_id: str = ""


class Manifest(BaseModel):
    manifest_version: int = MANIFEST_VERSION
    name: str
    version: str
    kind: str  # record kind or release kind: tasks, trajectories, verdicts, sft, rl
    schema_version: int
    created_at: str
    rows: int
    files: list[FileEntry]
    arrow_schema: str  # pyarrow schema, printed
    lineage: Lineage
    stats: dict[str, Any] = Field(default_factory=dict)


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def code_version() -> str:
    """Package version plus the git commit of the source tree when there is one."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        v = version("trajforge")
    except PackageNotFoundError:
        v = "0+unknown"
    here = Path(__file__).resolve().parent.parent
    try:
        sha = subprocess.run(
            ["git", "-C", str(here), "rev-parse", "--short", "HEAD"],
            capture_output=True, text=True, timeout=5, check=True,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", str(here), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True, text=True, timeout=5, check=True,
        ).stdout.strip()
        return f"{v}+g{sha}{'.dirty' if dirty else ''}"
    except (OSError, subprocess.SubprocessError):
        return v


def new_version(now: datetime | None = None) -> str:
    """A sortable, date-stamped version string."""
    now = now or datetime.now(UTC)
    return now.strftime("%Y%m%dT%H%M%S") + f"{now.microsecond // 1000:03d}Z"


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


ROW_GROUP_ROWS = 1_000  # rows per Parquet row group: what a reader holds at once


class PartWriter:
    """The open shard file of `DatasetWriter.part`: tables or row dicts appended in order."""

    def __init__(self, writer: pq.ParquetWriter, schema: pa.Schema) -> None:
        self.writer = writer
        self.schema = schema
        self.rows = 0

    def write(self, table: pa.Table) -> None:
        """Append `table`'s rows (cast to the schema), in row groups of at most `ROW_GROUP_ROWS`.
        A table without rows writes nothing: `datasets` fails on a row group of zero rows."""
        if not table.schema.equals(self.schema):
            table = table.cast(self.schema)
        if table.num_rows:
            self.writer.write_table(table, row_group_size=ROW_GROUP_ROWS)
            self.rows += table.num_rows

    def write_rows(self, rows: Sequence[dict[str, Any]]) -> None:
        self.write(table_from_rows(list(rows), self.schema))


class DatasetWriter:
    """Write shards into a staging folder, then `commit()` them as one dataset version."""

    def __init__(
        self,
        root: Path | str,
        name: str,
        kind: str,
        schema: pa.Schema,
        schema_version: int,
        version: str | None = None,
    ) -> None:
        self.root = Path(root)
        self.name = name
        self.kind = kind
        self.schema = schema
        self.schema_version = schema_version
        self.version = version or new_version()
        self.target = self.root / name / self.version
        if self.target.exists():
            raise DatasetError(f"dataset version already exists: {self.target}")
        # The writer's pid in the name lets a later run tell a dead writer's leftovers apart.
        self.staging = self.root / name / f".staging-{self.version}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        (self.staging / "data").mkdir(parents=True)
        self._files: list[FileEntry] = []
        self._open: set[str] = set()  # shard files being written (`part`)
        self._committed = False

    def write_rows(self, rows: Sequence[dict[str, Any]], prefix: str = "part") -> None:
        """Write one shard from plain row dicts (validated against the schema)."""
        self.write_table(table_from_rows(list(rows), self.schema), prefix)

    def write_table(self, table: pa.Table, prefix: str = "part") -> None:
        """Write one shard as `data/<prefix>-NNNNN.parquet` (e.g. `train-00000.parquet`, the
        names a dataset card's `data_files` globs select splits by), in bounded row groups.

        A shard without rows is written without a row group: `datasets` fails on a row group
        of zero rows, and skips a file with none."""
        with self.part(prefix) as part:
            part.write(table)

    def _next_name(self, prefix: str) -> str:
        """The first free shard file name `data/<prefix>-NNNNN.parquet`."""
        taken = {f.path for f in self._files} | self._open
        n = 0
        while f"data/{prefix}-{n:05d}.parquet" in taken:
            n += 1
        return f"data/{prefix}-{n:05d}.parquet"

    @contextlib.contextmanager
    def part(self, prefix: str = "part") -> Iterator[PartWriter]:
        """One shard file (`data/<prefix>-NNNNN.parquet`) written batch by batch: each
        `write` adds row groups of at most `ROW_GROUP_ROWS` rows, so a shard of any size is
        written, and later read, in bounded memory. The file enters the dataset on exit."""
        if self._committed:
            raise DatasetError("writer already committed")
        if not prefix or not prefix.replace("_", "").replace(".", "").isalnum():
            raise DatasetError(f"shard prefix must be a plain word, got {prefix!r}")
        rel = self._next_name(prefix)
        self._open.add(rel)
        path = self.staging / rel
        part = PartWriter(pq.ParquetWriter(path, self.schema, compression="zstd"), self.schema)
        try:
            yield part
        except BaseException:
            part.writer.close()
            path.unlink(missing_ok=True)  # a half-written shard never enters the dataset
            raise
        finally:
            part.writer.close()
            self._open.discard(rel)
        self._files.append(FileEntry(path=rel, sha256=sha256_file(path), rows=part.rows, bytes=path.stat().st_size))
        crashpoint("store.write.after_file")

    def adopt(self, source: Any, prefix: str = "part") -> FileEntry:
        """Add a finished Parquet file (a shard's part, `data.parts`) to the dataset as its
        next shard file: copied (downloaded from a URL), never hard-linked, so a committed
        version shares no storage with the parts, which are a mutable cache. A `PartRef`'s
        checksum is checked on the copy: a part altered since it was written raises
        `DatasetError` and enters no dataset. Its schema must be the dataset's."""
        if self._committed:
            raise DatasetError("writer already committed")
        from data.parts import PartRef, is_url, open_part

        expected = ""
        if isinstance(source, PartRef):
            source, expected = source.path, source.sha256
        found = open_part(str(source)).schema_arrow
        if not found.remove_metadata().equals(self.schema.remove_metadata()):
            raise DatasetError(f"{source}: its schema is not the dataset's ({self.name})")
        rel = self._next_name(prefix)
        target = self.staging / rel
        if is_url(source):  # a part at a URL (a cluster's shared storage): downloaded
            import fsspec

            fs, path = fsspec.core.url_to_fs(str(source))
            fs.get_file(path, str(target))
        else:
            shutil.copyfile(source, target)
        digest = sha256_file(target)
        if expected and digest != expected:
            target.unlink(missing_ok=True)
            raise DatasetError(f"{source}: altered since it was written (sha256 {digest[:12]}…, "
                               f"written {expected[:12]}…); rerun to recompute it")
        entry = FileEntry(path=rel, sha256=digest, rows=pq.ParquetFile(target).metadata.num_rows,
                          bytes=target.stat().st_size)
        self._files.append(entry)
        return entry

    @property
    def files(self) -> list[FileEntry]:
        """The shards written so far."""
        return list(self._files)

    def same_as_latest(self) -> Path | None:
        """The newest committed version of this dataset if it holds exactly the files written
        here (same kind, schema and file checksums, in order), else None."""
        prev = latest(self.root, self.name)
        if prev is None:
            return None
        try:
            manifest = read_manifest(prev, verify=True)
        except DatasetError:  # a damaged version is never reused
            return None
        same = (manifest.kind == self.kind and manifest.schema_version == self.schema_version
                and manifest.arrow_schema == str(self.schema)
                and [(f.path, f.sha256) for f in manifest.files] == [(f.path, f.sha256) for f in self._files])
        return prev if same else None

    def commit(
        self, lineage: Lineage, card: str = "", stats: dict[str, Any] | None = None,
        extra_files: dict[str, str] | None = None, reuse_identical: bool = False,
    ) -> Path:
        """Write manifest and card (and `extra_files`, e.g. a report, by relative name), mark
        `_SUCCESS`, and rename the folder into place. With `reuse_identical`, when the newest
        committed version holds the same files (`same_as_latest`), nothing is written and
        that version is returned: an unchanged or resumed rerun adds no version."""
        if not self._files:  # an empty dataset still has a (zero-row) file with its schema
            self.write_table(empty_table(self.schema))
        if reuse_identical and (same := self.same_as_latest()) is not None:
            self.abort()
            self._committed = True
            return same
        manifest = Manifest(
            name=self.name,
            version=self.version,
            kind=self.kind,
            schema_version=self.schema_version,
            created_at=datetime.now(UTC).isoformat(),
            rows=sum(f.rows for f in self._files),
            files=self._files,
            arrow_schema=str(self.schema),
            lineage=lineage,
            stats=stats or {},
        )
        (self.staging / MANIFEST).write_text(manifest.model_dump_json(indent=2))
        (self.staging / "README.md").write_text(card or f"# {self.name} {self.version}\n")
        for rel, text in (extra_files or {}).items():
            if Path(rel).is_absolute() or ".." in Path(rel).parts or rel in (MANIFEST, SUCCESS, "README.md"):
                raise DatasetError(f"extra file {rel!r} must be a new relative path inside the dataset")
            (self.staging / rel).parent.mkdir(parents=True, exist_ok=True)
            (self.staging / rel).write_text(text)
        for f in (self.staging / "data").iterdir():
            with open(f, "rb") as fh:
                os.fsync(fh.fileno())
        (self.staging / SUCCESS).write_text(manifest.created_at + "\n")
        _fsync_dir(self.staging)
        crashpoint("store.commit.before_rename")
        try:
            os.rename(self.staging, self.target)
        except OSError as exc:
            raise DatasetError(f"could not publish {self.target}: {exc}") from exc
        _fsync_dir(self.target.parent)
        self._committed = True
        return self.target

    def abort(self) -> None:
        shutil.rmtree(self.staging, ignore_errors=True)

    def __enter__(self) -> DatasetWriter:
        return self

    def __exit__(self, exc_type: Any, *_: Any) -> None:
        if not self._committed:
            self.abort()


def read_manifest(path: Path | str, verify: bool = True) -> Manifest:
    """The manifest of a committed dataset; refuses incomplete or corrupted ones."""
    path = Path(path)
    if not path.is_dir():
        raise DatasetError(f"no dataset at {path}")
    if not (path / SUCCESS).exists():
        raise DatasetError(f"dataset at {path} is incomplete: no {SUCCESS} marker (an interrupted write?)")
    try:
        manifest = Manifest.model_validate_json((path / MANIFEST).read_text())
    except (OSError, ValueError) as exc:
        raise DatasetError(f"dataset at {path} has an unreadable {MANIFEST}: {exc}") from exc
    if manifest.manifest_version != MANIFEST_VERSION:
        raise DatasetError(f"{path}: manifest version {manifest.manifest_version} is not supported")
    if verify:
        for entry in manifest.files:
            fp = path / entry.path
            if not fp.exists():
                raise DatasetError(f"{path}: file {entry.path} listed in the manifest is missing")
            digest = sha256_file(fp)
            if digest != entry.sha256:
                raise DatasetError(
                    f"{path}: checksum mismatch for {entry.path} "
                    f"(manifest {entry.sha256[:12]}…, file {digest[:12]}…)"
                )
    return manifest


def rewrite_card(path: Path | str, text: str) -> Path:
    """Replace the card (`README.md`) of a committed dataset atomically.

    The card is documentation, outside the manifest's checksums: data files, manifest and
    `_SUCCESS` are never touched, so a release stays immutable while its card can list what
    was later done with it (e.g. the training runs on it, `train.lineage`).
    """
    path = Path(path)
    read_manifest(path, verify=False)  # refuses an incomplete dataset
    card = path / "README.md"
    write_atomic(card, text)
    _fsync_dir(path)
    return card


def iter_batches(path: Path | str, columns: Sequence[str] | None = None, batch_rows: int = ROW_GROUP_ROWS,
                 verify: bool = True) -> Iterator[pa.Table]:
    """The rows of a committed dataset (its shard files in manifest order) as tables of at
    most `batch_rows` rows, read one at a time: bounded memory for a dataset of any size."""
    path = Path(path)
    manifest = read_manifest(path, verify=verify)
    for f in manifest.files:
        pf = pq.ParquetFile(path / f.path)
        for batch in pf.iter_batches(batch_size=batch_rows, columns=list(columns) if columns else None):
            yield pa.Table.from_batches([batch])


def read_table(path: Path | str, verify: bool = True) -> pa.Table:
    """All rows of a committed dataset as one Arrow table."""
    path = Path(path)
    manifest = read_manifest(path, verify=verify)
    tables = [pq.read_table(path / f.path) for f in manifest.files]
    return pa.concat_tables(tables) if tables else pa.table({})


def write_records(
    root: Path | str,
    name: str,
    kind: str,
    records: Iterable[Any],
    lineage: Lineage,
    card: str = "",
    stats: dict[str, Any] | None = None,
    version: str | None = None,
    shard_rows: int = 50_000,
    reuse_identical: bool = False,
) -> Path:
    """Write typed records (`kind` in tasks/trajectories/verdicts) as one dataset version
    (`reuse_identical`: see `DatasetWriter.commit`)."""
    schema, to_row, _ = CODECS[kind]
    records = list(records)
    schema_version = records[0].schema_version if records else 1
    with DatasetWriter(root, name, kind, schema, schema_version, version) as w:
        for i in range(0, max(len(records), 1), shard_rows):
            chunk = records[i : i + shard_rows]
            if chunk:
                w.write_rows([to_row(r) for r in chunk])
        return w.commit(lineage, card=card, stats=stats, reuse_identical=reuse_identical)


def read_records(path: Path | str, kind: str | None = None) -> list[Any]:
    """Typed records of a committed dataset of tasks, trajectories or verdicts."""
    return list(iter_records(path, kind))


def iter_records(path: Path | str, kind: str | None = None) -> Iterator[Any]:
    """The typed records of a committed dataset one at a time, read a batch at a time
    (`iter_batches`): memory bounded by a batch, whatever the dataset's size."""
    manifest = read_manifest(path)
    kind = kind or manifest.kind
    if kind not in CODECS:
        raise DatasetError(f"{path}: kind {kind!r} has no record codec")
    if manifest.kind != kind:
        raise DatasetError(f"{path}: holds {manifest.kind}, not {kind}")
    _, _, from_row = CODECS[kind]
    for batch in iter_batches(path, verify=False):
        for row in batch.to_pylist():
            yield from_row(row)


def versions(root: Path | str, name: str) -> list[str]:
    """Committed versions of a dataset, oldest first."""
    base = Path(root) / name
    if not base.is_dir():
        return []
    return sorted(p.name for p in base.iterdir() if not p.name.startswith(".") and (p / SUCCESS).exists())


def prune(root: Path | str, name: str, keep: int, protect: Iterable[Path | str] = ()) -> list[Path]:
    """Remove the committed versions of a dataset older than its newest `keep`, except those in
    `protect`; returns what was removed."""
    kept = {Path(p).resolve() for p in protect}
    removed = []
    for version in versions(root, name)[:-keep] if keep > 0 else []:
        path = Path(root) / name / version
        if path.resolve() in kept:
            continue
        shutil.rmtree(path)
        removed.append(path)
    return removed


def latest(root: Path | str, name: str) -> Path | None:
    vs = versions(root, name)
    return Path(root) / name / vs[-1] if vs else None


POINTER = "LATEST.json"


def write_pointer(root: Path | str, payload: dict[str, Any]) -> Path:
    """Atomically replace `root/LATEST.json` (tmp file, fsync, rename): readers see the old
    pointer or the new one, never a torn file."""

    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    target = root / POINTER
    write_json_atomic(target, payload, indent=2)
    _fsync_dir(root)
    return target


def read_pointer(root: Path | str) -> dict[str, Any] | None:
    """The `LATEST.json` pointer under `root`, or None when nothing was published yet."""
    import json

    path = Path(root) / POINTER
    return json.loads(path.read_text()) if path.exists() else None


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def remove_stale_staging(root: Path | str, older_than_s: float = 86_400.0) -> list[Path]:
    """Delete staging folders left by writers that died (a killed run) under `root/<name>/`:
    those whose writer process (on this machine) is gone, or older than `older_than_s`
    (a writer on another machine that shares the folder)."""
    import time

    removed: list[Path] = []
    base = Path(root)
    if not base.is_dir():
        return removed
    now = time.time()
    for staging in base.glob("*/.staging-*"):
        parts = staging.name.split("-")
        pid = int(parts[-2]) if len(parts) >= 4 and parts[-2].isdigit() else None
        dead = pid is not None and pid != os.getpid() and not _pid_alive(pid)
        if dead or now - staging.stat().st_mtime >= older_than_s:
            shutil.rmtree(staging, ignore_errors=True)
            removed.append(staging)
    return removed


def query(sql: str, **datasets: Path | str) -> pa.Table:
    """Run DuckDB SQL where each keyword names a view over a verified dataset's Parquet files.

    >>> query("select count(*) n from sft", sft="out/releases/sft/2026...")  # doctest: +SKIP
    """
    import duckdb

    con = duckdb.connect()
    try:
        for view, path in datasets.items():
            if not view.isidentifier():
                raise ValueError(f"not a valid view name: {view!r}")
            manifest = read_manifest(path)
            files = [str(Path(path) / f.path) for f in manifest.files]
            listing = ", ".join("'" + f.replace("'", "''") + "'" for f in files)
            con.execute(f"create view {view} as select * from read_parquet([{listing}])")
        return con.sql(sql).to_arrow_table()
    finally:
        con.close()
