"""`rollout.pending`: a queued chat call resolves its caller's future once, with a result or
an error, and does nothing when the caller is gone."""

from __future__ import annotations

import asyncio

import pytest

from data.records import Sampling
from rollout.model import ChatResponse, ModelError
from rollout.pending import PendingChat


def test_resolve_gives_the_first_result_or_error() -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()
        ok = PendingChat([], [], Sampling(), loop.create_future())
        ok.resolve(ChatResponse(text="hi"))
        ok.resolve(ChatResponse(text="late"))  # already done: ignored
        assert (await ok.future).text == "hi"
        failed = PendingChat([], [], Sampling(), loop.create_future())
        failed.resolve(error=ModelError("down", reason="timeout"))
        with pytest.raises(ModelError, match="down"):
            await failed.future
        gone = PendingChat([], [], Sampling(), loop.create_future())
        gone.future.cancel()
        gone.resolve(ChatResponse())  # the caller gave up: nothing happens
        assert gone.future.cancelled()

    asyncio.run(main())
