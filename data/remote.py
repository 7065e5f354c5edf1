"""Releases on any fsspec filesystem (s3://, gs://, az://, memory://, file://).

The pipeline writes locally (atomic renames need a real filesystem), then `publish`
mirrors a committed release to a URL in the order readers rely on: data files, manifest,
card, `_SUCCESS` last, then the root's `LATEST.json`. Object stores have no rename, so a
reader must check `_SUCCESS` (and checksums) before trusting a version, which
`read_manifest`/`read_table` here do. Install the filesystem's package (e.g. `s3fs`) to
use its scheme.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from data.store import (
    MANIFEST,
    POINTER,
    SUCCESS,
    DatasetError,
    Manifest,
    read_manifest,
    sha256_file,
)


def _fs(url: str) -> tuple[Any, str]:
    import fsspec

    fs, path = fsspec.core.url_to_fs(url)
    return fs, path.rstrip("/")


def publish(release: Path | str, root_url: str, move_pointer: bool = True) -> str:
    """Copy a committed local release folder to `root_url/<name>/<version>`; returns its URL."""
    release = Path(release)
    manifest = read_manifest(release)  # verifies _SUCCESS and checksums before anything leaves
    fs, root = _fs(root_url)
    target = f"{root}/{manifest.name}/{manifest.version}"
    if fs.exists(f"{target}/{SUCCESS}"):
        return f"{root_url.rstrip('/')}/{manifest.name}/{manifest.version}"
    for entry in manifest.files:
        fs.makedirs(f"{target}/{Path(entry.path).parent}", exist_ok=True)
        fs.put_file(str(release / entry.path), f"{target}/{entry.path}")
    for name in (MANIFEST, "README.md"):
        if (release / name).exists():
            fs.put_file(str(release / name), f"{target}/{name}")
    fs.pipe_file(f"{target}/{SUCCESS}", (release / SUCCESS).read_bytes())
    url = f"{root_url.rstrip('/')}/{manifest.name}/{manifest.version}"
    if move_pointer:
        pointer = {"version": manifest.version, "releases": {manifest.name: url}}
        old = read_pointer(root_url)
        if old and old.get("version") == manifest.version:
            pointer["releases"] = {**old.get("releases", {}), manifest.name: url}
        elif old:
            pointer["parent"] = old.get("version")
        fs.pipe_file(f"{root}/{POINTER}", json.dumps(pointer, indent=2).encode())
    return url


def read_pointer(root_url: str) -> dict[str, Any] | None:
    fs, root = _fs(root_url)
    path = f"{root}/{POINTER}"
    return json.loads(fs.cat_file(path)) if fs.exists(path) else None


def read_remote_manifest(url: str, verify: bool = True) -> Manifest:
    """The manifest of a release at `url`; refuses one without `_SUCCESS` or with a bad checksum."""
    import hashlib

    fs, path = _fs(url)
    if not fs.exists(f"{path}/{SUCCESS}"):
        raise DatasetError(f"dataset at {url} is incomplete: no {SUCCESS} marker (an interrupted upload?)")
    manifest = Manifest.model_validate_json(fs.cat_file(f"{path}/{MANIFEST}"))
    if verify:
        for entry in manifest.files:
            digest = hashlib.sha256(fs.cat_file(f"{path}/{entry.path}")).hexdigest()
            if digest != entry.sha256:
                raise DatasetError(f"{url}: checksum mismatch for {entry.path}")
    return manifest


def read_remote_table(url: str, verify: bool = True) -> pa.Table:
    fs, path = _fs(url)
    manifest = read_remote_manifest(url, verify)
    tables = []
    for entry in manifest.files:
        with fs.open(f"{path}/{entry.path}", "rb") as f:
            tables.append(pq.read_table(f))
    return pa.concat_tables(tables)


__all__ = ["publish", "read_pointer", "read_remote_manifest", "read_remote_table", "sha256_file"]
