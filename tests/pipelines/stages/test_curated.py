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
    assert [r["trajectory_id"] for r in rows["sft"]] == [t.id for t, _ in selection.sft]
    assert [r["task_id"] for r in rows["rl"]] == [p.task.id for p in selection.rl] and rows["rl"]
    for r in rows["rl"]:
        assert r["verifier"] in cfg.verifiers and r["verifier"] != "composite"  # the task's outcome verifier
        assert r["world_version"] == world_version(r["world"])
        assert r["write_tools"] == sorted(n for n, spec in get_world(r["world"]).tools.items() if spec.write)
        assert r["prompt"][0]["role"] == "system" and json.loads(r["task"])["id"] == r["task_id"]
        solution = json.loads(r["reference_solution"])
        assert {c["name"] for c in solution if c["write"]} <= set(r["write_tools"])


def test_curated_rows_carry_the_hidden_columns_until_written(curated) -> None:
    cfg, _, selection, tasks, _ = curated
    rows = stages.curated_rows(cfg, selection, tasks)
    assert all(isinstance(json.loads(r["_quality"]), dict) for r in rows["sft"].rows)
    assert all("_rl_key" in r for r in rows["rl"].rows)
    assert rows["sft"].scrub and rows["sft"].replay is not None
    for name in stages.RELEASES:
        assert stages.PART_SCHEMAS[name].names == stages.SCHEMAS[name].names + [c for c, _ in stages.HIDDEN[name]]
    off = cfg.model_copy(update={"hygiene": cfg.hygiene.model_copy(update={"enabled": False})})
    plain = stages.curated_rows(off, selection, tasks)
    assert (plain["sft"].scrub, plain["sft"].replay) == ({}, {}) and len(plain["sft"].rows) == len(selection.sft)


def test_the_curated_datasets_hold_the_rows_and_their_figures(curated) -> None:
    cfg, out, selection, _, paths = curated
    assert set(paths) == {"sft", "rl"} and paths["sft"].parent == out / "datasets" / "curated_sft"
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
