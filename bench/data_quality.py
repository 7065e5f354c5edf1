"""Data quality of released `sft` rows, for 3 synthesis methods × 4 worlds, with the
reference dialogues and noisy scripted rollouts (malformed calls, unknown tools, wrong
arguments, early stops) through the real stages: synthesize, roll out, verify, curate,
write the curated rows (hygiene included).

Per method × world and overall (worst case over the cells):

- `clause_compliance_min`, `grounded_args_rate`, `informative_reply_rate`,
  `refusal_explained_rate`: `curation.quality.sft_quality` of the released rows;
- `reference_kept_rate`: tasks whose reference row is released, of the tasks with a passing
  reference, unless an at-least-as-clean policy row (no failed call) replaced it;
- `unmarked_malformed_sft_rows`: released rows holding a failed call without `recovery`;
- `sft_trained_failures` / `sft_recovery_trained_failures`: rows of the `sft` and `sft_recovery`
  configs whose failed assistant turn carries loss (`curation.release.trained_failures`; 0);
- `stop_markers_in_rows`: released rows that still hold a user-simulator end marker;
- `scrubbed_rows_pass_rate` where the hygiene stage reports it;
- `phrase_variety` per world (over every method's reference dialogues): for three dialogue
  acts (the agent's first question, the plan it asks the user to confirm before a write, and
  its final report after a write), how many messages, how many distinct openings (first
  four words, lower-cased, any token with a digit masked) and the share of the commonest
  one; `phrase_variety_min_distinct` is the fewest distinct openings of any act seen at
  least 5 times;
- the reference dialogues' checks (`synthesis.dialogue_checks`, target 0 each):
  `reference_unseen_lookups` (reads of an id nobody showed yet), `reports_omitting_created_id`
  (ids a write created that no later reply tells), `template_artefacts` ("unit(s)", "a annual",
  "suit I", "1 refills", raw enum values), and for self-play `self_play_problems` (internal ids,
  past dates, arithmetic told as a record) and `self_play_trivial_share`.

Same-run baseline (`baseline_outcome_only`): the same rollouts curated by the outcome
verifiers alone (state / constraints / tests, the verdict before conversations were
judged), with the audit's figures of the rows that would then be selected.

    .venv/bin/python bench/data_quality.py [--quick] [--tasks N] [--noise P]

The last line printed is one JSON object of the figures.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from curation.base import failed_calls  # noqa: E402
from curation.quality import sft_quality  # noqa: E402
from curation.release import trained_failures  # noqa: E402
from data import store  # noqa: E402
from data.records import Task, Trajectory, Verdict  # noqa: E402
from envs.registry import get_world  # noqa: E402
from pipelines import stages  # noqa: E402
from pipelines.config import load_config  # noqa: E402
from rollout.user import MARKERS  # noqa: E402
from synthesis.dialogue_checks import (  # noqa: E402
    is_trivial,
    self_play_problems,
    task_artefacts,
    unseen_lookups,
    untold_ids,
)

METHODS = ["logic_driven", "constraint_guided", "self_play"]
WORLDS = ["airline", "retail", "telecom", "clinic"]
OUTCOME = {"state_equivalence", "constraint_satisfaction", "tests_pass"}


def reference_kept(tasks: list[Task], trajectories: list[Trajectory], verdicts: list[Verdict],
                   rows: list[dict[str, Any]], decided: dict[str, Verdict]) -> tuple[int, int]:
    """(tasks whose passing reference row is released or replaced by a clean policy row,
    tasks with a passing reference)."""
    by_traj = {t.id: t for t in trajectories}
    released = {r["trajectory_id"] for r in rows}
    good = kept = 0
    for task in tasks:
        refs = [t for t in trajectories if t.task_id == task.id and t.reference
                and (v := decided.get(t.id)) is not None and v.passed]
        if not refs:
            continue
        good += 1
        mine = [by_traj[i] for i in released if i in by_traj and by_traj[i].task_id == task.id]
        kept += any(t.reference for t in mine) or any(failed_calls(t) == 0 for t in mine)
    return kept, good


ACTS = ("first_question", "plan", "report")


def opening(text: str) -> str:
    """The first four words of `text`, lower-cased, tokens with a digit masked."""
    return " ".join(re.sub(r"\S*\d\S*", "#", text.lower()).split()[:4])


def dialogue_acts(trajectories: list[Trajectory], world: str) -> dict[str, list[str]]:
    """The openings of each act (`ACTS`) in the reference dialogues of `trajectories`."""
    tools = get_world(world).tools
    writes = {name for name, spec in tools.items() if spec.write}
    acts: dict[str, list[str]] = {a: [] for a in ACTS}

    def calls(m: dict[str, Any]) -> list[str]:
        return [c["function"]["name"] for c in m.get("tool_calls") or []]

    for t in trajectories:
        if not t.reference:
            continue
        msgs = [m for m in t.messages if m["role"] in ("assistant", "user", "tool")]
        said = [i for i, m in enumerate(msgs) if m["role"] == "assistant" and (m.get("content") or "").strip()
                and not calls(m)]
        first_call = next((i for i, m in enumerate(msgs) if m["role"] == "assistant" and calls(m)), len(msgs))
        if said and said[0] < first_call:
            acts["first_question"].append(opening(msgs[said[0]]["content"]))
        wrote = False
        for i in said:
            nxt = msgs[i + 1:i + 3]
            if len(nxt) == 2 and nxt[0]["role"] == "user" and set(calls(nxt[1])) & writes:
                acts["plan"].append(opening(msgs[i]["content"]))
                wrote = True
        if wrote and said:
            acts["report"].append(opening(msgs[said[-1]]["content"]))
    return acts


def variety(openings: list[str]) -> dict[str, Any]:
    counts = Counter(openings)
    return {"messages": len(openings), "distinct_openings": len(counts),
            "top_share": round(counts.most_common(1)[0][1] / len(openings), 3) if openings else None}


def dialogue_checks(tasks: list[Task], world: str) -> dict[str, Any]:
    """The reference dialogues' check counts (`synthesis.dialogue_checks`) over `tasks`."""
    w = get_world(world)
    spoken = [t for t in tasks if t.dialogue]
    out: dict[str, Any] = {
        "reference_unseen_lookups": sum(len(unseen_lookups(w, t)) for t in spoken),
        "reports_omitting_created_id": sum(bool(untold_ids(w, t)) for t in spoken),
        "template_artefacts": sum(len(task_artefacts(w, t)) for t in tasks),
    }
    played = [t for t in tasks if t.method == "self_play"]
    if played:
        out["self_play_problems"] = sum(len(self_play_problems(w, t)) for t in played)
        out["self_play_trivial"] = sum(is_trivial(w, t) for t in played)
    return out


