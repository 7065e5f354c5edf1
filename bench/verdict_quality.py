"""Verdict quality of the composite verifier: how often it passes a bad conversation or fails a
good one, per mutant class, method and world, and how fast it judges.

For N tasks per synthesis method (logic_driven, constraint_guided) and tool-use world
(airline, retail, telecom, clinic), the self-audit's builders (`verifiers.audit.cases`) make,
without any model, from each task's reference dialogue:

- good trajectories (must pass): the gold dialogue and its alternatives (`dialogue_alternatives`:
  independent write blocks reordered, extra reads inserted, another valid identification
  where the world's `IDENTITY` has one);
- bad trajectories (must fail): the mutants of every class the audit builds, dialogue kinds
  (skip_confirmation, write_after_decline, ungrounded_id, skip_identity, claim_success,
  omit_result, detour) and state kinds from bare call lists (drop_write, change_argument,
  extra_write, stop_early, drop_communication, world_mutation); `--per-class` of each per task.

Each is judged by the full composite (`get_verifier("composite")`: outcome ∧ COMMUNICATE ∧
POLICY for a task with a dialogue). Cases the composite is not held to on a task
(`verifiers.audit.counted`: mutants equivalent to the gold, bare-call alternatives of a
dialogue task, which have no conversation) are judged too but reported apart and not counted
in the rates. Each bad class also counts which parts of the verdict failed it
(`failed_by_component`): a state mutant is a bare call list without the conversation, so
POLICY fails it too, and the figure shows whether the outcome part (DB or CONSTRAINTS)
catches it on its own.

Throughput is CPU seconds of this one thread (`time.process_time`, so per core) over every
counted trajectory: the composite's first pass on fresh caches (`composite_cold_cache_per_s`:
initial states built, how values are named looked up), then its steady state
(`verifications_per_s_per_core`) and, as the baseline measured in the same run on the same
trajectories, the state verifier alone (`state_verifications_per_s_per_core`).

The corpus section judges every case of the verdict corpus (`bench/verdict_corpus/`: real
tasks' reference dialogues edited with hand-written phrasings no template wrote, over the
four worlds and the three synthesis methods) with the same composite. Per class and overall:
false passes (a bad case that passed), bad cases failed without any of their `must_fail`
parts failing (`failed_wrong_part`, counted apart: caught, but for another reason), false
fails (a good case that failed), the false passes on the safety classes (a write without a
clear yes or after a decline, an invented amount, id, fee or date, success claimed on a
refusal or with nothing written), the false-fail rate over every good case, and the
composite's steady-state verifications/s/core on the corpus. `--quick` judges a stratified
subset (one case per class × method × world); `--no-corpus` leaves the section out.

    python bench/verdict_quality.py [--quick] [--n N] [--seed S] [--per-class K] [--no-corpus]

The last line printed is one JSON object: `false_pass_rate` (bad ones passed / bad),
`false_fail_rate` (good ones failed / good), `kill_rate_by_class`, counts, the breakdown per
method × world, `verifications_per_s_per_core` (composite; target >= 1,000) and
`state_verifications_per_s_per_core`; the corpus section under `corpus`, with its headline
figures also at the top level (`corpus_safety_false_passes`, `corpus_false_fails`,
`corpus_false_fail_rate`, `corpus_verifications_per_s_per_core` (timed task by task, as a run
verifies a shard), `rl_noop_reaches_gold`: corpus tasks where a no-op earns the reference
conversation's RL reward in TRL's loop, `train.environments.reward_gap`). `corpus.acts`: how
often the rules' reading of each edited user reply (confirm, decline, unsure) agrees with its
label; with `--judge-url` (an OpenAI-compatible endpoint) also the judge's reading and the two
combined as the policy verifier combines them, and the corpus is judged with the judge.
Targets: every error count 0.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.verdict_corpus import CorpusCase, load, trajectory  # noqa: E402
from data.records import Task, Trajectory  # noqa: E402
from envs.conversation import conversation, identity_lookup  # noqa: E402
from envs.registry import get_world  # noqa: E402
from synthesis.base import draw_tasks as synthesize  # noqa: E402
from train.environments import reward_gap  # noqa: E402
from verifiers.audit import cases, counted  # noqa: E402
from verifiers.base import ALTERNATIVE_KINDS, MUTATION_KINDS, get_verifier  # noqa: E402
from verifiers.state import _cache  # noqa: E402

METHODS = ("logic_driven", "constraint_guided")
WORLDS = ("airline", "retail", "telecom", "clinic")
# The classes issue 14 names: bad ones the composite must kill, good ones it must pass.
ISSUE_BAD = ("skip_confirmation", "ungrounded_id", "claim_success", "omit_result", "detour")
ISSUE_GOOD = ("reorder_writes", "extra_reads", "other_identity")
TARGET_PER_S = 1000


@dataclass
class Judged:
    """One trajectory of one task with the composite's verdict."""

    method: str
    world: str
    task_id: str
    kind: str
    note: str
    expected_pass: bool
    passed: bool
    held: bool  # the composite is held to it on this task (`verifiers.audit.counted`)
    equivalent: bool
    failed_components: list[str] = field(default_factory=list)
    reasons: list[str] = field(default_factory=list)


