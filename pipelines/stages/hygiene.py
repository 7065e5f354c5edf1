"""The release hygiene of curated rows: scrubbing secrets and PII (keeping each task's world
values), re-judging the rows scrubbing changed, deduplication, decontamination, and the
train-vs-test overlap report (`curation.hygiene` does the work; this wires it to a run)."""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from curation.base import Selection
from data import store
from data.records import Task, Trajectory, Verdict
from data.schema import SFT_KINDS
from envs.registry import get_world
from pipelines.config import RunConfig
from pipelines.stages.base import SCHEMAS
from pipelines.stages.publish import latest_release
from pipelines.stages.verify import verify_shard
from verifiers.base import primary_verifier

# Columns hygiene never rewrites: names and versions. (The `task` JSON is scrubbed like the
# messages, its ids, hashes and initial-state recipe excepted: `curation.hygiene.SKIP_KEYS`.)
NOT_SCRUBBED = {"world_version", "verifier_version", "write_tools", "environment"}


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
        self.decontaminate = Decontaminator(eval_sets(cfg), drop_n=h.drop_n, similarity=h.similarity)

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
    """The re-judge of scrubbed rows (`curation.hygiene.Replay`). An `sft` (or `sft_recovery`) row: its trajectory
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

    return sft if name in SFT_KINDS else rl


def eval_sets(cfg: RunConfig) -> list[Any]:
    """The run's evaluation sets: the configured files, and τ²-bench's test split of each
    domain when `hygiene.tau2_test` is on and the tau2 extra is installed."""
    from curation.hygiene.decontamination import tau2_eval_sets

    h = cfg.hygiene
    return [*(_eval_set(n, p) for n, p in sorted(h.eval_sets.items())), *(tau2_eval_sets() if h.tau2_test else [])]


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
