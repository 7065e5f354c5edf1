"""Example model backend `recorded`: replays assistant turns recorded in a JSONL file (one
object per line: `{"text": ...}` or `{"tool_calls": [{"name", "arguments"}]}`), in order, one
per request of a conversation — for regression runs of the pipeline against fixed outputs.

Adding it is this file plus one line (its module imported by `rollout/backends.py`'s
registry, or a ``trajforge.backends`` entry point). `ModelConfig(kind="recorded",
options={"path": ...})` selects it; `tests/verifiers/test_recipes.py` rolls out through it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from data.records import Sampling, ToolCall
from rollout.backends import BACKENDS, BackendOptions, Built, ModelConfig
from rollout.model import ChatResponse


class RecordedOptions(BackendOptions):
    path: str  # the JSONL file of recorded assistant turns


class RecordedModel:
    def __init__(self, turns: list[dict[str, Any]], name: str) -> None:
        if not turns:
            raise ValueError("a recorded model needs at least one turn")
        self.turns = turns
        self.name = f"recorded:{name}"

    async def chat(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]], sampling: Sampling) -> ChatResponse:
        done = sum(m["role"] == "assistant" for m in messages)  # the next recorded turn of this conversation
        turn = self.turns[min(done, len(self.turns) - 1)]
        calls = [ToolCall(name=c["name"], arguments=c.get("arguments") or {}, id=f"call_{done}_{i}")
                 for i, c in enumerate(turn.get("tool_calls") or [])]
        return ChatResponse(text=turn.get("text", ""), tool_calls=calls, completion_tokens=1)

    async def aclose(self) -> None:
        return None


@BACKENDS.register("recorded", options=RecordedOptions)
def _recorded(cfg: ModelConfig, opts: RecordedOptions) -> Built:
    lines = Path(opts.path).read_text().splitlines()
    model = RecordedModel([json.loads(line) for line in lines if line.strip()], cfg.name)
    return Built(lambda task: model)
