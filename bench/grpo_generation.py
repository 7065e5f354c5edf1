"""GRPO's plain-text episodes (`train.conversation.ConversationRollout`) generated two ways,
on the same rl rows in the same invocation (docs/training.md, "Talking to the user in plain
text"):

- `plain`: `model.generate` left-padded over every open episode's whole ids, each turn
  (TRL's own transformers path: each turn prefills the whole conversation again);
- `reusing`: `train.conversation.reusing_generate`, each episode's keys and values kept
  between its turns (`rollout.embedded_engine.ReusingDecoder`): the group's prompt is
  prefilled once and a turn only after what the episode already holds.

Both arms play greedy (temperature 0), so they must write the same tokens; the bench checks
that they do and reports each arm's wall seconds, turns and generated tokens. The rows are
GRPO groups (each task `--episodes` times) of logic-driven airline and retail tasks, opened
as the rl release opens them, with the scripted user; the model is the embedded SmolLM2 in
fp32 (training's dtype) or `--model FOLDER` (a trained one: the base rarely gets past its
first turn, since its rambling ends the scripted user's conversation).

    .venv/bin/python bench/grpo_generation.py [--quick] [--model FOLDER]

`--quick`: 1 task x 2 episodes, 4 turns of at most 128 tokens. Full: 2 tasks (one a world) x
4 episodes, 12 turns of at most 256 tokens, 2,560 tokens an episode (configs/train-cpu.yaml).
The last line printed is one JSON object.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any


def group_rows(worlds: list[str], tasks_per_world: int, episodes: int, seed: int) -> list[dict[str, Any]]:
    """Rl rows as a GRPO batch holds them: each task `episodes` times, opened with its world's
    system prompt and the scripted user's first message."""
    from data.records import canonical_json
    from envs.registry import get_world
    from rollout.agent import opening_messages, world_now
    from rollout.user import ScriptedUser
    from synthesis.base import SynthesisConfig, get_method

    rows = []
    for name in worlds:
        world = get_world(name)
        made = get_method("logic_driven")(SynthesisConfig(method="logic_driven", world=name, n_tasks=tasks_per_world,
                                                          seed=seed), world)
        for task in made.tasks[:tasks_per_world]:
            env = world.env(task.initial_state)
            prompt = opening_messages(task, world, world_now(env.conn), ScriptedUser(task))
            env.close()
            row = {"prompt": prompt, "task": canonical_json(task.model_dump()), "task_id": task.id,
                   "environment": task.world}
            rows += [row] * episodes
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="1 task x 2 episodes, 4 turns of 128 tokens")
    ap.add_argument("--model", help="a model folder (default: the embedded SmolLM2)")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, GenerationConfig

    import train.conversation as conversation
    from rollout.embedded import hub_offline, prepare_embedded_model
    from rollout.prepare import folder_template

    size = ({"worlds": ["airline"], "tasks": 1, "episodes": 2, "max_turns": 4, "turn_tokens": 128, "budget": 1024}
            if args.quick else
            {"worlds": ["airline", "retail"], "tasks": 1, "episodes": 4, "max_turns": 12, "turn_tokens": 256,
             "budget": 2560})
    folder = args.model or str(prepare_embedded_model())
    with hub_offline():
        tok = AutoTokenizer.from_pretrained(folder, local_files_only=True)
        model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32, local_files_only=True)
    tok.chat_template = folder_template(None if args.model is None else Path(folder))
    model.eval()
    rows = group_rows(size["worlds"], size["tasks"], size["episodes"], args.seed)
    conversation._generating = lambda trainer: contextlib.nullcontext(model)  # the trainer's unwrapping is TRL's
    eos = sorted({tok.eos_token_id, tok.convert_tokens_to_ids("<|im_end|>")})

    arms: dict[str, dict[str, Any]] = {}
    played: dict[str, Any] = {}
    for name, sampling in (("plain", {"do_sample": False, "top_k": 50}), ("reusing", {"do_sample": False})):
        trainer = SimpleNamespace(generation_config=GenerationConfig(eos_token_id=eos, pad_token_id=tok.pad_token_id,
                                                                     **sampling),
                                  eos_token_ids=eos, processing_class=tok, accelerator=SimpleNamespace(device="cpu"),
                                  use_vllm=False)
        generate = conversation.trainer_generate(trainer)
        rollout = conversation.ConversationRollout(size["worlds"], max_turns=size["max_turns"],
                                                   turn_tokens=size["turn_tokens"])
        started = time.monotonic()
        episodes = rollout.play(rows, tok, generate, eos, size["budget"])
        wall = time.monotonic() - started
        played[name] = [(e.completion_ids, e.mask) for e in episodes]
        store = getattr(generate, "store", None)
        arms[name] = {"wall_s": round(wall, 1), "episodes": len(episodes),
                      "turns": sum(e.turns for e in episodes), "generated_tokens": sum(sum(e.mask) for e in episodes),
                      "closings": sorted(e.env.closing or "" for e in episodes),
                      **({"reused_tokens": store.stats.reused_tokens, "prefilled_tokens": store.stats.prefilled_tokens}
                         if store is not None else {})}
        print(name, json.dumps(arms[name]), flush=True)
    print(json.dumps({
        "bench": "grpo_generation", "quick": args.quick, "model": args.model or "embedded", "size": size,
        "threads": torch.get_num_threads(), "arms": arms, "identical_tokens": played["plain"] == played["reusing"],
        "speedup": round(arms["plain"]["wall_s"] / max(arms["reusing"]["wall_s"], 1e-9), 2),
    }))


if __name__ == "__main__":
    main()
