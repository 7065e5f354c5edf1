"""Model backends by kind, each with its own typed options, and the `ModelConfig` that names one.

A backend registers its `kind` with the pydantic model of its options and a factory::

    @BACKENDS.register("mybackend", options=MyOptions)
    def _mybackend(cfg: ModelConfig, opts: MyOptions) -> Built: ...

`ModelConfig(kind=..., name=..., options={...})` validates the options against the kind's
model, so an unknown key is an error naming the backend. For convenience the options may
also be written flat (``rollout.model.base_url: ...``): keys that are not `kind`, `name` or
`options` are moved into `options` before validation. An options model lists its
`TRANSPORT` fields (how requests travel, not what the model answers), which cache keys leave
out. The built-in factories import their heavy modules only when called.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass
from importlib import import_module
from pathlib import Path
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from data.records import Task
from data.registry import Registry
from rollout.model import ChatModel

ModelFor = Callable[[Task], ChatModel]


class BackendOptions(BaseModel):
    """Base of every backend's options: unknown keys are errors."""

    model_config = ConfigDict(extra="forbid")

    TRANSPORT: ClassVar[frozenset[str]] = frozenset()

    def identity(self) -> dict[str, Any]:
        """The options that decide what the model answers (cache keys use these)."""
        return self.model_dump(mode="json", exclude=set(self.TRANSPORT))


@dataclass
class Built:
    """What a backend factory returns: a model per task, and what to close afterwards."""

    model_for: ModelFor
    owned: ChatModel | None = None  # closed at the end of the collection that built it
    per_task: bool = False  # the model depends on the task (scripted policies)


BACKENDS: Registry[Callable[..., Built]] = Registry("model backend", [], group="backends")


class ModelConfig(BaseModel):
    """Which backend serves a model: `kind` (a registered backend; `embedded` is the CPU
    default), `name` (the served model's name, or a label) and the kind's `options`."""

    model_config = ConfigDict(extra="forbid")

    kind: str = "embedded"
    name: str = "SmolLM2-135M-Instruct"
    options: dict[str, Any] = Field(default_factory=dict)

    @model_validator(mode="before")
    @classmethod
    def _flat_options(cls, data: Any) -> Any:
        """Options written flat next to `kind` move into `options`."""
        if isinstance(data, dict):
            flat = {k: v for k, v in data.items() if k not in ("kind", "name", "options")}
            if flat:
                data = {k: v for k, v in data.items() if k in ("kind", "name", "options")}
                data["options"] = {**dict(data.get("options") or {}), **flat}
        return data

    @model_validator(mode="after")
    def _options_fit_the_backend(self) -> ModelConfig:
        self.backend_options()
        return self

    def backend_options(self) -> Any:
        """The options validated against the backend's options model."""
        return BACKENDS.parse_options(self.kind, self.options)

    def with_options(self, **options: Any) -> ModelConfig:
        return ModelConfig(kind=self.kind, name=self.name, options={**self.options, **options})


def build(cfg: ModelConfig) -> Built:
    """The backend `cfg.kind` built with its options."""
    return BACKENDS.get(cfg.kind)(cfg, cfg.backend_options())


def build_model(cfg: ModelConfig) -> tuple[ChatModel, bool]:
    """A model for callers that need one without a task (a generator, a judge, the
    Architect): (model, whether the caller must close it)."""
    built = build(cfg)
    if built.per_task:
        raise ValueError(f"a {cfg.kind!r} model follows a task's reference and cannot serve requests without "
                         "a task; use kind embedded or openai")
    return built.model_for(None), built.owned is not None  # type: ignore[arg-type]


# -- the built-in backends -----------------------------------------------------------------------

class ScriptedOptions(BackendOptions):
    noise: float = Field(0.0, ge=0, le=1)  # share of turns with a typical model mistake


@BACKENDS.register("scripted", options=ScriptedOptions)
def _scripted(cfg: ModelConfig, opts: ScriptedOptions) -> Built:
    from rollout.policies import ScriptedPolicy

    return Built(lambda task: ScriptedPolicy(task, noise=opts.noise), per_task=True)


class OpenAIOptions(BackendOptions):
    """An OpenAI-compatible endpoint (vLLM's server, any hosted API). `base_urls` (several
    data-parallel servers of one model) replaces `base_url` when given; see
    `rollout.openai_client` for routing, retries and the circuit breaker. The token-exact
    options (`logprobs`, `top_logprobs`, `return_token_ids`, `prompt_logprobs`; the last two
    are vLLM's) are stored per assistant turn in `Trajectory.turn_tokens`."""

    TRANSPORT: ClassVar[frozenset[str]] = frozenset({
        "base_url", "base_urls", "api_key_env", "timeout_s", "max_retries", "max_in_flight", "backoff_base_s",
        "backoff_max_s", "breaker_failures", "breaker_cooldown_s"})

    base_url: str = "http://127.0.0.1:8000/v1"
    base_urls: list[str] = Field(default_factory=list)
    api_key_env: str = "OPENAI_API_KEY"
    timeout_s: float = Field(60.0, gt=0)  # per HTTP attempt
    max_retries: int = Field(3, ge=0)
    max_in_flight: int = Field(64, ge=1)  # per endpoint
    backoff_base_s: float = Field(0.5, ge=0)
    backoff_max_s: float = Field(20.0, ge=0)
    breaker_failures: int = Field(5, ge=1)
    breaker_cooldown_s: float = Field(10.0, ge=0)
    logprobs: bool = False
    top_logprobs: int = Field(0, ge=0)
    return_token_ids: bool = False
    prompt_logprobs: int | None = Field(None, ge=0)
    extra_body: dict[str, Any] = Field(default_factory=dict)

    def urls(self) -> list[str]:
        """The endpoints to use: `base_urls` if set, else `[base_url]`."""
        return list(self.base_urls) or [self.base_url]