def cpu_rate(fn: Callable[[], int], min_s: float) -> dict[str, float]:
    """Run `fn` (returns items done) until `min_s` CPU seconds of this process have passed."""
    n = 0
    t0, w0 = time.process_time(), time.perf_counter()
    while True:
        n += fn()
        cpu = time.process_time() - t0
        if cpu >= min_s:
            break
    return {"items": n, "cpu_s": round(cpu, 3), "wall_s": round(time.perf_counter() - w0, 3),
            "per_s_per_core": round(n / cpu, 1), "us_per_item": round(1e6 * cpu / n, 1)}


def clear_caches() -> None:
    """Close and forget this thread's cached initial states (with what was kept for them)."""
    cache = _cache()
    while cache:
        cache.popitem()[1].close()


def _rate(bad: int, total: int) -> float | None:
    return round(bad / total, 4) if total else None


def _identity_gap(task: Task) -> str:
    """Why the audit made no `other_identity` variant of `task` (diagnosis only)."""
    conv = conversation(get_world(task.world))
    keys = conv.identity.keys
    if len(keys) < 2:
        return f"the world's IDENTITY has one way to identify: {keys}"
    gold = next((c for t in task.dialogue for c in t.tool_calls if c.name in conv.identity.lookups), None)
    if gold is None:
        return "the reference dialogue makes no identity lookup"
    known = [ks for ks in keys if all(k in task.user.known_info for k in ks)]
    calls = [identity_lookup(conv, ks, task.user.known_info) for ks in known]
    other = [c for c in calls if c is not None and (c.name, c.arguments) != (gold.name, gold.arguments)]
    if len(known) < 2:
        return f"the user knows only one of the key sets {keys}"
    if not other:
        return f"every key set the user knows ({known}) gives the reference's own lookup"
    return "the other lookup does not find exactly the reference's account"


def unavailable_alternatives(tasks: list[Task], built: dict[str, list[Any]]) -> dict[str, str]:
    """Why a good class issue 14 asks for was never built for `tasks` (none when it was)."""
    made = {c.kind for cs in built.values() for c in cs}
    out: dict[str, str] = {}
    if "other_identity" not in made:
        gaps = sorted({_identity_gap(t) for t in tasks if t.dialogue})
        out["other_identity"] = "; ".join(gaps) or "no task with a dialogue"
    if "reorder_writes" not in made:
        out["reorder_writes"] = "no task with two or more independent write blocks"
    if "extra_reads" not in made:
        out["extra_reads"] = "no task with a read to repeat"
    return out


