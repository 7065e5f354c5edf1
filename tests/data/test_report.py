"""The HTML run report: figures from records, pass@k / pass^k by hand, a self-contained page,
and (with Debian's `chromium`) that the page and every plot render in a headless browser.

Setup for the browser test: `apt-get update && apt-get install -y chromium`.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from data.records import StateRef, Task, Trajectory, UserScenario, Verdict
from data.report import (
    ReportFigures,
    figures_from_records,
    inline_svg,
    pass_at_k,
    pass_hat_k,
    render_report,
    write_report,
)

N_PLOTS = 5  # funnel, drops, pass rate per world, pass@k/pass^k, rewards

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


def _task(name: str, world: str) -> Task:
    return Task(
        id=name,
        world=world,
        method="t",
        instruction="x",
        user=UserScenario(),
        initial_state=StateRef(world=world, seed=0, scale=1, state_hash="h"),
        target_state_hash="t",
    )


def _records() -> tuple[list[Task], list[Trajectory], list[Verdict]]:
    tasks = [_task("A", "airline"), _task("B", "airline"), _task("C", "retail")]
    outcomes = {"A": [True, False, True, False], "B": [False] * 4, "C": [True] * 4}
    trajs, verdicts = [], []
    for tid, passes in outcomes.items():
        for i, p in enumerate(passes):
            t = Trajectory(id=f"{tid}{i}", task_id=tid, trial=i, model="m")
            trajs.append(t)
            verdicts.append(
                Verdict(
                    trajectory_id=t.id,
                    task_id=tid,
                    verifier="v",
                    verifier_version="1",
                    passed=p,
                    score=1.0 if p else 0.25 * i,
                )
            )
    ref = Trajectory(id="Aref", task_id="A", trial=0, model="ref", metadata={"reference": True})
    trajs.append(ref)
    verdicts.append(
        Verdict(
            trajectory_id="Aref",
            task_id="A",
            verifier="v",
            verifier_version="1",
            passed=True,
            score=1.0,
        )
    )
    return tasks, trajs, verdicts


def test_pass_at_k_by_hand() -> None:
    counts = [(2, 4), (0, 4), (4, 4)]
    # pass@1: mean of c/n = (0.5 + 0 + 1) / 3; pass@2 for (2,4): 1 - C(2,2)/C(4,2) = 5/6
    assert pass_at_k(counts, [1, 2])[1] == pytest.approx(0.5)
    assert pass_at_k(counts, [2])[2] == pytest.approx((5 / 6 + 0 + 1) / 3)
    # pass^2 for (2,4): C(2,2)/C(4,2) = 1/6; for (4,4): 1
    assert pass_hat_k(counts, [2])[2] == pytest.approx((1 / 6 + 0 + 1) / 3)
    assert pass_hat_k(counts, [5]) == {}  # no task has 5 trials


def test_figures_from_records() -> None:
    tasks, trajs, verdicts = _records()
    fig = figures_from_records(
        tasks,
        trajs,
        verdicts,
        {"sft:failed_verification": 6, "rl:always_solved": 1},
        sft_rows=7,
        rl_rows=1,
        version="v1",
    )
    assert dict(fig.funnel) == {
        "tasks": 3,
        "policy trajectories": 12,
        "reference trajectories": 1,
        "passed verification": 6,
        "sft rows": 7,
        "rl rows": 1,
    }
    assert fig.pass_rate_by_world == {
        "airline": (2, 8),
        "retail": (4, 4),
    }  # the reference is not counted
    assert fig.pass_at_k[1] == pytest.approx(0.5)
    assert sorted(fig.pass_at_k) == [1, 2, 3, 4]
    assert len(fig.rewards) == 12


def test_bad_figures_are_refused() -> None:
    with pytest.raises(ValueError, match="within"):
        ReportFigures(pass_rate_by_world={"w": (5, 3)})
    with pytest.raises(ValueError, match="out of range"):
        ReportFigures(pass_at_k={1: 1.5})
    with pytest.raises(ValueError, match="not SVG"):
        inline_svg("<div/>", "x-")


def test_inline_svg_prefixes_ids_and_strips_scripts() -> None:
    svg = (
        '<?xml version="1.0"?><!DOCTYPE svg>'
        '<svg xmlns="http://www.w3.org/2000/svg" onload="alert(1)">'
        '<defs><clipPath id="c1"><rect/></clipPath></defs><script>alert(2)</script>'
        '<g clip-path="url(#c1)" id="g"><use href="#c1"/></g></svg>'
    )
    out = inline_svg(svg, "p0-")
    assert (
        "<?xml" not in out and "DOCTYPE" not in out and "script" not in out and "onload" not in out
    )
    assert (
        'id="p0-c1"' in out
        and "url(#p0-c1)" in out
        and 'href="#p0-c1"' in out
        and 'id="p0-g"' in out
    )
    ET.fromstring(out)  # still well-formed


def _figures(graphs: int = 1) -> ReportFigures:
    tasks, trajs, verdicts = _records()
    svgs = {}
    if graphs:
        from curation.graphs import task_graph_svg
        from curation.topology import build_index

        ix = build_index(trajs, {v.trajectory_id: v.passed for v in verdicts})
        svgs = {f"task {t}": task_graph_svg(ix, t) for t in ["A", "C"][:graphs]}
    return figures_from_records(
        tasks,
        trajs,
        verdicts,
        {"sft:failed_verification": 6, "rl:<all>&passed": 1},
        sft_rows=7,
        rl_rows=1,
        graph_svgs=svgs,
        title="run <b>report</b>",
        version="v1",
        stats={"policy_pass_rate": 0.5, "config": {"a": 1}},
    )


def test_render_is_self_contained(tmp_path: Path) -> None:
    page = render_report(_figures(graphs=2))
    assert page.startswith("<!DOCTYPE html>")
    assert page.count("<svg") == N_PLOTS + 2
    assert "<script" not in page
    # self-contained: nothing is fetched (namespace URIs are names, not fetches)
    assert not re.search(
        r'(src|href)\s*=\s*["\']?(https?:|//|file:)|<link\b|@import|url\(\s*["\']?(https?:|//)',
        page,
    )
    assert "run &lt;b&gt;report&lt;/b&gt;" in page and "rl:&lt;all&gt;&amp;passed" in page
    ids = re.findall(r'\bid="([^"]+)"', page)
    assert len(ids) == len(set(ids)), "element ids collide between inline SVGs"
    path = write_report(tmp_path, _figures(graphs=0))
    assert path == tmp_path / "report.html" and path.read_text().count("<svg") == N_PLOTS
    with pytest.raises(FileNotFoundError):
        write_report(tmp_path / "missing", _figures(graphs=0))


def _chromium(*args: str, timeout: float = 90) -> subprocess.CompletedProcess:
    assert CHROMIUM is not None
    cmd = [
        CHROMIUM,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--no-first-run",
        "--hide-scrollbars",
        *args,
    ]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)


@pytest.mark.slow
@pytest.mark.skipif(
    CHROMIUM is None,
    reason="needs Debian's chromium: apt-get update && apt-get install -y chromium",
)
def test_report_renders_in_headless_chromium(tmp_path: Path) -> None:
    figures = _figures(graphs=2)
    page = write_report(tmp_path, figures)
    n_svg = N_PLOTS + 2
    # The page ships no script; a test copy adds one that measures every rendered <svg>
    # and every drawn shape inside it, and writes the result into the DOM for --dump-dom.
    probe = tmp_path / "probe.html"
    probe.write_text(
        page.read_text().replace(
            "</body>",
            """<pre id=probe></pre><script>
