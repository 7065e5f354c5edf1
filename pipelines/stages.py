"""The pipeline's stages as plain Python: read datasets, call the layers, write datasets.

Prefect flows (`pipelines/flows.py`) wrap these functions and nothing more, so every
stage can also run, and be measured, without Prefect. Each stage writes a committed,
versioned dataset with lineage pointing at its inputs.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import pyarrow as pa

from curation.base import Selection, get_curator
from curation.release import rl_rows, sft_rows
from data import parts, store
from data.atomic import write_json_atomic
from data.cache import ShardCache
from data.card import card_header, headline_markdown, render_card, run_sections
from data.crash import crashpoint
from data.records import Task, Trajectory, Verdict, content_hash
from data.schema import (
    CODECS,
    RELEASE_SCHEMA_VERSION,
    RL_SCHEMA,
    SFT_SCHEMA,
    empty_table,
    storage_type,
)
from envs.registry import get_world, world_version
from pipelines import figures, keys
from pipelines.config import RunConfig
from pipelines.figures import deciding_verdicts, task_realism  # noqa: F401  (re-exported)
from rollout.agent import env_now, opening_messages
from rollout.backends import build_model
from rollout.collector import ModelConfig, UserConfig, collect
from rollout.policies import ScriptedPolicy
from rollout.strategy import StrategyConfig
from rollout.user import ScriptedUser
from synthesis.base import get_method
from verifiers.base import VERIFIERS, applies, get_verifier, primary_verifier, share_components

T = TypeVar("T")
RELEASES = ("sft", "rl")
SCHEMAS = {"sft": SFT_SCHEMA, "rl": RL_SCHEMA}
# Columns hygiene never rewrites: names and versions. (The `task` JSON is scrubbed like the
# messages, its ids, hashes and initial-state recipe excepted: `curation.hygiene.SKIP_KEYS`.)
NOT_SCRUBBED = {"world_version", "verifier_version", "write_tools", "environment"}
# The Hub's task categories of each release kind (card metadata).
TASK_CATEGORIES = {"sft": ["text-generation"], "rl": ["reinforcement-learning", "text-generation"]}


def datasets_dir(out: Path) -> Path:
    return Path(out) / "datasets"


def releases_dir(out: Path) -> Path:
    return Path(out) / "releases"


def shard_cache(cfg: RunConfig, out: Path) -> ShardCache:
    """The run's shard cache (`<out>/cache` unless `cache_dir` is set)."""
    return ShardCache(Path(cfg.cache_dir) if cfg.cache_dir else Path(out) / "cache", enabled=cfg.cache)


def lineage(cfg: RunConfig, parents: Sequence[Path | str], run_id: str = "") -> store.Lineage:
    return store.Lineage(config_hash=cfg.config_hash(), code_version=store.code_version(),
                         parents=[str(p) for p in parents], run_id=run_id)


def shards(items: Sequence[T], size: int) -> list[list[T]]:
    size = max(1, size)
    return [list(items[i : i + size]) for i in range(0, len(items), size)]


# -- synthesis -------------------------------------------------------------------------

def synthesize(cfg: RunConfig, out: Path, run_id: str = "", cache: ShardCache | None = None) -> Path:
    """Synthesize tasks and write them as a `tasks` dataset (from the cache when unchanged)."""
    key = keys.synthesis_key(cfg) if cache else ""
    hit = cache.get_with_meta("synthesize", key, "tasks") if cache else None
    if hit is not None:
        tasks, stats = hit
        stats = {**stats, "cached": True}
    else:
        tasks, stats = [], {}
        for source in [cfg.synthesis, *cfg.synthesis_mix]:
            result = get_method(source.method)(source, get_world(source.world))
            if not result.tasks:
                raise RuntimeError(f"synthesis of {source.method} on {source.world} produced no tasks "
                                   f"(drops: {dict(result.drops)})")
            tasks += result.tasks
            stats[f"{source.method}@{source.world}"] = {
                **result.stats, "tasks": len(result.tasks), "drops": dict(result.drops)}
        if len(stats) == 1:  # one source: its stats at the top level, as before
            stats = {k: v for k, v in next(iter(stats.values())).items() if k != "tasks"}
        stats["splits"] = dict(Counter(t.split for t in tasks))
        stats["worlds"] = dict(Counter(t.world for t in tasks))
        if cache:
            cache.put("synthesize", key, "tasks", tasks, meta=stats)
    tasks, stats["verifier_audit"] = audit_tasks(cfg, tasks)
    if not tasks:
        raise RuntimeError(f"every synthesized task failed the verifier self-audit: {stats['verifier_audit']}")
    lin = lineage(cfg, [], run_id)
    return store.write_records(datasets_dir(out), "tasks", "tasks", tasks, lin, stats=stats, reuse_identical=True)


def audit_tasks(cfg: RunConfig, tasks: list[Task]) -> tuple[list[Task], dict[str, Any]]:
    """Tasks whose verifiers pass the self-audit (gold passes, mutants fail), and the audit's
    card section. Raises `VerifierAuditError` when a verifier fails too often."""
    if not cfg.audit.enabled:
        return tasks, {"enabled": False}
    from verifiers.audit import audit

    # built without a model: those that need one (the judge) are reported as skipped
    verifiers = [get_verifier(n, cfg.verifier_options.get(n)) for n in cfg.verifiers]
    report = audit(tasks, verifiers, max_failure_rate=cfg.audit.max_failure_rate, max_per_kind=cfg.audit.max_per_kind,
                   options=cfg.verifier_options)
    return report.kept(tasks), report.card()


# -- rollout ---------------------------------------------------------------------------

@contextmanager
def served_rollout(cfg: RunConfig) -> Iterator[RunConfig]:
    """The config to roll out with: as given, or, when `cfg.vllm` is set, pointed at vLLM
    servers started here (and stopped when the block ends)."""
    if cfg.vllm is None:
        yield cfg
        return
    from rollout.vllm_server import launch_replicas

    v = cfg.vllm
    with launch_replicas(v.server, v.replicas, v.gpus_per_replica, startup_timeout_s=v.startup_timeout_s) as servers:
        current = cfg.rollout.model
        options = dict(current.options) if current.kind == "openai" else {}
        model = ModelConfig(kind="openai", name=v.server.served_name(),
                            options={**options, "base_urls": [s.base_url for s in servers]})
        yield cfg.model_copy(update={"rollout": cfg.rollout.model_copy(update={"model": model}), "vllm": None})