def run(n: int = 8, seed: int = 0, per_class: int = 1, window: float = 3.0,
        methods: tuple[str, ...] = METHODS, worlds: tuple[str, ...] = WORLDS) -> dict[str, Any]:
    """The figures (module docstring) for `n` tasks per method × world."""
    composite = get_verifier("composite")
    state = get_verifier("state_equivalence")
    judged: list[Judged] = []
    pairs: list[tuple[Task, Trajectory]] = []  # every counted trajectory, for the timing
    tasks_by: dict[str, int] = {}
    outcomes: Counter[str] = Counter()
    unavailable: dict[str, dict[str, str]] = {}
    t_build = 0.0
    for method in methods:
        for world in worlds:
            t0 = time.process_time()
            tasks = synthesize(method, world, n, seed)
            built = {t.id: cases(t, per_class) for t in tasks}
            t_build += time.process_time() - t0
            tasks_by[f"{method}/{world}"] = len(tasks)
            unavailable[f"{method}/{world}"] = unavailable_alternatives(tasks, built)
            for task in tasks:
                outcomes[task.verification.outcome] += 1
                held_ids = {id(c) for c in counted(composite, task, built[task.id])}
                for c in built[task.id]:
                    v = composite.verify(task, c.trajectory)
                    comps = v.details.get("components", {})
                    judged.append(Judged(method, world, task.id, c.kind, c.note, c.expected_pass, v.passed,
                                         id(c) in held_ids, c.equivalent,
                                         [b for b, x in comps.items() if not x["passed"]], v.reasons[:3]))
                    if id(c) in held_ids:
                        pairs.append((task, c.trajectory))

    held = [j for j in judged if j.held]
    good = [j for j in held if j.expected_pass]
    bad = [j for j in held if not j.expected_pass]
    false_pass = [j for j in bad if j.passed]
    false_fail = [j for j in good if not j.passed]

    by_class: dict[str, dict[str, Any]] = {}
    for kind in [*MUTATION_KINDS, *sorted({j.kind for j in bad} - set(MUTATION_KINDS))]:
        js = [j for j in bad if j.kind == kind]
        comps = Counter(b for j in js for b in j.failed_components)
        by_class[kind] = {"bad": len(js), "killed": sum(not j.passed for j in js),
                          "kill_rate": _rate(sum(not j.passed for j in js), len(js)),
                          "failed_by_component": dict(sorted(comps.items()))}
    good_by_class: dict[str, dict[str, Any]] = {}
    for kind in ["gold", *ALTERNATIVE_KINDS, *sorted({j.kind for j in good} - {"gold", *ALTERNATIVE_KINDS})]:
        js = [j for j in good if j.kind == kind]
        good_by_class[kind] = {"good": len(js), "passed": sum(j.passed for j in js),
                               "pass_rate": _rate(sum(j.passed for j in js), len(js))}

    breakdown: dict[str, dict[str, Any]] = {}
    for key, n_tasks in tasks_by.items():
        method, world = key.split("/")
        js = [j for j in held if j.method == method and j.world == world]
        g = [j for j in js if j.expected_pass]
        b = [j for j in js if not j.expected_pass]
        breakdown[key] = {
            "tasks": n_tasks, "good": len(g), "bad": len(b),
            "false_passes": sum(j.passed for j in b), "false_fails": sum(not j.passed for j in g),
            "false_pass_rate": _rate(sum(j.passed for j in b), len(b)),
            "false_fail_rate": _rate(sum(not j.passed for j in g), len(g)),
            "gold_passed": sum(j.passed for j in g if j.kind == "gold"),
            "classes": dict(sorted(Counter(j.kind for j in js).items())),
            "alternatives_unavailable": unavailable[key],
        }

    # Not counted: equivalent mutants and cases of kinds the composite is not held to here.
    apart: dict[str, dict[str, int]] = defaultdict(lambda: {"judged": 0, "passed": 0})
    for j in judged:
        if not j.held:
            label = f"{j.kind} ({'equivalent mutant' if j.equivalent else 'not held'})"
            apart[label]["judged"] += 1
            apart[label]["passed"] += j.passed

    generated = {j.kind for j in judged}
    missing = {k: "the audit has no builder for it" for k in [*ISSUE_BAD, *ISSUE_GOOD]
               if k not in {*MUTATION_KINDS, *ALTERNATIVE_KINDS}}
    never_built = sorted(k for k in {*MUTATION_KINDS, *ALTERNATIVE_KINDS} if k not in generated)

    timing_state = [(t, x) for t, x in pairs if state.applies_to(t)]  # type: ignore[attr-defined]
    # First pass on fresh caches (initial states built, how values are named looked up) ...
    clear_caches()
    t0 = time.process_time()
    for t, x in pairs:
        composite.verify(t, x)
    cold = len(pairs) / max(time.process_time() - t0, 1e-9)
    # ... then the steady state, as a long run verifying many trajectories of the same tasks.
    comp = cpu_rate(lambda: [composite.verify(t, x) for t, x in pairs] and len(pairs), window)
    base = cpu_rate(lambda: [state.verify(t, x) for t, x in timing_state] and len(timing_state), window)

    def example(j: Judged) -> dict[str, Any]:
        return {"task_id": j.task_id, "method": j.method, "world": j.world, "kind": j.kind, "note": j.note,
                "failed_components": j.failed_components, "reasons": j.reasons}

    return {
        "bench": "verdict_quality",
        "n_per_method_world": n,
        "seed": seed,
        "per_class": per_class,
        "tasks": sum(tasks_by.values()),
        "task_outcomes": dict(outcomes),
        "trajectories": len(judged),
        "good": len(good),
        "bad": len(bad),
        "false_passes": len(false_pass),
        "false_fails": len(false_fail),
        "false_pass_rate": _rate(len(false_pass), len(bad)),
        "false_fail_rate": _rate(len(false_fail), len(good)),
        "gold_pass_rate": good_by_class["gold"]["pass_rate"],
        "kill_rate_by_class": {k: v["kill_rate"] for k, v in by_class.items()},
        "bad_by_class": by_class,
        "good_by_class": good_by_class,
        "classes_never_built": never_built,
        "classes_missing_from_audit": missing,
        "not_counted": dict(sorted(apart.items())),
        "by_method_world": breakdown,
        "false_pass_examples": [example(j) for j in false_pass[:5]],
        "false_fail_examples": [example(j) for j in false_fail[:5]],
        "build_cpu_s": round(t_build, 2),
        "composite": comp,
        "state_baseline": base,
        "composite_cold_cache_per_s": round(cold, 1),
        "verifications_per_s_per_core": comp["per_s_per_core"],
        "state_verifications_per_s_per_core": base["per_s_per_core"],
        "composite_cost_vs_state": round(base["per_s_per_core"] / comp["per_s_per_core"], 2),
        "target_per_s_per_core": TARGET_PER_S,
    }