const out = [...document.querySelectorAll('figure svg')].map(s => {
  const r = s.getBoundingClientRect();
  const drawn = [...s.querySelectorAll('path,rect,text,use')].filter(e => {
    const b = e.getBoundingClientRect(); return b.width > 0 || b.height > 0; }).length;
  return Math.round(r.width) + 'x' + Math.round(r.height) + ':' + drawn; });
document.getElementById('probe').textContent = 'SVGS ' + out.join(' ');
</script></body>""",
        )
    )
    res = _chromium("--dump-dom", probe.as_uri())
    assert res.returncode == 0, res.stderr[-2000:]
    m = re.search(r"SVGS ([^<]*)", res.stdout)
    assert m, res.stdout[-2000:]
    sizes = m.group(1).split()
    assert len(sizes) == n_svg
    for s in sizes:
        w, rest = s.split("x")
        h, drawn = rest.split(":")
        assert int(w) > 200 and int(h) > 100 and int(drawn) > 5, sizes
    # The real page (no script) renders to a non-blank screenshot.
    shot = tmp_path / "shot.png"
    res = _chromium(f"--screenshot={shot}", "--window-size=1100,2400", page.as_uri())
    assert res.returncode == 0 and shot.exists(), res.stderr[-2000:]
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.image as mpimg
    import numpy as np

    img = mpimg.imread(shot)[..., :3]
    assert img.shape[0] >= 2000 and img.shape[1] >= 1000
    non_white = (img < 0.95).any(axis=2).mean()
    colours = len(np.unique((img * 255).astype(np.uint8).reshape(-1, 3), axis=0))
    assert non_white > 0.03 and colours > 50, (non_white, colours)
