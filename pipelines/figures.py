"""The figures of a run (release cards, the HTML report, the summary) from shard figures.

A shard's figures (`shard_figures`) are small and JSON-typed: per-task pass counts, counters
of terminations, tool errors and rewards, usage, the curator's stats, data-quality counts and
the shard's best graph candidates. `merge` adds any number of them up, so a streamed run
computes its figures without holding a record, and the in-memory stages compute them as one
shard: there is one way to count.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from curation.base import Selection, combine_stats
from data.parts import sum_stats
from data.records import Task, Trajectory, Verdict
from envs.registry import get_world
from pipelines.config import RunConfig
from verifiers.base import get_verifier, primary_verifier

GRAPHS = 3  # task graphs the report draws


def deciding_verdicts(cfg: RunConfig, tasks: Sequence[Task], verdicts: Sequence[Verdict]) -> list[Verdict]:
    """The verdicts of each task's primary verifier: the ones curation and figures go by."""
    primary = {t.id: primary_verifier(t, cfg.verifiers) for t in tasks}
    return [v for v in verdicts if v.verifier == primary.get(v.task_id)]


# Second judges whose agreement with the deciding verdict the card and report show
# (`pipelines.stages.verify.SECOND_JUDGES`).
SECOND_JUDGES = ("tau2",)
AGREEMENT_CLASSES = ("both_pass", "only_second", "only_deciding", "both_fail")


def reason_class(reason: str) -> str:
    """A verdict's reason as a class that counts across tasks: quoted text and numbers out."""
    text = re.sub(r"'[^']*'|\"[^\"]*\"|‘[^’]*’", "…", reason)
    text = re.sub(r"[0-9]+(?:[.,][0-9]+)*", "N", text)
    return re.sub(r"\s+", " ", text).strip()[:120]


def agreement(cfg: RunConfig, tasks: Sequence[Task], trajectories: Sequence[Trajectory],
              verdicts: Sequence[Verdict]) -> dict[str, Any]:
    """How each second judge's verdict (`SECOND_JUDGES`, e.g. τ²'s reward) agrees with the
    deciding verdict on the policy trajectories both judged: per judge the four classes
    (`AGREEMENT_CLASSES`: both pass, only the second judge, only the deciding verdict, both
    fail), the reasons of each disagreement (`reason_class` of the failing side's reasons:
    τ²'s for `only_deciding`, the deciding verifier's for `only_second`) and how the judge
    scores the reference trajectories; `errors`: trajectories it could not judge (left out).
    Empty when no second judge gave a verdict."""
    primary = {t.id: primary_verifier(t, cfg.verifiers) for t in tasks}
    reference = {t.id for t in trajectories if t.reference}
    by_traj: dict[str, dict[str, Verdict]] = {}
    for v in verdicts:
        by_traj.setdefault(v.trajectory_id, {})[v.verifier] = v
    out: dict[str, Any] = {}
    for judge in SECOND_JUDGES:
        counts: Counter[str] = Counter()
        reasons: dict[str, Counter[str]] = {"only_second": Counter(), "only_deciding": Counter()}
        ref: Counter[str] = Counter()
        errors = 0
        for tid, found in by_traj.items():
            second = found.get(judge)
            if second is None:
                continue
            if second.details.get("error"):  # the judge could not read it: no verdict to compare
                errors += 1
                continue
            if tid in reference:
                ref["judged"] += 1
                ref["passed"] += int(second.passed)
                continue
            deciding = found.get(primary.get(second.task_id, ""))
            if deciding is None or deciding.verifier == judge:
                continue
            cls = ("both_pass" if second.passed else "only_deciding") if deciding.passed else \
                  ("only_second" if second.passed else "both_fail")
            counts[cls] += 1
            if cls in reasons:
                failing = deciding if cls == "only_second" else second
                reasons[cls].update(dict.fromkeys({reason_class(r) for r in failing.reasons} or {"(no reason given)"}, 1))
        if counts or ref or errors:
            out[judge] = {**{c: counts[c] for c in AGREEMENT_CLASSES},
                          "reasons": {k: dict(c) for k, c in reasons.items()},
                          "reference": {"judged": ref["judged"], "passed": ref["passed"]}, "errors": errors}
    return out


