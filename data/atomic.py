"""Atomic file writes: a temporary file beside the target, flushed and fsynced, then renamed
over it. A reader sees the old file or the new one, never a torn one, and a writer killed
half-way leaves at most a hidden `.<name>.<random>.tmp` behind (no partial target)."""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any


@contextmanager
def atomic_open(path: Path | str, mode: str = "w", fsync: bool = True) -> Iterator[IO[Any]]:
    """A file to write `path` through (text mode is UTF-8); it replaces `path` when the
    block ends without an error, and is removed otherwise."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex[:8]}.tmp")
    try:
        with open(tmp, mode, encoding=None if "b" in mode else "utf-8") as f:
            yield f
            f.flush()
            if fsync:
                os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def write_atomic(path: Path | str, data: str | bytes, fsync: bool = True) -> None:
    """Replace `path` with `data` atomically."""
    with atomic_open(path, "wb" if isinstance(data, bytes) else "w", fsync=fsync) as f:
        f.write(data)


def write_json_atomic(path: Path | str, payload: Any, indent: int | None = None, fsync: bool = True) -> None:
    """Replace `path` with `payload` as JSON atomically (non-JSON values as `str`)."""
    text = json.dumps(payload, indent=indent, default=str)
    write_atomic(path, text + ("\n" if indent is not None else ""), fsync=fsync)
