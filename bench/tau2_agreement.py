"""τ²-bench inside the pipeline: what the τ² worlds yield and how trajforge's verdict agrees
with τ²'s own evaluator.

For τ²'s airline and retail domains (worlds `tau2_airline`, `tau2_retail`; the `tau2` extra):

- `tasks`: tasks the `tau2` method imports per domain (τ²'s train split, dual-control and
  near-test tasks left out and counted), and the yield (kept / drawn);
- `reference_tau2_reward_1`: the share of tasks whose reference trajectory (the gold calls,
  replayed, and a closing message with the facts to tell) τ² rewards 1.0 in τ²'s runtime;
- `agreement`: on policy trajectories of a noisy scripted model and the audit's state mutants
  (bare call lists that drop, change or add a write), the deciding verdict (the composite)
  against τ²'s reward: both pass, only τ², only trajforge, both fail, with the commonest reasons
  of each disagreement (`pipelines.figures.agreement`);
- `near_test`: imported tasks within instruction similarity 0.5 of a τ² test task (target 0),
  `curation.hygiene.decontamination.tau2_test_proximity`;
- `realism`: prefix share and median nearest-neighbour similarity of the imported tasks beside
  τ²'s own train tasks (`synthesis.realism`);
- `synthesized`: the same figures for tasks synthesized inside the τ² worlds, per domain and
  method (`tau2_logic_driven`, `tau2_constraint_guided`, `tau2_self_play`;
  `synthesis/tau2_synth.py`): tasks and yield, the share whose reference τ² rewards 1.0,
  agreement, near-test tasks; summed up in `synthesized_per_method`, `synthesized_yield`,
  `synthesized_reference_tau2_reward_1` (target 1.0) and `synthesized_near_test` (target 0);
- `eval`: `evaluate_benchmark("tau2:airline", ...)` on `--eval-tasks` test tasks with the
  scripted model (seconds per task); with `--embedded` also the embedded model.

    python bench/tau2_agreement.py [--quick] [--n N] [--n-synth N] [--embedded]

The last line printed is one JSON object. Without the extra it says so and exits 0.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

DOMAINS = ("airline", "retail")
SYNTH_METHODS = ("tau2_logic_driven", "tau2_constraint_guided", "tau2_self_play")  # synthesis/tau2_synth.py


def domain_figures(domain: str, n: int, seed: int, noise: float, trials: int, method: str = "tau2") -> dict[str, Any]:
    """The figures of `n` tasks of `method` (τ²'s own tasks, or one of the τ² synthesis methods)
    in τ² `domain`."""
    from curation.hygiene.decontamination import tau2_test_proximity
    from data.records import Trajectory, Verdict
    from envs.registry import get_world
    from envs.tau2_world import task_from_tau2, tau2_tasks
    from pipelines.config import RunConfig
    from pipelines.figures import agreement
    from rollout.collector import ModelConfig, RolloutConfig, collect
    from synthesis.base import SynthesisConfig, get_method
    from synthesis.realism import median_nn_similarity, prefix_share
    from verifiers.base import get_verifier

    world = get_world(f"tau2_{domain}")
    t0 = time.perf_counter()
    result = get_method(method)(SynthesisConfig(method=method, world=world.name, n_tasks=n, seed=seed), world)
    tasks = result.tasks
    synth_s = time.perf_counter() - t0
    tau2 = get_verifier("tau2")
    composite = get_verifier("composite")

    refs = [conversation(world, t, list(t.reference_solution), "reference") for t in tasks]
    ref_pass = sum(tau2.verify(t, r).passed for t, r in zip(tasks, refs, strict=True))

    rollout = RolloutConfig(model=ModelConfig(kind="scripted", noise=noise), trials=trials)
    policy = collect(tasks, rollout)
    mutants: list[Trajectory] = [m for t in tasks for m in state_mutants(world, t)]
    by_id = {t.id: t for t in tasks}
    judged: list[Verdict] = []
    for traj in [*policy, *mutants]:
        task = by_id[traj.task_id]
        judged += [composite.verify(task, traj), tau2.verify(task, traj)]
    cfg = RunConfig(verifiers=["composite"])
    agree = agreement(cfg, tasks, [*policy, *mutants], judged).get("tau2", {})
    pool = [task_from_tau2(world, t2) for t2 in tau2_tasks(domain, "train")
            if all(a.requestor == "assistant" for a in (t2.evaluation_criteria.actions or [])
                   if t2.evaluation_criteria is not None)] if tasks and method == "tau2" else []
    near = tau2_test_proximity(tasks)
    return {
        "tasks": len(tasks), "drops": dict(result.drops), "yield": round(len(tasks) / max(1, len(tasks)
                                                                                        + sum(result.drops.values())), 3),
        "synthesis_s": round(synth_s, 2),
        "reference_judged": len(tasks), "reference_tau2_passed": ref_pass,
        "reference_tau2_reward_1": round(ref_pass / len(tasks), 4) if tasks else None,
        "policy_trajectories": len(policy), "mutant_trajectories": len(mutants),
        "agreement": agree,
        "agreement_share": _share(agree),
        "near_test": near.get("within"), "near_test_max_similarity": near.get("max_similarity"),
        "realism": {"prefix_share": round(prefix_share(tasks), 3) if tasks else None,
                    "median_nn_similarity": round(median_nn_similarity(tasks), 3) if len(tasks) > 1 else None,
                    "tau2_train_prefix_share": round(prefix_share(pool), 3) if pool else None,
                    "tau2_train_median_nn_similarity": round(median_nn_similarity(pool), 3) if len(pool) > 1 else None},
        "terminations": dict(Counter(t.termination for t in policy)),
        "outcomes": dict(Counter(t.verification.outcome for t in tasks)),
    }


def conversation(world: Any, task: Any, calls: list[Any], name: str, termination: str = "agent_stop") -> Any:
    """A trajectory that makes `calls` in a fresh copy of the task's τ² world (each as one
    assistant turn with its result), then tells the user the task's facts."""
    from data.records import Step, Trajectory
    from verifiers.tau2_reward import reference_messages

    msgs = reference_messages(task, calls, closing="Here is where things stand.")
    env = world.env(task.initial_state)
    steps = []
    for i, c in enumerate(calls):
        obs = env.call(c)
        steps.append(Step(index=i, turn=i + 1, action=c, observation=obs.content, error=obs.error))
    return Trajectory(id=f"{name}-{task.id}", task_id=task.id, trial=0, model=name, messages=msgs, steps=steps,
                      termination=termination, final_state_hash=env.state_hash())  # type: ignore[arg-type]


