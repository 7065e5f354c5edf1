"""What a run reports: the static HTML run report (of records in memory, or rebuilt from a
release's lineage), the figures a release card states, the released rows' stats, and the
run's summary."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from curation.base import Selection
from data import store
from data.records import Task, Trajectory, Verdict
from pipelines import figures
from pipelines.config import RunConfig
from pipelines.figures import deciding_verdicts
from pipelines.stages.publish import Published


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