def shard_figures(cfg: RunConfig, tasks: Sequence[Task], trajectories: Sequence[Trajectory],
                  verdicts: Sequence[Verdict], selection: Selection, graphs: int = 0) -> dict[str, Any]:
    """The figures of one shard (or of a whole run held in memory); `graphs`: how many graph
    candidates to keep (`curation.graphs.graph_candidates`)."""
    from curation.quality import row_quality

    policy = [t for t in trajectories if not t.reference]
    decided = {v.trajectory_id: v for v in deciding_verdicts(cfg, tasks, verdicts)}
    world_of = {t.id: t.world for t in tasks}
    by_task = {t.id: t for t in tasks}
    per_task: dict[str, dict[str, Any]] = {}
    rewards: Counter[str] = Counter()
    for t in policy:
        if (v := decided.get(t.id)) is not None:
            c = per_task.setdefault(t.task_id, {"world": world_of.get(t.task_id, "?"), "passed": 0, "trials": 0})
            c["passed"] += int(v.passed)
            c["trials"] += 1
            rewards[repr(float(v.score))] += 1
    tool_errors: Counter[str] = Counter()
    for t in policy:
        tool_errors.update(t.error_counts)
    candidates: list[list[Any]] = []
    if graphs:
        from curation.graphs import graph_candidates
        from curation.topology import build_index

        judged = [t for t in trajectories if t.id in decided]
        if judged:
            ix = build_index(judged, {t.id: decided[t.id].passed for t in judged})
            candidates = [list(c) for c in graph_candidates(ix)[:graphs]]
    return {
        "tasks": per_task,
        "trajectories": len(trajectories),
        "policy": len(policy),
        "terminations": dict(Counter(t.termination for t in policy if t.termination not in ("agent_stop", "user_stop"))),
        "tool_errors": dict(tool_errors),
        "usage": {"model_calls": sum(t.usage.model_calls for t in policy),
                  "prompt_tokens": sum(t.usage.prompt_tokens for t in policy),
                  "completion_tokens": sum(t.usage.completion_tokens for t in policy)},
        "rewards": dict(rewards),
        "verifiers": {v.verifier: v.verifier_version for v in verdicts},
        "sft": len(selection.sft),
        "rl": len(selection.rl),
        "drops": dict(selection.drops),
        "curator": dict(selection.stats),
        "quality": sum_stats(row_quality(t, by_task.get(t.task_id)) for t, _ in selection.sft),
        "graphs": candidates,
        **({"agreement": agreed} if (agreed := agreement(cfg, tasks, trajectories, verdicts)) else {}),
    }


def merge(parts: Sequence[Mapping[str, Any]], means: Mapping[str, str], graphs: int = GRAPHS) -> dict[str, Any]:
    """Shard figures as one: counts add, the curator's stats combine (`combine_stats` with the
    curator's `MEANS`), and the best `graphs` candidates over all shards stay."""
    out = sum_stats([{k: v for k, v in p.items() if k not in ("curator", "graphs")} for p in parts])
    out["curator"] = combine_stats([p["curator"] for p in parts], means) if parts else {}
    pool = [c for p in parts for c in p.get("graphs", [])]
    out["graphs"] = sorted(pool, key=lambda c: (-c[1], c[2]))[:graphs]  # stable: shard order breaks ties
    return out


def flat_quality(q: dict[str, Any]) -> dict[str, Any]:
    """The data-quality audit as report figures, one per check."""
    out = {f"data quality: compliance {k}": v for k, v in q.get("clause_compliance", {}).items()}
    out.update({f"data quality: {k}": v for k, v in q.items() if not isinstance(v, dict)})
    return out


def rewards_list(fig: Mapping[str, Any]) -> list[float]:
    """One reward per judged policy trajectory, from the rewards counter (for the histogram)."""
    return [float(k) for k, n in sorted(fig.get("rewards", {}).items(), key=lambda kv: float(kv[0])) for _ in range(n)]


