"""The run report: one self-contained static HTML page of a release's figures.

`render_report(figures)` is a pure function: plain figures in (funnel counts with drop
reasons, pass rates per world, pass@k / pass^k, reward histogram data, graph SVGs), an HTML
string out, every plot an inline SVG drawn by matplotlib (Agg; imported inside the function),
no scripts, no external files. `write_report(directory, figures)` writes it as
`<directory>/report.html` (atomically); `figures_from_records` computes the figures from
the run's records.
"""

from __future__ import annotations

import html
import io
import math
import re
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from data.atomic import write_atomic
from data.records import Task, Trajectory, Verdict

REPORT_NAME = "report.html"


@dataclass
class ReportFigures:
    """Everything the report shows. Counts are plain numbers; `graph_svgs` maps a caption
    to SVG text (e.g. from `curation.graphs.task_graph_svg`)."""

    title: str = "trajforge run report"
    version: str = ""
    funnel: list[tuple[str, int]] = field(default_factory=list)  # stage, count (in pipeline order)
    drops: dict[str, int] = field(default_factory=dict)  # "<stage>:<reason>" -> count
    pass_rate_by_world: dict[str, tuple[int, int]] = field(
        default_factory=dict
    )  # world -> (passes, trials)
    pass_at_k: dict[int, float] = field(default_factory=dict)
    pass_hat_k: dict[int, float] = field(default_factory=dict)
    rewards: list[float] = field(default_factory=list)  # one score per policy trajectory
    graph_svgs: dict[str, str] = field(default_factory=dict)
    stats: dict[str, Any] = field(default_factory=dict)  # further figures, shown as a table
    headline: dict[str, Any] = field(default_factory=dict)  # the run's headline figures, shown first
    warnings: list[str] = field(default_factory=list)  # what a reader must know first

    def __post_init__(self) -> None:
        for stage, n in self.funnel:
            if n < 0:
                raise ValueError(f"funnel count of {stage!r} is negative: {n}")
        for world, (p, n) in self.pass_rate_by_world.items():
            if not 0 <= p <= n:
                raise ValueError(f"world {world!r}: passes {p} not within 0..trials {n}")
        for name, table in (("pass@k", self.pass_at_k), ("pass^k", self.pass_hat_k)):
            for k, v in table.items():
                if k < 1 or not 0.0 <= v <= 1.0:
                    raise ValueError(f"{name}: k={k} value={v} out of range")
        if any(not math.isfinite(r) for r in self.rewards):
            raise ValueError("rewards must be finite numbers")


# -- figures from records ----------------------------------------------------------------


def pass_at_k(counts: Iterable[tuple[int, int]], ks: Iterable[int]) -> dict[int, float]:
    """Unbiased pass@k = 1 − C(n−c, k)/C(n, k), averaged over tasks with n ≥ k.
    `counts` holds (successes c, trials n) per task."""
    counts = list(counts)
    out = {}
    for k in ks:
        vals = [1.0 - math.comb(n - c, k) / math.comb(n, k) for c, n in counts if n >= k]
        if vals:
            out[k] = sum(vals) / len(vals)
    return out


def pass_hat_k(counts: Iterable[tuple[int, int]], ks: Iterable[int]) -> dict[int, float]:
    """τ²-bench pass^k = C(c, k)/C(n, k) (all k of k tries pass), averaged over tasks with n ≥ k."""
    counts = list(counts)
    out = {}
    for k in ks:
        vals = [math.comb(c, k) / math.comb(n, k) for c, n in counts if n >= k]
        if vals:
            out[k] = sum(vals) / len(vals)
    return out


