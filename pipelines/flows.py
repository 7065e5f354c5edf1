"""Prefect flows: one per stage and one end to end. Each Prefect task handles a shard of
work (a few tasks' rollouts, a shard's verification) or a whole later stage (writing
records, curation, hygiene, the report, the figures, the release), never one item; the work
itself is done by `pipelines.stages`.

Importing this module applies quiet local defaults for Prefect (see `prefect_defaults`)
unless the environment already sets them.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any


def prefect_defaults() -> None:
    """Defaults so a plain run needs no Prefect setup (a temporary local server starts)."""
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    os.environ.setdefault("PREFECT_LOGGING_LEVEL", "WARNING")
    os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "120")
    os.environ.setdefault("PREFECT_SERVER_LOGGING_LEVEL", "WARNING")
    # the flow's and tasks' INFO logs (one line a shard) reach the server's run pages, while
    # the console shows warnings only
    os.environ.setdefault("PREFECT_LOGGING_LOGGERS_PREFECT_FLOW_RUNS_LEVEL", "INFO")
    os.environ.setdefault("PREFECT_LOGGING_LOGGERS_PREFECT_TASK_RUNS_LEVEL", "INFO")
    os.environ.setdefault("PREFECT_LOGGING_HANDLERS_CONSOLE_LEVEL", "WARNING")


prefect_defaults()

from prefect import flow, get_run_logger, task  # noqa: E402
from prefect.artifacts import create_table_artifact  # noqa: E402
from prefect.cache_policies import NO_CACHE  # noqa: E402
from prefect.futures import wait  # noqa: E402
from prefect.runtime import flow_run  # noqa: E402
from prefect.task_runners import ThreadPoolTaskRunner  # noqa: E402
from prefect.utilities.annotations import quote  # noqa: E402

from data import parts, store  # noqa: E402
from data.parts import PartRef  # noqa: E402
from data.records import PackedTasks, Trajectory  # noqa: E402
from pipelines import figures, progress, sharded, stages  # noqa: E402
from pipelines.config import RunConfig, RunnerConfig  # noqa: E402
from pipelines.reaper import on_running_hooks  # noqa: E402
from pipelines.stages import synthesis as synth  # noqa: E402
from pipelines.stages.synthesis import SeedRange  # noqa: E402
from rollout.backends import close_shared_models  # noqa: E402


def _run_id() -> str:
    return str(flow_run.get_id() or "")


def _cfg(config: dict[str, Any] | RunConfig) -> RunConfig:
    return config if isinstance(config, RunConfig) else RunConfig.model_validate(config)


def _latest(out: Path, name: str) -> Path:
    path = store.latest(stages.datasets_dir(out), name)
    if path is None:
        raise FileNotFoundError(f"no committed '{name}' dataset under {stages.datasets_dir(out)}; run the earlier stage first")
    return path


# -- task runners ----------------------------------------------------------------------

def build_runner(cfg: RunnerConfig) -> Any:
    """The Prefect task runner a config names: a thread pool, Dask or Ray."""
    if cfg.kind == "thread":
        return ThreadPoolTaskRunner(max_workers=cfg.max_workers)
    if cfg.kind == "dask":
        from prefect_dask import DaskTaskRunner

        if cfg.address:
            return DaskTaskRunner(address=cfg.address)
        return DaskTaskRunner(cluster_kwargs={"n_workers": cfg.n_workers, "threads_per_worker": cfg.threads_per_worker,
                                              "processes": True, "dashboard_address": None})
    if cfg.kind == "ray":
        try:
            from prefect_ray import RayTaskRunner
        except ImportError as exc:
            raise RuntimeError("runner.kind=ray needs the optional extra: pip install 'trajforge[ray]'") from exc
        return RayTaskRunner(address=cfg.address) if cfg.address else RayTaskRunner()
    raise ValueError(f"unknown runner kind {cfg.kind!r}")


HEARTBEAT_ENV = ("PREFECT_FLOWS_HEARTBEAT_FREQUENCY", "PREFECT_RUNNER_HEARTBEAT_FREQUENCY")


def run_settings() -> Any:
    """The Prefect settings a flow runs under here: no flow-run heartbeat unless the
    environment asks for one. Prefect's heartbeat thread sleeps a second at a time and is
    joined when the flow run ends, which cost about a second a run (`fixed_flow_s` of
    `bench/prefect_overhead.py`); nothing reads heartbeats unless an automation is set up
    for crashed runs, and a killed run resumes from its parts anyway."""
    from contextlib import nullcontext

    from prefect.settings import PREFECT_FLOWS_HEARTBEAT_FREQUENCY, temporary_settings

    if any(name in os.environ for name in HEARTBEAT_ENV):
        return nullcontext()
    return temporary_settings(updates={PREFECT_FLOWS_HEARTBEAT_FREQUENCY: None})


def execute(flow_fn: Any, config: dict[str, Any] | RunConfig, *args: Any, **kwargs: Any) -> Any:
    """Call a flow with the task runner its config names (under `run_settings`)."""
    cfg = _cfg(config)
    with run_settings():
        return flow_fn.with_options(task_runner=build_runner(cfg.runner))(cfg.model_dump(mode="json"), *args, **kwargs)


# -- Prefect tasks: one shard of work each ----------------------------------------------

@task(name="synthesize-shard", task_run_name="synthesize-shard-{index}", cache_policy=NO_CACHE)
def synthesize_shard_task(ranges: list[SeedRange], cfg: RunConfig, out: Path, index: int) -> list[PartRef]:
    """Seed ranges of synthesis, each its tasks and their self-audit as a part."""
    cache = sharded.shared_cache(cfg, out)
    refs = [synth.synthesize_range(cfg, r, out, cache if cfg.cache_dir else None) for r in ranges]
    get_run_logger().info("synthesize shard=%d ranges=%d tasks=%d cached=%d", index, len(refs),
                          sum(r.rows for r in refs), sum(r.cached for r in refs))
    return refs


@task(name="synthesize", task_run_name="synthesize", cache_policy=NO_CACHE)
def write_tasks_task(cfg: RunConfig, out: Path, ranges: list[SeedRange], refs: list[PartRef], run_id: str) -> Path:
    """The split on the tasks' keys, the audit's exclusions, the `tasks` dataset."""
    return synth.finish(cfg, out, ranges, refs, run_id)


def _synthesize(cfg: RunConfig, out: Path, run_id: str, counts: dict[str, Any] | None = None) -> Path:
    """Synthesis as shards of seed ranges on the configured runner, then the `tasks` dataset."""
    ranges = synth.seed_ranges(cfg)
    groups = synth.pack(ranges, cfg.runner.synthesis_shards)
    futures = [synthesize_shard_task.submit(g, cfg, out, i) for i, g in enumerate(groups)]
    refs = [r for got in gather(futures, "synthesize", cfg.runner.stall_timeout_s) for r in got]
    if counts is not None:
        counts["synthesize"] = {"shards": len(groups), "ranges": len(refs), "cached": sum(r.cached for r in refs)}
    return write_tasks_task(cfg, out, quote(ranges), quote(refs), run_id)  # in this process: nothing to walk


@task(name="rollout-shard", task_run_name="rollout-shard-{index}", cache_policy=NO_CACHE)
def rollout_task(shard: PackedTasks, cfg: RunConfig, out: Path, index: int) -> PartRef:
    ref = sharded.rollout_part(list(shard), cfg, out)
    get_run_logger().info("rollout shard=%d tasks=%d trajectories=%d cached=%s", index, len(shard), ref.rows, ref.cached)
    return ref


@task(name="verify-shard", task_run_name="verify-shard-{index}", cache_policy=NO_CACHE)
def verify_task(shard: PackedTasks, rollout: PartRef, cfg: RunConfig, out: Path, index: int) -> PartRef:
    ref = sharded.verify_part(list(shard), rollout, cfg, out)
    get_run_logger().info("verify shard=%d trajectories=%d verdicts=%d cached=%s", index, rollout.rows, ref.rows,
                          ref.cached)
    return ref


@task(name="curate-shard", task_run_name="curate-shard-{index}", cache_policy=NO_CACHE)
def curate_shard_task(shard: PackedTasks, rollout: PartRef, verify: PartRef, cfg: RunConfig, out: Path,
                      index: int) -> dict[str, PartRef]:
    refs = sharded.curate_part(list(shard), rollout, verify, cfg, out)
    get_run_logger().info("curate shard=%d sft=%d rl=%d", index, refs["sft"].rows, refs["rl"].rows)
    return refs


# The stages after the shards, each a task run of the flow run (so the UI shows the whole run
# and a failed stage fails where it failed). They take part references and the run's merged
# figures, never records: they run in the flow's process in bounded memory.

@task(name="write-trajectories", task_run_name="write-trajectories", cache_policy=NO_CACHE)
def write_trajectories_task(refs: list[PartRef], cfg: RunConfig, out: Path, parents: list[Path], run_id: str) -> Path:
    return sharded.write_dataset(refs, "trajectories", cfg, out, parents, run_id)


@task(name="write-verdicts", task_run_name="write-verdicts", cache_policy=NO_CACHE)
def write_verdicts_task(refs: list[PartRef], cfg: RunConfig, out: Path, parents: list[Path], run_id: str) -> Path:
    return sharded.write_dataset(refs, "verdicts", cfg, out, parents, run_id)


@task(name="curate", task_run_name="curate", cache_policy=NO_CACHE)
def curate_task(cfg: RunConfig, curated: list[dict[str, PartRef]]) -> dict[str, Any]:
    """The run's curation figures: the shards' merged, with the rl budget applied."""
    fig = sharded.merged_figures(cfg, curated)
    get_run_logger().info("curate sft=%d rl=%d", fig.get("sft", 0), fig.get("rl", 0))
    return fig


@task(name="hygiene-and-curated-datasets", task_run_name="hygiene-and-curated-datasets", cache_policy=NO_CACHE)
def write_curated_task(cfg: RunConfig, out: Path, curated: list[dict[str, PartRef]], fig: dict[str, Any],
                       parents: list[Path], run_id: str) -> dict[str, Path]:
    """Apply the rl budget, deduplicate, decontaminate, and write the curated datasets."""
    return sharded.write_curated(cfg, out, curated, fig, parents, run_id)


@task(name="report", task_run_name="report", cache_policy=NO_CACHE)
def report_task(cfg: RunConfig, fig: dict[str, Any], task_shards: list[PackedTasks], rollouts: list[PartRef],
                verifies: list[PartRef], head: dict[str, Any]) -> str:
    svgs = sharded.graph_svgs(cfg, fig, task_shards, rollouts, verifies)
    return figures.report_html(fig, sum(len(s) for s in task_shards), svgs, head=head,
                               version=figures.RELEASE_VERSION)


@task(name="figures", task_run_name="figures", cache_policy=NO_CACHE)
def figures_task(cfg: RunConfig, tasks: PackedTasks, fig: dict[str, Any], tasks_path: Path,
                 curated: dict[str, Path], infra: dict[str, Any] | None = None) -> dict[str, Any]:
    """The figures the release cards state, the headline first (the summary's figures)."""
    return figures.run_figures(cfg, tasks, fig, store.read_manifest(tasks_path).stats,
                               stages.released_stats(curated), infra)


@task(name="release", task_run_name="release", cache_policy=NO_CACHE)
def release_task(cfg: RunConfig, out: Path, curated: dict[str, Path], run_id: str, report_html: str | None,
                 figures: dict[str, Any]) -> stages.Published:
    """Publish the release set, or nothing when its content is the one `LATEST.json` names."""
    return stages.publish_release(cfg, out, curated, run_id, report_html=report_html, run=figures)


class StallError(RuntimeError):
    """No shard of a stage finished within the configured stall timeout."""


def gather(futures: list[Any], stage: str, stall_timeout_s: float | None) -> list[Any]:
    """Results of `futures` in submission order; raises `StallError` when none finishes
    for `stall_timeout_s` (a hung server or sandbox fails the stage instead of hanging)."""
    index = {id(f): i for i, f in enumerate(futures)}
    results: list[Any] = [None] * len(futures)
    pending = list(futures)
    progress.start(stage, len(futures))
    while pending:
        done, not_done = wait(pending, timeout=stall_timeout_s)
        if not done:
            raise StallError(f"stage {stage!r} stalled: no shard finished in {stall_timeout_s:.0f} s "
                             f"({len(not_done)} of {len(futures)} shards outstanding); "
                             "check the model server or raise runner.stall_timeout_s")
        for f in done:
            results[index[id(f)]] = f.result()
            progress.advance(stage)
        pending = list(not_done)
    progress.finish(stage)
    return results


def _quote_for(cfg: RunConfig) -> Any:
    """`quote` on the thread runner (Prefect would otherwise walk every record of every shard
    looking for futures); other runners serialize parameters and do not unwrap it."""
    return quote if cfg.runner.kind == "thread" else (lambda x: x)


def _rollout(cfg: RunConfig, task_shards: list[PackedTasks], out: Path, counts: dict[str, Any]) -> list[PartRef]:
    q = _quote_for(cfg)  # Prefect would otherwise walk every record of every shard looking for futures
    futures = [rollout_task.submit(q(shard), cfg, out, i) for i, shard in enumerate(task_shards)]
    refs = gather(futures, "rollout", cfg.runner.stall_timeout_s)
    counts["rollout"] = {"shards": len(refs), "cached": sum(r.cached for r in refs)}
    counts["model_calls"] = sum(r.meta.get("model_calls", 0) for r in refs if not r.cached)
    counts["infra"] = stages.check_infra_failures(cfg, parts.sum_stats(r.meta for r in refs))
    return refs


def _verify(cfg: RunConfig, task_shards: list[PackedTasks], rollouts: list[PartRef], out: Path,
            counts: dict[str, Any]) -> list[PartRef]:
    q = _quote_for(cfg)
    futures = [verify_task.submit(q(shard), ref, cfg, out, i) for i, (shard, ref) in enumerate(zip(task_shards, rollouts,
                                                                                                 strict=True))]
    refs = gather(futures, "verify", cfg.runner.stall_timeout_s)
    counts["verify"] = {"shards": len(refs), "cached": sum(r.cached for r in refs)}
    return refs


def _curate(cfg: RunConfig, task_shards: list[PackedTasks], rollouts: list[PartRef], verifies: list[PartRef],
            out: Path) -> list[dict[str, PartRef]]:
    q = _quote_for(cfg)
    futures = [curate_shard_task.submit(q(shard), r, v, cfg, out, i)
               for i, (shard, r, v) in enumerate(zip(task_shards, rollouts, verifies, strict=True))]
    return gather(futures, "curate", cfg.runner.stall_timeout_s)


def _task_shards(cfg: RunConfig, tasks_path: Path) -> list[PackedTasks]:
    """The tasks of a `tasks` dataset in shards of `shard_size`, packed (`PackedTasks`: the
    driver holds about 2 KB a task), read a batch at a time."""
    out: list[PackedTasks] = []
    for t in store.iter_records(tasks_path, "tasks"):
        if not out or len(out[-1]) >= max(1, cfg.shard_size):
            out.append(PackedTasks())
        out[-1].append(t)
    return out


def _artifact(key: str, description: str, rows: list[dict[str, Any]]) -> None:
    """A table artifact on the current flow run (shown in the Prefect UI)."""
    try:
        create_table_artifact(key=key, table=rows, description=description)
    except Exception as exc:  # artifacts are observability: never fail a run over one
        get_run_logger().warning("could not create artifact %s: %s", key, exc)


RUNNER = ThreadPoolTaskRunner(max_workers=2)


# -- stage flows ------------------------------------------------------------------------

@flow(name="synthesize", flow_run_name="{config[name]}-synthesize", task_runner=RUNNER, on_running=on_running_hooks())
def synth_flow(config: dict[str, Any], out: str) -> str:
    return str(_synthesize(_cfg(config), Path(out), _run_id()))


@flow(name="rollout", flow_run_name="{config[name]}-rollout", task_runner=RUNNER, on_running=on_running_hooks())
def rollout_flow(config: dict[str, Any], out: str, tasks_path: str | None = None) -> str:
    cfg, root = _cfg(config), Path(out)
    tp = Path(tasks_path) if tasks_path else _latest(root, "tasks")
    counts: dict[str, Any] = {}
    try:
        with stages.served_rollout(cfg) as rcfg:
            stages.preflight(rcfg)
            refs = _rollout(rcfg, _task_shards(cfg, tp), root, counts)
    finally:
        close_shared_models()
    return str(sharded.write_dataset(refs, "trajectories", cfg, root, [tp], _run_id()))


@flow(name="verify", flow_run_name="{config[name]}-verify", task_runner=RUNNER, on_running=on_running_hooks())
def verify_flow(config: dict[str, Any], out: str, tasks_path: str | None = None,
                trajectories_path: str | None = None) -> str:
    cfg, root = _cfg(config), Path(out)
    tp = Path(tasks_path) if tasks_path else _latest(root, "tasks")
    rp = Path(trajectories_path) if trajectories_path else _latest(root, "trajectories")
    tasks, trajectories = store.read_records(tp, "tasks"), store.read_records(rp, "trajectories")
    by_id = {t.id: t for t in tasks}
    # Shards follow task boundaries, so a change to one task's rollouts re-verifies one shard.
    groups: dict[str, list[Trajectory]] = {}
    for t in trajectories:
        if not t.infra_failed:  # an infrastructure failure is no one's behaviour: not judged
            groups.setdefault(t.task_id, []).append(t)
    cache = stages.shard_cache(cfg, root)
    verdicts = [v for chunk in stages.shards(list(groups.values()), cfg.shard_size)
                for v in stages.verify_shard_cached(by_id, [t for g in chunk for t in g], cfg, cache)[0]]
    return str(stages.write_verdicts(verdicts, cfg, root, [tp, rp], _run_id()))


@flow(name="reverify", flow_run_name="{config[name]}-reverify", task_runner=RUNNER, on_running=on_running_hooks())
def reverify_flow(config: dict[str, Any], out: str, trajectories_path: str | None, verifier: str,
                  against: str | None = None, tasks_path: str | None = None,
                  verdicts_path: str | None = None, upgrade_tasks: bool = False) -> dict[str, Any]:
    """Re-score stored rollouts with a verifier's current version (no model) and diff."""
    cfg, root = _cfg(config), Path(out)
    rp = Path(trajectories_path) if trajectories_path else _latest(root, "trajectories")
    path, diff = stages.reverify(cfg, root, rp, verifier, against, Path(tasks_path) if tasks_path else None,
                                 Path(verdicts_path) if verdicts_path else None, _run_id(), upgrade_tasks)
    _artifact("trajforge-reverify", f"{verifier} re-verification", [diff.totals()])
    return {"verdicts": str(path), "totals": diff.totals(), "table": diff.table()}


@flow(name="curate", flow_run_name="{config[name]}-curate", task_runner=RUNNER, on_running=on_running_hooks())
def curate_flow(config: dict[str, Any], out: str, tasks_path: str | None = None,
                trajectories_path: str | None = None, verdicts_path: str | None = None) -> dict[str, str]:
    cfg, root = _cfg(config), Path(out)
    tp = Path(tasks_path) if tasks_path else _latest(root, "tasks")
    rp = Path(trajectories_path) if trajectories_path else _latest(root, "trajectories")
    vp = Path(verdicts_path) if verdicts_path else _latest(root, "verdicts")
    tasks = store.read_records(tp, "tasks")
    selection = stages.curate(cfg, tasks, store.read_records(rp, "trajectories"), store.read_records(vp, "verdicts"))
    paths = stages.write_curated(cfg, root, selection, tasks, [tp, rp, vp], _run_id())
    return {k: str(v) for k, v in paths.items()}


@flow(name="release", flow_run_name="{config[name]}-release", task_runner=RUNNER, on_running=on_running_hooks())
def release_flow(config: dict[str, Any], out: str, curated: dict[str, str] | None = None) -> dict[str, str]:
    cfg, root = _cfg(config), Path(out)
    sources = {k: Path(v) for k, v in curated.items()} if curated else {
        name: _latest(root, f"curated_{name}") for name in stages.RELEASES}
    published = stages.publish_release(cfg, root, sources, _run_id())
    get_run_logger().info("release %s %s", "unchanged" if published.unchanged else "published", published.version)
    return {k: str(v) for k, v in published.paths.items()}


@flow(name="train", on_running=on_running_hooks())
def train_flow(kind: str, dataset: str, config: dict[str, Any], out: str, max_steps: int | None = None,
               show_progress: bool = False) -> dict[str, Any]:
    cfg = _cfg(config)
    callbacks = []
    if show_progress:
        from train.progress import rich_progress_callback

        callbacks.append(rich_progress_callback(kind))
    if kind == "sft":
        from train.sft import run_sft

        stage = cfg.sft.model_copy(update={"max_steps": max_steps}) if max_steps else cfg.sft
        return run_sft(Path(dataset), stage, Path(out), callbacks)
    if kind == "grpo":
        from train.grpo import run_grpo

        stage = cfg.grpo.model_copy(update={"max_steps": max_steps}) if max_steps else cfg.grpo
        return run_grpo(Path(dataset), stage, Path(out), callbacks)
    raise ValueError(f"unknown training stage {kind!r}; use sft or grpo")


@flow(name="eval", on_running=on_running_hooks())
def eval_flow(dataset: str, model: str, base: str = "embedded", split: str = "test", trials: int = 1,
              max_turns: int = 12, max_tasks: int | None = None, next_action: bool = True) -> dict[str, Any]:
    """Base vs trained model on a release's held-out tasks: episode pass rate and (unless
    `next_action` is off) next-action accuracy, with intervals (`train.value.evaluate_pair`)."""
    from train.value import evaluate_pair

    return evaluate_pair(Path(dataset), model, base=base, split=split, trials=trials, max_turns=max_turns,
                         max_tasks=max_tasks, next_action=next_action)


# -- end to end ---------------------------------------------------------------------------

@flow(name="trajforge-run", flow_run_name="{config[name]}", task_runner=RUNNER, on_running=on_running_hooks())
def run_flow(config: dict[str, Any], out: str) -> dict[str, Any]:
    """Synthesize → rollout → verify → curate → release, all in one flow run, every stage a
    task run (shards of rollout, verification and curation one each). Shards pass part
    references (`pipelines.sharded`), never records, so memory stays bounded by a shard.

    Shards come from the cache when their inputs are unchanged, so a rerun of a killed run
    resumes where it stopped and an identical rerun makes no model calls.
    """
    cfg, root, run_id = _cfg(config), Path(out), _run_id()
    for folder in (stages.datasets_dir(root), stages.releases_dir(root)):
        store.remove_stale_staging(folder)
    counts: dict[str, Any] = {}
    if cfg.vllm is None:  # a server started for the run is checked once it is up
        stages.preflight(cfg)
    tp = _synthesize(cfg, root, run_id, counts)
    task_shards = _task_shards(cfg, tp)
    n_tasks = sum(len(s) for s in task_shards)
    try:
        with stages.served_rollout(cfg) as rcfg:
            if cfg.vllm is not None:
                stages.preflight(rcfg)
            rollouts = _rollout(rcfg, task_shards, root, counts)
    finally:
        close_shared_models()
    q = quote  # direct task calls run in this process: nothing to serialize or walk
    rp = write_trajectories_task(q(rollouts), cfg, root, [tp], run_id)
    verifies = _verify(cfg, task_shards, rollouts, root, counts)
    vp = write_verdicts_task(q(verifies), cfg, root, [tp, rp], run_id)
    curated_parts = _curate(cfg, task_shards, rollouts, verifies, root)
    fig = curate_task(cfg, q(curated_parts))
    curated = write_curated_task(cfg, root, q(curated_parts), q(fig), [tp, rp, vp], run_id)
    run_figures = figures_task(cfg, q(PackedTasks.concat(task_shards)), q(fig), tp, curated, counts.get("infra"))
    html = (report_task(cfg, q(fig), q(task_shards), q(rollouts), q(verifies), q(run_figures["headline"]))
            if cfg.report else None)
    published = release_task(cfg, root, curated, run_id, html, q(run_figures))
    summary = figures.summary(n_tasks, run_figures["headline"], published.paths, published,
                              model_calls=counts.get("model_calls", 0))
    summary["cache"] = counts
    if removed := stages.apply_retention(cfg, root):
        summary["retention_removed"] = removed
    _artifact("trajforge-yield", "Yield of this run, stage by stage",
              [{"stage": k, "count": v} for k, v in summary.items() if isinstance(v, int | float)])
    return summary


# -- self-play ----------------------------------------------------------------------------

@task(name="self-play-round", cache_policy=NO_CACHE)
def self_play_round_task(cfg: RunConfig, out: Path, round_index: int, generator: str, solver: str,
                         parent: str | None, run_id: str) -> dict[str, Any]:
    from pipelines.self_play import self_play_round

    return self_play_round(cfg, out, round_index, generator, solver, parent, run_id)


@flow(name="self-play", on_running=on_running_hooks())
def self_play_flow(config: dict[str, Any], out: str) -> list[dict[str, Any]]:
    """Tool-R0 rounds: each round trains the generator against the frozen solver, releases
    the generated tasks (lineage to the previous round), then trains the solver on them."""
    cfg, root, run_id = _cfg(config), Path(out), _run_id()
    generator, solver = cfg.self_play.generator_model, cfg.self_play.solver_model
    parent = str(p) if (p := store.latest(stages.releases_dir(root), "selfplay_tasks")) else None
    rounds = []
    for r in range(cfg.self_play.rounds):
        summary = self_play_round_task(cfg, root, r, generator, solver, parent, run_id)
        generator, solver, parent = summary["generator"], summary["solver"], summary["release"]
        rounds.append(summary)
    return rounds