def report_html(fig: Mapping[str, Any], n_tasks: int, graph_svgs: Mapping[str, str],
                title: str = "trajforge run report", head: Mapping[str, Any] | None = None,
                version: str = "") -> str:
    """The static HTML run report of a run's merged figures."""
    from curation.quality import quality_figures
    from data.report import ReportFigures, pass_at_k, pass_hat_k, render_report

    tasks = fig.get("tasks", {})
    counts = [(c["passed"], c["trials"]) for c in tasks.values()]
    per_world: dict[str, list[int]] = {}
    for c in tasks.values():
        w = per_world.setdefault(c["world"], [0, 0])
        w[0] += c["passed"]
        w[1] += c["trials"]
    kmax = max((n for _, n in counts), default=0)
    ks = [k for k in (1, 2, 3, 4, 5, 8, 10, 16) if k <= kmax]
    funnel = [("tasks", n_tasks), ("policy trajectories", fig.get("policy", 0)),
              ("reference trajectories", fig.get("trajectories", 0) - fig.get("policy", 0)),
              ("passed verification", sum(c for c, _ in counts)),
              ("sft rows", fig.get("sft", 0)), ("rl rows", fig.get("rl", 0))]
    figures = ReportFigures(
        title=title, funnel=funnel, drops=dict(fig.get("drops", {})),
        pass_rate_by_world={w: (p, n) for w, (p, n) in sorted(per_world.items())},
        pass_at_k=pass_at_k(counts, ks), pass_hat_k=pass_hat_k(counts, ks), rewards=rewards_list(fig),
        graph_svgs=dict(graph_svgs), version=version,
        headline={k: v for k, v in (head or {}).items() if k != "warnings"},
        warnings=list((head or {}).get("warnings", [])),
        stats={**fig.get("curator", {}), **flat_quality(quality_figures(fig.get("quality", {}))),
               **agreement_stats(fig)})
    return render_report(figures)


