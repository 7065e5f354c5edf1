"""Next-action scoring (`train.next_action`) with one kept head against one per world, on
the same held-out dialogues in the same invocation (docs/training.md, "Next-action
accuracy").

The held-out selection takes each world in turn (`train.evaluate.spread_over_worlds`), so
consecutive dialogues alternate between airline and retail. A dialogue's head (system
prompt, tool schemas and first user message: ~2,400-3,500 tokens) is reused by later
dialogues of its world from a kept cache. With one kept head (`MAX_HEADS = 1`, the
scorer before this bench) alternating worlds never reuse it; with the default each world
keeps its own.

The dialogues are the `test` reference dialogues of a small two-world run through the real
flow (`bench/train_value.py`'s data phase: logic-driven tasks in airline and retail, the
scripted policy), or of `--release`. Both arms score the same dialogues with the base
embedded model in this process, arms interleaved over `--rounds`; the figures are each
arm's tokens forwarded, wall seconds (the median round), and whether both arms judged every
turn alike (they must: the cache holds the same tokens either way, up to bf16 near-ties).

    .venv/bin/python bench/next_action_speed.py [--quick] [--release out/.../releases/sft/<V>]

`--quick`: 4 dialogues, one round. Full: 8 dialogues, 2 rounds. The last line printed is
one JSON object.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any


def dialogues_of(release: Path, n: int) -> tuple[list[Any], list[str]]:
    """Up to `n` held-out reference dialogues, each world in turn, and their worlds."""
    from train.value import held_out_selection, heldout_dialogues

    _, scored = held_out_selection(release, "test", None, n)
    dialogues = heldout_dialogues(release, [t.id for t in scored], "test")
    world = {t.id: t.world for t in scored}
    return dialogues, [world[d.task_id] for d in dialogues]


def score(dialogues: list[Any], max_heads: int) -> dict[str, Any]:
    from train import next_action

    kept = next_action.MAX_HEADS
    next_action.MAX_HEADS = max_heads
    try:
        started = time.monotonic()
        scorer = next_action.Scorer(None)
        results = [r for d in dialogues for r in scorer.score(d)]
        return {"wall_s": round(time.monotonic() - started, 2), "tokens_forwarded": scorer.forwarded,
                "right": [r.right for r in results]}
    finally:
        next_action.MAX_HEADS = kept


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--release", type=Path, help="an sft release with held-out reference dialogues")
    ap.add_argument("--dialogues", type=int)
    ap.add_argument("--rounds", type=int)
    args = ap.parse_args()
    n = args.dialogues or (4 if args.quick else 8)
    rounds = args.rounds or (1 if args.quick else 2)

    started = time.monotonic()
    with tempfile.TemporaryDirectory() as tmp:
        release = args.release
        if release is None:
            from bench.train_value import data_phase

            release = data_phase(6, 11, 1, 0.5, Path(tmp))["outcome"]["sft"]
        dialogues, worlds = dialogues_of(release, n)
        runs: dict[str, list[dict[str, Any]]] = {"one_head": [], "per_world": []}
        for r in range(rounds):
            order = [("one_head", 1), ("per_world", None)]
            for name, heads in order if r % 2 == 0 else order[::-1]:
                from train.next_action import MAX_HEADS

                runs[name].append(score(dialogues, heads or MAX_HEADS))
    figures = {name: {"wall_s": statistics.median(x["wall_s"] for x in rs),
                      "tokens_forwarded": rs[0]["tokens_forwarded"]} for name, rs in runs.items()}
    right = {name: rs[0]["right"] for name, rs in runs.items()}
    agree = sum(a == b for a, b in zip(right["one_head"], right["per_world"], strict=True)) / len(right["one_head"])
    print(json.dumps({
        "bench": "next_action_speed", "quick": args.quick, "dialogues": len(dialogues),
        "worlds": worlds, "turns": len(right["one_head"]), "rounds": rounds, **figures,
        "speedup": round(figures["one_head"]["wall_s"] / figures["per_world"]["wall_s"], 2),
        "forwarded_ratio": round(figures["one_head"]["tokens_forwarded"] / figures["per_world"]["tokens_forwarded"], 2),
        "turns_judged_alike": round(agree, 4), "wall_s": round(time.monotonic() - started, 1),
    }))


if __name__ == "__main__":
    main()
