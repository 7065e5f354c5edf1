"""Publishing a release set (`pipelines.stages.publish`): the same content publishes nothing
new (and is verified before it is kept), a changed row or setting is a new version, a forced
version, a publish cut half-way finished under its version, mirrors, and retention."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from data import store
from data.schema import RELEASE_SCHEMA_VERSION, SFT_RECOVERY_SCHEMA, SFT_SCHEMA
from pipelines import stages
from pipelines.config import load_config


def _versions(out: Path) -> dict[str, list[str]]:
    return {name: store.versions(out / "releases", name) for name in stages.RELEASES}


def _each(versions: list[str]) -> dict[str, list[str]]:
    """The same versions for every release config: a release set is all of them."""
    return {name: versions for name in stages.RELEASES}


def test_same_content_publishes_nothing_new(tmp_path: Path, curated) -> None:
    cfg, src, selection, tasks, paths = curated
    first = stages.publish_release(cfg, tmp_path, paths, run_id="first")
    assert not first.unchanged
    pointer = (tmp_path / "releases" / store.POINTER).read_text()
    # curated again from the same selection: the same bytes, so the same curated versions
    again = stages.write_curated(cfg, src, selection, tasks, [])
    assert again == paths
    second = stages.publish_release(cfg, tmp_path, again, run_id="second")
    assert second.unchanged and second.paths == first.paths and second.fingerprint == first.fingerprint
    assert _versions(tmp_path) == _each([first.version])
    assert (tmp_path / "releases" / store.POINTER).read_text() == pointer  # not even rewritten
    assert not (tmp_path / "releases" / ".pending.json").exists()
    summary = stages.summary(tasks, [], [], second.paths, selection, second)
    assert summary["release"] == "unchanged" and summary["release_version"] == first.version


def test_a_changed_row_or_setting_publishes_a_new_version(tmp_path: Path, curated) -> None:
    cfg, src, _, _, paths = curated
    first = stages.publish_release(cfg, tmp_path, paths)
    # one row's selection reason edited
    table = store.read_table(paths["sft"])
    reasons = table.column("selection_reason").to_pylist()
    reasons[-1] = (reasons[-1] or "") + " (edited)"
    edited = table.set_column(table.schema.get_field_index("selection_reason"), "selection_reason",
                              pa.array(reasons, pa.string()))
    with store.DatasetWriter(tmp_path / "edited", "curated_sft", "sft", SFT_SCHEMA, RELEASE_SCHEMA_VERSION) as w:
        w.write_table(edited)
        edited_sft = w.commit(store.Lineage())
    by_row = stages.publish_release(cfg, tmp_path, {**paths, "sft": edited_sft})
    assert not by_row.unchanged and by_row.fingerprint != first.fingerprint
    # one setting changed, the rows as first published
    licensed = cfg.model_copy(update={"card": cfg.card.model_copy(update={"license": "apache-2.0"})})
    by_config = stages.publish_release(licensed, tmp_path, paths)
    assert not by_config.unchanged and by_config.fingerprint not in (first.fingerprint, by_row.fingerprint)
    versions = [first.version, by_row.version, by_config.version]
    assert _versions(tmp_path) == _each(versions)
    pointer = store.read_pointer(tmp_path / "releases")
    assert pointer["version"] == by_config.version and pointer["parent"] == by_row.version
    released = store.read_table(by_row.paths["sft"]).column("selection_reason").to_pylist()
    assert sorted(map(str, released)) == sorted(map(str, reasons))  # rows in split order


@pytest.mark.parametrize("damage", ["delete", "tamper"])
def test_unchanged_verifies_the_release_it_keeps(tmp_path: Path, curated, damage: str) -> None:
    """Issue 34: a data file of the release LATEST.json names deleted or altered; the next
    publish of the same content republishes instead of reporting it `unchanged`."""
    cfg, _, _, _, paths = curated
    first = stages.publish_release(cfg, tmp_path, paths)
    data = next((first.paths["sft"] / "data").glob("*.parquet"))
    if damage == "delete":
        data.unlink()
    else:
        raw = bytearray(data.read_bytes())
        raw[len(raw) // 2] ^= 0xFF
        data.write_bytes(bytes(raw))
    second = stages.publish_release(cfg, tmp_path, paths)
    assert not second.unchanged and second.version != first.version
    for path in second.paths.values():
        store.read_manifest(path, verify=True)
    assert store.read_pointer(tmp_path / "releases")["version"] == second.version


def test_retention_keeps_the_newest_and_what_the_release_descends_from(tmp_path: Path, curated) -> None:
    cfg, _, _, _, paths = curated
    root = tmp_path / "datasets"
    made = []
    for i in range(4):
        with store.DatasetWriter(root, "trajectories", "trajectories", stages.CODECS["trajectories"][0], 3,
                                 version=f"2026010{i}T000000000Z") as w:
            made.append(w.commit(store.Lineage()))
    # the release names the oldest trajectories version in its lineage (through a curated one)
    with store.DatasetWriter(root, "curated_sft", "sft", SFT_SCHEMA, RELEASE_SCHEMA_VERSION) as w:
        curated_path = w.commit(store.Lineage(parents=[str(made[0])]))
    stages.publish_release(cfg, tmp_path, {"sft": curated_path, "rl": paths["rl"]})
    removed = stages.apply_retention(cfg.model_copy(update={"retention": cfg.retention.model_copy(
        update={"keep_versions": 2})}), tmp_path)
    assert removed == {"trajectories": 1}
    assert store.versions(root, "trajectories") == [made[0].name, made[2].name, made[3].name]
    assert stages.apply_retention(cfg.model_copy(update={"retention": cfg.retention.model_copy(
        update={"keep_versions": None})}), tmp_path) == {}


def test_force_new_version_publishes_the_same_content_again(tmp_path: Path, curated,
                                                            tiny_settings: dict[str, Any]) -> None:
    cfg, _, _, _, paths = curated
    first = stages.publish_release(cfg, tmp_path, paths)
    forced_cfg = load_config(None, {**tiny_settings, "release.force_new_version": True})
    forced = stages.publish_release(forced_cfg, tmp_path, paths)
    assert not forced.unchanged and forced.version != first.version
    assert forced.fingerprint == first.fingerprint  # the switch is not content
    assert store.read_table(forced.paths["rl"]).to_pylist() == store.read_table(first.paths["rl"]).to_pylist()
    assert store.read_pointer(tmp_path / "releases")["parent"] == first.version
    assert str(first.paths["sft"]) in store.read_manifest(forced.paths["sft"]).lineage.parents
    # switched off again: the forced version is the one LATEST.json names, and unchanged
    after = stages.publish_release(cfg, tmp_path, paths)
    assert after.unchanged and after.version == forced.version
    assert _versions(tmp_path) == _each([first.version, forced.version])


def test_an_incomplete_latest_release_is_published_again(tmp_path: Path, curated) -> None:
    cfg, _, _, _, paths = curated
    first = stages.publish_release(cfg, tmp_path, paths)
    (first.paths["rl"] / store.SUCCESS).unlink()
    again = stages.publish_release(cfg, tmp_path, paths)
    assert not again.unchanged and again.version != first.version
    assert store.read_pointer(tmp_path / "releases")["version"] == again.version


def test_a_publish_cut_half_way_is_finished_under_its_version(tmp_path: Path, curated,
                                                              monkeypatch: pytest.MonkeyPatch,
                                                              tiny_settings: dict[str, Any]) -> None:
    cfg, _, _, _, paths = curated

    class Killed(Exception):
        pass

    def cut_after_first_dataset(name: str) -> None:
        if name == "release.dataset_done":
            raise Killed(name)

    with monkeypatch.context() as m:
        m.setattr(stages, "crashpoint", cut_after_first_dataset)
        with pytest.raises(Killed):
            stages.publish_release(cfg, tmp_path, paths)
    intent = json.loads((tmp_path / "releases" / ".pending.json").read_text())
    assert store.read_pointer(tmp_path / "releases") is None
    sft = tmp_path / "releases" / "sft" / intent["version"]
    committed = (sft / store.MANIFEST).stat().st_mtime_ns
    resumed = stages.publish_release(cfg, tmp_path, paths)
    assert not resumed.unchanged and resumed.version == intent["version"]
    assert (sft / store.MANIFEST).stat().st_mtime_ns == committed  # kept, not written twice
    assert not (tmp_path / "releases" / ".pending.json").exists()
    assert stages.publish_release(cfg, tmp_path, paths).unchanged
    # a forced publish of the same content cut half-way is finished by the next run, forced or not
    with monkeypatch.context() as m:
        m.setattr(stages, "crashpoint", cut_after_first_dataset)
        with pytest.raises(Killed):
            stages.publish_release(load_config(None, {**tiny_settings, "release.force_new_version": True}), tmp_path, paths)
    finished = stages.publish_release(cfg, tmp_path, paths)
    assert not finished.unchanged and finished.version != resumed.version
    assert _versions(tmp_path) == _each([resumed.version, finished.version])
    assert not (tmp_path / "releases" / ".pending.json").exists()


def test_an_unchanged_release_mirrors_only_what_publish_to_lacks(tmp_path: Path, curated) -> None:
    from data import remote

    cfg, _, _, _, paths = curated
    mirror = tmp_path / "mirror"
    cfg = cfg.model_copy(update={"publish_to": f"file://{mirror}"})
    first = stages.publish_release(cfg, tmp_path / "out", paths)
    sft_file = mirror / "sft" / first.version / store.MANIFEST
    uploaded = sft_file.stat().st_mtime_ns
    shutil.rmtree(mirror / "rl" / first.version)  # a mirror an earlier run did not finish
    again = stages.publish_release(cfg, tmp_path / "out", paths)
    assert again.unchanged
    assert sft_file.stat().st_mtime_ns == uploaded  # not uploaded again
    url = remote.read_pointer(f"file://{mirror}")["releases"]["rl"]
    assert remote.read_remote_table(url).to_pylist() == store.read_table(first.paths["rl"]).to_pylist()


def test_sft_recovery_is_published_beside_sft_and_rl(tmp_path: Path, curated) -> None:
    """The recoveries are a config of the release set: same version, own folder, card, splits,
    every failed turn marked `train: false`, and no row of either sft config trains one."""
    from curation.release import release_trained_failures

    cfg, _, _, _, paths = curated
    published = stages.publish_release(cfg, tmp_path, paths)
    rec = published.paths["sft_recovery"]
    assert set(published.paths) == {"sft", "sft_recovery", "rl"}
    assert rec == tmp_path / "releases" / "sft_recovery" / published.version
    assert store.read_pointer(tmp_path / "releases")["releases"]["sft_recovery"] == str(rec)
    manifest = store.read_manifest(rec)
    assert manifest.kind == "sft_recovery" and manifest.rows > 0 and manifest.stats["trained_failures"] == 0
    assert {f.path.split("/")[-1].split("-")[0] for f in manifest.files} == set(manifest.stats["splits"])
    card = (rec / "README.md").read_text()
    assert "config_name: sft_recovery" in card and "recovers from a failed assistant turn" in card
    assert "### Failed turns out of the loss" in card
    for row in store.read_table(rec).to_pylist():
        assert row["recovery"] and any(m["train"] is False for m in row["messages"] if m["role"] == "assistant")
    assert release_trained_failures(rec) == release_trained_failures(published.paths["sft"]) == 0


def test_an_empty_sft_recovery_is_published_all_the_same(tmp_path: Path, curated) -> None:
    """A run without recoveries still publishes `sft_recovery` (no rows, one empty train file,
    a card saying so), so every version of a release set has the same configs and the latest
    `sft_recovery` is never one of an older run (as it would be if an empty one were skipped)."""
    from pipelines import figures

    cfg, _, _, _, paths = curated
    with store.DatasetWriter(tmp_path / "datasets", "curated_sft_recovery", "sft_recovery", SFT_RECOVERY_SCHEMA,
                             RELEASE_SCHEMA_VERSION) as w:
        empty = w.commit(store.Lineage(), stats={"reference_rows": 0, "trained_failures": 0})
    published = stages.publish_release(cfg, tmp_path, {**paths, "sft_recovery": empty})
    rec = published.paths["sft_recovery"]
    assert store.read_manifest(rec).rows == 0 and (rec / "data" / "train-00000.parquet").exists()
    assert "the config is empty" in (rec / "README.md").read_text()
    assert store.read_pointer(tmp_path / "releases")["releases"]["sft_recovery"] == str(rec)  # not an older one
    assert stages.latest_release(tmp_path, "sft_recovery") == rec
    head = stages.released_stats(published.paths)
    assert "the sft_recovery release has no rows" not in str(figures.headline(cfg, {}, head)["warnings"])
