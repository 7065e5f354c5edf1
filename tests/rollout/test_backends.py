"""`rollout.backends`: `ModelConfig` names a registered backend with its typed options
(flat options accepted, unknown keys refused), what a cache key keeps of them, and the
built-in factories that need no model or network."""

from __future__ import annotations

import asyncio

import pytest

from data.records import Sampling, Task
from rollout.backends import (
    EmbeddedOptions,
    ModelConfig,
    OpenAIOptions,
    ScriptedOptions,
    build,
    build_model,
    load_object,
)
from rollout.collector import build_model_for
from rollout.openai_client import OpenAICompatibleModel
from rollout.policies import ScriptedPolicy


def test_model_config_is_backward_compatible() -> None:
    """Options may be written flat next to `kind` (as before backends had their own
    options models); they are validated against the kind's options."""
    old = ModelConfig(kind="openai", name="q", base_url="http://h:1/v1", timeout_s=60)
    assert old.backend_options().urls() == ["http://h:1/v1"]
    assert old == ModelConfig(
        kind="openai", name="q", options={"base_url": "http://h:1/v1", "timeout_s": 60}
    )
    new = ModelConfig(kind="openai", name="q", base_urls=["http://a:1/v1", "http://b:1/v1"])
    assert new.backend_options().urls() == ["http://a:1/v1", "http://b:1/v1"]
    _, client = build_model_for(new)
    assert isinstance(client, OpenAICompatibleModel) and len(client.endpoints) == 2
    with pytest.raises(ValueError):
        ModelConfig(kind="openai", timeout_s=0)
    with pytest.raises(ValueError, match="model backend 'embedded'"):
        ModelConfig(
            kind="embedded", base_url="http://h:1/v1"
        )  # not an option of the embedded backend
    with pytest.raises(KeyError, match="unknown model backend"):
        ModelConfig(kind="llamafile")


def test_options_are_typed_per_backend() -> None:
    cfg = ModelConfig(kind="scripted", noise=0.25)
    assert cfg.options == {"noise": 0.25} and cfg.backend_options() == ScriptedOptions(noise=0.25)
    with pytest.raises(ValueError):
        ModelConfig(kind="scripted", noise=2)  # outside [0, 1]
    emb = ModelConfig().backend_options()
    assert isinstance(emb, EmbeddedOptions) and emb.kv_reuse == "full" and emb.path is None
    assert ModelConfig(kind="openai", name="a").with_options(timeout_s=5).options == {"timeout_s": 5}
    merged = ModelConfig(kind="openai", name="a", options={"timeout_s": 5}, max_retries=1)
    assert merged.options == {"timeout_s": 5, "max_retries": 1}


def test_identity_leaves_transport_out() -> None:
    a = OpenAIOptions(base_url="http://a/v1", timeout_s=5, logprobs=True)
    b = OpenAIOptions(base_urls=["http://b/v1"], timeout_s=50, max_in_flight=2, logprobs=True)
    assert a.identity() == b.identity() and "timeout_s" not in a.identity() and a.identity()["logprobs"] is True
    assert OpenAIOptions(logprobs=False).identity() != a.identity()
    assert EmbeddedOptions(max_batch=2).identity() == EmbeddedOptions(max_batch=16).identity()
    assert EmbeddedOptions(kv_reuse="none").identity() != EmbeddedOptions().identity()


def test_scripted_backend_builds_a_policy_per_task(tasks: list[Task]) -> None:
    built = build(ModelConfig(kind="scripted", noise=0.5))
    assert built.per_task and built.owned is None
    model = built.model_for(tasks[0])
    assert isinstance(model, ScriptedPolicy) and model.task is tasks[0] and model.noise == 0.5
    with pytest.raises(ValueError, match="cannot serve requests without a task"):
        build_model(ModelConfig(kind="scripted"))


def test_openai_backend_shares_one_owned_client(tasks: list[Task]) -> None:
    model, owned = build_model(ModelConfig(kind="openai", name="served", base_url="http://127.0.0.1:9/v1"))
    try:
        assert owned and isinstance(model, OpenAICompatibleModel) and model.name == "openai:served"
        built = build(ModelConfig(kind="openai", name="served"))
        assert built.model_for(tasks[0]) is built.model_for(tasks[1]) is built.owned
        asyncio.run(built.owned.aclose())  # type: ignore[union-attr]
    finally:
        asyncio.run(model.aclose())


def test_load_object() -> None:
    assert load_object("rollout.backends:build") is build
    assert load_object("data.records:Sampling") is Sampling
    with pytest.raises(ValueError, match="module:attribute"):
        load_object("rollout.backends")
    with pytest.raises(AttributeError):
        load_object("rollout.backends:nothing_here")
