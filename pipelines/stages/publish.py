"""The release stage: publish curated datasets as one release set (cards, lineage, the
`LATEST.json` pointer, finishing a publish cut half-way), the card's opening sentence,
finding the latest release, and the retention of intermediate dataset versions."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from data import store
from data.atomic import write_json_atomic
from data.card import card_header, headline_markdown, render_card, run_sections
from data.records import content_hash
from data.schema import RELEASE_SCHEMA_VERSION, SFT_KINDS, empty_table, storage_type
from pipelines import figures
from pipelines.config import RunConfig
from pipelines.stages.base import RELEASES, SCHEMAS, crashpoint, datasets_dir, lineage, releases_dir

# The Hub's task categories of each release kind (card metadata).
TASK_CATEGORIES = {"sft": ["text-generation"], "sft_recovery": ["text-generation"],
                   "rl": ["reinforcement-learning", "text-generation"]}


SUMMARIES = {
    "sft": "Verified multi-turn tool-use conversations in TRL's conversational format (`messages` + `tools`), "
           "selected by trajforge's curation; no row holds a failed assistant turn (the recoveries are the "
           "`sft_recovery` config): {composition}",
    "sft_recovery": "Verified multi-turn tool-use conversations in TRL's conversational format (`messages` + "
                    "`tools`) in which the agent recovers from a failed assistant turn (a malformed call, an "
                    "unknown tool, rejected arguments, a rule violation). Each failed assistant turn is marked "
                    "`\"train\": false` on its message and carries no loss with a template that honours the mark "
                    "(see \"Failed turns out of the loss\"); its error result stays in the context the recovery "
                    "learns from: {composition}",
    "rl": "Tasks for reinforcement learning: the opening prompt, the tools, and the full task record "
          "(initial state recipe, target state hash and diff) that a reward function replays against.",
}


def release_summary(name: str, stats: dict[str, Any], rows: int) -> str:
    """The card's opening sentence, saying what the rows are made of (an sft release may be
    all reference dialogues: the tasks' verified paths played as conversations). An empty
    `sft_recovery` (no selected conversation recovered from a failed turn) is published all
    the same, so every version has the same configs."""
    if name not in SFT_KINDS:
        return SUMMARIES[name]
    ref = int(stats.get("reference_rows", 0))
    if rows == 0 and name == "sft_recovery":
        composition = "no selected conversation recovered from a failed turn in this run (the config is empty)."
    elif rows == 0:
        composition = "no row passed (the release is empty)."
    elif ref == rows:
        composition = (f"all {rows} rows are reference dialogues (each task's verified path played as a "
                       "conversation); no policy rollout was selected.")
    elif ref == 0:
        composition = f"all {rows} rows are policy rollouts that passed verification."
    else:
        composition = (f"{rows - ref} rows are policy rollouts that passed verification and {ref} are reference "
                       "dialogues (each task's verified path played as a conversation).")
    return SUMMARIES[name].format(composition=composition)


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