def rollout_shard_cached(tasks: list[Task], cfg: RunConfig, cache: ShardCache,
                         key: str | None = None) -> tuple[list[Trajectory], bool]:
    """`rollout_shard` through the shard cache: (trajectories, whether they came from it).
    `key`: the shard's `keys.rollout_key`, when the caller has it."""
    key = key or keys.rollout_key(cfg, tasks)
    hit = cache.get("rollout", key, "trajectories")
    if hit is not None and not any(t.infra_failed for t in hit):
        return hit, True
    trajectories = rollout_shard(tasks, cfg)
    if not any(t.infra_failed for t in trajectories):  # a failed shard is rolled out again next run
        cache.put("rollout", key, "trajectories", trajectories)
    crashpoint("rollout.shard_done")
    return trajectories, False


# A reference replay plays the task's verified path to its end, whatever `agent.max_turns`
# allows the policy: this bounds only a replay that never ends.
REFERENCE_MAX_TURNS = 1_000


def rollout_shard(tasks: list[Task], cfg: RunConfig) -> list[Trajectory]:
    """The policy's trials for a shard of tasks, plus gold reference trajectories."""
    trajectories = collect(tasks, cfg.rollout)
    if cfg.reference_trials:
        # the gold path needs neither an LLM user nor an exploration strategy, nor a turn limit
        ref_cfg = cfg.rollout.model_copy(update={
            "trials": cfg.reference_trials, "user": UserConfig(),
            "agent": cfg.rollout.agent.model_copy(update={"strategy": StrategyConfig(),
                                                          "max_turns": REFERENCE_MAX_TURNS})})
        gold = collect(tasks, ref_cfg, model_for=lambda task: ScriptedPolicy(task, name="reference"))
        for t in gold:
            t.reference = True
        trajectories += gold
    return trajectories


def trajectory_stats(trajectories: Sequence[Trajectory]) -> dict[str, Any]:
    """The `trajectories` dataset's stats of some trajectories (they add up over shards).
    `model_calls` and tokens are the policy's (a reference replay calls no model);
    `infra_failed` counts policy trajectories that ended on infrastructure, and
    `all_infra_failed` says whether every policy trajectory of these did (a shard's
    figure: over shards it reads "some shard fully failed"); `incomplete` marks a part that
    must not be reused (`data.parts.find`)."""
    policy = [t for t in trajectories if not t.reference]
    failed = [t for t in policy if t.infra_failed]
    return {"trajectories": len(trajectories),
            "policy": len(policy),
            "terminations": dict(Counter(t.termination for t in trajectories)),
            "error_counts": dict(sum((Counter(t.error_counts) for t in trajectories), Counter())),
            "model_error_reasons": dict(Counter(t.metadata.get("model_error_reason", "backend")
                                                for t in trajectories if t.termination == "model_error")),
            "infra_failed": len(failed),
            "all_infra_failed": bool(policy) and len(failed) == len(policy),
            "incomplete": bool(failed),
            "infra_errors": sorted({str(t.metadata.get("model_error") or t.metadata.get("user_error"))[:200]
                                    for t in failed})[:3],
            "model_calls": sum(t.usage.model_calls for t in policy),
            "completion_tokens": sum(t.usage.completion_tokens for t in policy)}


class InfraFailureError(RuntimeError):
    """Too many trajectories ended on infrastructure failures: the run publishes nothing."""


def check_infra_failures(cfg: RunConfig, stats: dict[str, Any]) -> dict[str, Any]:
    """The run's infrastructure-failure figures from its rollout stats (summed over shards),
    raising `InfraFailureError` when any shard's policy trajectories all failed, or more than
    `failures.max_infra_failure_rate` of them did, unless `failures.allow_partial`."""
    policy, failed = int(stats.get("policy", 0)), int(stats.get("infra_failed", 0))
    rate = failed / policy if policy else 0.0
    figures = {"infra_failed": failed, "policy": policy, "infra_failure_rate": round(rate, 4),
               "reasons": dict(stats.get("model_error_reasons", {}))}
    too_many = bool(stats.get("all_infra_failed")) or rate > cfg.failures.max_infra_failure_rate
    if failed and too_many and not cfg.failures.allow_partial:
        why = ", ".join(f"{k}: {v}" for k, v in sorted(figures["reasons"].items())) or "user simulator"
        first = next(iter(stats.get("infra_errors") or []), "")
        raise InfraFailureError(
            f"{failed} of {policy} policy trajectories ended on infrastructure failures ({why})"
            f"{'; e.g. ' + first if first else ''}. Nothing was published or cached as done; fix the model "
            "server and rerun (--allow-partial publishes what succeeded)")
    return figures


def preflight(cfg: RunConfig) -> None:
    """Check every remote model the run will call (agent, LLM user, judge) before it starts
    (`rollout.preflight.check_model`); raises `PreflightError` with one line."""
    if not cfg.failures.preflight:
        return
    from rollout.preflight import check_model

    check_model(cfg.rollout.model, "rollout.model")
    if cfg.rollout.user.kind == "llm" and cfg.rollout.user.model is not None:
        check_model(cfg.rollout.user.model, "rollout.user.model")
    if cfg.judge is not None:
        check_model(cfg.judge, "judge")


def write_trajectories(trajectories: list[Trajectory], cfg: RunConfig, out: Path, parents: Sequence[Path],
                       run_id: str = "") -> Path:
    return store.write_records(datasets_dir(out), "trajectories", "trajectories", trajectories,
                               lineage(cfg, parents, run_id), stats=trajectory_stats(trajectories), reuse_identical=True)


def verdict_stats(verdicts: Sequence[Verdict]) -> dict[str, Any]:
    return {"verdicts": len(verdicts), "passed": sum(v.passed for v in verdicts)}


# -- verification ----------------------------------------------------------------------

