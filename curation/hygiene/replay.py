"""Re-judging scrubbed rows: a row that scrubbing changed is judged again on the scrubbed text
(a `Replay` the pipeline supplies: the row's verifier) and dropped, counted, if it fails."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any

from pydantic import BaseModel, Field

from curation.hygiene.items import Row, item_of
from curation.hygiene.scrubbing import Scrubber
from data.records import Verdict

# Re-judges changed rows: given each (scrubbed row, its scrubber), the verdict on the scrubbed
# row (None: the row cannot be judged and is dropped as such).
Replay = Callable[[list[tuple[Row, Scrubber]]], list[Verdict | None]]


class ReplayReport(BaseModel):
    """Rows that scrubbing changed, judged again by their verifier on the scrubbed text."""

    enabled: bool = False
    checked: int = 0
    passed: int = 0
    dropped: int = 0
    reasons: dict[str, int] = Field(default_factory=dict)  # first failure reason -> rows
    examples: list[dict[str, Any]] = Field(default_factory=list)


def replay_scrubbed(rows: list[Row], scrubbers: list[Scrubber], replay: Replay | None,
                    max_examples: int = 5) -> tuple[list[Row], ReplayReport]:
    """The rows that still pass their verifier after scrubbing (unchanged rows pass as they
    did); a passing row's `score` becomes the new verdict's."""
    report = ReplayReport(enabled=replay is not None)
    changed = [i for i, s in enumerate(scrubbers) if s.counts]
    if replay is None or not changed:
        return rows, report
    verdicts = replay([(rows[i], scrubbers[i]) for i in changed])
    if len(verdicts) != len(changed):
        raise ValueError(f"replay judged {len(verdicts)} rows, not the {len(changed)} it was given")
    drop: set[int] = set()
    out = list(rows)
    reasons: Counter[str] = Counter()
    for i, v in zip(changed, verdicts, strict=True):
        report.checked += 1
        if v is not None and v.passed:
            report.passed += 1
            if "score" in out[i]:
                out[i] = {**out[i], "score": v.score}
            continue
        drop.add(i)
        why = "cannot be judged" if v is None else (v.reasons or ["not passed"])[0]
        reasons[why[:160]] += 1
        if len(report.examples) < max_examples:
            report.examples.append({"row": item_of(rows[i]).id, "reason": why[:300]})
    report.dropped = len(drop)
    report.reasons = dict(reasons.most_common())
    return [r for i, r in enumerate(out) if i not in drop], report
