"""Lineage of training runs: which release, config and code version made each model.

Every run folder (`<out>/train/<stage>-<version>/`) holds `run.json`, written when the run
starts (`status: running`) and rewritten when it ends (`done` or `failed`, with headline
figures). `runs_on_release` lists the runs trained on a release, and `runs_table` renders
them as Markdown for the release card.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

from data import store

RUN_FILE = "run.json"


def release_ref(dataset_path: Path | str, manifest: store.Manifest) -> dict[str, Any]:
    """How a run names its release: path, name, kind, version and the files' checksums."""
    return {"path": str(Path(dataset_path).resolve()), "name": manifest.name, "kind": manifest.kind,
            "version": manifest.version, "rows": manifest.rows,
            "sha256": sorted(f.sha256 for f in manifest.files)}


def _is_main_process() -> bool:
    """False in the non-zero ranks of a distributed (accelerate) run."""
    return os.environ.get("RANK", "0") == "0"


def write_run_record(out: Path | str, stage: str, dataset_path: Path | str, manifest: store.Manifest,
                     config: dict[str, Any], status: str = "running", **fields: Any) -> dict[str, Any]:
    """Write (or rewrite) `out/run.json`; keeps `started_at` from an earlier write."""
    out = Path(out)
    if not _is_main_process():
        return {}
    out.mkdir(parents=True, exist_ok=True)
    path = out / RUN_FILE
    previous = json.loads(path.read_text()) if path.exists() else {}
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    record = {
        "stage": stage, "status": status, "run_dir": str(out.resolve()),
        "release": release_ref(dataset_path, manifest), "config": config,
        "code_version": store.code_version(), "started_at": previous.get("started_at", now),
        **({"finished_at": now} if status != "running" else {}), **fields,
    }
    tmp = path.with_name(f".{RUN_FILE}.tmp-{os.getpid()}")
    tmp.write_text(json.dumps(record, indent=2, default=str) + "\n")
    os.replace(tmp, path)
    return record


def read_run(run_dir: Path | str) -> dict[str, Any]:
    path = Path(run_dir) / RUN_FILE
    if not path.is_file():
        raise FileNotFoundError(f"{run_dir} is not a training run (no {RUN_FILE})")
    return json.loads(path.read_text())


def default_train_dir(release: Path | str) -> Path:
    """`<out>/train` for a release at `<out>/releases/<name>/<version>`."""
    return Path(release).resolve().parents[2] / "train"


def runs_on_release(release: Path | str, train_dir: Path | str | None = None) -> list[dict[str, Any]]:
    """The run records (oldest first) of every run under `train_dir` trained on `release`.

    A run matches when its release name and version equal the release's manifest and its
    recorded checksums equal the release's files (a re-published folder does not match).
    """
    manifest = store.read_manifest(release, verify=False)
    want = release_ref(release, manifest)
    root = Path(train_dir) if train_dir is not None else default_train_dir(release)
    runs = []
    for path in sorted(root.glob(f"*/{RUN_FILE}")) if root.is_dir() else []:
        try:
            record = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError):
            continue
        got = record.get("release", {})
        if (got.get("name"), got.get("version"), got.get("sha256")) == (want["name"], want["version"], want["sha256"]):
            runs.append(record)
    return sorted(runs, key=lambda r: r.get("started_at", ""))


def runs_table(runs: list[dict[str, Any]]) -> str:
    """A Markdown table of runs for a release card."""
    lines = ["| run | stage | status | steps | result | code |", "|---|---|---|---|---|---|"]
    for r in runs:
        result = r.get("final_loss") if r.get("stage") == "sft" else r.get("final_reward")
        lines.append(f"| {Path(r['run_dir']).name} | {r['stage']} | {r['status']} | {r.get('steps', '')} | "
                     f"{'' if result is None else round(float(result), 4)} | {r.get('code_version', '')} |")
    return "\n".join(lines) + "\n"
