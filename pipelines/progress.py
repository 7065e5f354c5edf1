"""Progress of long stages: rich bars on the terminal when the CLI turns them on.

Flows report shard completions here; nothing is shown unless `enable()` was called (the
CLI does, for an interactive terminal), so library use and tests stay quiet.
"""

from __future__ import annotations

import threading
from typing import Any

_lock = threading.Lock()
_progress: Any = None
_tasks: dict[str, Any] = {}


def enable() -> None:
    """Show a progress bar per stage on stderr for the rest of the process."""
    global _progress
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    with _lock:
        if _progress is None:
            _progress = Progress(TextColumn("{task.description:>10}"), BarColumn(), MofNCompleteColumn(),
                                 TextColumn("shards"), TimeElapsedColumn(), console=Console(stderr=True),
                                 transient=False)
            _progress.start()


def disable() -> None:
    global _progress
    with _lock:
        if _progress is not None:
            _progress.stop()
        _progress = None
        _tasks.clear()


def start(stage: str, total: int) -> None:
    with _lock:
        if _progress is not None:
            _tasks[stage] = _progress.add_task(stage, total=total)


def advance(stage: str, n: int = 1) -> None:
    with _lock:
        if _progress is not None and stage in _tasks:
            _progress.advance(_tasks[stage], n)


def finish(stage: str) -> None:
    with _lock:
        if _progress is not None and stage in _tasks:
            tid = _tasks.pop(stage)
            total = next((t.total for t in _progress.tasks if t.id == tid), None)
            _progress.update(tid, completed=total)
