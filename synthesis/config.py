"""Configuration models that synthesis modules share, kept in a leaf module (it imports no
other synthesis module) so that `synthesis.base` and `synthesis.writer` need not import each
other. `synthesis.writer` re-exports `WriterConfig`."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field


class WriterConfig(BaseModel):
    """The model that writes scenario text (`synthesis.writer`)."""

    model_config = ConfigDict(extra="forbid")

    # A ModelConfig dict (embedded, or an OpenAI-compatible endpoint), or a ChatModel object
    # when synthesis is called from code.
    model: Any
    temperature: float = Field(0.8, ge=0.0, le=2.0)
    concurrency: int = Field(8, ge=1)
