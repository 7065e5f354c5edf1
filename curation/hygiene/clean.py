"""Everything, in release order: scrub, re-judge the changed rows, deduplicate, decontaminate
(`clean_release`), and the card's hygiene report."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from pydantic import BaseModel, Field

from curation.hygiene.decontamination import ContaminationReport, EvalSet, decontaminate
from curation.hygiene.dedup import DedupReport, dedup
from curation.hygiene.items import Row
from curation.hygiene.replay import Replay, ReplayReport, replay_scrubbed
from curation.hygiene.scrubbing import ScrubReport, SyntheticOf, scrub_all


class HygieneReport(BaseModel):
    scrub: ScrubReport
    dedup: DedupReport
    contamination: ContaminationReport
    replay: ReplayReport = Field(default_factory=ReplayReport)

    def card(self) -> dict[str, Any]:
        return self.model_dump()


def clean_release(
    rows: Sequence[Row],
    earlier: Iterable[Any] = (),
    eval_sets: Iterable[str | EvalSet] | None = None,
    dedup_threshold: float = 0.85,
    drop_n: int | None = 13,
    columns: Iterable[str] | None = None,
    synthetic: SyntheticOf = None,
    replay: Replay | None = None,
) -> tuple[list[Row], HygieneReport]:
    """Scrub (`columns`, keeping the world's `synthetic` values), re-judge the rows scrubbing
    changed (`replay`; those that no longer pass are dropped), then deduplicate, then
    decontaminate a release's rows."""
    scrubbed, s, scrubbers = scrub_all(rows, list(columns) if columns is not None else None, synthetic)
    judged, r = replay_scrubbed(scrubbed, scrubbers, replay)
    unique, d = dedup(judged, earlier, threshold=dedup_threshold)
    clean, c = decontaminate(unique, eval_sets, drop_n=drop_n)
    return clean, HygieneReport(scrub=s, dedup=d, contamination=c, replay=r)
