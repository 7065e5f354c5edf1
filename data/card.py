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

## Statistics and drop reasons

```json
{json.dumps(stats, indent=2, sort_keys=True, default=str)}
```

Verify the files against `manifest.json` with `trajforge datasets verify <this folder>`.
"""