def state_mutants(world: Any, task: Any) -> list[Any]:
    """Known-bad variants of the reference, as the self-audit's state kinds: the last write
    dropped, a write's string argument changed, a write made twice, and stopping early."""
    from data.records import ToolCall

    calls = list(task.reference_solution)
    writes = [i for i, c in enumerate(calls) if world.tools[c.name].write]
    if not writes:
        return []
    out = [conversation(world, task, calls[:writes[-1]] + calls[writes[-1] + 1:], "drop_write"),
           conversation(world, task, calls + [calls[writes[0]]], "extra_write"),
           conversation(world, task, calls, "stop_early", termination="max_turns")]
    first = calls[writes[0]]
    key = next((k for k, v in first.arguments.items() if isinstance(v, str)), None)
    if key is not None:
        changed = ToolCall(name=first.name, arguments={**first.arguments, key: first.arguments[key] + "X"})
        out.append(conversation(world, task, [changed if i == writes[0] else c for i, c in enumerate(calls)],
                                "change_argument"))
    return out


def _share(agree: dict[str, Any]) -> float | None:
    n = sum(agree.get(k, 0) for k in ("both_pass", "only_second", "only_deciding", "both_fail"))
    return round((agree.get("both_pass", 0) + agree.get("both_fail", 0)) / n, 4) if n else None


def eval_figures(n_tasks: int, embedded: bool) -> dict[str, Any]:
    from rollout.collector import ModelConfig
    from train.evaluate import evaluate_benchmark

    out: dict[str, Any] = {}
    models = [("scripted", ModelConfig(kind="scripted"))] + ([("embedded", ModelConfig(kind="embedded"))]
                                                             if embedded else [])
    for name, model in models:
        r = evaluate_benchmark("tau2:airline", model, split="test", trials=1, max_tasks=n_tasks)
        out[name] = {k: r.get(k) for k in ("tasks", "pass_hat_k", "mean_reward", "seconds_per_task")}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="4 tasks per domain, 1 trial, 1 eval task")
    ap.add_argument("--n", type=int, default=None, help="tasks per domain (default 30, quick 4)")
    ap.add_argument("--n-synth", type=int, default=None, help="synthesized tasks per domain and method (default 10, quick 2)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--noise", type=float, default=0.4, help="the scripted policy's share of mistaken turns")
    ap.add_argument("--eval-tasks", type=int, default=None, help="τ² airline test tasks to evaluate (default 3, quick 1)")
    ap.add_argument("--embedded", action="store_true", help="also evaluate the embedded model (minutes a task)")
    args = ap.parse_args()
    from envs.tau2_world import available

    if not available():
        print(json.dumps({"bench": "tau2_agreement", "available": False,
                          "note": "install the tau2 extra: pip install -e '.[tau2]' -c constraints.txt"}))
        return
    n = args.n if args.n is not None else (4 if args.quick else 30)
    trials = 1 if args.quick else 2
    started = time.perf_counter()
    domains = {d: domain_figures(d, n, args.seed, args.noise, trials) for d in DOMAINS}
    n_synth = args.n_synth if args.n_synth is not None else (2 if args.quick else 10)
    synthesized = {d: {m: domain_figures(d, n_synth, args.seed, args.noise, trials, method=m) for m in SYNTH_METHODS}
                   for d in DOMAINS}
    figures: dict[str, Any] = {"bench": "tau2_agreement", "quick": args.quick, "n_per_domain": n, "domains": domains,
                               "synthesized": synthesized}
    figures["eval"] = eval_figures(args.eval_tasks if args.eval_tasks is not None else (1 if args.quick else 3),
                                   args.embedded)
    judged = [d["reference_judged"] for d in domains.values()]
    figures["reference_tau2_reward_1"] = round(sum(d["reference_tau2_passed"] for d in domains.values())
                                               / max(1, sum(judged)), 4)
    figures["near_test"] = sum(d["near_test"] or 0 for d in domains.values())
    figures["tasks_per_domain"] = {d: v["tasks"] for d, v in domains.items()}
    cells = [f for per in synthesized.values() for f in per.values()]
    figures["synthesized_per_method"] = {d: {m: f["tasks"] for m, f in per.items()} for d, per in synthesized.items()}
    figures["synthesized_yield"] = {d: {m: f["yield"] for m, f in per.items()} for d, per in synthesized.items()}
    figures["synthesized_reference_tau2_reward_1"] = round(sum(f["reference_tau2_passed"] for f in cells)
                                                           / max(1, sum(f["reference_judged"] for f in cells)), 4)
    figures["synthesized_near_test"] = sum(f["near_test"] or 0 for f in cells)
    figures["synthesized_agreement_share"] = {d: {m: f["agreement_share"] for m, f in per.items()}
                                              for d, per in synthesized.items()}
    figures["agreement_share"] = {d: v["agreement_share"] for d, v in domains.items()}
    figures["wall_s"] = round(time.perf_counter() - started, 1)
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
