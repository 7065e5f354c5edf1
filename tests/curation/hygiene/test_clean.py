"""`clean_release`: scrub, dedup and decontaminate in release order."""

from __future__ import annotations

import json

from curation.hygiene import clean_release
from tests.curation.hygiene.planted import EVAL_TEXT, row_with_canaries


def test_clean_release_runs_all_three(eval_set: str) -> None:
    rows = [
        row_with_canaries(),
        dict(row_with_canaries(), trajectory_id="traj-2"),
        {"messages": [{"role": "user", "content": EVAL_TEXT}], "trajectory_id": "leak"},
    ]
    out, report = clean_release(rows, eval_sets=[eval_set])
    assert [r["trajectory_id"] for r in out] == ["traj-1"]
    assert report.scrub.total == 60 and report.dedup.exact_duplicates == 1
    assert report.contamination.eval_sets[eval_set].removed == 1
    json.dumps(report.card())