CHECKS = ("reference_unseen_lookups", "reports_omitting_created_id", "template_artefacts", "self_play_problems")


def cell(method: str, world: str, n: int, noise: float, out: Path) -> dict[str, Any]:
    cfg = load_config(None, {"synthesis.method": method, "synthesis.world": world, "synthesis.n_tasks": n,
                             "rollout.model.kind": "scripted", "rollout.model.noise": noise, "rollout.trials": 2})
    tp = stages.synthesize(cfg, out)
    tasks = store.read_records(tp)
    trajs = [t for sh in stages.shards(tasks, 4) for t in stages.rollout_shard(sh, cfg)]
    verdicts = stages.verify_shard({t.id: t for t in tasks}, trajs, cfg.verifiers)
    selection = stages.curate(cfg, tasks, trajs, verdicts)
    paths = stages.write_curated(cfg, out, selection, tasks, [tp])
    rows = store.read_table(paths["sft"]).to_pylist()
    recovery = store.read_table(paths["sft_recovery"]).to_pylist() if "sft_recovery" in paths else []
    stats = store.read_manifest(paths["sft"]).stats
    decided = {v.trajectory_id: v for v in stages.deciding_verdicts(cfg, tasks, verdicts)}
    outcome_only = cfg.model_copy(update={"verifiers": [n for n in cfg.verifiers if n in OUTCOME]})
    base = sft_quality(stages.curate(outcome_only, tasks, trajs, verdicts), {t.id: t for t in tasks})
    kept, good = reference_kept(tasks, trajs, verdicts, rows, decided)
    by_traj = {t.id: t for t in trajs}
    q = stats.get("data_quality", {})
    return {
        "tasks": len(tasks), "sft_rows": len(rows),
        "clause_compliance_min": q.get("clause_compliance_min"),
        "grounded_args_rate": q.get("grounded_args_rate"),
        "informative_reply_rate": q.get("informative_reply_rate"),
        "refusal_explained_rate": q.get("refusal_explained_rate"),
        "scrubbed_rows_pass_rate": q.get("scrubbed_rows_pass_rate"),
        "reference_kept_rate": round(kept / good, 4) if good else None,
        "unmarked_malformed_sft_rows": sum(1 for r in rows if not r["recovery"]
                                           and failed_calls(by_traj[r["trajectory_id"]]) > 0),
        # rows whose failed assistant turn carries loss (target 0 in both configs)
        "sft_trained_failures": trained_failures(rows),
        "sft_recovery_rows": len(recovery),
        "sft_recovery_trained_failures": trained_failures(recovery),
        "stop_markers_in_rows": sum(1 for r in rows if any(k in json.dumps(r["messages"]) for k in MARKERS)),
        "reference_share": q.get("reference_share"),
        "acts": dialogue_acts(trajs, world),
        **dialogue_checks(tasks, world),
        "baseline_outcome_only": {k: base.get(k) for k in ("rows", "clause_compliance_min", "informative_reply_rate",
                                                           "refusal_explained_rate")},
    }