def figures_from_records(
    tasks: Sequence[Task],
    trajectories: Sequence[Trajectory],
    verdicts: Sequence[Verdict],
    drops: Mapping[str, int],
    sft_rows: int,
    rl_rows: int,
    graph_svgs: Mapping[str, str] | None = None,
    title: str = "trajforge run report",
    version: str = "",
    stats: Mapping[str, Any] | None = None,
) -> ReportFigures:
    """Report figures of a run. Pass rates, pass@k and rewards count policy rollouts only
    (reference trajectories have `reference` set); `verdicts` should be the
    deciding verifier's (one per trajectory)."""
    policy = {t.id for t in trajectories if not t.reference}
    world_of = {t.id: t.world for t in tasks}
    per_task: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    per_world: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    rewards = []
    for v in verdicts:
        if v.trajectory_id not in policy:
            continue
        per_task[v.task_id][0] += v.passed
        per_task[v.task_id][1] += 1
        w = world_of.get(v.task_id, "?")
        per_world[w][0] += v.passed
        per_world[w][1] += 1
        rewards.append(float(v.score))
    counts = [(c, n) for c, n in per_task.values()]
    kmax = max((n for _, n in counts), default=0)
    ks = [k for k in (1, 2, 3, 4, 5, 8, 10, 16) if k <= kmax]
    passed = sum(c for c, _ in counts)
    funnel = [
        ("tasks", len(tasks)),
        ("policy trajectories", len(policy)),
        ("reference trajectories", len(trajectories) - len(policy)),
        ("passed verification", passed),
        ("sft rows", sft_rows),
        ("rl rows", rl_rows),
    ]
    return ReportFigures(
        title=title,
        version=version,
        funnel=funnel,
        drops=dict(drops),
        pass_rate_by_world={w: (p, n) for w, (p, n) in sorted(per_world.items())},
        pass_at_k=pass_at_k(counts, ks),
        pass_hat_k=pass_hat_k(counts, ks),
        rewards=rewards,
        graph_svgs=dict(graph_svgs or {}),
        stats=dict(stats or {}),
    )


# -- SVG plots ---------------------------------------------------------------------------

_XML_HEAD = re.compile(r"<\?xml[^>]*\?>|<!DOCTYPE[^>]*>|<metadata>.*?</metadata>", re.S)
_SCRIPT = re.compile(r"<script\b.*?</script\s*>|<script\b[^>]*/>", re.S | re.I)
_ON_ATTR = re.compile(r"\son[a-z]+\s*=\s*(\"[^\"]*\"|'[^']*')", re.I)
_ID = re.compile(r'\bid="([^"]+)"')


def inline_svg(svg: str, prefix: str) -> str:
    """SVG text made fit to inline in HTML: no XML header or DOCTYPE, no scripts or event
    handlers, and every id (and reference to it) prefixed so several SVGs can share a page."""
    if "<svg" not in svg:
        raise ValueError("not SVG text (no <svg element)")
    body = _ON_ATTR.sub("", _SCRIPT.sub("", _XML_HEAD.sub("", svg))).strip()
    ids = set(_ID.findall(body))
    if ids:
        pattern = re.compile(
            r'(\bid="|url\(#|href="#)('
            + "|".join(re.escape(i) for i in sorted(ids, key=len, reverse=True))
            + r")\b"
        )
        body = pattern.sub(lambda m: f"{m.group(1)}{prefix}{m.group(2)}", body)
    return body


def _svg_of(fig: Any) -> str:
    buf = io.StringIO()
    fig.savefig(buf, format="svg")
    return buf.getvalue()