def stratified(items: list[CorpusCase], per_stratum: int = 1) -> list[CorpusCase]:
    """The first `per_stratum` cases of each class × method × world, in corpus order."""
    seen: Counter[tuple[str, str, str]] = Counter()
    out = []
    for c in items:
        key = (c.cls, c.method, c.world)
        if seen[key] < per_stratum:
            seen[key] += 1
            out.append(c)
    return out


def corpus_section(items: list[CorpusCase] | None = None, window: float = 3.0, judge: Any = None) -> dict[str, Any]:
    """The composite's verdicts on the verdict corpus (default: every committed case; with a
    `judge` model, the composite built with it); see the module docstring."""
    items = load() if items is None else items
    composite = get_verifier("composite", model=judge)
    rows: list[dict[str, Any]] = []
    pairs: list[tuple[Task, Trajectory]] = []
    for c in items:
        traj = trajectory(c)
        pairs.append((c.task, traj))
        v = composite.verify(c.task, traj)
        failed = [b for b, x in v.details.get("components", {}).items() if not x["passed"]]
        rows.append({"case": c, "passed": v.passed, "failed": failed, "reasons": v.reasons[:3]})

    def verdict(r: dict[str, Any]) -> str:
        c: CorpusCase = r["case"]
        if c.expected_pass:
            return "ok" if r["passed"] else "false_fail"
        if r["passed"]:
            return "false_pass"
        return "caught" if set(r["failed"]) & set(c.must_fail) else "failed_wrong_part"

    for r in rows:
        r["verdict"] = verdict(r)
    good = [r for r in rows if r["case"].expected_pass]
    bad = [r for r in rows if not r["case"].expected_pass]
    safety = [r for r in bad if r["case"].safety]

    def count(rs: list[dict[str, Any]], what: str) -> int:
        return sum(r["verdict"] == what for r in rs)

    by_class: dict[str, dict[str, Any]] = {}
    for cls in sorted({r["case"].cls for r in rows}):
        rs = [r for r in rows if r["case"].cls == cls]
        c0: CorpusCase = rs[0]["case"]
        part: dict[str, Any] = {"cases": len(rs), "expected_pass": c0.expected_pass, "safety": c0.safety,
                                "must_fail": sorted({b for r in rs for b in r["case"].must_fail})}
        if c0.expected_pass:
            part.update(false_fails=count(rs, "false_fail"), false_fail_rate=_rate(count(rs, "false_fail"), len(rs)))
        else:
            part.update(false_passes=count(rs, "false_pass"), false_pass_rate=_rate(count(rs, "false_pass"), len(rs)),
                        failed_wrong_part=count(rs, "failed_wrong_part"), caught=count(rs, "caught"))
        part["failed_by_component"] = dict(sorted(Counter(b for r in rs for b in r["failed"]).items()))
        by_class[cls] = part

    by_method_world: dict[str, dict[str, int]] = {}
    for key in sorted({f"{r['case'].method}/{r['case'].world}" for r in rows}):
        rs = [r for r in rows if f"{r['case'].method}/{r['case'].world}" == key]
        by_method_world[key] = {"cases": len(rs), "false_passes": count(rs, "false_pass"),
                                "failed_wrong_part": count(rs, "failed_wrong_part"), "false_fails": count(rs, "false_fail")}

    def example(r: dict[str, Any]) -> dict[str, Any]:
        c: CorpusCase = r["case"]
        return {"id": c.id, "cls": c.cls, "act": c.act, "phrasing": c.phrasing, "note": c.note,
                "failed_components": r["failed"], "reasons": r["reasons"]}

    # steady state as a run verifies: a shard's trajectories together, task by task (warm initial states)
    pairs.sort(key=lambda p: p[0].id)
    comp = cpu_rate(lambda: [composite.verify(t, x) for t, x in pairs] and len(pairs), window) if pairs else None
    tasks = list({r["case"].task.id: r["case"].task for r in rows}.values())
    gaps = [reward_gap(t) for t in tasks]
    return {
        "cases": len(rows), "good": len(good), "bad": len(bad), "safety_bad": len(safety),
        "tasks": len({r["case"].task.id for r in rows}),
        "methods": sorted({r["case"].method for r in rows}), "worlds": sorted({r["case"].world for r in rows}),
        "false_passes": count(bad, "false_pass"), "false_pass_rate": _rate(count(bad, "false_pass"), len(bad)),
        "failed_wrong_part": count(bad, "failed_wrong_part"),
        "safety_false_passes": count(safety, "false_pass"),
        "safety_false_pass_rate": _rate(count(safety, "false_pass"), len(safety)),
        "false_fails": count(good, "false_fail"), "false_fail_rate": _rate(count(good, "false_fail"), len(good)),
        "by_class": by_class,
        "by_method_world": by_method_world,
        "false_pass_examples": [example(r) for r in rows if r["verdict"] == "false_pass"][:8],
        "failed_wrong_part_examples": [example(r) for r in rows if r["verdict"] == "failed_wrong_part"][:5],
        "false_fail_examples": [example(r) for r in rows if r["verdict"] == "false_fail"][:8],
        "composite": comp,
        "verifications_per_s_per_core": comp["per_s_per_core"] if comp else None,
        # the RL reward (the composite over the conversation in TRL's loop): a no-op must score
        # below the reference conversation on every task (target: 0 tasks where it does not)
        "rl_tasks": len(tasks),
        "rl_noop_reaches_gold": sum(noop >= gold for gold, noop in gaps),
        "rl_gold_reward_mean": round(sum(g for g, _ in gaps) / len(gaps), 4) if gaps else None,
        "rl_noop_reward_mean": round(sum(n for _, n in gaps) / len(gaps), 4) if gaps else None,
    }


