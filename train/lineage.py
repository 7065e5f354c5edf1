"""Lineage of training runs: which release, config and code version made each model.

Every run folder (`<out>/train/<stage>-<version>/`) holds `run.json`, written when the run
starts (`status: running`) and rewritten when it ends (`done` or `failed`, with headline
figures). `runs_on_release` lists the runs trained on a release, and `runs_table` renders
them as Markdown, and `refresh_release_card` writes that table into the release's card
(section "Training runs", rewritten atomically whenever a run ends or is evaluated; the
release's data and manifest are never touched). A run's benchmark results (`benchmark-*.json`,
from `trajforge eval --benchmark`, see `train.evaluate.record_benchmark`) show in the table
as pass^k per benchmark.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from pathlib import Path
from typing import Any

from data import store
from data.atomic import write_json_atomic
from data.card import set_section

RUN_FILE = "run.json"
RUNS_SECTION = "Training runs"


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
    """Write (or rewrite) `out/run.json`. The first write of a training (`status` "running")
    starts it; the closing write ("done", "failed") keeps that `started_at`. Training does not
    resume, so a folder trained into again (a bench arm retrained on a new release version)
    starts afresh: keeping its first start made the card's wall time span both trainings."""
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
        "code_version": store.code_version(), "started_at": now if status == "running" else previous.get("started_at", now),
        **({"finished_at": now} if status != "running" else {}), **fields,
    }
    write_json_atomic(path, record, indent=2)
    if status != "running":
        refresh_release_card(dataset_path, [out.parent])
    return record


def read_run(run_dir: Path | str) -> dict[str, Any]:
    path = Path(run_dir) / RUN_FILE
    if not path.is_file():
        raise FileNotFoundError(f"{run_dir} is not a training run (no {RUN_FILE})")
    return json.loads(path.read_text())


def keep_beside_run(result: dict[str, Any], run_dir: Path, filename: str) -> dict[str, Any]:
    """Write `result` into the run folder `run_dir` as `filename` (an evaluation or a benchmark
    of the run's model) and refresh the card of the release the run trained on, which lists
    it. Returns `result` with `written_to`."""
    path = run_dir / filename
    path.write_text(json.dumps(result, indent=2) + "\n")
    trained_on = read_run(run_dir).get("release", {}).get("path")
    if trained_on:
        refresh_release_card(trained_on, [run_dir.parent])
    return {**result, "written_to": str(path)}


def default_train_dir(release: Path | str) -> Path:
    """`<out>/train` for a release at `<out>/releases/<name>/<version>`."""
    return Path(release).resolve().parents[2] / "train"


def runs_on_release(release: Path | str,
                    train_dir: Path | str | list[Path | str] | None = None) -> list[dict[str, Any]]:
    """The run records (oldest first) of every run under `train_dir` (one folder or several;
    default `<out>/train`) trained on `release`, each with its newest evaluation (`eval`,
    from the run's `eval-*.json`, see `train.value.evaluate_pair`) when it has one.

    A run matches when its release name and version equal the release's manifest and its
    recorded checksums equal the release's files (a re-published folder does not match).
    """
    manifest = store.read_manifest(release, verify=False)
    want = release_ref(release, manifest)
    if train_dir is None:
        roots = [default_train_dir(release)]
    else:
        roots = [Path(d) for d in (train_dir if isinstance(train_dir, list) else [train_dir])]
    runs: dict[str, dict[str, Any]] = {}
    for root in dict.fromkeys(r.resolve() for r in roots):
        for path in sorted(root.glob(f"*/{RUN_FILE}")) if root.is_dir() else []:
            try:
                record = json.loads(path.read_text())
            except (OSError, json.JSONDecodeError):
                continue
            got = record.get("release", {})
            trained_on = _manifest_at(got.get("path"))
            if (got.get("name"), got.get("version"), got.get("sha256")) != (want["name"], want["version"],
                                                                            want["sha256"]) \
                    and want["path"] not in _arm_parents(trained_on):
                continue
            record["arm"] = _arm_of(got, trained_on)
            evals = sorted(path.parent.glob("eval-*.json"), key=lambda p: p.stat().st_mtime)
            if evals:
                with contextlib.suppress(OSError, json.JSONDecodeError):
                    record["eval"] = json.loads(evals[-1].read_text())
            benchmarks: dict[str, Any] = {}
            for found in sorted(path.parent.glob("benchmark-*.json")):
                with contextlib.suppress(OSError, json.JSONDecodeError):
                    result = json.loads(found.read_text())
                    benchmarks[f"{result.get('benchmark', found.stem)} {result.get('split', '')}".strip()] = result
            if benchmarks:
                record["benchmarks"] = benchmarks
            runs[str(path.parent.resolve())] = record
    return sorted(runs.values(), key=lambda r: r.get("started_at", ""))


def _manifest_at(path: str | Path | None) -> store.Manifest | None:
    """The manifest of the dataset at `path` (not verified), None when there is none."""
    if not path:
        return None
    try:
        return store.read_manifest(path, verify=False)
    except (store.DatasetError, OSError):
        return None


def _arm_parents(manifest: store.Manifest | None) -> list[str]:
    """The datasets an arm (a dataset cut from a release, `train.value.arm_dataset`) was cut from."""
    return list(manifest.lineage.parents) if manifest is not None and "arm" in manifest.stats else []


