"""`clean_release`: scrub, dedup and decontaminate in release order."""

from __future__ import annotations

import json

from curation.hygiene import clean_release
from tests.curation.hygiene.planted import EVAL_TEXT, row_with_canaries


def test_clean_release_runs_all_three(eval_set: str) -> None:
    rows = [
        row_with_canaries(in_arguments=False),
        dict(row_with_canaries(in_arguments=False), trajectory_id="traj-2"),
        dict(row_with_canaries(), trajectory_id="in-arguments"),
        {"messages": [{"role": "user", "content": EVAL_TEXT}], "trajectory_id": "leak"},
    ]
    out, report = clean_release(rows, eval_sets=[eval_set])
    assert [r["trajectory_id"] for r in out] == ["traj-1"]
    assert report.scrub.total == 40 and report.dedup.exact_duplicates == 1
    assert report.scrub.dropped_call_arguments == 1  # never released with a placeholder in a call
    assert report.contamination.eval_sets[eval_set].removed == 1
    assert json.loads(json.dumps(report.card()))["scrub"]["dropped_call_arguments"] == 1
