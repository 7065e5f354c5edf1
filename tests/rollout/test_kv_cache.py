"""Key/value reuse in the embedded model: the store's bookkeeping (fast, fake tensors) and
greedy outputs that are token-identical with and without reuse (the real model, fp32)."""

from __future__ import annotations

import asyncio
from typing import Any

import numpy as np
import pytest

from rollout.kv_cache import KVStore, common_prefix


def _layers(length: int, n_layers: int = 2) -> list[tuple[Any, Any]]:
    torch = pytest.importorskip("torch")
    return [(torch.zeros(1, 1, length, 4), torch.zeros(1, 1, length, 4)) for _ in range(n_layers)]


def _bytes(length: int, n_layers: int = 2) -> int:
    return n_layers * 2 * length * 4 * 4  # keys and values, float32


def test_common_prefix() -> None:
    a = np.array([1, 2, 3, 4])
    assert common_prefix(a, np.array([1, 2, 9])) == 2
    assert common_prefix(a, a[:3]) == 3
    assert common_prefix(a, np.array([], dtype=np.int64)) == 0


def test_lookup_prefers_the_longest_match_and_keeps_the_last_token_to_compute() -> None:
    store = KVStore(budget_bytes=10**9)
    store.put("prefix", [1, 2, 3], _layers(3))
    store.put("conversation", [1, 2, 3, 4, 5, 6], _layers(6), prompt_len=4)
    store.put("conversation", [1, 2, 7, 8], _layers(4), prompt_len=4)

    handle, entry, n = store.lookup(np.array([1, 2, 3, 4, 5, 9, 9]), conversations=True)
    assert entry.kind == "conversation" and n == 5
    assert all(k.shape[2] == 5 for k, _ in entry.sliced(n))
    # A prompt equal to a cached sequence still computes its last token (for the logits).
    _, entry, n = store.lookup(np.array([1, 2, 3, 4, 5, 6]), conversations=True)
    assert n == 5
    # Prefix-only lookups ignore conversations; a prefix longer than the prompt never matches.
    _, entry, n = store.lookup(np.array([1, 2, 3, 4, 5, 9]), conversations=False)
    assert entry.kind == "prefix" and n == 3
    assert store.lookup(np.array([1, 2, 3]), conversations=False) is None
    assert store.lookup(np.array([5, 5, 5]), conversations=True) is None
    assert store.stats.prefix_hits == 1 and store.stats.conversation_hits == 2


def test_budget_evicts_least_recently_used_and_refuses_oversized_entries() -> None:
    store = KVStore(budget_bytes=_bytes(10))
    a = store.put("conversation", [1] * 4, _layers(4))
    store.put("conversation", [2] * 4, _layers(4))
    store.lookup(np.array([1, 1, 1, 1, 1]), conversations=True)  # touches a
    store.put("conversation", [3] * 4, _layers(4))  # over budget: the oldest untouched goes
    kept = sorted(int(e.tokens[0]) for e in store.entries.values())
    assert kept == [1, 3] and a in store.entries
    assert store.nbytes <= store.budget_bytes and store.stats.evictions == 1
    assert store.stats.peak_bytes <= store.budget_bytes
    assert store.put("conversation", [4] * 11, _layers(11)) is None  # larger than the budget
    # The same sequence stored again replaces its entry rather than adding a copy.
    store.put("conversation", [3] * 4, _layers(4))
    assert sorted(int(e.tokens[0]) for e in store.entries.values()) == [1, 3]


def test_release_drops_the_finished_conversation_only() -> None:
    store = KVStore(budget_bytes=10**9)
    store.put("prefix", [1, 2], _layers(2))
    store.put("conversation", [1, 2, 3, 4, 5], _layers(5), prompt_len=4)  # generated 5
    store.put("conversation", [1, 2, 8, 9], _layers(4), prompt_len=4)  # another conversation
    # The conversation ended with its reply re-rendered differently (6 instead of 5).
    assert store.release(np.array([1, 2, 3, 4, 6, 7])) == 1
    assert sorted(len(e) for e in store.entries.values()) == [2, 4]


# --------------------------------------------------------------------------- real model