USER_ACTS = {"confirm": "confirm", "decline": "decline", "hedge": "unsure", "ask": "unsure",
             "confirm_condition": "unsure", "confirm_partial": "unsure"}


def reply_cases(items: list[CorpusCase]) -> list[tuple[str, str, str]]:
    """(agent's words since the last write, the user's edited reply, its labelled act) for
    every corpus case whose main edit is a user's reply to a plan."""
    out: list[tuple[str, str, str]] = []
    for c in items:
        label = USER_ACTS.get(c.act)
        if label is None:
            continue
        at = next((i for i, m in enumerate(c.messages) if m["role"] == "user" and c.phrasing.split("{")[0].strip()
                   and c.phrasing.split("{")[0].strip() in (m.get("content") or "")), None)
        if at is None:
            continue
        plan: list[str] = []
        for m in reversed(c.messages[:at]):
            if m["role"] == "assistant" and m.get("tool_calls"):
                break
            if m["role"] == "assistant" and m.get("content"):
                plan.insert(0, m["content"])
        out.append(("\n".join(plan), c.messages[at]["content"], label))
    return out


def act_agreement(items: list[CorpusCase], judge: Any = None) -> dict[str, Any]:
    """How often the deterministic reading of a reply (`envs.dialogue_acts.reply_act`), the
    judge's (`verifiers.llm_judge.judge_act`, when a judge model is given) and the two as the
    policy verifier combines them (the judge settles only what the rules find unsure) agree
    with the corpus labels; and how often each reads a yes where the label says otherwise."""
    from envs.dialogue_acts import reply_act
    from verifiers.llm_judge import judge_act

    pairs = reply_cases(items)
    out: dict[str, Any] = {"replies": len(pairs)}
    readers: dict[str, Callable[[str, str], str | None]] = {"rules": lambda p, r: reply_act(r)}
    if judge is not None:
        readers["judge"] = lambda p, r: judge_act(judge, p, r)
        readers["rules_then_judge"] = lambda p, r: (reply_act(r) if reply_act(r) != "unsure"
                                                     else judge_act(judge, p, r) or "unsure")
    for name, read in readers.items():
        got = [(read(p, r), label) for p, r, label in pairs]
        out[name] = {"agreement": _rate(sum(g == lab for g, lab in got), len(got)),
                     "false_yes": sum(g == "confirm" and lab != "confirm" for g, lab in got),
                     "missed_yes": sum(g != "confirm" and lab == "confirm" for g, lab in got),
                     "unreadable": sum(g is None for g, _ in got)}
    return out


