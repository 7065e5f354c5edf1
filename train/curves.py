"""Curves of a run from its `metrics.jsonl`: a CSV of per-step figures and a PNG plot.

matplotlib is imported inside `plot_curves` (Agg backend, no display needed).
"""

from __future__ import annotations

import contextlib
import csv
import json
from pathlib import Path
from typing import Any

CURVES_CSV = "curves.csv"
CURVES_PNG = "curves.png"


def read_metrics(path: Path | str) -> list[dict[str, Any]]:
    path = Path(path)
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.exists() else []


def per_step(rows: list[dict[str, Any]], keys: list[str]) -> list[dict[str, Any]]:
    """One row per step with the `keys` logged at that step (train and eval lines merged;
    the final `train_runtime` summary line excluded)."""
    by_step: dict[int, dict[str, Any]] = {}
    for row in rows:
        if "train_runtime" in row or "step" not in row:
            continue
        found = {k: row[k] for k in keys if k in row}
        if found:
            by_step.setdefault(int(row["step"]), {"step": int(row["step"])}).update(found)
    return [by_step[s] for s in sorted(by_step)]


def write_curves(run_dir: Path | str, keys: list[str], title: str = "") -> dict[str, str]:
    """Write `curves.csv` (and `curves.png` when matplotlib is present); returns their paths."""
    run_dir = Path(run_dir)
    table = per_step(read_metrics(run_dir / "metrics.jsonl"), keys)
    csv_path = run_dir / CURVES_CSV
    with csv_path.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=["step", *keys])
        w.writeheader()
        for row in table:
            w.writerow(row)
    out = {"csv": str(csv_path)}
    with contextlib.suppress(ImportError):
        out["png"] = str(plot_curves(table, keys, run_dir / CURVES_PNG, title))
    return out


def plot_curves(table: list[dict[str, Any]], keys: list[str], path: Path, title: str = "") -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    present = [k for k in keys if any(k in r for r in table)]
    fig, axes = plt.subplots(len(present) or 1, 1, figsize=(6, 2.2 * max(len(present), 1)), squeeze=False)
    for ax, key in zip(axes[:, 0], present, strict=False):
        pts = [(r["step"], r[key]) for r in table if key in r]
        ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o")
        ax.set_ylabel(key, fontsize=8)
        ax.grid(alpha=0.3)
    axes[-1, 0].set_xlabel("step")
    if title:
        axes[0, 0].set_title(title)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