def _plots(fig_data: ReportFigures) -> list[tuple[str, str]]:
    """(caption, svg) for each standard plot; a plot without data says so inside its axes."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    def funnel(ax: Any) -> None:
        labels = [s for s, _ in fig_data.funnel][::-1]
        vals = [n for _, n in fig_data.funnel][::-1]
        bars = ax.barh(labels, vals, color="#2e86c1")
        ax.bar_label(bars, padding=3)
        ax.set_xlabel("count")

    def drops(ax: Any) -> None:
        items = sorted(fig_data.drops.items(), key=lambda kv: kv[1])
        bars = ax.barh([k for k, _ in items], [v for _, v in items], color="#cb4335")
        ax.bar_label(bars, padding=3)
        ax.set_xlabel("dropped")

    def pass_rate(ax: Any) -> None:
        worlds = list(fig_data.pass_rate_by_world)
        rates = [p / n if n else 0.0 for p, n in fig_data.pass_rate_by_world.values()]
        bars = ax.bar(worlds, rates, color="#28b463")
        ax.bar_label(
            bars,
            labels=[f"{p}/{n}" for p, n in fig_data.pass_rate_by_world.values()],
            padding=2,
        )
        ax.set_ylim(0, 1.1)
        ax.set_ylabel("pass rate")

    def pass_k(ax: Any) -> None:
        for table, label, style in (
            (fig_data.pass_at_k, "pass@k", "o-"),
            (fig_data.pass_hat_k, "pass^k", "s--"),
        ):
            if table:
                ks = sorted(table)
                ax.plot(ks, [table[k] for k in ks], style, label=label)
        ax.set_xticks(sorted(set(fig_data.pass_at_k) | set(fig_data.pass_hat_k)))  # k is a count
        ax.set_xlabel("k")
        ax.set_ylim(0, 1.05)
        ax.legend()

    def rewards(ax: Any) -> None:
        ax.hist(
            fig_data.rewards,
            bins=20,
            range=(min(0.0, min(fig_data.rewards)), max(1.0, max(fig_data.rewards))),
            color="#884ea0",
        )
        ax.set_xlabel("reward (verifier score)")
        ax.set_ylabel("trajectories")

    # (title, caption, height, how to draw it: None when there is no data)
    plots: list[tuple[str, str, float, Callable[[Any], None] | None]] = [
        ("Funnel", "Funnel: how many records reached each stage",
         0.45 * max(len(fig_data.funnel), 3) + 1, funnel if fig_data.funnel else None),
        ("Drop reasons", "Drop reasons (stage:reason)",
         0.35 * max(len(fig_data.drops), 3) + 1, drops if fig_data.drops else None),
        ("Pass rate per world", "Policy pass rate per world",
         3.0, pass_rate if fig_data.pass_rate_by_world else None),
        ("pass@k and pass^k", "pass@k (some of k tries pass) and pass^k (all k pass)",
         3.0, pass_k if fig_data.pass_at_k or fig_data.pass_hat_k else None),
        ("Reward histogram", "Reward histogram of policy trajectories",
         3.0, rewards if fig_data.rewards else None),
    ]
    out: list[tuple[str, str]] = []
    with plt.rc_context({"svg.fonttype": "none", "font.size": 9, "svg.hashsalt": "trajforge"}):
        for title, caption, height, draw in plots:
            fig, ax = plt.subplots(figsize=(6.4, height))
            if draw is None:
                ax.text(0.5, 0.5, "no data", ha="center", va="center", transform=ax.transAxes, color="#888")
                ax.set_xticks([])
                ax.set_yticks([])
            else:
                draw(ax)
            ax.set_title(title)
            fig.tight_layout()
            out.append((caption, _svg_of(fig)))
            plt.close(fig)
    return out


# -- HTML --------------------------------------------------------------------------------

_CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Helvetica,Arial,sans-serif;margin:2rem auto;
max-width:980px;color:#222;padding:0 1rem}
h1{font-size:1.6rem;margin-bottom:.2rem}.sub{color:#666;margin-top:0}
figure{margin:1.5rem 0;padding:.5rem;border:1px solid #e5e5e5;border-radius:6px}
figure svg{max-width:100%;height:auto;display:block;margin:auto}
figcaption{color:#555;font-size:.9rem;margin-top:.3rem}
table{border-collapse:collapse;font-size:.9rem}
td,th{border:1px solid #ddd;padding:.25rem .6rem;text-align:left}
th{background:#f6f6f6}.num{text-align:right;font-variant-numeric:tabular-nums}
"""


def _table(rows: Iterable[tuple[str, Any]], head: tuple[str, str]) -> str:
    body = "".join(
        f"<tr><td>{html.escape(str(k))}</td><td class=num>{html.escape(_fmt(v))}</td></tr>"
        for k, v in rows
    )
    th = "".join(f"<th>{html.escape(h)}</th>" for h in head)
    return f"<table><tr>{th}</tr>{body}</table>"


