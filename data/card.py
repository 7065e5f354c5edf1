"""Dataset cards: a README.md with Hugging Face metadata, counts, lineage and schema."""

from __future__ import annotations

import json
from typing import Any

import pyarrow as pa

FOLDER = "path/to/this/folder"  # stands for the release folder in the card's code

SIZE_CATEGORIES = [(1_000, "n<1K"), (10_000, "1K<n<10K"), (100_000, "10K<n<100K"), (1_000_000, "100K<n<1M"),
                   (10_000_000, "1M<n<10M"), (100_000_000, "10M<n<100M"), (1_000_000_000, "100M<n<1B")]


def size_category(rows: int) -> str:
    """The Hub's `size_categories` bucket of a row count."""
    return next((name for bound, name in SIZE_CATEGORIES if rows < bound), "n>1B")


def _dtype(t: pa.DataType) -> dict[str, Any]:
    """One Arrow type in the YAML form of `datasets` features (`Features._to_yaml_list`)."""
    if isinstance(t, pa.JsonType):
        return {"dtype": "json"}
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        inner = t.value_type
        key = "large_list" if pa.types.is_large_list(t) else "list"
        if pa.types.is_struct(inner):
            return {key: [{"name": f.name, **_dtype(f.type)} for f in inner]}
        sub = _dtype(inner)
        return {key: sub["dtype"] if list(sub) == ["dtype"] else sub}
    if pa.types.is_struct(t):
        return {"struct": [{"name": f.name, **_dtype(f.type)} for f in t]}
    names = {pa.string(): "string", pa.large_string(): "large_string", pa.bool_(): "bool", pa.int8(): "int8",
             pa.int16(): "int16", pa.int32(): "int32", pa.int64(): "int64", pa.float32(): "float32",
             pa.float64(): "float64"}
    if t not in names:
        raise ValueError(f"no dataset-card dtype for Arrow type {t}")
    return {"dtype": names[t]}


def card_features(schema: pa.Schema) -> list[dict[str, Any]]:
    """`dataset_info.features` of a card: the schema in the YAML form `datasets` reads (and
    casts the Parquet data to), JSON-typed columns as `dtype: json`."""
    return [{"name": f.name, **_dtype(f.type)} for f in schema]