def _arm_of(release: dict[str, Any], manifest: store.Manifest | None) -> dict[str, Any]:
    """A run's arm: the arm's name and training rows, or the release's name and rows."""
    if manifest is not None and "arm" in manifest.stats:
        return {"name": manifest.stats["arm"], "rows": manifest.stats.get("rows")}
    return {"name": release.get("name", ""), "rows": release.get("rows")}


def _with_ci(base: float | None, trained: float | None, delta: dict[str, Any] | None) -> str:
    if delta is None:
        return f"{base} → {trained}"
    lo, hi = delta["ci95"]
    return f"{base} → {trained} (Δ {delta['mean']:+.3f}, 95% CI {lo:+.3f} … {hi:+.3f})"


def _eval_cells(result: dict[str, Any] | None) -> list[str]:
    """Next-action accuracy and episode pass rate, base → trained with the paired interval
    (`train.value.evaluate_pair`); an older pass-rate-only result fills the second cell."""
    if not result:
        return ["-", "-"]
    base, trained, delta = result.get("base", {}), result.get("trained", {}), result.get("delta", {})
    where = f" on {result.get('tasks')} {result.get('split', '')} tasks"
    if "episodes" not in trained and "next_action" not in trained:  # written before evaluate_pair (pass rates only)
        release = result.get("release", {})
        return ["-", f"{base.get('pass_rate')} → {trained.get('pass_rate')}{where} of {release.get('name', '')} "
                     f"{release.get('version', '')}"]
    na = ("-" if "next_action" not in trained else
          _with_ci(base.get("next_action", {}).get("accuracy"), trained["next_action"]["accuracy"],
                   delta.get("next_action")) + f" on {trained['next_action']['turns']} turns")
    ep = ("-" if "episodes" not in trained else
          _with_ci(base.get("episodes", {}).get("pass_rate"), trained["episodes"]["pass_rate"],
                   delta.get("pass_rate")) + where)
    return [na, ep]


def _wall(run: dict[str, Any]) -> str:
    """The training's own measured wall time (`wall_s`, the train summary's), else the span
    of the run record's timestamps (a run recorded before `wall_s`, or one that failed)."""
    import datetime

    if isinstance(run.get("wall_s"), int | float):
        return f"{round(run['wall_s'])} s"
    try:
        start, end = (datetime.datetime.strptime(run[k], "%Y-%m-%dT%H:%M:%SZ") for k in ("started_at", "finished_at"))
    except (KeyError, ValueError):
        return ""
    return f"{int((end - start).total_seconds())} s"


def _benchmark_cell(results: dict[str, Any] | None) -> str:
    """Each benchmark result as `<benchmark> <split>: pass^1 … pass^k (tasks × trials)`."""
    if not results:
        return "-"
    cells = []
    for name, r in sorted(results.items()):
        ks = " ".join(f"pass^{k} {v}" for k, v in sorted(r.get("pass_hat_k", {}).items(), key=lambda kv: int(kv[0])))
        cells.append(f"{name}: {ks or '-'} ({r.get('tasks')} tasks × {r.get('trials')})")
    return "; ".join(cells)


RUN_COLUMNS = ("run", "stage", "arm", "rows", "status", "steps", "wall time", "final loss / reward",
               "next-action accuracy (base → trained)", "episode pass rate (base → trained)",
               "benchmarks (pass^k)", "code")


def run_cells(run: dict[str, Any]) -> list[str]:
    """One run as the cells of `RUN_COLUMNS`: its arm (the dataset it trained on) and rows,
    final loss (SFT) or reward (GRPO), wall time, both evaluations against the base with
    their intervals when the run's model was judged, and its benchmarks' pass^k."""
    result = run.get("final_loss") if run.get("stage") == "sft" else run.get("final_reward")
    release = run.get("release", {})
    arm = run.get("arm") or _arm_of(release, _manifest_at(release.get("path")))
    return [Path(run["run_dir"]).name, run["stage"], str(arm.get("name", "")), str(arm.get("rows", "")),
            run["status"], str(run.get("steps", "")), _wall(run),
            "" if result is None else str(round(float(result), 4)), *_eval_cells(run.get("eval")),
            _benchmark_cell(run.get("benchmarks")), str(run.get("code_version", ""))]


def runs_table(runs: list[dict[str, Any]]) -> str:
    """A Markdown table of runs (`RUN_COLUMNS`) for a release card."""
    lines = ["| " + " | ".join(RUN_COLUMNS) + " |", "|" + "---|" * len(RUN_COLUMNS)]
    lines += ["| " + " | ".join(run_cells(r)) + " |" for r in runs]
    return "\n".join(lines) + "\n"


def refresh_release_card(release: Path | str, train_dirs: list[Path | str] | None = None) -> Path | None:
    """Rewrite the "Training runs" section of `release`'s card from the runs trained on it
    (under `<out>/train` and `train_dirs`); for an arm, the cards of the releases it was cut
    from as well. None when the release is gone or not a dataset."""
    release = Path(release)
    if not _is_main_process():
        return None
    try:
        runs = runs_on_release(release, [default_train_dir(release), *(train_dirs or [])])
        card = (release / "README.md").read_text(encoding="utf-8")
    except (store.DatasetError, OSError):
        return None
    body = ("Models trained on this release (`trajforge runs --dataset <this folder>`; each run folder's "
            "`run.json` holds its config and code version).\n\n" + (runs_table(runs) if runs else "None yet.\n"))
    written = store.rewrite_card(release, set_section(card, RUNS_SECTION, body))
    for parent in _arm_parents(_manifest_at(release)):  # an arm's runs show on the releases it was cut from too
        refresh_release_card(parent, [default_train_dir(release), *(train_dirs or [])])
    return written