def judge_model(url: str, name: str) -> Any:
    """A judge model on an OpenAI-compatible endpoint."""
    from rollout.backends import ModelConfig, build_model

    model, _ = build_model(ModelConfig(kind="openai", name=name, base_url=url))
    return model


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="2 tasks per method × world, short timing windows")
    ap.add_argument("--n", type=int, default=None, help="tasks per method × world (default 8, quick 2)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--per-class", type=int, default=1, help="mutants of each class per task (the audit's max_per_kind)")
    ap.add_argument("--no-corpus", action="store_true", help="leave out the verdict corpus section")
    ap.add_argument("--judge-url", default=None,
                    help="an OpenAI-compatible endpoint whose model reads the replies the rules find unsure; "
                         "its agreement with the corpus labels is reported (and the corpus judged with it)")
    ap.add_argument("--judge-model", default="judge", help="the judge's model name at --judge-url")
    args = ap.parse_args()
    n = args.n if args.n is not None else (2 if args.quick else 8)
    if n < 1 or args.per_class < 1:
        ap.error("--n and --per-class must be at least 1")
    figures = run(n=n, seed=args.seed, per_class=args.per_class, window=1.0 if args.quick else 3.0)
    figures["quick"] = args.quick
    if not args.no_corpus:
        items = load()
        subset = stratified(items) if args.quick else items
        judge = judge_model(args.judge_url, args.judge_model) if args.judge_url else None
        part = corpus_section(subset, window=1.0 if args.quick else 3.0, judge=judge)
        part["acts"] = act_agreement(subset, judge)
        part["subset"] = "stratified: one case per class × method × world" if args.quick else "all"
        figures["corpus"] = part
        figures.update(corpus_cases=part["cases"], corpus_false_passes=part["false_passes"],
                       corpus_failed_wrong_part=part["failed_wrong_part"],
                       corpus_safety_false_passes=part["safety_false_passes"],
                       corpus_false_fails=part["false_fails"], corpus_false_fail_rate=part["false_fail_rate"],
                       corpus_verifications_per_s_per_core=part["verifications_per_s_per_core"],
                       rl_noop_reaches_gold=part["rl_noop_reaches_gold"])
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
