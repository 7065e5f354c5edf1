"""The training progress bar (`train.progress`): one rich bar from the start of training to
its end, with the latest loss / reward figures, drawn on the main process only."""

from __future__ import annotations

import sys
import types
from types import SimpleNamespace

import pytest

from train.progress import rich_progress_callback


@pytest.fixture(autouse=True)
def light_transformers(monkeypatch: pytest.MonkeyPatch) -> None:
    """`TrainerCallback` from a stand-in module: the callback's hooks are plain methods, and
    importing transformers costs seconds."""
    fake = types.ModuleType("transformers")
    fake.TrainerCallback = type("TrainerCallback", (), {})  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "transformers", fake)


def test_progress_bar_follows_steps_and_latest_figures() -> None:
    cb = rich_progress_callback("sft")
    state = SimpleNamespace(is_world_process_zero=True, max_steps=4, global_step=0)
    cb.on_train_begin(None, state, None)
    assert cb.progress is not None
    [task] = cb.progress.tasks
    assert task.description == "sft" and task.total == 4
    state.global_step = 1
    cb.on_log(None, state, None, logs={"loss": 2.5, "learning_rate": 1e-4, "epoch": 0.5})
    cb.on_step_end(None, state, None)
    cb.on_log(None, state, None, logs={"eval_loss": 2.25})
    assert task.completed == 1 and task.fields["figures"] == "loss=2.5  eval_loss=2.25"
    assert cb.latest == {"loss": 2.5, "eval_loss": 2.25}  # only the figures it shows
    state.global_step = 4
    cb.on_train_end(None, state, None)
    assert task.completed == 4 and cb.progress is None


def test_other_processes_draw_nothing() -> None:
    cb = rich_progress_callback()
    state = SimpleNamespace(is_world_process_zero=False, max_steps=4, global_step=1)
    cb.on_train_begin(None, state, None)
    cb.on_log(None, state, None, logs={"loss": 1.0})
    cb.on_step_end(None, state, None)
    cb.on_train_end(None, state, None)
    assert cb.progress is None and cb.latest == {}
