"""The frozen solver as a `Solve` function: k samples of a candidate's question with its menu."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from data.records import Sampling, ToolCall
from data.self_play import Candidate, Solve
from rollout.model import ChatModel, ChatResponse


def chat_solver(model: ChatModel | Callable[[], ChatModel], temperature: float = 0.7, max_tokens: int = 256,
                seed: int = 0) -> Solve:
    """A `Solve` backed by a `ChatModel`: k samples of the question with the menu as tools.

    Runs its own event loop, so call it from synchronous code (TRL reward functions are).
    `model` may be a factory instead: a client bound to an event loop (an HTTP client, e.g.
    `OpenAICompatibleModel` in front of a served solver) is then made, and closed, per call.
    """

    async def run(candidate: Candidate, k: int) -> list[list[ToolCall]]:
        client = model if hasattr(model, "chat") else model()  # type: ignore[operator]
        gen = candidate.generation
        messages = [{"role": "system", "content": SOLVER_SYSTEM}, {"role": "user", "content": gen.question}]
        try:
            jobs = [client.chat(messages, gen.tools, Sampling(temperature=temperature, max_tokens=max_tokens,
                                                              seed=seed * 1000 + i)) for i in range(k)]
            answers = await asyncio.gather(*jobs, return_exceptions=True)
        finally:
            if client is not model:
                await client.aclose()
        return [[ToolCall(name=c.name, arguments=c.arguments) for c in r.tool_calls]
                if isinstance(r, ChatResponse) else [] for r in answers]

    return lambda candidate, k: asyncio.run(run(candidate, k))


SOLVER_SYSTEM = ("Answer the user's request by calling the tools. Write each call as "
                 '<tool_call>{"name": ..., "arguments": {...}}</tool_call> and nothing else.')
