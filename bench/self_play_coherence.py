"""Self-play coherence figures (issue 16 §3): per world, scripted self-play tasks counted by
problem: internal ids in what the user says, no identity given (of write tasks), records of
more than one user, transfers first / with more after / not called for, calculator-only
tasks, and tasks that change nothing with no answer to check.

    python bench/self_play_coherence.py [--quick] [--n 40] [--seed 5]   # last line: JSON

`--quick` takes 20 tasks per world.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from envs.registry import get_world  # noqa: E402
from synthesis.base import SynthesisConfig, get_method  # noqa: E402
from synthesis.self_play.coherence import figures  # noqa: E402

WORLDS = ["airline", "retail", "telecom", "clinic"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=40, help="tasks per world")
    ap.add_argument("--seed", type=int, default=5)
    ap.add_argument("--quick", action="store_true", help="20 tasks per world")
    args = ap.parse_args()
    if args.quick:
        args.n = 20
    out: dict[str, dict] = {}
    total: dict[str, int] = {}
    for name in WORLDS:
        world = get_world(name)
        t0 = time.perf_counter()
        r = get_method("self_play")(SynthesisConfig(method="self_play", world=name, n_tasks=args.n, seed=args.seed),
                                    world)
        figs = figures(world, r.tasks)
        figs["seconds"] = round(time.perf_counter() - t0, 2)
        figs["drops"] = dict(sorted(r.drops.items()))
        out[name] = figs
        for k, v in figs.items():
            if isinstance(v, int):
                total[k] = total.get(k, 0) + v
        print(name, {k: v for k, v in figs.items() if k != "drops"}, file=sys.stderr)
    out["total"] = total
    print(json.dumps(out, sort_keys=True))


if __name__ == "__main__":
    main()