@BACKENDS.register("openai", options=OpenAIOptions)
def _openai(cfg: ModelConfig, opts: OpenAIOptions) -> Built:
    from rollout.openai_client import OpenAICompatibleModel

    client = OpenAICompatibleModel(
        model=cfg.name, base_urls=opts.urls(), api_key=os.environ.get(opts.api_key_env, "EMPTY"),
        timeout_s=opts.timeout_s, max_retries=opts.max_retries, extra_body=opts.extra_body,
        max_in_flight=opts.max_in_flight, backoff_base_s=opts.backoff_base_s, backoff_max_s=opts.backoff_max_s,
        breaker_failures=opts.breaker_failures, breaker_cooldown_s=opts.breaker_cooldown_s,
        logprobs=opts.logprobs, top_logprobs=opts.top_logprobs, return_token_ids=opts.return_token_ids,
        prompt_logprobs=opts.prompt_logprobs,
    )
    return Built(lambda task: client, owned=client)  # bound to one event loop: one per collection


class EmbeddedOptions(BackendOptions):
    """The embedded CPU model (`rollout.embedded`)."""

    TRANSPORT: ClassVar[frozenset[str]] = frozenset({"max_batch"})

    path: str | None = None  # a model folder (e.g. a trained checkpoint); default the prepared one
    max_batch: int = Field(8, ge=1)
    # Key/value reuse: "full" (shared prefix + each conversation's earlier turns), "prefix"
    # (the system prompt + tools only) or "none"; bounded by kv_budget_mb (LRU).
    kv_reuse: Literal["none", "prefix", "full"] = "full"
    kv_budget_mb: float = Field(1536.0, ge=0)


_SHARED: dict[str, ChatModel] = {}
_SHARED_LOCK = threading.Lock()


@BACKENDS.register("embedded", options=EmbeddedOptions)
def _embedded(cfg: ModelConfig, opts: EmbeddedOptions) -> Built:
    """Loaded once per process and shared by every collection (its worker thread serves any
    event loop); `close_shared_models` stops it."""
    key = cfg.model_dump_json()
    with _SHARED_LOCK:
        if key not in _SHARED:
            from rollout.embedded import EmbeddedModel

            model_dir = Path(opts.path).expanduser() if opts.path else None
            _SHARED[key] = EmbeddedModel(model_dir=model_dir, max_batch=opts.max_batch,
                                         kv_reuse=opts.kv_reuse, kv_budget_mb=opts.kv_budget_mb)
        shared = _SHARED[key]
    return Built(lambda task: shared)


def close_shared_models() -> None:
    """Stop the worker threads of process-wide models (call at the end of a run)."""
    import asyncio

    for model in list(_SHARED.values()):
        asyncio.run(model.aclose())
    _SHARED.clear()
    _ENGINES.clear()


class VLLMOfflineOptions(BackendOptions):
    """vLLM's in-process engine (`rollout.vllm_offline`, GPU machines). `model` is what the
    engine loads (default: the config's `name`); `engine` holds `vllm.LLM` keyword arguments;
    `engine_factory` ("module:function") builds the engine instead, for a custom build or a
    stand-in."""

    TRANSPORT: ClassVar[frozenset[str]] = frozenset({"max_batch", "batch_window_ms"})

    model: str | None = None
    max_batch: int = Field(256, ge=1)
    batch_window_ms: float = Field(5.0, ge=0)
    logprobs: int | None = Field(0, ge=0)
    prompt_logprobs: int | None = Field(None, ge=0)
    chat_template: str | None = None
    engine: dict[str, Any] = Field(default_factory=dict)
    engine_factory: str | None = None


def load_object(spec: str) -> Any:
    """The object a "module:attribute" string names."""
    module, _, attr = spec.partition(":")
    if not module or not attr:
        raise ValueError(f"expected 'module:attribute', got {spec!r}")
    return getattr(import_module(module), attr)


_ENGINES: dict[str, Any] = {}


@BACKENDS.register("vllm_offline", options=VLLMOfflineOptions)
def _vllm_offline(cfg: ModelConfig, opts: VLLMOfflineOptions) -> Built:
    """The engine is loaded once per process (like the embedded model); each collection gets
    its own batching front (bound to its event loop), closed when the collection ends."""
    from rollout.vllm_offline import VLLMOfflineModel

    target = opts.model or cfg.name
    key = json.dumps([target, opts.engine, opts.engine_factory], sort_keys=True, default=str)
    with _SHARED_LOCK:
        llm = _ENGINES.get(key)
        if llm is None:
            llm = _ENGINES[key] = (load_object(opts.engine_factory)(target, **opts.engine) if opts.engine_factory
                                   else VLLMOfflineModel(target, **opts.engine).engine())
    model = VLLMOfflineModel(target, llm=llm, max_batch=opts.max_batch, batch_window_ms=opts.batch_window_ms,
                             logprobs=opts.logprobs, prompt_logprobs=opts.prompt_logprobs,
                             chat_template=opts.chat_template)
    return Built(lambda task: model, owned=model)