def verify_shard_cached(tasks: dict[str, Task], trajectories: list[Trajectory], cfg: RunConfig,
                        cache: ShardCache, key: str | None = None) -> tuple[list[Verdict], bool]:
    """`verify_shard` with the run's verifiers through the shard cache: (verdicts, whether
    they came from it). `key`: the shard's `keys.verify_key`, when the caller has it."""
    key = key or keys.verify_key(cfg, tasks, trajectories)
    hit = cache.get("verify", key, "verdicts")
    if hit is not None:
        return hit, True
    verdicts = verify_shard(tasks, trajectories, cfg.verifiers, cfg.verifier_options, cfg.judge)
    cache.put("verify", key, "verdicts", verdicts)
    crashpoint("verify.shard_done")
    return verdicts, False


def verify_shard(tasks: dict[str, Task], trajectories: list[Trajectory], verifier_names: list[str],
                 options: dict[str, dict[str, Any]] | None = None, judge: ModelConfig | None = None) -> list[Verdict]:
    """Every verifier's verdict on every trajectory of a task it applies to. Verifiers are
    built with their `options`; those that take a model get one built from `judge`."""
    options = options or {}
    model, owned = (None, False)
    if judge is not None and any(getattr(VERIFIERS.get(n), "takes_model", False)
                                 or getattr(VERIFIERS.get(n), "needs_model", False) for n in verifier_names):
        model, owned = build_model(judge)
    # a composite judges with the run's own instances: each runs once per trajectory
    verifiers = share_components([get_verifier(n, options.get(n), model=model) for n in verifier_names], options)
    try:
        return [v.verify(tasks[t.task_id], t) for t in trajectories for v in verifiers if applies(v, tasks[t.task_id])]
    finally:
        if owned:
            for v in verifiers:
                close = getattr(v, "close", None)
                if callable(close):
                    close()


def write_verdicts(verdicts: list[Verdict], cfg: RunConfig, out: Path, parents: Sequence[Path], run_id: str = "") -> Path:
    return store.write_records(datasets_dir(out), "verdicts", "verdicts", verdicts,
                               lineage(cfg, parents, run_id), stats=verdict_stats(verdicts), reuse_identical=True)


def find_verdicts_for(out: Path, trajectories_path: Path) -> Path | None:
    """The newest committed verdicts dataset whose lineage names `trajectories_path`."""
    for version in reversed(store.versions(datasets_dir(out), "verdicts")):
        path = datasets_dir(out) / "verdicts" / version
        if str(trajectories_path) in store.read_manifest(path, verify=False).lineage.parents:
            return path
    return None


def reverify(cfg: RunConfig, out: Path, trajectories_path: Path, verifier: str, against: str | None = None,
             tasks_path: Path | None = None, verdicts_path: Path | None = None,
             run_id: str = "", upgrade_tasks: bool = False) -> tuple[Path, Any]:
    """Re-score stored trajectories with `verifier` (its current version) without any model,
    write the new verdicts as a dataset (with `diff.md`/`diff.json` of flips per task), and
    return its path and the diff. Tasks and old verdicts are found from lineage if not given.

    `upgrade_tasks`: tasks made before reference dialogues are judged as today's synthesis
    would make them (`synthesis.dialogue.upgrade`: facts to tell, expected outcome, reward
    basis); a trajectory of a task that today would not be released (a no-change task with
    nothing to tell) gets a failing verdict that says so. The counts go to the diff."""
    from verifiers.reverify import reverify as rescore

    trajectories_path = Path(trajectories_path)
    if tasks_path is None:
        parents = [Path(p) for p in store.read_manifest(trajectories_path).lineage.parents]
        tasks_path = next((p for p in parents if p.parent.name == "tasks"), None)
        if tasks_path is None:
            raise FileNotFoundError(f"{trajectories_path}: its lineage names no tasks dataset; pass --tasks")
    verdicts_path = verdicts_path or find_verdicts_for(out, trajectories_path)
    old = store.read_records(verdicts_path, "verdicts") if verdicts_path else []
    tasks = store.read_records(tasks_path, "tasks")
    trajectories = store.read_records(trajectories_path, "trajectories")
    unreleasable: dict[str, str] = {}
    upgraded = 0
    if upgrade_tasks:
        from synthesis.dialogue import upgrade

        rebuilt: set[str] = set()  # tasks whose world changed since: their recorded states are the old world's
        for i, task in enumerate(tasks):
            new, why = upgrade(get_world(task.world), task)
            upgraded += not why
            if why and why != "current":
                unreleasable[task.id] = why
            if new.initial_state.state_hash != task.initial_state.state_hash:
                rebuilt.add(task.id)
            tasks[i] = new
        trajectories = [t.model_copy(update={"final_state_hash": None}) if t.task_id in rebuilt else t
                        for t in trajectories]
    result = rescore(tasks, trajectories, old, verifier, against=against, unreleasable=unreleasable)
    result.diff.tasks_upgraded = upgraded
    totals = result.diff.totals()
    parents = [trajectories_path, tasks_path, *([verdicts_path] if verdicts_path else [])]
    with store.DatasetWriter(datasets_dir(out), "verdicts", "verdicts", CODECS["verdicts"][0], 1) as w:
        to_row = CODECS["verdicts"][1]
        if result.verdicts:
            w.write_rows([to_row(v) for v in result.verdicts])
        path = w.commit(lineage(cfg, parents, run_id), stats={"reverify": totals},
                        extra_files={"diff.md": result.diff.table() + "\n",
                                     "diff.json": result.diff.model_dump_json(indent=2)})
    return path, result.diff


# -- curation and release ----------------------------------------------------------------

def curate(cfg: RunConfig, tasks: list[Task], trajectories: list[Trajectory], verdicts: list[Verdict]) -> Selection:
    return curator_for(cfg).select(tasks, trajectories, deciding_verdicts(cfg, tasks, verdicts))


def curator_for(cfg: RunConfig) -> Any:
    """The configured curation strategy, built with its `curation_options`."""
    return get_curator(cfg.curation, cfg.curation_options)


