"""Pictures of a task's quotient graph (TopoCurate, methods.md §4) as SVG or PNG.

Nodes are drawn as a tree (the root on top, one row per turn), coloured by the success
potential Φ (red 0 → green 1), with a thick red edge for error turns; edge width grows
with visits; a node where rollouts end is marked ✓/✗ with its counts. matplotlib (Agg) and
networkx are imported inside the functions.
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

from curation.topology import QuotientIndex, build_index, task_graph_nodes
from data.records import Trajectory, Verdict

FORMATS = ("svg", "png")


def _layout(nodes: list[dict[str, Any]]) -> dict[int, tuple[float, float]]:
    """Tidy tree layout: leaves spread left to right in depth-first order, parents centred."""
    children: dict[int, list[int]] = {}
    root = None
    for n in nodes:
        if n["parent"] < 0:
            root = n["id"]
        else:
            children.setdefault(n["parent"], []).append(n["id"])
    if root is None:
        raise ValueError("graph has no root node")
    depth = {n["id"]: n["depth"] for n in nodes}
    pos: dict[int, tuple[float, float]] = {}
    next_x = 0.0
    stack: list[tuple[int, bool]] = [(root, False)]
    while stack:  # iterative post-order (graphs can be deep)
        v, done = stack.pop()
        kids = children.get(v, [])
        if not kids:
            pos[v] = (next_x, -float(depth[v]))
            next_x += 1.0
        elif done:
            xs = [pos[c][0] for c in kids]
            pos[v] = ((min(xs) + max(xs)) / 2, -float(depth[v]))
        else:
            stack.append((v, True))
            stack.extend((c, False) for c in reversed(kids))
    return pos


def _label(n: dict[str, Any], max_len: int = 18) -> str:
    tool = n["tool"]
    text = tool if len(tool) <= max_len else tool[: max_len - 1] + "…"
    return f"{text}\nΦ={n['phi']:.2f} ({n['successes']}/{n['visits']})"


def render_task_graph(
    ix: QuotientIndex,
    task_id: str,
    fmt: str = "svg",
    title: str | None = None,
    max_nodes: int = 400,
) -> bytes:
    """The picture of one task's quotient graph, as SVG or PNG bytes."""
    if fmt not in FORMATS:
        raise ValueError(f"format must be one of {FORMATS}, got {fmt!r}")
    nodes = task_graph_nodes(ix, task_id)
    if len(nodes) > max_nodes:
        raise ValueError(
            f"task {task_id} has {len(nodes)} nodes (> max_nodes={max_nodes}); too many to draw"
        )
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import networkx as nx

    g = nx.DiGraph()
    for n in nodes:
        g.add_node(n["id"], **n)
        if n["parent"] >= 0:
            g.add_edge(n["parent"], n["id"])
    pos = _layout(nodes)
    width = max(4.0, 1.6 * (max(x for x, _ in pos.values()) + 1))
    height = max(3.0, 1.1 * (max(-y for _, y in pos.values()) + 1))
    fig, ax = plt.subplots(figsize=(min(width, 40.0), min(height, 40.0)))
    try:
        cmap = plt.get_cmap("RdYlGn")
        root_visits = max(1, max(n["visits"] for n in nodes))
        edges = list(g.edges())
        nx.draw_networkx_edges(
            g,
            pos,
            ax=ax,
            edgelist=edges,
            arrows=False,
            width=[0.8 + 4.0 * g.nodes[v]["visits"] / root_visits for _, v in edges],
            edge_color=["#c0392b" if g.nodes[v]["error"] else "#7f8c8d" for _, v in edges],
        )
        nx.draw_networkx_nodes(
            g,
            pos,
            ax=ax,
            node_size=900,
            node_color=[g.nodes[v]["phi"] for v in g.nodes],
            cmap=cmap,
            vmin=0.0,
            vmax=1.0,
            edgecolors=["#c0392b" if g.nodes[v]["error"] else "#2c3e50" for v in g.nodes],
            linewidths=[2.5 if g.nodes[v]["error"] else 1.0 for v in g.nodes],
        )
        nx.draw_networkx_labels(
            g, pos, ax=ax, labels={v: _label(g.nodes[v]) for v in g.nodes}, font_size=7
        )
        for v in g.nodes:
            ends = g.nodes[v]["ends"]
            if ends:
                ok = sum(ends)
                x, y = pos[v]
                ax.annotate(
                    f"✓{ok} ✗{len(ends) - ok}",
                    (x, y),
                    xytext=(0, -22),
                    textcoords="offset points",
                    ha="center",
                    fontsize=7,
                    color="#1e8449" if ok else "#c0392b",
                )
        ax.set_title(title or f"quotient graph of {task_id}", fontsize=9)
        ax.set_axis_off()
        ax.margins(0.12)
        fig.tight_layout()
        buf = io.BytesIO()
        fig.savefig(buf, format=fmt, dpi=110 if fmt == "png" else None)
    finally:
        plt.close(fig)
    return buf.getvalue()


def write_task_graph(
    ix: QuotientIndex, task_id: str, path: Path | str, title: str | None = None
) -> Path:
    """Write the picture to `path`; the format comes from its suffix (.svg or .png)."""
    path = Path(path)
    fmt = path.suffix.lstrip(".").lower()
    if fmt not in FORMATS:
        raise ValueError(f"{path}: the file name must end in .svg or .png")
    data = render_task_graph(ix, task_id, fmt, title)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path


def task_graph_svg(ix: QuotientIndex, task_id: str, title: str | None = None) -> str:
    """The SVG text of one task's graph (for embedding in the HTML run report)."""
    return render_task_graph(ix, task_id, "svg", title).decode()


def graph_candidates(ix: QuotientIndex, max_nodes: int = 60) -> list[tuple[str, int, int]]:
    """(task id, branching nodes, nodes) of every task graph that fits on a page, the most
    branched first, then the smallest (ties: index order). A run drawn shard by shard keeps
    each shard's first few and takes the first over all of them."""
    import numpy as np

    sizes = np.bincount(ix.node_task, minlength=len(ix.task_ids))
    child = ix.node_parent[ix.node_parent >= 0]
    n_children = np.bincount(child, minlength=ix.n_nodes) if len(child) else np.zeros(ix.n_nodes)
    per_task = np.bincount(ix.node_task, weights=(n_children >= 2), minlength=len(ix.task_ids))
    return [(ix.task_ids[i], int(per_task[i]), int(sizes[i]))
            for i in (int(j) for j in np.lexsort((sizes, -per_task))) if sizes[i] <= max_nodes]


def pick_tasks_to_draw(ix: QuotientIndex, n: int = 3, max_nodes: int = 60) -> list[str]:
    """Task ids worth a picture: the most branched graphs that still fit on a page."""
    return [tid for tid, _, _ in graph_candidates(ix, max_nodes)[:n]]


def graph_svgs_for(
    trajectories: list[Trajectory], verdicts: list[Verdict], n: int = 3, max_nodes: int = 60
) -> dict[str, str]:
    """SVGs of the `n` most branched task graphs of a run, keyed by a caption (for the HTML
    report). Trajectories without a verdict are left out."""
    passed = {v.trajectory_id: v.passed for v in verdicts}
    judged = [t for t in trajectories if t.id in passed]
    if not judged:
        return {}
    ix = build_index(judged, passed)
    return {
        f"task {tid}": task_graph_svg(ix, tid, title=f"quotient graph of {tid}")
        for tid in pick_tasks_to_draw(ix, n, max_nodes)
    }