def run_figures(cfg: RunConfig, tasks: Sequence[Task], fig: Mapping[str, Any], synth_stats: dict[str, Any],
                curated_stats: dict[str, dict[str, Any]], infra: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The figures a release card states: the yield funnel with drop reasons, pass@k and pass^k
    per world, verifiers (names, versions, self-audit), hygiene, model, sampling, token usage.
    `tasks` is read twice, a task at a time (the run's `PackedTasks` parse each as it goes)."""
    from data.report import pass_at_k, pass_hat_k

    per_task = fig.get("tasks", {})
    by_world: dict[str, dict[str, Any]] = {}
    for w in sorted({c["world"] for c in per_task.values()}):
        counts = [(c["passed"], c["trials"]) for c in per_task.values() if c["world"] == w]
        kmax = max(n for _, n in counts)
        ks = [k for k in (1, 2, 4, 8, 16) if k <= kmax]
        by_world[w] = {"tasks": len(counts), "trajectories": sum(n for _, n in counts),
                       "pass_rate": round(sum(c for c, _ in counts) / max(1, sum(n for _, n in counts)), 4),
                       "pass_at_k": {str(k): round(v, 4) for k, v in pass_at_k(counts, ks).items()},
                       "pass_hat_k": {str(k): round(v, 4) for k, v in pass_hat_k(counts, ks).items()}}
    audit = synth_stats.get("verifier_audit", {})
    synth_drops: Counter[str] = Counter(synth_stats.get("drops", {}))
    for source in synth_stats.values():  # a mixed run keeps each source's stats under its name
        if isinstance(source, dict) and isinstance(source.get("drops"), dict) and "tasks" in source:
            synth_drops.update(source["drops"])
    attempted = len(tasks) + int(audit.get("excluded", 0)) + sum(synth_drops.values())
    passed = sum(c["passed"] for c in per_task.values())
    hygiene = {n: st.get("hygiene", {}) for n, st in curated_stats.items()}
    quality = curated_stats.get("sft", {}).get("data_quality", {})
    released = {n: st.get("rows") for n, st in curated_stats.items()}
    drops = fig.get("drops", {})
    drops_of = lambda prefix: {k.split(":", 1)[1]: v for k, v in drops.items() if k.startswith(prefix)}  # noqa: E731
    funnel = [
        {"stage": "synthesized (attempted)", "count": attempted, "drops": dict(synth_drops)},
        {"stage": "validated (passed self-audit)", "count": len(tasks), "drops": audit.get("exclusion_reasons", {})},
        {"stage": "rolled out (policy trajectories)", "count": fig.get("policy", 0),
         "drops": dict(fig.get("terminations", {}))},
        {"stage": "verified (passed)", "count": passed, "drops": {}},
        {"stage": "curated (sft picks / rl tasks)", "count": f"{fig.get('sft', 0)} / {fig.get('rl', 0)}",
         "drops": {**{f"sft:{k}": v for k, v in drops_of("sft:").items()}, **{f"rl:{k}": v for k, v in drops_of("rl:").items()}}},
        {"stage": "released (sft / sft_recovery / rl rows)",
         "count": f"{released.get('sft')} / {released.get('sft_recovery', 0)} / {released.get('rl')}",
         "drops": {**{f"{n}:hygiene": (h.get("dedup", {}).get("input", 0) - h.get("contamination", {}).get("kept", 0))
                      for n, h in hygiene.items() if h.get("dedup")},
                   **{f"{n}:failed its verifier once scrubbed": h["replay"]["dropped"]
                      for n, h in hygiene.items() if h.get("replay", {}).get("dropped")}}},
    ]
    names = sorted(set(fig.get("verifiers", {})) | set(cfg.verifiers))
    versions = dict(fig.get("verifiers", {}))
    for n in names:
        if n not in versions:
            try:
                versions[n] = get_verifier(n).version
            except KeyError:
                versions[n] = "?"
    from synthesis.splits import split_figures

    split = {**split_figures(tasks), "configured_test_fraction": cfg.synthesis.test_fraction}
    return {"headline": headline(cfg, fig, curated_stats, infra), "funnel": funnel, "pass_by_world": by_world, "split": split, "realism": task_realism(tasks),
            "verifiers": versions, "verifier_audit": audit,
            "hygiene": hygiene, "data_quality": quality, "tool_errors": dict(sorted(fig.get("tool_errors", {}).items())),
            "model": cfg.rollout.model.model_dump(mode="json", include={"kind", "name", "path"}),
            "sampling": cfg.rollout.sampling.model_dump(mode="json"), "usage": dict(fig.get("usage", {})),
            **({"agreement": dict(fig["agreement"])} if fig.get("agreement") else {})}


def agreement_stats(fig: Mapping[str, Any], top: int = 3) -> dict[str, Any]:
    """The agreement figures (`agreement`) as report figures: per second judge the four
    classes, the agreement share and the `top` reasons of each disagreement."""
    out: dict[str, Any] = {}
    for judge, a in sorted(fig.get("agreement", {}).items()):
        n = sum(int(a.get(c, 0)) for c in AGREEMENT_CLASSES)
        for c in AGREEMENT_CLASSES:
            out[f"agreement with {judge}: {c}"] = a.get(c, 0)
        if n:
            out[f"agreement with {judge}: share"] = round((a.get("both_pass", 0) + a.get("both_fail", 0)) / n, 4)
        for cls, reasons in sorted(a.get("reasons", {}).items()):
            for reason, count in Counter(reasons).most_common(top):
                out[f"agreement with {judge}: {cls} because {reason}"] = count
        if a.get("errors"):
            out[f"agreement with {judge}: not judged (evaluator errors)"] = a["errors"]
        ref = a.get("reference", {})
        if ref.get("judged"):
            out[f"agreement with {judge}: reference trajectories passed"] = f"{ref.get('passed', 0)}/{ref['judged']}"
    return out


REALISM_SAMPLE = 200


def task_realism(tasks: Iterable[Task]) -> dict[str, dict[str, Any]]:
    """How the tool-use tasks read, per method@world (`synthesis.realism`): prefix share,
    nearest-neighbour similarity, words, leaked ids, write tools targeted, outcome assertions.
    Read in one pass: per method@world only its count, the tools it targets and the
    `REALISM_SAMPLE` tasks of smallest id (the text figures are quadratic in tasks) are held."""
    from synthesis.realism import realism_figures, targeted_tools, write_tools

    counts: Counter[str] = Counter()
    targeted: dict[str, set[str]] = {}
    samples: dict[str, list[Task]] = {}
    for t in tasks:
        key = f"{t.method}@{t.world}"
        counts[key] += 1
        targeted.setdefault(key, set()).update(targeted_tools([t]))
        sample = samples.setdefault(key, [])
        sample.append(t)
        if len(sample) >= 2 * REALISM_SAMPLE:  # keep the smallest ids only
            sample.sort(key=lambda x: x.id)
            del sample[REALISM_SAMPLE:]
    out: dict[str, dict[str, Any]] = {}
    for key in sorted(counts):
        sample = sorted(samples[key], key=lambda t: t.id)[:REALISM_SAMPLE]
        world = get_world(sample[0].world)
        if not getattr(world, "tools", None) or sample[0].verification.verifier:  # workspace tasks
            continue
        writes = write_tools(world)
        missing = [w for w in writes if w not in targeted[key]]
        out[key] = {**realism_figures(world, sample), "tasks": counts[key], "sampled": len(sample),
                    "write_tools_covered": len(writes) - len(missing), "write_tools_missing": missing}
    return out


# Stands for the release version in a report written before the release is published.
RELEASE_VERSION = "@@trajforge-release-version@@"


def headline(cfg: RunConfig, fig: Mapping[str, Any], released: Mapping[str, Mapping[str, Any]],
             infra: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The figures a reader sees first, in the CLI summary, the Prefect artifact, the card and
    the report alike: the model; the policy's pass rate by each trajectory's deciding verdict
    (its task's primary verifier: the one curation goes by); released rows (after hygiene),
    the share of sft rows that are reference dialogues, the `sft_recovery` rows and
    `trained_failures` (sft and sft_recovery rows whose failed turn carries loss: 0; a
    warning otherwise); and warnings. `released`: each release kind's curated stats with its
    `rows`; `infra`: `stages.check_infra_failures`."""
    per_task = fig.get("tasks", {})
    judged = sum(c["trials"] for c in per_task.values())
    passed = sum(c["passed"] for c in per_task.values())
    scores = fig.get("rewards", {})
    score_n = sum(scores.values())
    sft = int(released.get("sft", {}).get("rows") or 0)
    rl = int(released.get("rl", {}).get("rows") or 0)
    ref = int(released.get("sft", {}).get("reference_rows") or 0)
    recovery = int(released.get("sft_recovery", {}).get("rows") or 0)
    trained = sum(int(released.get(k, {}).get("trained_failures") or 0) for k in ("sft", "sft_recovery"))
    failed = int((infra or {}).get("infra_failed", 0))
    model = cfg.rollout.model
    out: dict[str, Any] = {
        "model": f"{model.kind}:{model.name}" if model.name and model.kind != "scripted" else model.kind,
        "policy_trajectories": fig.get("policy", 0),
        "policy_passed": passed,
        "policy_pass_rate": round(passed / judged, 4) if judged else 0.0,
        "mean_score": round(sum(float(k) * n for k, n in scores.items()) / score_n, 4) if score_n else 0.0,
        "reference_trajectories": fig.get("trajectories", 0) - fig.get("policy", 0),
        "infra_failed": failed,
        "sft_rows": sft,
        "sft_reference_rows": ref,
        "sft_reference_share": round(ref / sft, 4) if sft else 0.0,
        "sft_recovery_rows": recovery,
        "trained_failures": trained,
        "rl_rows": rl,
    }
    warnings: list[str] = []
    if judged and not passed:
        warnings.append(f"0 of {judged} policy trajectories passed"
                        + (": every sft row is a reference dialogue" if sft and ref == sft else ""))
    elif sft and ref == sft:
        warnings.append("every sft row is a reference dialogue: no policy rollout was selected")
    if judged < fig.get("policy", 0):
        warnings.append(f"{fig.get('policy', 0) - judged} policy trajectories have no deciding verdict and are "
                        "not in the pass rate")
    if failed:
        warnings.append(f"{failed} of {int((infra or {}).get('policy', 0))} policy trajectories ended on "
                        "infrastructure failures and were left out (--allow-partial)")
    for name, n in (("sft", sft), ("rl", rl)):  # an empty sft_recovery is a run without recoveries
        if not n:
            warnings.append(f"the {name} release has no rows")
    if trained:
        warnings.append(f"{trained} released sft rows give loss to a failed assistant turn")
    out["warnings"] = warnings
    return out


def summary(n_tasks: int, head: Mapping[str, Any], releases: dict[str, Path], published: Any = None,
            model_calls: int | None = None) -> dict[str, Any]:
    """The run's summary: the `headline` figures as they are, the tasks, the model calls this
    run made (a reference replay or a cached shard makes none), and with `published`
    (`stages.Published`) whether the release was `published` as a new version or `unchanged`
    (the one `LATEST.json` already named)."""
    keys = ("policy_trajectories", "policy_passed", "policy_pass_rate", "mean_score", "reference_trajectories",
            "infra_failed", "sft_rows", "sft_reference_rows", "sft_reference_share", "sft_recovery_rows",
            "trained_failures", "rl_rows")
    return {
        "tasks": n_tasks,
        **{k: head.get(k) for k in keys},
        "model": head.get("model"),
        **({"model_calls": model_calls} if model_calls is not None else {}),
        "warnings": list(head.get("warnings", [])),
        "releases": {k: str(v) for k, v in releases.items()},
        **({"release": "unchanged" if published.unchanged else "published", "release_version": published.version}
           if published else {}),
    }
