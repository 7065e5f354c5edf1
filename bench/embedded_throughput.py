"""Embedded backend throughput: generated tokens per second of 8 concurrent trajectories
(agent loop + `EmbeddedModel` micro-batching), in three arms measured in the same run:

- `none`: every prompt prefilled whole (the backend before key/value reuse);
- `prefix`: the shared system prompt + tools prefix computed once and reused;
- `full`: the prefix plus each conversation's own earlier turns reused.

Full mode runs 4-turn conversations of 64 new tokens per turn, `--quick` 1 turn of 32.
The user is a stand-in that always asks a follow-up question and never ends the
conversation (`KeepTalking`), so every conversation runs its full number of agent turns
whatever the 135M agent says; the agent is the real embedded model.
Targets: `speedup_full_vs_none` >= 3 over 4 turns, `speedup_prefix_vs_none` >= 2 over 1
turn. Each arm starts with an empty cache (its first prefix is computed inside the run).
`ratio_vs_raw` compares the `full` arm against raw batched `model.generate` on the `none`
arm's prompts.

The trajectory run records every prompt the model was asked (messages, tools, max_tokens);
the raw arm renders the same prompts with the same tokenizer and template, left-pads them
in batches of 8 in arrival order, and runs greedy `generate` with the same
`max_new_tokens`. Both count the tokens up to and including the first end-of-turn token.

    .venv/bin/python bench/embedded_throughput.py [--quick]

The last line printed is one JSON object of the figures.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from types import SimpleNamespace
from typing import Any

from data.records import Sampling
from envs.registry import get_world
from rollout.agent import AgentConfig
from rollout.collector import RolloutConfig, UserConfig, collect
from rollout.embedded import EmbeddedModel, _Engine, prepare_embedded_model
from rollout.model import ChatResponse
from synthesis.base import SynthesisConfig, get_method

CONCURRENCY = 8


class Recording:
    """Passes chats to the embedded model and records each prompt."""

    def __init__(self, model: EmbeddedModel) -> None:
        self.model = model
        self.name = model.name
        self.prompts: list[tuple[list[dict[str, Any]], list[dict[str, Any]], int]] = []

    async def chat(
        self, messages: list[dict[str, Any]], tools: list[dict[str, Any]], sampling: Sampling
    ) -> ChatResponse:
        self.prompts.append(([dict(m) for m in messages], list(tools), sampling.max_tokens))
        return await self.model.chat(messages, tools, sampling)

    async def aclose(self) -> None:
        return None


class KeepTalking:
    """The user's model: a follow-up question each turn, never an end-of-conversation marker."""

    name = "keep-talking-user"
    REPLIES = ("Could you explain that once more, step by step?", "What would you suggest I do next?",
               "Can you check that again for me, please?", "And what does that mean for my booking?")

    def __init__(self) -> None:
        self.calls = 0

    async def chat(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]], sampling: Sampling
                   ) -> ChatResponse:
        self.calls += 1
        return ChatResponse(text=self.REPLIES[self.calls % len(self.REPLIES)])

    async def aclose(self) -> None:
        return None


def raw_generate(engine: _Engine, prompts: list[tuple[Any, Any, int]]) -> dict[str, Any]:
    import torch
    from transformers import GenerationConfig

    rows = [engine.render(SimpleNamespace(messages=m, tools=t)) for m, t, _ in prompts]  # type: ignore[arg-type]
    eos = set(engine.eos_ids)
    tokens = 0
    t0 = time.perf_counter()
    for start in range(0, len(rows), CONCURRENCY):
        chunk = rows[start : start + CONCURRENCY]
        max_new = max(p[2] for p in prompts[start : start + CONCURRENCY])
        width = max(len(r) for r in chunk)
        ids = torch.full((len(chunk), width), engine.pad_id, dtype=torch.long)
        mask = torch.zeros((len(chunk), width), dtype=torch.long)
        for i, r in enumerate(chunk):
            ids[i, width - len(r) :] = torch.tensor(r)
            mask[i, width - len(r) :] = 1
        config = GenerationConfig(
            max_new_tokens=max_new,
            do_sample=False,
            eos_token_id=engine.eos_ids,
            pad_token_id=engine.pad_id,
        )
        with torch.inference_mode():
            out = engine.model.generate(
                input_ids=ids, attention_mask=mask, generation_config=config
            )
        for i in range(len(chunk)):
            new = out[i, width:].tolist()
            end = next((k + 1 for k, t in enumerate(new) if t in eos), None)
            tokens += len(new) if end is None else end
    wall = time.perf_counter() - t0
    return {
        "prompts": len(rows),
        "completion_tokens": tokens,
        "wall_s": round(wall, 2),
        "tokens_per_s": round(tokens / wall, 2),
    }