def _conversations() -> list[tuple[list[dict[str, Any]], list[dict[str, Any]], list[str]]]:
    """Airline and retail conversations: an opening plus the user's later replies, of
    different lengths, so the batch holds different suffixes at every turn."""
    from envs.registry import get_world
    from rollout.agent import system_prompt
    from synthesis.base import SynthesisConfig, get_method

    out = []
    for name, n in (("airline", 1), ("retail", 1)):
        world = get_world(name)
        tasks = get_method("logic_driven")(SynthesisConfig(n_tasks=n, seed=3), world).tasks
        for k, task in enumerate(tasks):
            # The start of the real system prompt and three of the world's tools: prompts of
            # about 900 tokens keep the shared prefix and the per-turn suffixes of the real
            # thing at a quarter of the fp32 prefill (the whole prompt makes this test 4 min).
            opening = [
                {"role": "system", "content": system_prompt(world, "2026-05-10 09:00")[:1800]},
                {"role": "user", "content": task.instruction},
            ]
            replies = ["Yes, please go ahead." + " Thank you." * k,
                       "My id is " + next(iter(task.user.known_info.values()), "unknown") + "."]
            out.append((opening, world.tool_schemas()[:3], replies))
    return out


async def _talk(model: Any, conversations: list[Any], max_tokens: int) -> list[list[str]]:
    from data.records import Sampling

    sampling = Sampling(temperature=0.0, max_tokens=max_tokens, seed=0)
    histories = [list(opening) for opening, _, _ in conversations]
    said: list[list[str]] = [[] for _ in conversations]
    for turn in range(3):
        responses = await asyncio.gather(*[
            model.chat(h, tools, sampling) for h, (_, tools, _) in zip(histories, conversations, strict=True)
        ])
        for k, resp in enumerate(responses):
            said[k].append(resp.raw["completion"])
            histories[k].append({"role": "assistant", "content": resp.raw["completion"]})
            if turn < 2:
                histories[k].append({"role": "user", "content": conversations[k][2][turn]})
    for h, (_, tools, _) in zip(histories, conversations, strict=True):
        await model.release(h, tools)
    return said


SMALL_MB = 60.0  # room for about 1,300 tokens in fp32 (~46 KB a token): entries get evicted


@pytest.mark.slow
def test_greedy_outputs_are_token_identical_with_and_without_reuse() -> None:
    """fp32, where a prompt's greedy tokens do not depend on how it is batched or split. (In
    bf16 they do already without reuse: the same conversations batched 1 or 4 at a time give
    different tokens, so bf16 cannot show identity either way.)"""
    from rollout.embedded import EmbeddedModel

    conversations = _conversations()
    said: dict[str, list[list[str]]] = {}
    stats: dict[str, dict[str, int]] = {}
    # mode, budget: every prompt prefilled whole; prefix only; the prefix plus earlier
    # turns; the same with room for about one conversation (SMALL_MB), so entries are
    # evicted as the conversations go on.
    arms = {"none": ("none", 1536.0), "prefix": ("prefix", 1536.0), "full": ("full", 1536.0),
            "small": ("full", SMALL_MB)}
    for arm, (mode, budget) in arms.items():
        model = EmbeddedModel(dtype="float32", kv_reuse=mode, max_batch=4, kv_budget_mb=budget)
        try:
            said[arm] = asyncio.run(_talk(model, conversations, max_tokens=8))
            stats[arm] = model.kv_stats()
            asyncio.run(model.chat(*conversations[0][:2], _greedy(2)))  # runs the releases
            stats[arm + "_after"] = model.kv_stats()
        finally:
            asyncio.run(model.aclose())
    for arm in ("prefix", "full", "small"):
        assert said[arm] == said["none"], arm
    # Each world's prefix is computed once and reused by every other request.
    assert stats["prefix"]["prefix_hits"] == 2 * 3 - 2 and stats["prefix"]["conversation_hits"] == 0
    # Later turns reuse the conversation's own earlier turns: most of each prompt is reused.
    full = stats["full"]
    assert full["conversation_hits"] == 2 * 2
    assert full["reused_tokens"] > 10 * full["prefilled_tokens"]
    # Ended conversations are released; the two prefixes and the new request's turn stay.
    assert stats["full_after"]["released"] == 2 and stats["full_after"]["entries"] == 3
    small = stats["small"]
    assert small["evictions"] > 0 and small["peak_bytes"] <= SMALL_MB * 2**20


def _greedy(max_tokens: int) -> Any:
    from data.records import Sampling

    return Sampling(temperature=0.0, max_tokens=max_tokens, seed=0)