def release_rows(selection: Selection, tasks: list[Task],
                 verifiers: Sequence[str] | None = None) -> dict[str, list[dict[str, Any]]]:
    """The `sft` and `rl` rows of a selection. `verifiers` (default: the config's default
    list) decide each rl row's `verifier` and its version: the task's primary outcome
    verifier, since an rl episode in TRL's loop has no user to identify, confirm or tell
    (the composite verdict's other parts judge conversations, in rollouts and sft rows)."""
    names = [n for n in (verifiers or RunConfig().verifiers) if n != "composite"] or ["state_equivalence"]
    by_id = {t.id: t for t in tasks}
    prompts: dict[str, list[dict[str, Any]]] = {}
    tools: dict[str, list[dict[str, Any]]] = {}
    environments: dict[str, dict[str, Any]] = {}
    for pick in selection.rl:
        task = pick.task
        world = get_world(task.world)
        env = world.env(task.initial_state)
        # no user answers inside TRL's loop: the opening says all the agent would ask for
        prompts[task.id] = opening_messages(task, world, env_now(env), ScriptedUser(task),
                                            first=ScriptedUser(task).standalone_message())
        env.close()
        tools[task.id] = world.tool_schemas()
        verifier = primary_verifier(task, names)
        environments[task.id] = {
            "world_version": world_version(task.world), "verifier": verifier,
            "verifier_version": get_verifier(verifier).version,
            "write_tools": [n for n, spec in getattr(world, "tools", {}).items() if getattr(spec, "write", False)],
        }
    return {
        "sft": sft_rows(selection, {t: x.split for t, x in by_id.items()}, {t: x.method for t, x in by_id.items()},
                        {t: x.world for t, x in by_id.items()}),
        "rl": rl_rows(selection, prompts, tools, environments),
    }


SUMMARIES = {
    "sft": "Verified multi-turn tool-use conversations in TRL's conversational format (`messages` + `tools`), "
           "selected by trajforge's curation: {composition}",
    "rl": "Tasks for reinforcement learning: the opening prompt, the tools, and the full task record "
          "(initial state recipe, target state hash and diff) that a reward function replays against.",
}


def release_summary(name: str, stats: dict[str, Any], rows: int) -> str:
    """The card's opening sentence, saying what the rows are made of (an sft release may be
    all reference dialogues: the tasks' verified paths played as conversations)."""
    if name != "sft":
        return SUMMARIES[name]
    ref = int(stats.get("reference_rows", 0))
    if rows == 0:
        composition = "no row passed (the release is empty)."
    elif ref == rows:
        composition = (f"all {rows} rows are reference dialogues (each task's verified path played as a "
                       "conversation); no policy rollout was selected.")
    elif ref == 0:
        composition = f"all {rows} rows are policy rollouts that passed verification."
    else:
        composition = (f"{rows - ref} rows are policy rollouts that passed verification and {ref} are reference "
                       "dialogues (each task's verified path played as a conversation).")
    return SUMMARIES["sft"].format(composition=composition)


# Columns a shard's curated rows carry until the finished dataset is written: each sft row's
# data-quality counts (`curation.quality.row_quality`, JSON) and each rl pick's sampling key.
HIDDEN = {"sft": [("_quality", pa.string())], "rl": [("_rl_key", pa.float64())]}
PART_SCHEMAS = {name: pa.schema([*SCHEMAS[name], *HIDDEN[name]]) for name in RELEASES}


@dataclass
class CuratedRows:
    """One shard's rows of a release kind, scrubbed and re-judged (not yet deduplicated),
    with the hidden columns (`HIDDEN`), and the scrub and replay reports (plain dicts)."""

    rows: list[dict[str, Any]]
    scrub: dict[str, Any]
    replay: dict[str, Any]


def curated_rows(cfg: RunConfig, selection: Selection, tasks: Sequence[Task]) -> dict[str, CuratedRows]:
    """The `sft` and `rl` rows of a selection with each row's hygiene that needs no other row:
    scrubbing, and the re-judging of the rows scrubbing changed (`clean_rows` does the rest)."""
    from curation.quality import row_quality

    by_id = {t.id: t for t in tasks}
    rows = release_rows(selection, list(tasks), cfg.verifiers)
    trajectories = {t.id: t for t, _ in selection.sft}
    for r in rows["sft"]:
        r["_quality"] = json.dumps(row_quality(trajectories[r["trajectory_id"]], by_id.get(r["task_id"])))
    keys_of = {pick.task.id: pick.key for pick in selection.rl}
    for r in rows["rl"]:
        r["_rl_key"] = keys_of.get(r["task_id"])
    out: dict[str, CuratedRows] = {}
    for name in RELEASES:
        if not cfg.hygiene.enabled:
            out[name] = CuratedRows(rows[name], {}, {})
            continue
        judged, report, replayed = scrub_and_judge(cfg, name, rows[name], by_id, selection)
        out[name] = CuratedRows(judged, report.model_dump(), replayed.model_dump())
    return out


def write_curated(cfg: RunConfig, out: Path, selection: Selection, tasks: list[Task], parents: Sequence[Path],
                  run_id: str = "") -> dict[str, Path]:
    """Write the curated `sft` and `rl` rows as datasets (`datasets/curated_<name>`)."""
    rows = curated_rows(cfg, selection, tasks)
    return {name: finish_curated(cfg, out, name, [rows[name].rows], [rows[name]], selection.stats, selection.drops,
                                 parents, run_id) for name in RELEASES}