def run_arm(mode: str, tasks: list[Any], max_turns: int, max_tokens: int) -> tuple[dict[str, Any], Recording]:
    """8 concurrent trajectories on a fresh `EmbeddedModel` with `kv_reuse=mode`."""
    embedded = EmbeddedModel(max_batch=CONCURRENCY, kv_reuse=mode)
    sampling = Sampling(temperature=0.0, max_tokens=max_tokens, seed=0)
    cfg = RolloutConfig(
        trials=1, concurrency=CONCURRENCY, sampling=sampling, agent=AgentConfig(max_turns=max_turns),
        user=UserConfig(kind="llm"),
    )
    user = KeepTalking()
    warm = Recording(embedded)  # loads the model and warms the kernels
    collect(tasks[:1], cfg.model_copy(update={"agent": AgentConfig(max_turns=1)}), model_for=lambda t: warm,
            user_model_for=lambda t: user)
    embedded.clear_kv()
    rec = Recording(embedded)
    batches_before = len(embedded.batch_sizes)
    t0 = time.perf_counter()
    trajs = collect(tasks, cfg, model_for=lambda t: rec, user_model_for=lambda t: user)
    wall = time.perf_counter() - t0
    tokens = sum(t.usage.completion_tokens for t in trajs)
    sizes = embedded.batch_sizes[batches_before:]
    figures = {
        "trajectories": len(trajs),
        "model_calls": len(rec.prompts),
        "prompt_tokens": sum(t.usage.prompt_tokens for t in trajs),
        "completion_tokens": tokens,
        "wall_s": round(wall, 2),
        "tokens_per_s": round(tokens / wall, 2),
        "mean_batch_size": round(sum(sizes) / max(1, len(sizes)), 2),
        "kv": {k: v for k, v in embedded.kv_stats().items() if k != "bytes"},
    }
    asyncio.run(embedded.aclose())
    return figures, rec


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="1 turn of 32 tokens per trajectory")
    args = ap.parse_args()
    max_turns, max_tokens = (1, 32) if args.quick else (4, 64)
    tasks = get_method("logic_driven")(
        SynthesisConfig(n_tasks=CONCURRENCY, seed=1), get_world("airline")
    ).tasks
    prepare_embedded_model()
    arms: dict[str, dict[str, Any]] = {}
    recordings: dict[str, Recording] = {}
    for mode in ("none", "prefix", "full"):
        arms[mode], recordings[mode] = run_arm(mode, tasks, max_turns, max_tokens)
    engine = _Engine(None, "bfloat16", kv_reuse="none")
    raw_generate(engine, recordings["none"].prompts[:1])  # warm-up
    raw = raw_generate(engine, recordings["none"].prompts)
    tps = {mode: arm["tokens_per_s"] for mode, arm in arms.items()}
    prefix_speedup = tps["prefix"] / max(tps["none"], 1e-9)
    full_speedup = tps["full"] / max(tps["none"], 1e-9)
    figures = {
        "bench": "embedded_throughput",
        "quick": args.quick,
        "concurrency": CONCURRENCY,
        "max_tokens": max_tokens,
        "max_turns": max_turns,
        "arms": arms,
        "raw_batched_generate": raw,
        "tokens_per_s": tps,
        "speedup_prefix_vs_none": round(prefix_speedup, 2),
        "speedup_full_vs_none": round(full_speedup, 2),
        "ratio_vs_raw": round(tps["full"] / max(raw["tokens_per_s"], 1e-9), 3),
        "targets": {"speedup_prefix_vs_none": 2.0, "speedup_full_vs_none": 3.0},
        "meets_target": (prefix_speedup >= 2.0) if args.quick else (full_speedup >= 3.0),
    }
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
