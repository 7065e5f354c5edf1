"""Training curves (`train.curves`): per-step figures from `metrics.jsonl`, as CSV and PNG."""

from __future__ import annotations

import json
from pathlib import Path


def test_curves_from_metrics(tmp_path: Path) -> None:
    from train.curves import per_step, write_curves

    lines = [{"step": 1, "loss": 2.0}, {"step": 2, "loss": 1.5}, {"step": 2, "eval_loss": 1.7},
             {"step": 2, "train_runtime": 3.0, "loss": 9.0}]
    (tmp_path / "metrics.jsonl").write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    assert per_step(lines, ["loss", "eval_loss"]) == [{"step": 1, "loss": 2.0},
                                                      {"step": 2, "loss": 1.5, "eval_loss": 1.7}]
    out = write_curves(tmp_path, ["loss", "eval_loss"], "t")
    assert Path(out["csv"]).read_text().splitlines() == ["step,loss,eval_loss", "1,2.0,", "2,1.5,1.7"]
    assert Path(out["png"]).stat().st_size > 1000