def finish_curated(cfg: RunConfig, out: Path, name: str, batches: Iterable[list[dict[str, Any]]],
                   shards: Sequence[CuratedRows], selection_stats: dict[str, Any], drops: dict[str, int],
                   parents: Sequence[Path], run_id: str = "") -> Path:
    """Deduplicate and decontaminate a release kind's curated rows, given batch by batch (the
    shards' parts in order), and write them as `datasets/curated_<name>` in bounded row
    groups: memory holds one batch, the dedup index (`curation.hygiene.Deduper`) and the
    data-quality counts, never the release. `shards` hold the shards' scrub and replay
    reports (their rows are not read)."""
    from curation.quality import quality_figures
    from data.parts import sum_stats

    hygiene = ReleaseHygiene(cfg, out, name) if cfg.hygiene.enabled else None
    splits: Counter[str] = Counter()
    reference_rows = 0
    quality: list[dict[str, Any]] = []
    test_items = TrainVsTest()
    schema = SCHEMAS[name]
    with store.DatasetWriter(datasets_dir(out), f"curated_{name}", name, schema, RELEASE_SCHEMA_VERSION) as w:
        with w.part() as part:
            for batch in batches:
                kept = hygiene.filter(batch) if hygiene else list(batch)
                for r in kept:
                    splits[r["split"]] += 1
                    reference_rows += bool(r.get("reference"))
                    if (q := r.pop("_quality", None)) is not None:
                        quality.append(json.loads(q) if isinstance(q, str) else q)
                        if len(quality) >= 1000:
                            quality[:] = [sum_stats(quality)]
                    r.pop("_rl_key", None)
                    test_items.see(r)
                part.write_rows(kept)
        if hygiene:
            card = hygiene.card(sum_stats(s.scrub for s in shards), sum_stats(s.replay for s in shards))
            card["train_vs_test"] = test_items.check(parts.iter_batches(w.staging / w.files[-1].path))
        else:
            card = {"enabled": False}
        stats = {**selection_stats, "drops": {k: v for k, v in drops.items() if k.startswith(name + ":")},
                 "splits": dict(splits), "hygiene": card}
        if name == "sft":
            stats["reference_rows"] = reference_rows
            stats["data_quality"] = quality_figures(sum_stats(quality))
            if (rp := card.get("replay", {})).get("checked"):
                stats["data_quality"]["scrubbed_rows_pass_rate"] = round(rp["passed"] / rp["checked"], 4)
        return w.commit(lineage(cfg, parents, run_id), stats=stats, reuse_identical=True)


INTERMEDIATE = ("tasks", "trajectories", "verdicts", *(f"curated_{n}" for n in RELEASES))


def apply_retention(cfg: RunConfig, out: Path) -> dict[str, int]:
    """Remove intermediate dataset versions beyond `retention.keep_versions` (newest kept),
    never one the release `LATEST.json` names descends from; returns how many per dataset."""
    keep = cfg.retention.keep_versions
    if keep is None:
        return {}
    protect: set[Path] = set()
    todo = [Path(p) for p in (store.read_pointer(releases_dir(out)) or {}).get("releases", {}).values()]
    while todo:  # the pointer's releases and their lineage, transitively
        path = todo.pop()
        if path in protect or not (path / store.MANIFEST).exists():
            continue
        protect.add(path)
        try:
            todo += [Path(p) for p in store.read_manifest(path, verify=False).lineage.parents]
        except store.DatasetError:
            continue
    removed = {name: len(store.prune(datasets_dir(out), name, keep, protect)) for name in INTERMEDIATE}
    return {k: v for k, v in removed.items() if v}


def latest_release(out: Path, name: str) -> Path | None:
    """The `name` release that `releases/LATEST.json` points at (a complete published set),
    else the newest committed version (releases written before pointers existed)."""
    pointer = store.read_pointer(releases_dir(out))
    if pointer and name in pointer.get("releases", {}):
        return Path(pointer["releases"][name])
    return store.latest(releases_dir(out), name)


def clean_rows(cfg: RunConfig, out: Path, name: str, rows: list[dict[str, Any]], tasks: Sequence[Task] = (),
               selection: Selection | None = None) -> tuple[list[dict[str, Any]], dict]:
    """Scrub secrets and PII (keeping the values of each task's world), drop the rows that no
    longer pass their verifier once scrubbed, drop duplicates and rows contaminated by
    evaluation sets: the hygiene of `curated_rows` and `finish_curated` on rows in memory."""
    if not cfg.hygiene.enabled:
        return rows, {"enabled": False}
    judged, scrub, replay = scrub_and_judge(cfg, name, rows, {t.id: t for t in tasks}, selection)
    hygiene = ReleaseHygiene(cfg, out, name)
    clean = hygiene.filter(judged)
    card = hygiene.card(scrub.model_dump(), replay.model_dump())
    own = TrainVsTest()
    for r in clean:
        own.see(r)
    card["train_vs_test"] = own.check([clean])
    return clean, card


def scrub_and_judge(cfg: RunConfig, name: str, rows: list[dict[str, Any]], tasks: dict[str, Task],
                    selection: Selection | None) -> tuple[list[dict[str, Any]], Any, Any]:
    """The hygiene of each row alone: scrub its columns (keeping the world's values), then
    re-judge the rows scrubbing changed; the kept rows, the scrub and the replay reports."""
    from curation.hygiene import replay_scrubbed, scrub_all

    columns = [c for c in SCHEMAS[name].names if c not in NOT_SCRUBBED]
    scrubbed, report, scrubbers = scrub_all(rows, columns, synthetic_of(tasks))
    judged, replayed = replay_scrubbed(scrubbed, scrubbers,
                                       scrubbed_replay(cfg, name, tasks, selection) if cfg.hygiene.replay else None)
    return judged, report, replayed