def worst(cells: dict[str, dict[str, Any]], key: str, fn: Any = min) -> Any:
    values = [c[key] for c in cells.values() if c.get(key) is not None]
    return fn(values) if values else None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="4 tasks per cell")
    ap.add_argument("--tasks", type=int, default=None, help="tasks per method × world (default 10, quick 4)")
    ap.add_argument("--noise", type=float, default=0.4)
    args = ap.parse_args()
    n = args.tasks or (4 if args.quick else 10)
    t0 = time.perf_counter()
    cells: dict[str, dict[str, Any]] = {}
    by_world: dict[str, dict[str, list[str]]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for method in METHODS:
            for world in WORLDS:
                key = f"{method}@{world}"
                try:
                    cells[key] = cell(method, world, n, args.noise, Path(tmp) / key)
                except Exception as exc:  # a cell that cannot run is reported, never skipped silently
                    cells[key] = {"error": f"{type(exc).__name__}: {exc}"[:300]}
                acts = cells[key].pop("acts", {})
                for act, openings in acts.items():
                    by_world.setdefault(world, {}).setdefault(act, []).extend(openings)
                print(key, json.dumps(cells[key]), flush=True)
    variety_of = {w: {a: variety(o) for a, o in acts.items()} for w, acts in by_world.items()}
    seen = [v["distinct_openings"] for acts in variety_of.values() for v in acts.values() if v["messages"] >= 5]
    figures = {
        "tasks_per_cell": n, "noise": args.noise,
        "clause_compliance_min": worst(cells, "clause_compliance_min"),
        "grounded_args_rate": worst(cells, "grounded_args_rate"),
        "informative_reply_rate": worst(cells, "informative_reply_rate"),
        "refusal_explained_rate": worst(cells, "refusal_explained_rate"),
        "scrubbed_rows_pass_rate": worst(cells, "scrubbed_rows_pass_rate"),
        "reference_kept_rate": worst(cells, "reference_kept_rate"),
        "unmarked_malformed_sft_rows": sum(c.get("unmarked_malformed_sft_rows", 0) for c in cells.values()),
        "sft_trained_failures": sum(c.get("sft_trained_failures", 0) for c in cells.values()),
        "sft_recovery_rows": sum(c.get("sft_recovery_rows", 0) for c in cells.values()),
        "sft_recovery_trained_failures": sum(c.get("sft_recovery_trained_failures", 0) for c in cells.values()),
        "stop_markers_in_rows": sum(c.get("stop_markers_in_rows", 0) for c in cells.values()),
        "baseline_outcome_only_clause_compliance_min": worst(
            {k: c.get("baseline_outcome_only", {}) for k, c in cells.items()}, "clause_compliance_min"),
        "baseline_outcome_only_informative_reply_rate": worst(
            {k: c.get("baseline_outcome_only", {}) for k, c in cells.items()}, "informative_reply_rate"),
        "phrase_variety_min_distinct": min(seen) if seen else None,
        **{k: sum(c.get(k, 0) for c in cells.values()) for k in CHECKS},
        "self_play_trivial_share": (round(sum(c.get("self_play_trivial", 0) for c in cells.values())
                                          / played, 3) if (played := sum(c.get("tasks", 0) for k, c in cells.items()
                                                                         if k.startswith("self_play@"))) else None),
        "phrase_variety": variety_of,
        "failed_cells": sorted(k for k, c in cells.items() if "error" in c),
        "cells": cells,
        "wall_s": round(time.perf_counter() - t0, 1),
    }
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
