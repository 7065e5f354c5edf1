"""What a release card says about training on it, measured on the release's own rows.

At publish time (`pipelines.stages.release`) every row is rendered through the chat
templates of three families and every tool call of the rendered text is parsed back and
compared with the row's arguments (`check_templates`); the embedded tokenizer gives the
token lengths before the first assistant turn and in total (`token_lengths`), and the rows
that hold escaped chat-template control tokens are counted (`rollout.control_tokens`: the
card says how to undo the escape). The card warns when rows are longer than TRL's default
`max_length` (`TRL_DEFAULT_MAX_LENGTH`), and says which templates have no assistant-only-loss
path (no `{% generation %}` markers). It then shows plain `datasets` / TRL code for the
release kind: for `sft_recovery`, how many assistant turns are marked ``train: false`` and
which templates leave a marked turn out of the loss (`loss_mark_checks`); for `rl`, the lines
that build TRL's
`environment_factory` and the verifier reward from the installed trajforge, and the portable
action-match reward (`train.portable`) for users without it.

transformers and trl are imported inside functions; without them (or without a prepared
embedded model) the card says what it could not check.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Iterable, Iterator
from functools import lru_cache
from pathlib import Path
from typing import Any

from data.card import FOLDER
from data.schema import RL_SCHEMA, SFT_KINDS, SFT_RECOVERY_SCHEMA, SFT_SCHEMA, decode_row
from rollout.control_tokens import ESCAPED, holds_escape

MAX_ROWS = 5000  # rows rendered per release (the first ones); the card says when it is fewer than all
TRL_DEFAULT_MAX_LENGTH = 1024  # `SFTConfig.max_length` when none is given (TRL 1.16)

# family -> (file under trl/chat_templates, or None for the embedded model's; what it is)
TEMPLATES: dict[str, tuple[str | None, str]] = {
    "embedded": (None, "trajforge's `rollout/templates/smollm2_tools.jinja`, the template of the embedded "
                       "SmolLM2-135M-Instruct folder (`trajforge prepare-model`): ChatML with tool schemas in the "
                       "system turn, `<tool_call>` blocks and `{% generation %}` markers. It is not the template "
                       "shipped with SmolLM2-135M-Instruct (Hub repo, GGUF), which has no tool support: with it "
                       "`tools` and `tool_calls` vanish from the text and TRL refuses `assistant_only_loss`"),
    "qwen2_5": ("qwen2_5_training.jinja", "Qwen2.5, TRL's `trl/chat_templates/qwen2_5_training.jinja` (what "
                                          "SFTTrainer swaps in for Qwen2.5 with `assistant_only_loss=True`)"),
    "llama3_2": ("llama3_2.jinja", "Llama 3.1/3.2 tool format, TRL's `trl/chat_templates/llama3_2.jinja` "
                                   "(one tool call per assistant turn)"),
}

_TOOL_CALL = re.compile(r"<tool_call>\s*(.*?)\s*</tool_call>", re.DOTALL)
_CHATML_TURN = re.compile(r"<\|im_start\|>assistant(.*?)<\|im_end\|>", re.DOTALL)
_GENERATION = re.compile(r"\{%-?\s*generation\s*-?%\}")  # TRL's assistant-only-loss markers
_LLAMA_TURN = re.compile(r"<\|start_header_id\|>assistant<\|end_header_id\|>\n\n(.*?)<\|eot_id\|>", re.DOTALL)


def template_text(family: str) -> str:
    """The chat template of a family in `TEMPLATES` (TRL's files need trl installed)."""
    if family not in TEMPLATES:
        raise KeyError(f"unknown template family {family!r}; known: {', '.join(TEMPLATES)}")
    file = TEMPLATES[family][0]
    if file is None:
        from rollout.embedded import chat_template

        return chat_template()
    return (trl_templates_dir() / file).read_text(encoding="utf-8")


def trl_templates_dir() -> Path:
    """TRL's `chat_templates` folder, found without importing trl (a slow import)."""
    import importlib.util

    spec = importlib.util.find_spec("trl")
    if spec is None or not spec.submodule_search_locations:
        raise ImportError("trl is not installed (pip install 'trajforge[train]')")
    return Path(next(iter(spec.submodule_search_locations))) / "chat_templates"


def rendered_calls(text: str, family: str) -> list[tuple[str, Any]]:
    """(name, arguments) of each tool call in text rendered by `family`'s template."""
    calls: list[tuple[str, Any]] = []
    if family == "llama3_2":
        for body in _LLAMA_TURN.findall(text):
            try:
                value = json.loads(body)
            except ValueError:
                continue  # a plain-text answer
            if isinstance(value, dict) and "name" in value and "parameters" in value:
                calls.append((value["name"], value["parameters"]))
        return calls
    for turn in _CHATML_TURN.findall(text):  # assistant turns only (system turns show the format)
        for body in _TOOL_CALL.findall(turn):
            value = json.loads(body)
            calls.append((value["name"], value["arguments"]))
    return calls


def expected_calls(messages: list[dict[str, Any]]) -> list[tuple[str, Any]]:
    """(name, arguments) of each assistant tool call of a row, arguments as stored."""
    return [(c["function"]["name"], c["function"]["arguments"])
            for m in messages if m.get("role") == "assistant" for c in m.get("tool_calls") or []]


def check_row(tokenizer: Any, row: dict[str, Any], family: str, template: str) -> str | None:
    """None when `row` (as `datasets` yields it) renders with `template` so that every tool
    call's arguments read back as the stored object; else what went wrong."""
    messages = row["messages"]
    if any(not isinstance(args, dict) for _, args in expected_calls(messages)):
        return "skipped: a malformed tool call (its arguments are the model's text, kept as written)"
    if family == "llama3_2" and any(len(m.get("tool_calls") or []) > 1 for m in messages):
        return "skipped: an assistant turn with several tool calls (the template takes one)"
    try:
        text = tokenizer.apply_chat_template(messages, tools=row.get("tools") or None, chat_template=template,
                                             tokenize=False)
        got = rendered_calls(text, family)
    except Exception as exc:  # a template error is a finding about this row, not a crash
        return f"render failed: {type(exc).__name__}: {str(exc)[:200]}"
    want = expected_calls(messages)
    if got != want:
        bad = next(((g, w) for g, w in zip(got, want, strict=False) if g != w), None)
        detail = f"rendered {bad[0]!r}, stored {bad[1]!r}" if bad else f"{len(got)} calls rendered, {len(want)} stored"
        return f"arguments differ: {detail}"[:300]
    return None


def check_templates(tokenizer: Any, rows: list[dict[str, Any]], families: list[str] | None = None,
                    offset: int = 0) -> dict[str, Any]:
    """Per family: rows checked, rows whose tool calls render right, the first failures
    (`row` counts from `offset`, the position of `rows[0]` in the release), and whether the
    template marks assistant output for `assistant_only_loss` (`{% generation %}`)."""
    out: dict[str, Any] = {}
    for family in families or list(TEMPLATES):
        try:
            template = template_text(family)
        except (ImportError, OSError) as exc:
            out[family] = {"unavailable": f"{type(exc).__name__}: {exc}"}
            continue
        ok, skipped, failures = 0, Counter(), []
        for i, row in enumerate(rows):
            problem = check_row(tokenizer, row, family, template)
            if problem is None:
                ok += 1
            elif problem.startswith("skipped: "):
                skipped[problem.removeprefix("skipped: ")] += 1
            else:
                failures.append({"row": offset + i, "problem": problem})
        out[family] = {"rows": len(rows), "ok": ok, "skipped": sum(skipped.values()), "skipped_why": dict(skipped),
                       "failed": len(failures), "failures": failures[:3],
                       "assistant_only_loss": _GENERATION.search(template) is not None}
    return out


def merge_template_checks(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    """Two `check_templates` results of consecutive chunks as one (counts added, the first
    three failures kept)."""
    out = dict(a)
    for family, fb in b.items():
        fa = a.get(family)
        if fa is None or "unavailable" in fa or "unavailable" in fb:
            out[family] = fa or fb
            continue
        why = Counter(fa["skipped_why"])
        why.update(fb["skipped_why"])
        out[family] = {"rows": fa["rows"] + fb["rows"], "ok": fa["ok"] + fb["ok"],
                       "skipped": fa["skipped"] + fb["skipped"], "skipped_why": dict(why),
                       "failed": fa["failed"] + fb["failed"], "failures": (fa["failures"] + fb["failures"])[:3],
                       "assistant_only_loss": fa.get("assistant_only_loss")}
    return out


def _percentiles(values: list[int]) -> dict[str, int]:
    """Nearest-rank p50 and p95, and the max."""
    if not values:
        return {"p50": 0, "p95": 0, "max": 0}
    s = sorted(values)

    def rank(q: int) -> int:
        return s[max(0, -(-len(s) * q // 100) - 1)]

    return {"p50": rank(50), "p95": rank(95), "max": s[-1]}


class TokenCounter:
    """Token counts of texts, each exactly `len(tokenizer(text, add_special_tokens=False)
    ["input_ids"])`, made cheap for texts that share long parts.

    A fast tokenizer first cuts a text at its added tokens (`<|im_start|>`, ...) and encodes
    each piece between them on its own. When no added token strips the spaces next to it,
    matches single words only, or is matched on normalized text, a text's count is therefore
    its added tokens plus the counts of its pieces. Rendered rows repeat most of their
    pieces (the system prompt with the tool schemas), so each distinct piece is encoded once
    (the most recent `max_pieces` kept), the new ones of a call in one batch. A tokenizer
    whose added tokens do any of that has its texts encoded whole, in one batch per call.
    """

    def __init__(self, tokenizer: Any, max_pieces: int = 4096) -> None:
        self.backend = tokenizer.backend_tokenizer
        added = list(self.backend.get_added_tokens_decoder().values())
        self.exact_pieces = bool(added) and not any(
            t.lstrip or t.rstrip or t.single_word or (t.normalized and self.backend.normalizer is not None)
            for t in added)
        contents = sorted({t.content for t in added}, key=len, reverse=True)  # leftmost, then longest
        self.split = re.compile("(" + "|".join(map(re.escape, contents)) + ")") if contents else None
        self.max_pieces = max_pieces
        self.pieces: dict[str, int] = {}  # insertion order: the oldest first

    def _encode(self, texts: list[str]) -> list[int]:
        return [len(e.ids) for e in self.backend.encode_batch(texts, add_special_tokens=False)] if texts else []

    def counts(self, texts: list[str]) -> list[int]:
        if not self.exact_pieces or self.split is None:
            return self._encode(texts)
        cut = [self.split.split(t) for t in texts]  # pieces at even places, added tokens at odd
        new = list(dict.fromkeys(p for parts in cut for p in parts[::2] if p and p not in self.pieces))
        found = dict(zip(new, self._encode(new), strict=True))
        out = []
        for parts in cut:
            pieces = parts[::2]
            n = (len(parts) - 1) // 2  # the added tokens
            for p in pieces:
                if not p:
                    continue
                c = found.get(p)
                if c is None:
                    c = self.pieces.pop(p)  # re-inserted below: now the most recent
                self.pieces[p] = c
                n += c
            out.append(n)
        while len(self.pieces) > self.max_pieces:
            del self.pieces[next(iter(self.pieces))]
        return out


def row_texts(tokenizer: Any, row: dict[str, Any], kind: str, chat_template: str | None = None) -> tuple[str, str]:
    """A row rendered with `chat_template` (default: the tokenizer's) up to its first
    assistant turn (the prompt, generation header included) and whole (sft: the whole
    conversation; rl: the prompt again)."""
    tools = row.get("tools") or None
    tools = json.loads(tools) if isinstance(tools, str) else tools

    def render(messages: list[dict[str, Any]], prompt: bool) -> str:
        return tokenizer.apply_chat_template(messages, tools=tools, add_generation_prompt=prompt,
                                             chat_template=chat_template, tokenize=False)

    if kind == "rl":
        text = render(row["prompt"], True)
        return text, text
    messages = row["messages"]
    first = next((i for i, m in enumerate(messages) if m.get("role") == "assistant"), len(messages))
    return render(messages[:first], True), render(messages, False)


def row_lengths(tokenizer: Any, row: dict[str, Any], kind: str, chat_template: str | None = None) -> tuple[int, int]:
    """Tokens of a row before its first assistant turn and in total (see `row_texts`)."""
    prompt, whole = row_texts(tokenizer, row, kind, chat_template)
    return (len(tokenizer(prompt, add_special_tokens=False)["input_ids"]),
            len(tokenizer(whole, add_special_tokens=False)["input_ids"]))


def rows_lengths(tokenizer: Any, rows: list[dict[str, Any]], kind: str, counter: TokenCounter | None = None,
                 chat_template: str | None = None) -> list[tuple[int, int]]:
    """`row_lengths` of each row, counted by `counter` (made from the tokenizer if None)."""
    counter = counter or TokenCounter(tokenizer)
    texts = [row_texts(tokenizer, r, kind, chat_template) for r in rows]
    counts = counter.counts([t for pair in texts for t in (pair[:1] if kind == "rl" else pair)])
    if kind == "rl":
        return [(n, n) for n in counts]
    return list(zip(counts[::2], counts[1::2], strict=True))


def token_lengths(tokenizer: Any, rows: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    """p50/p95/max tokens before the first assistant turn and in total, and the `max_length`
    that drops no row under assistant-only loss (`min_max_length`)."""
    return length_figures([row_lengths(tokenizer, r, kind) for r in rows])


def length_figures(lengths: list[tuple[int, int]]) -> dict[str, Any]:
    """`token_lengths`' figures from each row's (before the first assistant turn, total), and
    how many rows TRL's default `max_length` would cut (`total`) and, under assistant-only
    loss, drop (`before_first_assistant`: no assistant token left)."""
    before, total = zip(*lengths, strict=True) if lengths else ((), ())
    limit = TRL_DEFAULT_MAX_LENGTH
    return {"rows": len(lengths), "before_first_assistant": _percentiles(list(before)),
            "total": _percentiles(list(total)), "min_max_length": (max(before) + 1) if before else 0,
            "over_trl_default": {"total": sum(n > limit for n in total),
                                 "before_first_assistant": sum(n >= limit for n in before)}}


CHUNK_ROWS = 200  # rows decoded at a time while measuring: what the measurement holds


def decoded_chunks(batches: Iterable[Any], kind: str, limit: int = MAX_ROWS,
                   chunk_rows: int = CHUNK_ROWS) -> Iterator[list[dict[str, Any]]]:
    """The first `limit` rows of Arrow `batches` (tables or record batches of a release of
    `kind`), decoded as `datasets` yields them, `chunk_rows` at a time."""
    schema = {"sft": SFT_SCHEMA, "sft_recovery": SFT_RECOVERY_SCHEMA}.get(kind, RL_SCHEMA)
    left = limit
    for batch in batches:
        for start in range(0, min(batch.num_rows, left), chunk_rows):
            chunk = batch.slice(start, min(chunk_rows, left - start))
            yield [decode_row(r, schema) for r in chunk.to_pylist()]
        left -= min(batch.num_rows, left)
        if left <= 0:
            return


@lru_cache(maxsize=1)
def embedded_tokenizer() -> Any:
    """The embedded model's tokenizer with its template, if the model folder is prepared
    (never downloads); else raises `FileNotFoundError`. One per process: callers must not
    change it."""
    from transformers import AutoTokenizer

    from rollout.embedded import READY_MARKER, chat_template, default_model_dir, hub_offline

    folder = default_model_dir()
    if not (folder / READY_MARKER).is_file():
        raise FileNotFoundError(f"the embedded model is not prepared in {folder} (run `trajforge prepare-model`)")
    with hub_offline():
        tok = AutoTokenizer.from_pretrained(folder, local_files_only=True)
    tok.chat_template = chat_template()
    return tok


def training_sections(kind: str, batches: Any, code_version: str = "",
                      total_rows: int | None = None) -> tuple[str, dict[str, Any]]:
    """The card's markdown about training on a release of `kind` (`sft`, `sft_recovery` or `rl`), and its
    figures (template checks, token lengths) for the manifest's stats, measured on the first
    `MAX_ROWS` rows of `batches` (an Arrow table, or an iterable of tables read one at a
    time; `total_rows` says how many rows the release has when that is not all of them).
    Rows are decoded and measured `CHUNK_ROWS` at a time, so memory does not grow with them."""
    if hasattr(batches, "num_rows"):  # one table
        total_rows = batches.num_rows if total_rows is None else total_rows
        batches = [batches]
    figures: dict[str, Any] = {"rows_measured": 0, "rows": total_rows, "control_tokens_escaped": 0}
    try:
        tokenizer = embedded_tokenizer()
    except (ImportError, OSError) as exc:
        figures["unmeasured"] = f"{type(exc).__name__}: {exc}"
        tokenizer = None
    lengths: list[tuple[int, int]] = []
    templates: dict[str, Any] = {}
    counter = TokenCounter(tokenizer) if tokenizer is not None else None
    try:
        for rows in decoded_chunks(batches, kind, chunk_rows=CHUNK_ROWS):
            if tokenizer is not None:
                lengths += rows_lengths(tokenizer, rows, kind, counter)
                if kind in SFT_KINDS:
                    templates = merge_template_checks(templates, check_templates(tokenizer, rows,
                                                                                 offset=figures["rows_measured"]))
            figures["rows_measured"] += len(rows)
            rendered = "messages" if kind in SFT_KINDS else "prompt"
            figures["control_tokens_escaped"] += sum(holds_escape(r.get(rendered)) for r in rows)
            if kind == "sft_recovery":
                marks = figures.setdefault("loss_marks", {"marked_turns": 0, "rows_marked": 0})
                counts = [sum(m.get("role") == "assistant" and m.get("train") is False for m in r["messages"])
                          for r in rows]
                marks["marked_turns"] += sum(counts)
                marks["rows_marked"] += sum(n > 0 for n in counts)
    except Exception as exc:  # a card figure must never block a publish; the card says why
        figures["unmeasured"] = f"{type(exc).__name__}: {str(exc)[:300]}"
    if figures["rows"] is None:
        figures["rows"] = figures["rows_measured"]
    if tokenizer is not None and lengths and "unmeasured" not in figures:
        figures["token_lengths"] = length_figures(lengths)
        if kind in SFT_KINDS:
            figures["templates"] = templates
    if kind == "sft_recovery" and tokenizer is not None:
        figures.setdefault("loss_marks", {"marked_turns": 0, "rows_marked": 0})["templates"] = \
            loss_mark_checks(tokenizer)
    parts = ["## Training with it", ""]
    if kind in SFT_KINDS:
        parts += _sft_text(figures, kind)
    else:
        parts += _rl_text(figures, code_version)
    parts += _escape_text(figures, kind)
    return "\n".join(parts) + "\n", figures


def _lengths_text(figures: dict[str, Any], kind: str) -> list[str]:
    lengths = figures.get("token_lengths")
    if not lengths:
        return [f"Token lengths were not measured: {figures.get('unmeasured', 'no rows')}.", ""]
    scope = "" if figures["rows_measured"] == figures["rows"] else f" (the first {figures['rows_measured']} rows)"
    b, t = lengths["before_first_assistant"], lengths["total"]
    out = [f"### Token lengths{scope}", "",
           "With the embedded SmolLM2 tokenizer and template (tool schemas rendered into the system turn):", "",
           "| tokens | p50 | p95 | max |", "|---|---|---|---|"]
    if kind in SFT_KINDS:
        out += [f"| before the first assistant turn | {b['p50']} | {b['p95']} | {b['max']} |",
                f"| whole row | {t['p50']} | {t['p95']} | {t['max']} |", "",
                f"With `assistant_only_loss=True`, TRL drops every row left without an assistant token after "
                f"truncation to `max_length`: `max_length` must be at least {lengths['min_max_length']} to keep "
                f"every row, and {t['max']} to keep every row whole. `trajforge train sft` refuses a `max_length` "
                "that would drop rows and names the length needed (for the model's own tokenizer). Other "
                "tokenizers and templates give other counts.", "", *_default_length_text(lengths)]
    else:
        out += [f"| prompt (system, tools, opening request) | {b['p50']} | {b['p95']} | {b['max']} |", "",
                "Multi-turn GRPO adds the episode (model tokens and tool results, `max_completion_length`) "
                "on top of the prompt."]
    return out + [""]


def _default_length_text(lengths: dict[str, Any]) -> list[str]:
    """The warning about TRL's default `max_length` when rows are longer (else a line saying
    every row fits)."""
    limit, t = TRL_DEFAULT_MAX_LENGTH, lengths["total"]
    over = lengths.get("over_trl_default") or {}
    if t["max"] <= limit:
        return [f"Every row measured fits TRL's default `max_length` ({limit} tokens)."]
    cut, dropped, rows = over.get("total", 0), over.get("before_first_assistant", 0), lengths["rows"]
    share = lambda n: "every one" if n == rows else f"{n}"  # noqa: E731
    return [f"**TRL's default `max_length` is {limit} tokens, and {cut} of the {rows} rows measured are longer** "
            f"(p95 {t['p95']}, max {t['max']} tokens). Left at the default, SFTTrainer cuts each of them at {limit} "
            f"tokens (`truncation_mode=\"keep_start\"`), and with `assistant_only_loss=True` it drops the rows with "
            f"{limit} tokens or more before their first assistant turn ({share(dropped)} of them here): they keep no "
            f"assistant token. Set `SFTConfig(max_length={t['max']})` to train on every row whole (at least "
            f"{lengths['min_max_length']} to keep every row), as the code below does."]


def _escape_text(figures: dict[str, Any], kind: str) -> list[str]:
    """What the card says about escaped control tokens: where, how many rows, how to undo it."""
    where = ("message contents, tool calls' names and arguments, and tool results" if kind in SFT_KINDS
             else "the `prompt` messages")
    n, rows = figures.get("control_tokens_escaped", 0), figures.get("rows_measured", 0)
    scope = "" if rows == figures.get("rows") else f" (of the first {rows})"
    return ["### Control tokens in the text", "",
            f"Chat-template control tokens written as text in {where} (a model writing `<|im_start|>`, a tool "
            "echoing `<|eot_id|>`, a user pasting `<|start_header_id|>`) are escaped, so that a template renders "
            "each message as exactly one turn and the tokenizer reads them as text: a zero-width space (U+200B) "
            "follows the first character of every `<|name|>` and `<｜name｜>` token (ChatML, Llama 3, Phi, "
            "DeepSeek) and of Gemma's and Mistral's turn markers (`<start_of_turn>`, `[INST]`, ...), so "
            "`<|im_start|>` is stored as `<`, U+200B, `|im_start|>`. A token already written in that escaped form gets "
            "one more zero-width space, which makes the escape exactly reversible. "
            + ("`tools` (the world's tool schemas) are not escaped. " if kind in SFT_KINDS else
               "`tools` (the world's tool schemas), `task` and `reference_solution` are not escaped: no template "
               "renders the task or the reference, and the environment replays them. ")
            + f"Rows holding an escaped token{scope}: **{n}**.", "",
            "To get the original text back (trajforge has the same as `rollout.control_tokens.unescape`; it also "
            "takes a whole row or message, or JSON text):", "",
            "```python",
            "import re",
            "",
            f"ESCAPED = re.compile({ascii(ESCAPED.pattern)})",
            "",
            "",
            "def unescape(text: str) -> str:",
            "    return ESCAPED.sub(lambda m: m.group(0)[0] + m.group(0)[2:], text)",
            "```", ""]


def _templates_text(figures: dict[str, Any]) -> list[str]:
    out = ["### Chat templates", "",
           "Tool-call `arguments` (and `tools`) are JSON objects when `datasets` loads this release, so a "
           "template that applies `| tojson` to them renders each object once, with only its own keys. At "
           "release every row was rendered, as `datasets` yields it, through these templates, and every tool "
           "call of the text was parsed back and compared with the row's arguments:", "",
           "| template | rows | rendered right | skipped | wrong | assistant-only loss |", "|---|---|---|---|---|---|"]
    checks = figures.get("templates") or {}
    unmasked = []
    for family, (_, what) in TEMPLATES.items():
        c = checks.get(family)
        if c is None or "unavailable" in c:
            why = (c or {}).get("unavailable") or figures.get("unmeasured", "no rows")
            out.append(f"| {what} | - | not checked ({why}) | - | - | - |")
            continue
        masks = c.get("assistant_only_loss")
        if masks is False:
            unmasked.append(family)
        loss = {True: "yes", False: "**no** (see below)", None: "-"}[masks]
        out.append(f"| {what} | {c['rows']} | {c['ok']} | {c['skipped']} | {c['failed']} | {loss} |")
    why = Counter()
    for c in checks.values():
        why.update(c.get("skipped_why") or {})
    if why:
        out += ["", "Skipped rows: " + "; ".join(f"{n} × {reason}" for reason, n in why.most_common()) + "."]
    for family in unmasked:
        out += ["", f"**No assistant-only-loss path with `{family}`**: \"rendered right\" says only that its tool "
                "calls read back. The template has no `{% generation %}` markers and TRL ships no training version "
                "of it, so SFTTrainer refuses `assistant_only_loss=True` with it. Train with "
                "`assistant_only_loss=False` (the loss then covers the whole row: system prompt, user turns and "
                "tool results too), or mask the completions by other means, e.g. a copy of the template with "
                "`{% generation %}` around assistant output (next paragraph)."]
    out += ["", "Training another model: its template must render `tools`, assistant `tool_calls` and `tool` "
            "messages, and, for `assistant_only_loss`, mark assistant output with `{% generation %}`. TRL "
            "ships training versions of the common ones (`trl/chat_templates/*_training.jinja`); for any other, "
            "see \"Bringing a template for another model\" in trajforge's `docs/training.md`.", ""]
    return out


def loss_mark_checks(tokenizer: Any, families: list[str] | None = None) -> dict[str, bool | str | None]:
    """Per template family: whether TRL's assistant-only loss (`return_assistant_tokens_mask`)
    leaves an assistant message marked ``train: false`` out of the loss while the next
    assistant turn keeps some (True: ours; False: a `{% generation %}` template that ignores
    the mark, as TRL's training templates do), None for a template without `{% generation %}`
    (no assistant-only-loss path at all), or why it could not be checked."""
    probe = [{"role": "user", "content": "Look up u1."},
             {"role": "assistant", "content": "Looking u1 up, wrongly.", "train": False},
             {"role": "user", "content": "That failed."},
             {"role": "assistant", "content": "Found u1."}]
    out: dict[str, bool | str | None] = {}
    for family in families or list(TEMPLATES):
        try:
            template = template_text(family)
            if _GENERATION.search(template) is None:
                out[family] = None
                continue
            masks = [tokenizer.apply_chat_template(msgs, tokenize=True, return_dict=True, chat_template=template,
                                                   return_assistant_tokens_mask=True)["assistant_masks"]
                     for msgs in (probe[:2], probe)]
            out[family] = not any(masks[0]) and any(masks[1])
        except Exception as exc:  # a card figure never blocks a publish
            out[family] = f"not checked ({type(exc).__name__}: {str(exc)[:200]})"
    return out


def _loss_marks_text(figures: dict[str, Any]) -> list[str]:
    """What an `sft_recovery` card says about its failed turns and the templates that honour
    their ``train: false`` marks."""
    marks = figures.get("loss_marks") or {}
    scope = "" if figures.get("rows_measured") == figures.get("rows") else f" (of the first {figures['rows_measured']})"
    out = ["### Failed turns out of the loss", "",
           "Every row recovers from a failed assistant turn (a malformed call, an unknown tool, rejected arguments, "
           "a rule violation). Each assistant message has a `train` mark: `false` on a failed turn, `true` on the "
           "others (`null` on other roles). The failed turn and its error result stay in the conversation, as the "
           "context the recovery learns from, but the failed turn must carry no loss: train with "
           "`assistant_only_loss=True` and a chat template whose `{% generation %}` blocks leave a marked message "
           "out. trajforge's embedded template does; TRL's training templates do not (they would train the "
           "mistake), and `trajforge train sft` refuses such a setup.", "",
           f"Assistant turns marked `train: false`{scope}: **{marks.get('marked_turns', 0)}**, in "
           f"{marks.get('rows_marked', 0)} rows.", ""]
    checks = marks.get("templates")
    if checks:
        said = {True: "yes", False: "**no**: the marked turn would carry loss", None: "no assistant-only loss path"}
        out += ["| template | leaves a `train: false` turn out of the loss |", "|---|---|"]
        out += [f"| {family} | {said.get(v, v) if not isinstance(v, str) else v} |" for family, v in checks.items()]
        out.append("")
    return out


def _sft_text(figures: dict[str, Any], kind: str = "sft") -> list[str]:
    lengths = figures.get("token_lengths") or {}
    max_length = lengths.get("total", {}).get("max") or 4096
    if kind == "sft_recovery":
        return [*_loss_marks_text(figures), *_templates_text(figures), *_lengths_text(figures, kind),
                "### Plain TRL", "",
                "`messages` and `tools` are TRL's conversational format; keep the marks out of the loss with a "
                "template that honours them (trajforge's, `rollout/templates/smollm2_tools.jinja`):", "",
                "```python",
                "from datasets import load_dataset",
                "from trl import SFTConfig, SFTTrainer",
                "",
                f'ds = load_dataset("{FOLDER}")',
                'tokenizer.chat_template = open("smollm2_tools.jinja").read()  # honours `train: false`',
                'trainer = SFTTrainer(model=model, processing_class=tokenizer, train_dataset=ds["train"],',
                f"                     args=SFTConfig(assistant_only_loss=True, max_length={max_length}))",
                "```", ""]
    return [*_templates_text(figures), *_lengths_text(figures, "sft"),
            "### Plain TRL", "",
            "`messages` and `tools` are TRL's conversational format: no conversion is needed.", "",
            "```python",
            "from datasets import load_dataset",
            "from trl import SFTConfig, SFTTrainer",
            "",
            f'ds = load_dataset("{FOLDER}")',
            'trainer = SFTTrainer(model=model, processing_class=tokenizer, train_dataset=ds["train"],',
            f"                     args=SFTConfig(assistant_only_loss=True, max_length={max_length}))",
            "```", ""]


ENV_SNIPPET = f'''from datasets import load_dataset
from train.environments import environment_factories, verifier_reward

rows = load_dataset("{FOLDER}", split="train")
environment_factory = environment_factories(rows.unique("environment"))
reward_funcs = [verifier_reward]
'''


CONVERSATION_SNIPPET = f'''from datasets import load_dataset
from trl import GRPOTrainer
from train.conversation import ConversationRollout, exposing_rows
from train.environments import verifier_reward

rows = load_dataset("{FOLDER}", split="train")
rollout_func = ConversationRollout(rows.unique("environment"))
Trainer = exposing_rows(GRPOTrainer)
reward_funcs = [verifier_reward]
'''


def _rl_text(figures: dict[str, Any], code_version: str) -> list[str]:
    from train.portable import card_code

    return [
        "Each row names its environment: `environment` (the world; the key of TRL's `environment_factory`), "
        "`world_version` (a hash of the world's tools, policy and schema), and `verifier` / `verifier_version` "
        "(what judges an episode). `task` holds the full task (initial state recipe, target state hash and "
        "diff); checking a completion means replaying it in the world, which needs trajforge's runtime.", "",
        "### Multi-turn GRPO with trajforge installed", "",
        f"Install trajforge at the code version that made this release (`{code_version or 'see Lineage'}`; "
        "`pip install -e '<trajforge checkout>[train]'`): an environment refuses a row whose world or verifier "
        "version differs from the installed one. Then, with TRL, one of two ways.", "",
        "**The user in plain text, as in the sft rows** (what `trajforge train grpo` does):", "",
        "```python", CONVERSATION_SNIPPET.rstrip(), "```", "",
        "and `Trainer(model=..., processing_class=..., args=GRPOConfig(max_completion_length=1024), "
        "train_dataset=rows, reward_funcs=reward_funcs, rollout_func=rollout_func)`. Each episode gets a fresh "
        "copy of its task's world; the prompt is rendered with the world's tools; the model's calls run there, "
        "and a turn without a call goes to the task's scripted user, whose reply opens the next turn, until the "
        "user ends the conversation (as trajforge's agent loop plays it). Tool results and the user's turns carry "
        "no loss.", "",
        "**TRL's environment loop**, with plain TRL:", "",
        "```python", ENV_SNIPPET.rstrip(), "```", "",
        "and `GRPOTrainer(model=..., processing_class=..., args=GRPOConfig(max_completion_length=768, "
        "max_tool_calling_iterations=6), train_dataset=rows, reward_funcs=reward_funcs, "
        "environment_factory=environment_factory)`. GRPOTrainer renders the environment's tools into each "
        "prompt (one method per world tool with the same schemas, and `send_message_to_user`, through which "
        "the task's scripted user answers: the `tools` column lists the same) and runs the model's calls in a "
        "fresh copy of the task's world (`reset(**row)`). A plain-text answer ends the episode here, so a model "
        "that speaks to the user in plain text, as the sft rows teach, ends it before any write.", "",
        "Either way `verifier_reward` scores the conversation with "
        "the row's verifier: the composite verdict's dense score (outcome, what the user was told, and the "
        "policy's process: identity, a clear yes before each write, nothing invented).", "",
        "### Without trajforge: the portable reward", "",
        "Without the runtime a completion cannot be executed, so the only reward the row alone supports is "
        "action-match: the completion's tool calls against the reference solution's state-changing calls "
        "(`reference_solution` entries with `\"write\": true`, `write_tools`). It is weaker than the verifier "
        "(another valid path to the same state scores less; arguments compare exactly). The prompt must carry "
        "the row's tool schemas, so render it to text with the model's template first:", "",
        "```python", card_code().rstrip(), "", "",
        "from datasets import load_dataset",
        "",
        f'rows = load_dataset("{FOLDER}", split="train")',
        'rows = rows.map(lambda r: {"prompt": tokenizer.apply_chat_template(',
        '    r["prompt"], tools=r["tools"], add_generation_prompt=True, tokenize=False)})',
        "# GRPOTrainer(model=..., processing_class=tokenizer, train_dataset=rows, reward_funcs=[action_match_reward])",
        "```", "",
        *_lengths_text(figures, "rl"),
        "### τ²-bench", "",
        "`trajforge export-tau2 <this release folder> --to tasks.json` writes the rows' tasks in τ²-bench's "
        "`Task` schema. Tasks of τ²'s own worlds (`tau2_airline`, `tau2_retail`) target τ²'s domain with τ²'s "
        "tool names, so τ²'s runtime runs and grades them (the reference scores 1.0). Tasks of trajforge's "
        "worlds get their own domain names (`trajforge_<world>`): τ² has no such domain, so they cannot be "
        "graded against τ²'s databases (docs/methods.md says what running them in τ² would need).", "",
    ]
