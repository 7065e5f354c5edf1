"""A rich progress bar for training runs (steps, elapsed, latest loss / reward / eval loss)."""

from __future__ import annotations

from typing import Any

SHOWN = ("loss", "reward", "eval_loss", "verifier/passed")


def rich_progress_callback(description: str = "train") -> Any:
    """A `TrainerCallback` drawing one rich bar on stderr from `on_train_begin` to `on_train_end`."""
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
    from transformers import TrainerCallback

    class _RichProgress(TrainerCallback):
        def __init__(self) -> None:
            self.progress: Progress | None = None
            self.task: Any = None
            self.latest: dict[str, float] = {}

        def on_train_begin(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
            if not state.is_world_process_zero:
                return
            self.progress = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                                     TextColumn("steps"), TimeElapsedColumn(), TextColumn("{task.fields[figures]}"),
                                     console=Console(stderr=True))
            self.progress.start()
            self.task = self.progress.add_task(description, total=state.max_steps or None, figures="")

        def on_log(self, args: Any, state: Any, control: Any, logs: dict | None = None, **kw: Any) -> None:
            if self.progress is None or not logs:
                return
            self.latest.update({k: float(logs[k]) for k in SHOWN if isinstance(logs.get(k), int | float)})
            figures = "  ".join(f"{k}={v:.4g}" for k, v in self.latest.items())
            self.progress.update(self.task, figures=figures)

        def on_step_end(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
            if self.progress is not None:
                self.progress.update(self.task, completed=state.global_step)

        def on_train_end(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
            if self.progress is not None:
                self.progress.update(self.task, completed=state.global_step)
                self.progress.stop()
                self.progress = None

    return _RichProgress()
