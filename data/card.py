"""Dataset cards: a README.md with Hugging Face metadata, counts, lineage and schema."""

from __future__ import annotations

import json
from typing import Any

import pyarrow as pa


def render_card(
    name: str,
    version: str,
    summary: str,
    schema: pa.Schema,
    rows: int,
    lineage: dict[str, Any],
    stats: dict[str, Any],
    usage: str = "",
    sections: str = "",
) -> str:
    """Markdown dataset card; the YAML header lets `datasets` find the Parquet files."""
    fields = "\n".join(f"| `{f.name}` | `{f.type}` |" for f in schema)
    parents = "\n".join(f"- `{p}`" for p in lineage.get("parents", [])) or "- (none)"
    return f"""---
configs:
- config_name: default
  data_files:
  - split: train
    path: data/*.parquet
tags:
- trajforge
- agents
- tool-use
---

# {name} — {version}

{summary}

**Rows:** {rows}

## Load it

```python
from datasets import load_dataset
ds = load_dataset("parquet", data_files="{{this folder}}/data/*.parquet", split="train")
```

```sql
-- DuckDB
select * from read_parquet('{{this folder}}/data/*.parquet') limit 5;
```
{usage}
{sections}
## Columns

| column | Arrow type |
|---|---|
{fields}

`tools` and tool-call `arguments` are JSON strings (decode with `json.loads`).

## Lineage

- config hash: `{lineage.get("config_hash", "")}`
- code version: `{lineage.get("code_version", "")}`
- run id: `{lineage.get("run_id", "")}`
- parent datasets:
{parents}

## All statistics

```json
{json.dumps(stats, indent=2, sort_keys=True, default=str)}
```

Verify the files against `manifest.json` with `trajforge datasets verify <this folder>`.
"""


def set_section(card: str, title: str, body: str) -> str:
    """`card` with its `## {title}` section replaced by `body`; a missing section goes in
    before `## Columns` (or at the end). Sections run to the next `## ` heading."""
    block = f"## {title}\n\n{body.strip()}\n\n"
    start = card.find(f"\n## {title}\n")
    if start >= 0:
        end = card.find("\n## ", start + 1)
        return card[:start + 1] + block + (card[end + 1:] if end >= 0 else "")
    anchor = card.find("\n## Columns\n")
    if anchor < 0:
        return card.rstrip("\n") + "\n\n" + block
    return card[:anchor + 1] + block + card[anchor + 1:]


def _table(head: list[str], rows: list[list[Any]]) -> str:
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return "\n".join(lines)


def run_sections(run: dict[str, Any]) -> str:
    """Markdown sections of a run's figures (see `pipelines.stages.run_figures`): the yield
    funnel with drop reasons, pass@k and pass^k per world, verifiers and their self-audit,
    hygiene, tool-call error classes, model, sampling and token usage."""
    out: list[str] = []
    if funnel := run.get("funnel"):
        out += ["## Yield funnel", "", _table(["stage", "count", "dropped (reason: count)"], [
            [f["stage"], f["count"], ", ".join(f"{k}: {v}" for k, v in f.get("drops", {}).items()) or "-"]
            for f in funnel]), ""]
    if worlds := run.get("pass_by_world"):
        ks = sorted({int(k) for w in worlds.values() for k in w.get("pass_at_k", {})})
        head = ["world", "tasks", "trajectories", "pass rate"] + [f"pass@{k}" for k in ks] + [f"pass^{k}" for k in ks]
        rows = [[w, d["tasks"], d["trajectories"], d["pass_rate"]]
                + [d["pass_at_k"].get(str(k), "-") for k in ks] + [d["pass_hat_k"].get(str(k), "-") for k in ks]
                for w, d in sorted(worlds.items())]
        out += ["## Pass rates per world", "", "Policy rollouts only (reference trajectories excluded).", "",
                _table(head, rows), ""]
    if verifiers := run.get("verifiers"):
        audit = run.get("verifier_audit", {}).get("verifiers", {})
        rows = []
        for name, version in sorted(verifiers.items()):
            a = audit.get(name, {})
            if not a.get("tasks_audited"):
                rows.append([name, version, 0, "-", "not audited (applies to no task here, or needs a model)"])
                continue
            kills = ", ".join(f"{k}: {v}" for k, v in sorted(a.get("mutant_kill_rate", {}).items()) if v is not None)
            rows.append([name, version, a["tasks_audited"], a.get("gold_pass_rate", "-"), kills or "-"])
        out += ["## Verifiers and self-audit", "", _table(
            ["verifier", "version", "tasks audited", "gold pass rate", "mutant kill rate by kind"], rows), ""]
        excluded = run.get("verifier_audit", {}).get("excluded", 0)
        out += [f"Tasks excluded by the audit: {excluded}.", ""]
    if hygiene := run.get("hygiene"):
        rows = []
        for name, h in sorted(hygiene.items()):
            if not h or h.get("enabled") is False:
                continue
            d, c, sc = h.get("dedup", {}), h.get("contamination", {}), h.get("scrub", {})
            flagged = {k: f"{v.get('flagged_any', 0)}/{v.get('checked', 0)} flagged, {v.get('removed', 0)} removed"
                       for k, v in c.get("eval_sets", {}).items()}
            tvt = h.get("train_vs_test", {})
            own = (f"{tvt.get('flagged_any', 0)}/{tvt.get('checked', 0)} train rows share an 8/13-gram "
                   f"({json.dumps(tvt.get('flagged', {}), sort_keys=True)})") if "flagged_any" in tvt else "-"
            dups = f"{d.get('exact_duplicates', 0)} exact, {d.get('near_duplicates', 0)} near"
            rows.append([name, d.get("input", "-"), dups, d.get("kept", "-"),
                         json.dumps(sc.get("replacements", {}), sort_keys=True) or "{}",
                         "; ".join(f"{k}: {v}" for k, v in flagged.items()) or "no eval sets registered", own])
        if rows:
            out += ["## Hygiene", "", _table(["release", "rows in", "duplicates removed", "rows kept",
                                              "secrets/PII scrubbed", "eval-set contamination",
                                              "train vs own test split (report only)"], rows), ""]
    if errors := run.get("tool_errors"):
        out += ["## Tool-call errors", "",
                "Error classes counted in the policy rollouts (`rollout.parsing`, the worlds' tools). "
                "Malformed calls, calls inside reasoning blocks and calls in other syntaxes were never run.",
                "", _table(["class", "count"], [[k, v] for k, v in sorted(errors.items())]), ""]
    if model := run.get("model"):
        u = run.get("usage", {})
        out += ["## Model, sampling and usage", "", _table(["", ""], [
            ["model", model.get("name", "")], ["backend", model.get("kind", "")],
            ["sampling", json.dumps(run.get("sampling", {}), sort_keys=True)],
            ["model calls", u.get("model_calls", 0)], ["prompt tokens", u.get("prompt_tokens", 0)],
            ["completion tokens", u.get("completion_tokens", 0)]]), ""]
    return "\n".join(out)