class ReleaseHygiene:
    """The hygiene of one release kind that needs the other rows: exact and near dedup
    (within the release and, with `hygiene.dedup_against_earlier`, against the previous
    release, read batch by batch) and decontamination, over batches in release order."""

    def __init__(self, cfg: RunConfig, out: Path, name: str) -> None:
        from curation.hygiene import Decontaminator, Deduper

        h = cfg.hygiene
        self.dedup = Deduper(threshold=h.dedup_threshold)
        if h.dedup_against_earlier and (prev := latest_release(out, name)) is not None:
            for batch in store.iter_batches(prev, verify=False):
                self.dedup.add_earlier(batch.to_pylist())
        self.decontaminate = Decontaminator([_eval_set(n, p) for n, p in sorted(h.eval_sets.items())],
                                            drop_n=h.drop_n)

    def filter(self, rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
        return self.decontaminate.filter(self.dedup.filter(rows))

    def card(self, scrub: dict[str, Any], replay: dict[str, Any]) -> dict[str, Any]:
        """The card's hygiene section (`curation.hygiene.HygieneReport`'s fields)."""
        from curation.hygiene import HygieneReport, ReplayReport, ScrubReport

        return HygieneReport(scrub=ScrubReport.model_validate(scrub), replay=ReplayReport.model_validate(replay),
                             dedup=self.dedup.report, contamination=self.decontaminate.report).card()


class TrainVsTest:
    """How much a release's train split overlaps its own test split (report only: tasks
    synthesized from one world's templates share phrasing by construction). `see` each
    written row, then `check` the train rows, read again batch by batch. At most
    `MAX_TEST_ITEMS` test rows (the first) are indexed, so memory stays bounded."""

    MAX_TEST_ITEMS = 5_000

    def __init__(self) -> None:
        self.test: list[Any] = []
        self.test_rows = 0

    def see(self, row: dict[str, Any]) -> None:
        from curation.hygiene import item_of

        if row.get("split") == "test":
            self.test_rows += 1
            if len(self.test) < self.MAX_TEST_ITEMS:
                self.test.append(item_of(row))

    def check(self, batches: Iterable[Any]) -> dict[str, Any]:
        from curation.hygiene import Decontaminator, EvalSet

        own = EvalSet("own_test_split", [i.instruction for i in self.test], [i.tool_text() for i in self.test])
        d = Decontaminator([own], drop_n=None) if self.test else None
        checked = 0
        for batch in batches:
            rows = batch.to_pylist() if hasattr(batch, "to_pylist") else batch
            train = [r for r in rows if r.get("split") != "test"]
            checked += len(train)
            if d is not None and train:
                d.filter(train)
        out: dict[str, Any] = {"test_items": self.test_rows}
        if self.test_rows > len(self.test):
            out["test_items_indexed"] = len(self.test)
        if d is None or not checked:
            return {"checked": checked, **out}
        flagged = d.report.eval_sets["own_test_split"].model_dump(
            include={"checked", "flagged", "flagged_any", "longest_match"})
        return {**out, **flagged}


def synthetic_of(tasks: dict[str, Task]) -> Any:
    """row -> the values its task's world generated (`World.synthetic_values` of the task's
    initial state), read once per initial state; None for a row of an unknown task."""
    from curation.hygiene import Synthetic

    seen: dict[tuple[str, int, int, tuple[str, ...]], Synthetic] = {}

    def of(row: dict[str, Any]) -> Synthetic | None:
        task = tasks.get(str(row.get("task_id")))
        if task is None:
            return None
        ref = task.initial_state
        key = (task.world, ref.seed, ref.scale, tuple(ref.patches))
        if key not in seen:
            world = get_world(task.world)
            texts = world.synthetic_values(ref) if hasattr(world, "synthetic_values") else ()
            seen[key] = Synthetic.of_texts(texts)
        return seen[key]

    return of


def scrubbed_replay(cfg: RunConfig, name: str, tasks: dict[str, Task], selection: Selection | None) -> Any:
    """The re-judge of scrubbed rows (`curation.hygiene.Replay`). An `sft` row: its trajectory
    with the row's replacements (messages, tool arguments, observations) judged by the task's
    primary verifier. An `rl` row: the gold of its scrubbed task (its reference dialogue or
    solution, replayed) judged by the row's verifier; a task of a world that cannot be replayed
    here (a workspace) is kept when only what the user says changed, else not judged (dropped)."""
    from curation.hygiene import Scrubber, scrub_record
    from verifiers.audit import build_dialogue, build_trajectory
    from verifiers.state import replayer_for

    trajectories = {t.id: t for t, _ in (selection.sft if selection else [])}

    def judged(pairs: list[tuple[str, Task, Trajectory] | None]) -> list[Verdict | None]:
        out: dict[str, Verdict] = {}
        for verifier in sorted({p[0] for p in pairs if p}):
            group = [(task, traj) for v, task, traj in (p for p in pairs if p) if v == verifier]
            found = verify_shard({task.id: task for task, _ in group}, [traj for _, traj in group], [verifier],
                                 cfg.verifier_options, cfg.judge)
            out.update({v.trajectory_id: v for v in found})
        return [out.get(p[2].id) if p else None for p in pairs]

    def sft(batch: list[tuple[dict[str, Any], Scrubber]]) -> list[Verdict | None]:
        pairs: list[tuple[str, Task, Trajectory] | None] = []
        for row, scrubber in batch:
            task, traj = tasks.get(row.get("task_id", "")), trajectories.get(row.get("trajectory_id", ""))
            pairs.append(None if task is None or traj is None else
                         (primary_verifier(task, cfg.verifiers), task, scrub_record(traj, scrubber=scrubber)))
        return judged(pairs)

    def rl(batch: list[tuple[dict[str, Any], Scrubber]]) -> list[Verdict | None]:
        pairs: list[tuple[str, Task, Trajectory] | None] = []
        text_only: list[Verdict | None] = []
        for row, _ in batch:
            task = Task.model_validate_json(row["task"])
            text_only.append(None)
            if replayer_for(task.world, task.initial_state) is not None:
                gold = (build_dialogue(task, task.dialogue) if task.dialogue
                        else build_trajectory(task, task.reference_solution))
                pairs.append((row.get("verifier") or primary_verifier(task, cfg.verifiers), task, gold))
                continue
            pairs.append(None)
            before = tasks.get(task.id)
            talk = {"instruction", "user", "dialogue"}  # what the user says; the reward reads none of it
            if before is not None and task.model_dump(exclude=talk) == before.model_dump(exclude=talk):
                text_only[-1] = Verdict(trajectory_id="", task_id=task.id, verifier="hygiene", verifier_version="1",
                                        passed=True, score=1.0, reasons=["only what the user says was scrubbed"])
        return [t or v for t, v in zip(text_only, judged(pairs), strict=True)]

    return sft if name == "sft" else rl


def _eval_set(name: str, path: str) -> Any:
    """Register an evaluation set from a JSONL file of {"text", "tool_calls"} objects."""
    from curation.hygiene import register_eval_set

    texts, tools = [], []
    with open(path) as f:
        for line in f:
            if line.strip():
                rec = json.loads(line)
                texts.append(str(rec.get("text", "")))
                if rec.get("tool_calls"):
                    tools.append(str(rec["tool_calls"]))
    return register_eval_set(name, [t for t in texts if t], tools)


@dataclass(frozen=True)
class Published:
    """What `publish_release` did: the release set's paths and version, its fingerprint, and
    whether it was already the one `LATEST.json` names (`unchanged`: nothing was written)."""

    paths: dict[str, Path]
    version: str
    fingerprint: str
    unchanged: bool


def release_fingerprint(cfg: RunConfig, manifests: dict[str, store.Manifest]) -> str:
    """The content fingerprint of a release set: the config (`RunConfig.content_hash`, the
    release options excepted) and the checksums of the curated files, which hold the rows and
    their schema. Run ids, times, paths, cards, stats and the code version do not enter: an
    identical rerun, or a killed run finished later, has the same fingerprint; a changed row,
    schema or setting has another."""
    return content_hash({"config": cfg.content_hash(),
                         "data": {n: [f.sha256 for f in m.files] for n, m in sorted(manifests.items())}},
                        length=32)


def _complete(root: Path, pointer: dict[str, Any], names: Sequence[str]) -> bool:
    """Whether every dataset of `names` is committed under the pointer's version with every
    file its manifest lists, intact (checksums checked), and the pointer names no other."""
    version = pointer.get("version")
    if not version or set(pointer.get("releases", {})) != set(names):
        return False
    for n in names:
        try:
            store.read_manifest(root / n / version, verify=True)
        except store.DatasetError:
            return False
    return True


def release(cfg: RunConfig, out: Path, curated: dict[str, Path], run_id: str = "",
            report_html: str | None = None, run: dict[str, Any] | None = None) -> dict[str, Path]:
    """`publish_release`, returning the release paths only."""
    return publish_release(cfg, out, curated, run_id, report_html, run).paths


def publish_release(cfg: RunConfig, out: Path, curated: dict[str, Path], run_id: str = "",
                    report_html: str | None = None, run: dict[str, Any] | None = None) -> Published:
    """Publish curated datasets as one release set: same rows, a dataset card, lineage
    (the curated inputs and the previous release), `_SUCCESS`, then `releases/LATEST.json`.

    Each dataset is staged and renamed into place, and the pointer moves only once the whole
    set is committed, so a reader following the pointer sees a complete release or the
    previous one. A publish killed half-way is finished by the next run with the same
    content: its intent (`.pending.json`: content fingerprint → version) is picked up and
    the datasets already committed under that version are kept, not written twice.

    When the fingerprint (`release_fingerprint`) equals the one `LATEST.json` names and that
    set is complete, nothing new is published (unless `release.force_new_version`): the
    existing set is returned as `unchanged`, and `publish_to` gets only what it lacks of it.
    """
    root = releases_dir(out)
    root.mkdir(parents=True, exist_ok=True)
    manifests = {name: store.read_manifest(src) for name, src in curated.items()}
    fingerprint = release_fingerprint(cfg, manifests)
    pending = root / ".pending.json"
    intent = json.loads(pending.read_text()) if pending.exists() else {}
    previous = store.read_pointer(root)
    if intent.get("fingerprint") != fingerprint or (previous and intent.get("version") == previous.get("version")):
        intent = {}  # another content's intent, or one whose pointer had already moved
    if (not intent and not cfg.release.force_new_version and previous
            and previous.get("fingerprint") == fingerprint and _complete(root, previous, list(curated))):
        pending.unlink(missing_ok=True)
        same = Published({n: root / n / previous["version"] for n in curated}, previous["version"], fingerprint,
                         unchanged=True)
        _mirror(cfg, same.paths)
        return same
    version = intent.get("version") or store.new_version()
    write_json_atomic(pending, {"fingerprint": fingerprint, "version": version, "run_id": run_id})
    paths: dict[str, Path] = {}
    for name, src in curated.items():
        target = root / name / version
        if (target / store.SUCCESS).exists():  # committed before an interruption
            paths[name] = target
            continue
        manifest = manifests[name]
        parents = [str(src), *manifest.lineage.parents]
        if previous and name in previous.get("releases", {}):
            parents.append(previous["releases"][name])
        lin = lineage(cfg, parents, run_id)
        with store.DatasetWriter(root, name, name, SCHEMAS[name], RELEASE_SCHEMA_VERSION, version) as w:
            written = _write_splits(w, src)
            stats = {**manifest.stats, "run": run} if run else dict(manifest.stats)
            head = (_with_columns(b, w.schema) for b in store.iter_batches(src, verify=False))
            extra_sections, stats["training"] = _training_sections(name, head, lin.code_version,
                                                                   sum(written.rows.values()))
            header = card_header(name, SCHEMAS[name], written.rows, license=cfg.card.license,
                                 language=cfg.card.language, task_categories=TASK_CATEGORIES[name],
                                 pretty_name=cfg.card.pretty_name or f"{cfg.name} {name}",
                                 tags=["trajforge", "agents", "tool-use", *sorted(written.worlds)],
                                 num_bytes=written.nbytes, download_size=sum(f.bytes for f in w.files))
            n_rows = sum(written.rows.values())
            opening = release_summary(name, manifest.stats, n_rows)
            if run and run.get("headline"):
                opening += "\n\n" + headline_markdown(run["headline"], version)
            card = render_card(name, version, opening, SCHEMAS[name], n_rows,
                               lin.model_dump(), stats,
                               sections=extra_sections + (run_sections(run) if run else ""), header=header)
            extra = {"report.html": report_html.replace(figures.RELEASE_VERSION, version)} if report_html else None
            paths[name] = w.commit(lin, card=card, stats=stats, extra_files=extra)
        crashpoint("release.dataset_done")
    store.write_pointer(root, {
        "version": version, "releases": {k: str(v) for k, v in paths.items()},
        "parent": previous.get("version") if previous else None, "fingerprint": fingerprint,
        "run_id": run_id, "config_hash": cfg.config_hash(), "code_version": store.code_version(),
    })
    pending.unlink(missing_ok=True)
    _mirror(cfg, paths)
    return Published(paths, version, fingerprint, unchanged=False)


def _mirror(cfg: RunConfig, paths: dict[str, Path]) -> None:
    """Copy the release set to `publish_to`, if set (a version already there is not uploaded
    again: `data.remote.publish`)."""
    if cfg.publish_to:
        from data.remote import publish

        for path in paths.values():
            publish(path, cfg.publish_to)


def _with_columns(table: Any, schema: Any) -> Any:
    """`table` with the columns of `schema` it lacks added as nulls (curated rows written by an
    older release schema), so it casts to `schema`."""
    import pyarrow as pa

    for field in schema:
        if field.name not in table.column_names:
            table = table.append_column(field, pa.nulls(table.num_rows, storage_type(field.type)).cast(field.type))
    return table.select(schema.names)


@dataclass
class WrittenSplits:
    """What `_write_splits` wrote: rows and Arrow bytes per split (train, test, then others),
    and the worlds seen."""

    rows: dict[str, int]
    nbytes: dict[str, int]
    worlds: set[str]


def _write_splits(w: store.DatasetWriter, src: Path) -> WrittenSplits:
    """Copy the curated dataset at `src` into `w`, one file per split
    (`data/<split>-00000.parquet`, listed train, test, then others), reading and writing in
    batches of bounded size (`store.iter_batches`, `DatasetWriter.part`): memory stays flat
    whatever the release's size. Rows written by an older release schema get the columns they
    lack as nulls."""
    import pyarrow.compute as pc

    def order(splits: Any) -> list[str]:
        return sorted(splits, key=lambda s: ({"train": 0, "test": 1}.get(s, 2), s))

    rows: dict[str, int] = {}
    nbytes: dict[str, int] = {}
    worlds: set[str] = set()
    opened: dict[str, Any] = {}  # split -> the `w.part` context of its file
    parts: dict[str, store.PartWriter] = {}
    try:
        for batch in store.iter_batches(src, verify=True):  # the curated files, checksums checked
            batch = _with_columns(batch, w.schema)
            worlds.update(x for x in pc.unique(batch.column("world")).to_pylist() if x)
            for split in pc.unique(batch.column("split")).to_pylist():
                part = batch.filter(pc.equal(batch.column("split"), split))
                if split not in parts:
                    opened[split] = w.part(prefix=split)
                    parts[split] = opened[split].__enter__()
                parts[split].write(part)
                rows[split] = rows.get(split, 0) + part.num_rows
                nbytes[split] = nbytes.get(split, 0) + part.nbytes
    except BaseException as exc:
        for ctx in opened.values():
            ctx.__exit__(type(exc), exc, exc.__traceback__)
        raise
    for split in order(opened):  # the manifest lists files as they close: train, test, others
        opened[split].__exit__(None, None, None)
    if not rows:  # the file the card's `train` pattern names, without rows
        w.write_table(empty_table(w.schema), prefix="train")
    return WrittenSplits({s: rows[s] for s in order(rows)}, nbytes, worlds)


def _training_sections(kind: str, batches: Any, code_version: str,
                       total_rows: int | None = None) -> tuple[str, dict[str, Any]]:
    """The card's sections on training with the release (templates checked, token lengths,
    plain TRL, environments and rewards) and their figures, measured on the first rows of
    `batches` a chunk at a time; a note when they cannot be made here (no transformers, or
    no prepared embedded model)."""
    from train.release_card import training_sections

    return training_sections(kind, batches, code_version, total_rows)


def report_html(cfg: RunConfig, tasks: list[Task], trajectories: list[Trajectory], verdicts: list[Verdict],
                selection: Selection, title: str = "trajforge run report",
                released: dict[str, dict[str, Any]] | None = None) -> str:
    """The static HTML run report: the headline, funnel, drop reasons, pass rates per world,
    pass@k and pass^k, reward histogram, and the quotient graphs of the most branched tasks."""
    from curation.graphs import graph_svgs_for

    fig = figures.shard_figures(cfg, tasks, trajectories, verdicts, selection)
    svgs = graph_svgs_for(trajectories, deciding_verdicts(cfg, tasks, verdicts), n=figures.GRAPHS)
    return figures.report_html(fig, len(tasks), svgs, title=title, head=figures.headline(cfg, fig, released or {}))


def report_for_release(release_path: Path, cfg: RunConfig | None = None) -> str:
    """Rebuild a release's report from the datasets its lineage names (no model, no rerun)."""
    manifest = store.read_manifest(release_path)
    found: dict[str, Path] = {}
    for parent in manifest.lineage.parents:
        p = Path(parent)
        if p.parent.name in ("tasks", "trajectories", "verdicts") and (p / store.SUCCESS).exists():
            found.setdefault(p.parent.name, p)
    missing = {"tasks", "trajectories", "verdicts"} - set(found)
    if missing:
        raise FileNotFoundError(f"{release_path}: lineage does not name committed {', '.join(sorted(missing))} datasets")
    cfg = cfg or RunConfig()
    tasks, trajectories, verdicts = (store.read_records(found[k]) for k in ("tasks", "trajectories", "verdicts"))
    selection = Selection(stats=dict(manifest.stats))
    selection.drops.update({k: v for k, v in manifest.stats.get("drops", {}).items()})
    html = report_html(cfg, tasks, trajectories, verdicts, selection, title=f"trajforge report {manifest.version}",
                       released=released_stats({manifest.kind: Path(release_path)}))
    return html


def run_figures(cfg: RunConfig, tasks: list[Task], trajectories: list[Trajectory], verdicts: list[Verdict],
                selection: Selection, synth_stats: dict[str, Any], curated_stats: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The figures a release card states (`pipelines.figures.run_figures`) of records in memory."""
    fig = figures.shard_figures(cfg, tasks, trajectories, verdicts, selection)
    return figures.run_figures(cfg, tasks, fig, synth_stats, curated_stats)


def released_stats(paths: dict[str, Path]) -> dict[str, dict[str, Any]]:
    """Each dataset's stats with its committed `rows` (what `figures.headline` reads)."""
    out: dict[str, dict[str, Any]] = {}
    for name, path in paths.items():
        manifest = store.read_manifest(path, verify=False)
        out[name] = {**manifest.stats, "rows": manifest.rows}
    return out


def summary(tasks: list[Task], trajectories: list[Trajectory], verdicts: list[Verdict],
            releases: dict[str, Path], selection: Selection, published: Published | None = None,
            cfg: RunConfig | None = None) -> dict[str, Any]:
    """The run's summary (`figures.summary`) of records in memory: the headline figures of
    the trajectories' deciding verdicts and the released rows; with `published`, whether
    the release was `published` as a new version or `unchanged`, and its version."""
    cfg = cfg or RunConfig()
    fig = figures.shard_figures(cfg, tasks, trajectories, verdicts, selection)
    return figures.summary(len(tasks), figures.headline(cfg, fig, released_stats(releases)), releases, published)


def dumps(obj: Any) -> str:
    return json.dumps(obj, indent=2, default=str)
