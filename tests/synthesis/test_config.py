"""`synthesis.config`: `WriterConfig`, the model that writes scenario text, with its bounds
(it is what `synthesis.writer` and `SynthesisConfig.writer` use)."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

import synthesis.writer
from synthesis.base import SynthesisConfig
from synthesis.config import WriterConfig


def test_defaults_and_a_model_object() -> None:
    cfg = WriterConfig(model={"kind": "openai", "name": "w"})
    assert (cfg.temperature, cfg.concurrency) == (0.8, 8)
    marker = object()
    assert WriterConfig(model=marker).model is marker  # a ChatModel when called from code


@pytest.mark.parametrize("bad", [{"temperature": -0.1}, {"temperature": 2.5}, {"concurrency": 0}, {"voice": "x"}])
def test_bounds_and_unknown_keys_are_refused(bad: dict[str, object]) -> None:
    with pytest.raises(ValidationError):
        WriterConfig(model={"kind": "embedded"}, **bad)  # type: ignore[arg-type]
    with pytest.raises(ValidationError):
        WriterConfig()  # type: ignore[call-arg]  # the model is required


def test_one_class_for_the_writer_and_the_synthesis_config() -> None:
    assert synthesis.writer.WriterConfig is WriterConfig
    cfg = SynthesisConfig.model_validate({"writer": {"model": {"kind": "embedded"}, "temperature": 0.3}})
    assert isinstance(cfg.writer, WriterConfig) and cfg.writer.temperature == 0.3