def card_header(config_name: str, schema: pa.Schema, splits: dict[str, int] | None, *, license: str = "unknown",
                language: list[str] | None = None, task_categories: list[str] | None = None,
                pretty_name: str | None = None, tags: list[str] | None = None,
                num_bytes: dict[str, int] | None = None, download_size: int | None = None) -> dict[str, Any]:
    """The card's YAML metadata: Hub fields, one config named `config_name` whose splits are
    separate files (`data/<split>-*.parquet`), and `dataset_info` with features and split sizes.

    `splits` maps split names to row counts; only splits with rows are declared (`datasets`
    refuses to build an empty split, and checks the declared row counts). `num_bytes`: the
    splits' Arrow sizes; `download_size`: the Parquet files' bytes. None: one `train` split
    over `data/*.parquet`, no sizes.
    """
    if splits is None:
        files = [{"split": "train", "path": "data/*.parquet"}]
        split_info: list[dict[str, Any]] = []
        rows = 0
    else:
        kept = {k: v for k, v in splits.items() if v} or {"train": 0}
        files = [{"split": k, "path": f"data/{k}-*.parquet"} for k in kept]
        split_info = [{"name": k, "num_bytes": (num_bytes or {}).get(k, 0), "num_examples": v}
                      for k, v in kept.items()]
        rows = sum(kept.values())
    header: dict[str, Any] = {
        "license": license,
        "language": list(language or ["en"]),
        "pretty_name": pretty_name or f"trajforge {config_name}",
        "task_categories": list(task_categories or ["text-generation"]),
        "size_categories": [size_category(rows)],
        "tags": list(tags or ["trajforge", "agents", "tool-use"]),
        "configs": [{"config_name": config_name, "data_files": files}],
        "dataset_info": {"config_name": config_name, "features": card_features(schema),
                         **({"splits": split_info} if split_info else {}),
                         **({"download_size": download_size} if download_size is not None else {}),
                         **({"dataset_size": sum(s["num_bytes"] for s in split_info)} if num_bytes else {})},
    }
    return header


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
    header: dict[str, Any] | None = None,
) -> str:
    """Markdown dataset card; the YAML header (`card_header`, default: one `name` config over
    all files) lets `datasets` find the Parquet files, their splits and features."""
    import yaml

    meta = header or card_header(name, schema, None)
    config = meta["configs"][0]["config_name"]
    splits = [f["split"] for f in meta["configs"][0]["data_files"]]
    fields = "\n".join(f"| `{f.name}` | `{f.type}` |" for f in schema)
    parents = "\n".join(f"- `{p}`" for p in lineage.get("parents", [])) or "- (none)"
    json_cols = [f.name for f in schema if _has_json(f.type)]
    json_note = (f"JSON-typed values ({', '.join(f'`{c}`' for c in json_cols)}) are Arrow's `arrow.json` extension "
                 "type (Parquet's JSON logical type): `datasets` yields them as objects (its `Json` feature), "
                 "pyarrow as JSON text, DuckDB as `JSON`.") if json_cols else ""
    return f"""---
{yaml.safe_dump(meta, sort_keys=False, allow_unicode=True, width=1000).rstrip()}
---

# {name} — {version}

{summary}

**Rows:** {rows}

## Load it

```python
from datasets import load_dataset
ds = load_dataset("{FOLDER}")  # config "{config}": {", ".join(splits)}
```

```sql
-- DuckDB
select * from read_parquet('{FOLDER}/data/*.parquet') limit 5;
```
{usage}
{sections}
## Columns

| column | Arrow type |
|---|---|
{fields}

{json_note}

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


def _has_json(t: pa.DataType) -> bool:
    if isinstance(t, pa.JsonType):
        return True
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return _has_json(t.value_type)
    if pa.types.is_struct(t):
        return any(_has_json(f.type) for f in t)
    return False


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


HEADLINE_LABELS = {
    "model": "model",
    "policy_trajectories": "policy trajectories",
    "policy_passed": "policy trajectories passed",
    "policy_pass_rate": "policy pass rate (deciding verdict)",
    "mean_score": "mean score (deciding verdict)",
    "reference_trajectories": "reference trajectories (gold replays)",
    "infra_failed": "policy trajectories lost to infrastructure failures",
    "sft_rows": "sft rows released",
    "sft_reference_rows": "sft rows that are reference dialogues",
    "sft_reference_share": "reference share of sft rows",
    "sft_recovery_rows": "sft_recovery rows released (failed turns marked `train: false`)",
    "trained_failures": "released sft / sft_recovery rows whose failed turn carries loss",
    "rl_rows": "rl rows released",
}


def headline_markdown(headline: dict[str, Any], version: str) -> str:
    """The card's headline block: the release version, model, pass rate, reference share,
    released rows and warnings (`pipelines.figures.headline`), the same figures the run's
    summary and report state."""
    rows = [["release version", version]] + [[HEADLINE_LABELS.get(k, k), v] for k, v in headline.items()
                                             if k != "warnings" and v is not None]
    out = ["**Headline**", "", _table(["figure", "value"], rows)]
    for w in headline.get("warnings", []):
        out += ["", f"> ⚠ **Warning:** {w}"]
    return "\n".join(out)


SECOND_JUDGE_LABELS = {"tau2": "τ²"}  # a second judge's name in the agreement table


def agreement_section(agreement: dict[str, Any], top: int = 5) -> list[str]:
    """The card's agreement table (`pipelines.figures.agreement`): per second judge (τ²-bench's
    evaluator) how its verdict and the deciding verdict split the policy trajectories (both
    pass, only the second judge, only trajforge, both fail) and the `top` reasons of each
    disagreement. No lines when no second judge judged anything."""
    if not agreement:
        return []
    rows, why = [], []
    for judge, a in sorted(agreement.items()):
        label = SECOND_JUDGE_LABELS.get(judge, judge)
        n = sum(int(a.get(c, 0)) for c in ("both_pass", "only_second", "only_deciding", "both_fail"))
        share = f"{(a.get('both_pass', 0) + a.get('both_fail', 0)) / n:.1%}" if n else "-"
        ref = a.get("reference", {})
        rows.append([label, a.get("both_pass", 0), a.get("only_second", 0), a.get("only_deciding", 0),
                     a.get("both_fail", 0), share,
                     f"{ref.get('passed', 0)}/{ref['judged']}" if ref.get("judged") else "-"])
        for cls, side in (("only_second", f"only {label} passes (trajforge's reason)"),
                          ("only_deciding", f"only trajforge passes ({label}'s reason)")):
            ranked = sorted(a.get("reasons", {}).get(cls, {}).items(), key=lambda kv: (-kv[1], kv[0]))
            why += [[label, side, reason, count] for reason, count in ranked[:top]]
    out = ["## Agreement with a second judge", "",
           "τ²-bench's own evaluator (its reward: τ²'s database check, actions and facts told, natural-language "
           "assertions left out) judges every trajectory of a τ² world beside trajforge's deciding verdict, which "
           "alone decides curation. Policy trajectories by both verdicts; the last column is the second judge on "
           "the reference trajectories.", "",
           _table(["second judge", "both pass", "only it passes", "only trajforge passes", "both fail",
                   "agreement", "reference trajectories passed"], rows), ""]
    errors = {SECOND_JUDGE_LABELS.get(j, j): a["errors"] for j, a in sorted(agreement.items()) if a.get("errors")}
    if errors:
        out += ["Trajectories the second judge could not read (left out): "
                + ", ".join(f"{k}: {v}" for k, v in errors.items()) + ".", ""]
    if why:
        out += ["Commonest reasons for disagreement (a trajectory counts once per reason class):", "",
                _table(["second judge", "disagreement", "reason", "trajectories"], why), ""]
    return out


def run_sections(run: dict[str, Any]) -> str:
    """Markdown sections of a run's figures (see `pipelines.stages.run_figures`): the yield
    funnel with drop reasons, the train/test split, pass@k and pass^k per world, verifiers and their self-audit,
    hygiene, tool-call error classes, model, sampling and token usage."""
    out: list[str] = []
    if funnel := run.get("funnel"):
        out += ["## Yield funnel", "", _table(["stage", "count", "dropped (reason: count)"], [
            [f["stage"], f["count"], ", ".join(f"{k}: {v}" for k, v in f.get("drops", {}).items()) or "-"]
            for f in funnel]), ""]
    if sp := run.get("split"):
        out += ["## Train/test split", "",
                "Tasks are split by group (world, method, goal kind and generator seed); groups that share an "
                "exact reference call sequence or an instruction are kept together, so no test task repeats "
                "a train task's path or text.", "", _table(["figure", "value"], [
                    ["tasks / test tasks", f"{sp['tasks']} / {sp['test']}"],
                    ["test share (configured)", f"{sp['test_share']} ({sp.get('configured_test_fraction', '-')})"],
                    ["split groups / joined components", f"{sp['groups']} / {sp['components']}"],
                    ["test tasks sharing a reference call sequence with train", sp["test_sharing_call_sequence"]],
                    ["test tasks sharing a split group with train", sp["test_sharing_group"]],
                    ["test tasks whose goal kind also appears in train (other seeds)", sp["test_sharing_goal_kind"]],
                    ["test tasks whose tool-name sequence also appears in train",
                     sp.get("test_sharing_tool_names", "-")],
                ]), ""]
    if realism := run.get("realism"):
        out += ["## How the tasks read", "",
                "Per method and world: the share of distinct 8-word openings, the median similarity of each "
                "task's text (instruction, reason, reactions) to its nearest other task (Jaccard of character "
                "5-grams), mean words, tasks that state a world-internal id, write tools some task targets, "
                "and tasks with natural-language outcome assertions.", "",
                _table(["method@world", "tasks", "distinct openings", "NN similarity", "words", "leaked ids",
                        "write tools targeted", "outcome assertions"],
                       [[k, f["tasks"], f["prefix_share"], f["median_nn_similarity"], f["mean_words"], f["leaked_tasks"],
                         f"{f['write_tools_covered']}/{f['write_tools_total']}"
                         + (f" (missing: {', '.join(f['write_tools_missing'])})" if f["write_tools_missing"] else ""),
                         f["nl_assertion_coverage"]] for k, f in realism.items()]), ""]
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
                rows.append([name, version, 0, "-", "not audited (applies to no task here, or needs a model)", "-"])
                continue
            kills = ", ".join(f"{k}: {v}" for k, v in sorted(a.get("mutant_kill_rate", {}).items()) if v is not None)
            alts = ", ".join(f"{k}: {v}" for k, v in sorted(a.get("alternative_pass_rate", {}).items())
                             if v is not None)
            rows.append([name, version, a["tasks_audited"], a.get("gold_pass_rate", "-"), kills or "-", alts or "-"])
        out += ["## Verifiers and self-audit", "",
                "Each verifier judges every audited task's gold (must pass), its mutants (must fail) and its "
                "alternatives, good variants such as independent writes in another order (must pass).", "",
                _table(["verifier", "version", "tasks audited", "gold pass rate", "mutant kill rate by kind",
                        "alternative pass rate by kind"], rows), ""]
        excluded = run.get("verifier_audit", {}).get("excluded", 0)
        out += [f"Tasks excluded by the audit: {excluded}.", ""]
    out += agreement_section(run.get("agreement") or {})
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
            rp = h.get("replay", {})
            replayed = (f"{rp.get('checked', 0)} re-judged, {rp.get('dropped', 0)} dropped"
                        + (f" ({'; '.join(f'{k}: {v}' for k, v in rp.get('reasons', {}).items())})"
                           if rp.get("dropped") else "")) if rp.get("enabled") else "off"
            if sc.get("dropped_call_arguments"):  # never released with a placeholder in a tool call
                replayed = f"{sc['dropped_call_arguments']} dropped (a placeholder in a call's arguments); {replayed}"
            rows.append([name, sc.get("rows", d.get("input", "-")), dups, c.get("kept", d.get("kept", "-")),
                         json.dumps(sc.get("replacements", {}), sort_keys=True) or "{}",
                         json.dumps(sc.get("synthetic_kept", {}), sort_keys=True), replayed,
                         "; ".join(f"{k}: {v}" for k, v in flagged.items()) or "no eval sets registered", own])
        if rows:
            out += ["## Hygiene", "",
                    "E-mail addresses and phone numbers of the worlds' own synthetic users (in a task's initial "
                    "state, or minted by a tool) are kept; other secrets and PII get one placeholder per value, "
                    "the same in every column of the row. Rows that scrubbing changed are judged again on the "
                    "scrubbed text, and dropped when they no longer pass.", "",
                    _table(["release", "rows in", "duplicates removed", "rows kept", "secrets/PII scrubbed",
                            "kept as the world's data", "after scrubbing", "eval-set contamination",
                            "train vs own test split (report only)"], rows), ""]
    if (q := run.get("data_quality")) and q.get("rows"):
        head = run.get("headline") or {}
        fmt = lambda r: "-" if r is None else f"{r:.1%}"  # noqa: E731
        rows = [[f"policy compliance: {k}", fmt(v)] for k, v in q.get("clause_compliance", {}).items()]
        rows += [["writes with grounded arguments", fmt(q.get("grounded_args_rate"))],
                 ["informative final replies (facts told)", fmt(q.get("informative_reply_rate"))],
                 ["refusals that explain the rule", fmt(q.get("refusal_explained_rate"))],
                 ["reference dialogues among rows", fmt(q.get("reference_share"))],
                 ["rows recovering from a failed call (the `sft_recovery` config)",
                  head.get("sft_recovery_rows", q.get("recovery_rows", 0))]]
        if "trained_failures" in head:
            rows.append(["rows of both sft configs whose failed turn carries loss", head["trained_failures"]])
        if "scrubbed_rows_pass_rate" in q:
            rows.append(["scrubbed rows that still pass their verifier", fmt(q["scrubbed_rows_pass_rate"])])
        out += ["## Data quality", "",
                f"Every `sft` row re-checked ({q['rows']} rows, {q.get('rows_judged_by_policy', 0)} judged by the "
                "policy's working rules); a share is of the checks that apply.", "",
                _table(["check", "share"], rows), ""]
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
