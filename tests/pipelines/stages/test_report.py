"""What a run reports (`pipelines.stages.report`): the HTML report rebuilt from a release's
lineage (no model, no rerun), the released rows' stats, and the run's summary of records."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from data import store
from data.schema import RELEASE_SCHEMA_VERSION, SFT_SCHEMA
from pipelines import figures, stages


def _release(small_run, root: Path, parents: list[Path]) -> Path:
    """The run's sft rows committed with `parents` as lineage (what a release names)."""
    rows = stages.release_rows(small_run.selection, small_run.tasks, small_run.cfg.verifiers)["sft"]
    with store.DatasetWriter(root, "sft", "sft", SFT_SCHEMA, RELEASE_SCHEMA_VERSION) as w:
        w.write_rows(rows)
        return w.commit(store.Lineage(parents=[str(p) for p in parents]), stats={"drops": {"sft:failed": 1}})


def test_the_report_is_rebuilt_from_the_release_lineage(small_run, tmp_path: Path) -> None:
    release = _release(small_run, tmp_path / "releases", list(small_run.paths.values()))
    html = stages.report_for_release(release)
    version = store.read_manifest(release).version
    assert html.lstrip().lower().startswith("<!doctype html") and f"trajforge report {version}" in html
    assert "<svg" in html and "policy_pass_rate" in html
    partial = _release(small_run, tmp_path / "partial", [small_run.paths["tasks"]])
    with pytest.raises(FileNotFoundError, match="trajectories, verdicts"):
        stages.report_for_release(partial)


def test_released_stats_and_the_summary_of_a_run(small_run, tmp_path: Path) -> None:
    release = _release(small_run, tmp_path / "releases", list(small_run.paths.values()))
    rows = store.read_manifest(release).rows
    assert stages.released_stats({"sft": release}) == {"sft": {"drops": {"sft:failed": 1}, "rows": rows}}
    published = stages.Published(paths={"sft": release}, version="v1", fingerprint="f", unchanged=True)
    s = stages.summary(small_run.tasks, small_run.trajectories, small_run.verdicts, {"sft": release},
                       small_run.selection, published, cfg=small_run.cfg)
    policy = {t.id for t in small_run.trajectories if not t.reference}
    deciding = figures.deciding_verdicts(small_run.cfg, small_run.tasks, small_run.verdicts)
    assert s["tasks"] == len(small_run.tasks) and s["policy_trajectories"] == len(policy)
    assert s["reference_trajectories"] == len(small_run.trajectories) - len(policy)
    assert s["policy_passed"] == sum(v.passed for v in deciding if v.trajectory_id in policy)
    assert s["sft_rows"] == rows and s["releases"] == {"sft": str(release)}
    assert s["release"] == "unchanged" and s["release_version"] == "v1"
    assert json.loads(stages.dumps({"path": release})) == {"path": str(release)}
