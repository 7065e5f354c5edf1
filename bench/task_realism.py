"""Task realism figures (issue 16): per synthesis method × world, on the template path with
no model, how the instructions read and what the tasks cover (`synthesis.realism`):

- prefix share: distinct first-8-word prefixes of the instructions / tasks;
- median NN similarity: Jaccard of character 5-grams of instruction + reason + task
  instructions, each task against its most similar other task, median;
- mean words of that text;
- leaked: tasks whose user-facing text states a world-internal id;
- write tools: the world's write tools some reference solution calls (and the missing ones);
- NL assertions: share of tasks with natural-language outcome assertions;
- test/train overlap: share of test tasks whose exact reference call sequence (or template
  family) some train task has.

    python bench/task_realism.py [--quick] [--n 40] [--seed 0] [--writer embedded]   # last line: JSON

`--writer KIND` has a model of that kind (`embedded`, or `openai` with `--writer-url` and
`--writer-name`) rewrite the scenario text (`synthesis.writer`); each cell then also reports
`writer` (accepted and rejected counts), and the target for NN similarity is the model
path's (<= 0.2).

`--quick` takes 20 tasks per method × world. The JSON carries every figure keyed
"method@world", the issue's `targets` and `meets_targets` (per method@world and figure).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from envs.registry import get_world  # noqa: E402
from synthesis.base import SynthesisConfig, get_method, supports  # noqa: E402
from synthesis.realism import TARGETS, meets, realism_figures  # noqa: E402
from synthesis.writer import WriterConfig  # noqa: E402

METHODS = ["logic_driven", "constraint_guided", "self_play"]
WORLDS = ["airline", "retail", "telecom", "clinic"]
COLUMNS = [("prefix", "prefix_share"), ("nn_sim", "median_nn_similarity"), ("words", "mean_words"),
           ("leaked", "leaked_tasks"), ("nl", "nl_assertion_coverage"), ("test", "test_tasks"),
           ("seq_ovl", "test_train_call_overlap"), ("fam_ovl", "test_train_family_overlap"),
           ("fams", "families")]


def _row(key: str, f: dict) -> str:
    cells = [f"{key:<28}", f"{f['tasks']:>5}"]
    cells += [f"{f[name]:>8}" for _, name in COLUMNS]
    cells.append(f"  {f['write_tools_covered']}/{f['write_tools_total']}")
    if f["write_tools_missing"]:
        cells.append(" missing: " + ", ".join(f["write_tools_missing"]))
    return "".join(cells)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=40, help="tasks per method × world")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--quick", action="store_true", help="20 tasks per method × world")
    ap.add_argument("--methods", default=",".join(METHODS))
    ap.add_argument("--worlds", default=",".join(WORLDS))
    ap.add_argument("--writer", default=None, help="model kind that rewrites the scenario text")
    ap.add_argument("--writer-url", default=None)
    ap.add_argument("--writer-name", default=None)
    args = ap.parse_args()
    if args.quick:
        args.n = 20
    writer = None
    if args.writer:
        model = {"kind": args.writer, **({"base_url": args.writer_url} if args.writer_url else {}),
                 **({"name": args.writer_name} if args.writer_name else {})}
        writer = WriterConfig(model=model)
    figures: dict[str, dict] = {}
    print(f"{'method@world':<28}{'tasks':>5}" + "".join(f"{h:>8}" for h, _ in COLUMNS) + "  writes")
    for method in args.methods.split(","):
        for name in args.worlds.split(","):
            world = get_world(name)
            if not supports(method, world):
                continue
            t0 = time.perf_counter()
            cfg = SynthesisConfig(method=method, world=name, n_tasks=args.n, seed=args.seed, writer=writer)
            result = get_method(method)(cfg, world)
            f = realism_figures(world, result.tasks)
            if writer is not None:
                f["writer"] = result.stats.get("writer", {})
            f["seconds"] = round(time.perf_counter() - t0, 2)
            key = f"{method}@{name}"
            figures[key] = f
            print(_row(key, f), flush=True)
    targets = dict(TARGETS)
    if writer is not None:
        targets["median_nn_similarity"] = ("<=", 0.2)  # the model path's target
    met = {key: meets(f, targets) for key, f in figures.items()}
    all_met = all(all(m.values()) for m in met.values())
    print(f"meets every target: {all_met}")
    print(json.dumps({"n": args.n, "seed": args.seed, "figures": figures,
                      "targets": {k: list(v) for k, v in targets.items()}, "writer": args.writer,
                      "meets_targets": met, "all_targets_met": all_met}, sort_keys=True))


if __name__ == "__main__":
    main()
