"""The curation stage (`pipelines.stages.curated`): the selection's `sft` and `rl` rows, with
their hidden per-shard columns, and the curated datasets written from them."""

from __future__ import annotations

import json

from data import store
from envs.registry import get_world, world_version
from pipelines import stages


def test_release_rows_of_a_selection(curated) -> None:
    cfg, _, selection, tasks, _ = curated
    rows = stages.release_rows(selection, tasks, cfg.verifiers)
    sft_ids = [r["trajectory_id"] for name in ("sft", "sft_recovery") for r in rows[name]]
    assert sorted(sft_ids) == sorted(t.id for t, _ in selection.sft) and rows["sft_recovery"]  # noisy: recoveries
    assert not any(r["recovery"] for r in rows["sft"]) and all(r["recovery"] for r in rows["sft_recovery"])
    for r in rows["sft_recovery"]:  # each failed turn marked, the others trained
        marks = [m["train"] for m in r["messages"] if m["role"] == "assistant"]
        assert False in marks and True in marks
    assert [r["task_id"] for r in rows["rl"]] == [p.task.id for p in selection.rl] and rows["rl"]
    for r in rows["rl"]:
        assert r["verifier"] == "composite" in cfg.verifiers  # the whole verdict is the reward (0664e92)
        assert r["world_version"] == world_version(r["world"])
        assert r["write_tools"] == sorted(n for n, spec in get_world(r["world"]).tools.items() if spec.write)
        assert r["prompt"][0]["role"] == "system" and json.loads(r["task"])["id"] == r["task_id"]
        solution = json.loads(r["reference_solution"])
        assert {c["name"] for c in solution if c["write"]} <= set(r["write_tools"])


def test_curated_rows_carry_the_hidden_columns_until_written(curated) -> None:
    cfg, _, selection, tasks, _ = curated
    rows = stages.curated_rows(cfg, selection, tasks)
    assert all(isinstance(json.loads(r["_quality"]), dict) for r in rows["sft"].rows + rows["sft_recovery"].rows)
    assert all("_rl_key" in r for r in rows["rl"].rows)
    assert rows["sft"].scrub and rows["sft"].replay is not None
    for name in stages.RELEASES:
        assert stages.PART_SCHEMAS[name].names == stages.SCHEMAS[name].names + [c for c, _ in stages.HIDDEN[name]]
    off = cfg.model_copy(update={"hygiene": cfg.hygiene.model_copy(update={"enabled": False})})
    plain = stages.curated_rows(off, selection, tasks)
    assert (plain["sft"].scrub, plain["sft"].replay) == ({}, {})
    assert len(plain["sft"].rows) + len(plain["sft_recovery"].rows) == len(selection.sft)


def test_the_curated_datasets_hold_the_rows_and_their_figures(curated) -> None:
    cfg, out, selection, _, paths = curated
    assert set(paths) == {"sft", "sft_recovery", "rl"} and paths["sft"].parent == out / "datasets" / "curated_sft"
    sft = store.read_table(paths["sft"])
    assert sft.column_names == stages.SCHEMAS["sft"].names  # the hidden columns are gone
    assert set(sft.column("trajectory_id").to_pylist()) <= {t.id for t, _ in selection.sft}
    stats = store.read_manifest(paths["sft"]).stats
    assert sum(stats["splits"].values()) == sft.num_rows > 0
    assert stats["reference_rows"] == sum(sft.column("reference").to_pylist())
    assert stats["hygiene"]["dedup"]["kept"] == sft.num_rows and "data_quality" in stats
    assert all(k.startswith("sft:") for k in stats["drops"])
    rl = store.read_manifest(paths["rl"])
    assert rl.rows == len(selection.rl) and "reference_rows" not in rl.stats
    assert store.read_manifest(paths["sft"]).lineage.config_hash == cfg.config_hash()


def test_curate_uses_the_configured_strategy(curated) -> None:
    cfg, *_ = curated
    assert type(stages.curator_for(cfg)).__name__.lower().startswith("outcome")
    topo = cfg.model_copy(update={"curation": "topology", "curation_options": {"sft_per_task": 1}})
    assert type(stages.curator_for(topo)).__name__.lower().startswith("topo")


def test_the_curated_sft_recovery_dataset_has_the_sft_hygiene_and_no_trained_failure(curated) -> None:
    """Recoveries are curated like `sft` (scrubbed, re-judged, deduplicated, decontaminated,
    data quality) into their own dataset, every failed turn marked so no row trains it."""
    from curation.release import release_trained_failures

    cfg, out, selection, tasks, paths = curated
    rec = store.read_table(paths["sft_recovery"])
    assert paths["sft_recovery"].parent == out / "datasets" / "curated_sft_recovery"
    assert rec.column_names == stages.SCHEMAS["sft_recovery"].names and rec.num_rows > 0
    stats = store.read_manifest(paths["sft_recovery"]).stats
    assert stats["hygiene"]["dedup"]["kept"] == rec.num_rows and stats["hygiene"]["replay"]["enabled"]
    assert stats["data_quality"]["recovery_rows"] == rec.num_rows and stats["trained_failures"] == 0
    assert store.read_manifest(paths["sft"]).stats["trained_failures"] == 0
    assert release_trained_failures(paths["sft_recovery"]) == release_trained_failures(paths["sft"]) == 0
    parts = stages.curated_rows(cfg, selection, tasks)["sft_recovery"]
    assert all(isinstance(json.loads(r["_quality"]), dict) for r in parts.rows) and parts.scrub
