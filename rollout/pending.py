"""A `chat` call waiting in a batching model's queue (`rollout.vllm_offline`,
`rollout.embedded_engine`): the call's arguments and the caller's future."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

from data.records import Sampling
from rollout.model import ChatResponse


@dataclass
class PendingChat:
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]]
    sampling: Sampling
    future: asyncio.Future[ChatResponse]

    def resolve(self, result: ChatResponse | None = None, error: BaseException | None = None) -> None:
        """Give the caller `result`, or raise `error` in it (nothing when the caller is gone).
        Call it on the caller's event loop."""
        if self.future.done():
            return
        if error is not None:
            self.future.set_exception(error)
        else:
            self.future.set_result(result)  # type: ignore[arg-type]
