"""The pipeline's stages as plain Python: read datasets, call the layers, write datasets.

Prefect flows (`pipelines/flows.py`) wrap these functions and nothing more, so every
stage can also run, and be measured, without Prefect. Each stage writes a committed,
versioned dataset with lineage pointing at its inputs.

One module per stage: `synthesis` (tasks and their verifier self-audit), `rollout`
(trajectories), `verify` (verdicts, re-verification), `curated` (selection and curated
rows), `hygiene` (the release hygiene of curated rows), `publish` (release sets, retention),
`report` (the HTML report, card figures and the run's summary); `base` holds what they
share. Every name is re-exported here: callers use `pipelines.stages.<name>`.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from curation.base import Selection, get_curator  # read from here by callers, as before
from data.crash import crashpoint  # the stages call it through this package (`base.crashpoint`)
from data.schema import CODECS  # read from here by callers, as before
from pipelines.figures import deciding_verdicts, task_realism
from pipelines.stages.base import (
    RELEASES,
    SCHEMAS,
    T,
    datasets_dir,
    lineage,
    releases_dir,
    shard_cache,
    shards,
)
from pipelines.stages.curated import (
    HIDDEN,
    PART_SCHEMAS,
    CuratedRows,
    curate,
    curated_rows,
    curator_for,
    finish_curated,
    release_rows,
    write_curated,
)
from pipelines.stages.hygiene import (
    NOT_SCRUBBED,
    ReleaseHygiene,
    TrainVsTest,
    clean_rows,
    scrub_and_judge,
    scrubbed_replay,
    synthetic_of,
)
from pipelines.stages.publish import (
    INTERMEDIATE,
    SUMMARIES,
    TASK_CATEGORIES,
    Published,
    WrittenSplits,
    apply_retention,
    latest_release,
    publish_release,
    release,
    release_fingerprint,
    release_summary,
)
from pipelines.stages.report import (
    dumps,
    released_stats,
    report_for_release,
    report_html,
    run_figures,
    summary,
)
from pipelines.stages.rollout import (
    REFERENCE_MAX_TURNS,
    InfraFailureError,
    check_infra_failures,
    preflight,
    rollout_shard,
    rollout_shard_cached,
    served_rollout,
    trajectory_stats,
    write_trajectories,
)
from pipelines.stages.synthesis import audit_tasks, synthesize
from pipelines.stages.verify import (
    find_verdicts_for,
    reverify,
    verdict_stats,
    verify_shard,
    verify_shard_cached,
    write_verdicts,
)
from verifiers.base import get_verifier  # read from here by callers, as before

if TYPE_CHECKING:
    from data.records import Task
    from pipelines.config import RunConfig

__all__ = [
    "CODECS", "HIDDEN", "INTERMEDIATE", "NOT_SCRUBBED", "PART_SCHEMAS", "REFERENCE_MAX_TURNS", "RELEASES", "SCHEMAS",
    "SUMMARIES", "TASK_CATEGORIES", "CuratedRows", "InfraFailureError", "Published", "ReleaseHygiene", "Selection",
    "T", "TrainVsTest", "WrittenSplits", "apply_retention", "audit_tasks", "check_infra_failures", "clean_rows",
    "crashpoint", "curate", "curated_rows", "curator_for", "datasets_dir", "deciding_verdicts", "dumps",
    "find_verdicts_for", "finish_curated", "get_curator", "get_verifier", "latest_release", "lineage",
    "preflight", "publish_release", "release", "release_fingerprint", "release_rows", "release_summary",
    "released_stats", "releases_dir", "report_for_release", "report_html", "reverify", "rollout_shard",
    "rollout_shard_cached", "run_figures", "scrub_and_judge", "scrubbed_replay", "served_rollout", "shard_cache",
    "shards", "summary", "synthesize", "synthetic_of", "task_realism", "trajectory_stats", "verdict_stats",
    "verify_shard", "verify_shard_cached", "write_curated", "write_trajectories", "write_verdicts", "curated_run",
]


def curated_run(cfg: RunConfig, out: Path, shard_size: int = 4) -> tuple[list[Task], Selection, dict[str, Path]]:
    """The stages run plainly (no Prefect, no cache) up to the curated datasets: synthesize,
    roll out shard by shard, verify, curate and write. Returns the tasks, the selection and
    the curated datasets' paths (for tests and benches that need real rows)."""
    from data import store

    tp = synthesize(cfg, out)
    tasks = store.read_records(tp)
    trajectories = [t for shard in shards(tasks, shard_size) for t in rollout_shard(shard, cfg)]
    verdicts = verify_shard({t.id: t for t in tasks}, trajectories, cfg.verifiers)
    selection = curate(cfg, tasks, trajectories, verdicts)
    return tasks, selection, write_curated(cfg, out, selection, tasks, [tp])
