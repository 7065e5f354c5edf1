"""Pictures of a task's quotient graph (SVG and PNG) and the choice of tasks to draw."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from curation.graphs import graph_svgs_for, pick_tasks_to_draw, task_graph_svg, write_task_graph
from tests.curation.rollouts import OK_U1, index, task_a, traj, verdict


def test_graph_pictures(tmp_path: Path) -> None:
    trajs, passed = task_a()
    ix = index(trajs, passed)
    svg_path = write_task_graph(ix, "A", tmp_path / "a.svg")
    png_path = write_task_graph(ix, "A", tmp_path / "a.png")
    root = ET.parse(svg_path).getroot()
    assert root.tag.endswith("svg")
    text = svg_path.read_text()
    assert "get_user" in text and "book" in text and "Φ=0.67" in text
    assert png_path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png_path.stat().st_size > 5000
    assert task_graph_svg(ix, "A").lstrip().startswith("<?xml")
    assert pick_tasks_to_draw(ix, 1) == ["A"]
    verdicts = [verdict(t, p) for t, p in zip(trajs, passed, strict=True)]
    svgs = graph_svgs_for([*trajs, traj("Z", 0, [OK_U1])], verdicts)  # Z has no verdict: left out
    assert list(svgs) == ["task A"] and "<svg" in svgs["task A"]
    with pytest.raises(ValueError, match=".svg or .png"):
        write_task_graph(ix, "A", tmp_path / "a.jpg")
    with pytest.raises(KeyError):
        write_task_graph(ix, "nope", tmp_path / "b.svg")