def _fmt(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.4g}"
    if isinstance(v, dict | list):
        import json

        return json.dumps(v, sort_keys=True, default=str)
    return str(v)


def render_report(figures: ReportFigures) -> str:
    """The report as one self-contained HTML string (inline SVG plots, no scripts)."""
    plots = _plots(figures)
    parts = [
        f"<figure class=plot data-plot={i}>{inline_svg(svg, f'p{i}-')}"
        f"<figcaption>{html.escape(cap)}</figcaption></figure>"
        for i, (cap, svg) in enumerate(plots)
    ]
    graphs = [
        f"<figure class=graph data-graph={i}>{inline_svg(svg, f'g{i}-')}"
        f"<figcaption>{html.escape(cap)}</figcaption></figure>"
        for i, (cap, svg) in enumerate(figures.graph_svgs.items())
    ]
    drop_stages = Counter()
    for key, n in figures.drops.items():
        drop_stages[key.split(":", 1)[0]] += n
    title = html.escape(figures.title)
    sub = html.escape(f"release {figures.version}" if figures.version else "")
    pk = sorted(set(figures.pass_at_k) | set(figures.pass_hat_k))
    pk_rows = "".join(
        f"<tr><td class=num>{k}</td><td class=num>{_cell(figures.pass_at_k.get(k))}</td>"
        f"<td class=num>{_cell(figures.pass_hat_k.get(k))}</td></tr>"
        for k in pk
    )
    head = []
    if figures.headline:
        head.append(_table(list(figures.headline.items()), ("headline", "value")))
    if figures.warnings:
        head.append("<ul class=warnings>" + "".join(f"<li>⚠ {html.escape(w)}</li>" for w in figures.warnings)
                    + "</ul>")
    sections = [
        f"<h1>{title}</h1><p class=sub>{sub}</p>",
        *head,
        "<h2>Funnel</h2>",
        _table(figures.funnel, ("stage", "count")),
        parts[0],
        "<h2>Drops</h2>",
        _table(sorted(figures.drops.items()), ("stage:reason", "dropped")),
        _table(sorted(drop_stages.items()), ("stage", "dropped in all")),
        parts[1],
        "<h2>Pass rates</h2>",
        _table(
            [
                (w, f"{p}/{n} = {p / n:.3f}" if n else "0/0")
                for w, (p, n) in figures.pass_rate_by_world.items()
            ],
            ("world", "pass rate"),
        ),
        parts[2],
        f"<table><tr><th>k</th><th>pass@k</th><th>pass^k</th></tr>{pk_rows}</table>",
        parts[3],
        "<h2>Rewards</h2>",
        parts[4],
    ]
    if graphs:
        sections += [
            "<h2>Quotient graphs</h2>",
            "<p>Rollouts of one task merged into a graph; colour = success potential Φ, "
            "red edges = error turns, ✓/✗ = rollouts ending there.</p>",
            *graphs,
        ]
    if figures.stats:
        sections += ["<h2>Figures</h2>", _table(sorted(figures.stats.items()), ("figure", "value"))]
    return (
        "<!DOCTYPE html><html lang=en><head><meta charset=utf-8>"
        f"<meta name=viewport content='width=device-width,initial-scale=1'><title>{title}</title>"
        f"<style>{_CSS}</style></head><body>{''.join(sections)}</body></html>"
    )


def _cell(v: float | None) -> str:
    return "" if v is None else f"{v:.4f}"


def write_report(directory: Path | str, figures: ReportFigures) -> Path:
    """Render the report and write it as `<directory>/report.html` (tmp file + rename).

    `directory` is usually a release folder; the file is not in its manifest, so
    `trajforge datasets verify` still passes."""
    directory = Path(directory)
    if not directory.is_dir():
        raise FileNotFoundError(f"no directory {directory} to write {REPORT_NAME} into")
    text = render_report(figures)
    target = directory / REPORT_NAME
    write_atomic(target, text)
    return target
