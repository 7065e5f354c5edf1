"""In-process `ChatModel` over vLLM's offline engine (`vllm.LLM`), for batch generation
on a GPU machine without an HTTP server in between.

Concurrent `chat` calls are gathered (up to `max_batch`, within `batch_window_ms`) and
run as one `LLM.chat` call in a worker thread, each with its own `SamplingParams`
(temperature, top_p, max_tokens, seed, logprobs). Replies carry token ids and logprobs
(token-exact records) and tool calls parsed from the text (`<tool_call>` blocks, as the
hermes-style templates write them). vLLM is imported only when the engine is built;
`llm=` accepts a ready engine (or a stand-in with the same `chat` method, for tests).
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from typing import Any

from data.records import Sampling
from rollout.model import ChatResponse, ModelError
from rollout.pending import PendingChat
from rollout.response import decoded_response


class VLLMOfflineModel:
    """`ChatModel` on `vllm.LLM(model, **engine_kw)`; see the module docstring."""

    def __init__(
        self,
        model: str,
        llm: Any = None,
        max_batch: int = 256,
        batch_window_ms: float = 5.0,
        logprobs: int | None = 0,
        prompt_logprobs: int | None = None,
        chat_template: str | None = None,
        **engine_kw: Any,
    ) -> None:
        if max_batch < 1:
            raise ValueError("max_batch must be >= 1")
        self.model = model
        self.name = f"vllm:{model}"
        self.max_batch = max_batch
        self.batch_window_s = max(0.0, batch_window_ms / 1000)
        self.logprobs = logprobs
        self.prompt_logprobs = prompt_logprobs
        self.chat_template = chat_template
        self.engine_kw = engine_kw
        self._llm = llm
        self._llm_lock = threading.Lock()
        self._queue: list[PendingChat] = []
        self._flusher: asyncio.Task[None] | None = None
        self.batch_sizes: list[int] = []

    def engine(self) -> Any:
        """The `vllm.LLM` (built on first use)."""
        with self._llm_lock:
            if self._llm is None:
                try:
                    from vllm import LLM
                except ImportError as e:
                    raise ModelError(
                        "vLLM is not installed (pip install vllm on a CUDA machine)",
                        reason="backend",
                    ) from e
                self._llm = LLM(model=self.model, **self.engine_kw)
            return self._llm

    async def chat(
        self, messages: list[dict[str, Any]], tools: list[dict[str, Any]], sampling: Sampling
    ) -> ChatResponse:
        loop = asyncio.get_running_loop()
        pending = PendingChat(list(messages), list(tools or []), sampling, loop.create_future())
        self._queue.append(pending)
        if len(self._queue) >= self.max_batch:
            self._flush_now()
        elif self._flusher is None:
            self._flusher = loop.create_task(self._flush_later())
        return await pending.future

    async def _flush_later(self) -> None:
        await asyncio.sleep(self.batch_window_s)
        self._flusher = None
        self._flush_now()

    def _flush_now(self) -> None:
        if self._flusher is not None:
            self._flusher.cancel()
            self._flusher = None
        while self._queue:
            batch, self._queue = self._queue[: self.max_batch], self._queue[self.max_batch :]
            asyncio.get_running_loop().create_task(self._run(batch))

    async def _run(self, batch: list[PendingChat]) -> None:
        self.batch_sizes.append(len(batch))
        try:
            outputs = await asyncio.to_thread(self._generate, batch)
        except Exception as e:  # every caller hears about it
            error = (
                e
                if isinstance(e, ModelError)
                else ModelError(
                    f"vLLM generation failed: {type(e).__name__}: {e}", reason="backend"
                )
            )
            for p in batch:
                p.resolve(error=error)
            return
        for p, out in zip(batch, outputs, strict=True):
            p.resolve(out)

    def _generate(self, batch: list[PendingChat]) -> list[ChatResponse]:
        llm = self.engine()
        params = [self._params(p.sampling) for p in batch]
        tools = batch[0].tools or None
        if any((p.tools or None) != tools for p in batch):  # LLM.chat takes one tool list
            return [
                r
                for p, sp in zip(batch, params, strict=True)
                for r in self._chat(llm, [p], [sp], p.tools or None)
            ]
        return self._chat(llm, batch, params, tools)

    def _chat(
        self, llm: Any, batch: list[PendingChat], params: list[Any], tools: Any
    ) -> list[ChatResponse]:
        kw: dict[str, Any] = {"use_tqdm": False}
        if self.chat_template:
            kw["chat_template"] = self.chat_template
        if tools:
            kw["tools"] = tools
        outputs = llm.chat([p.messages for p in batch], params, **kw)
        if len(outputs) != len(batch):
            raise ModelError(f"vLLM returned {len(outputs)} outputs for {len(batch)} prompts")
        return [_response(o) for o in outputs]

    def _params(self, sampling: Sampling) -> Any:
        kw: dict[str, Any] = {
            "temperature": sampling.temperature,
            "top_p": sampling.top_p,
            "max_tokens": sampling.max_tokens,
            "seed": sampling.seed,
        }
        if self.logprobs is not None:
            kw["logprobs"] = self.logprobs
        if self.prompt_logprobs is not None:
            kw["prompt_logprobs"] = self.prompt_logprobs
        try:
            from vllm import SamplingParams
        except ImportError:  # a stand-in engine takes plain settings
            return kw
        return SamplingParams(**kw)

    async def aclose(self) -> None:
        if self._flusher is not None:
            self._flusher.cancel()
        for p in self._queue:
            p.resolve(error=ModelError("the vLLM model was closed", reason="backend"))
        self._queue = []
        with contextlib.suppress(Exception):
            self._llm = None


def _chosen_logprob(entry: Any, token_id: int) -> float | None:
    """The logprob of `token_id` in a vLLM `{token_id: Logprob}` position (None if absent)."""
    if not isinstance(entry, dict) or token_id not in entry:
        return None
    lp = entry[token_id]
    value = getattr(lp, "logprob", lp)
    return float(value) if isinstance(value, int | float) else None


def _response(output: Any) -> ChatResponse:
    """A `ChatResponse` from one vLLM `RequestOutput`."""
    completion = output.outputs[0]
    token_ids = list(completion.token_ids or [])
    prompt_ids = list(output.prompt_token_ids or [])
    logprobs = None
    if completion.logprobs is not None:
        logprobs = [
            _chosen_logprob(e, t) for e, t in zip(completion.logprobs, token_ids, strict=False)
        ]
        logprobs = None if any(v is None for v in logprobs) else logprobs
    prompt_lps = None
    if getattr(output, "prompt_logprobs", None) is not None:
        prompt_lps = [
            _chosen_logprob(e, t) for e, t in zip(output.prompt_logprobs, prompt_ids, strict=False)
        ]
    return decoded_response(
        completion.text or "", completion.finish_reason, len(prompt_ids), len(token_ids),
        {"request_id": getattr(output, "request_id", None)},
        prompt_token_ids=prompt_ids or None,
        completion_token_ids=token_ids or None,
        completion_logprobs=logprobs,  # type: ignore[arg-type]
        prompt_logprobs=prompt_lps,
    )
