"""Next-action accuracy, teacher-forced: at every assistant turn of held-out reference
dialogues, is the model's next action right?

Each dialogue is rendered once with the chat template the model is used with (the
folder's own template, else the project's, `rollout.prepare.folder_template`), and one
forward pass gives, at every position of every assistant turn, the token the model would
pick greedily after the reference prefix. Greedy decoding after the reference prefix
writes the reference turn exactly when every one of the turn's tokens (its end-of-turn
token included) is that pick, so no generation is needed for the common case. Dialogues of one world open with the same
system prompt and tool schemas: their cache is computed once and reused by every later
dialogue of that world (`Scorer._shared_head`), however the worlds' dialogues alternate
(the held-out selection takes each world in turn).

A turn is **right**:
- a reference tool-call turn: when the model's greedy turn makes the same calls (names and
  arguments as JSON values, in order). When the greedy turn leaves the reference's tokens
  inside a call's arguments, the rest is generated greedily (from the dialogue's cache)
  and parsed (`rollout.parsing.parse_model_output`), so arguments written with other
  spacing or key order still count; a turn that leaves them earlier (another tool name, no
  call at all, another call syntax) is wrong;
- a reference reply turn (words to the user): when the model replies too, i.e. its greedy
  turn does not start a tool call. The words are not judged here (`exact` says whether
  they were the reference's, token for token); the episode pass rate judges what was said.

Turns marked `train: false` (failed turns of recovery rows) are not scored.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from data.jsonish import maybe_json
from data.records import ToolCall
from rollout.parsing import parse_model_output

MIN_SHARED = 64  # leading tokens worth reusing from a kept head's cache
MAX_HEADS = 4  # heads kept (one a world's system prompt and tool schemas), least recently used dropped


@dataclass(frozen=True)
class Dialogue:
    """A reference dialogue to score: OpenAI-format messages and the tool schemas."""

    task_id: str
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]]


@dataclass(frozen=True)
class TurnResult:
    task_id: str
    turn: int  # index of the assistant turn in the dialogue
    kind: str  # "call" or "reply"
    right: bool
    exact: bool  # the greedy turn is the reference's, token for token


def assistant_spans(mask: list[int]) -> list[tuple[int, int]]:
    """The [start, end) runs of 1s in an assistant-token mask: one per scored turn."""
    spans: list[tuple[int, int]] = []
    start = None
    for i, bit in enumerate([*mask, 0]):
        if bit and start is None:
            start = i
        elif not bit and start is not None:
            spans.append((start, i))
            start = None
    return spans


def reference_calls(message: dict[str, Any]) -> list[str]:
    """An assistant message's calls in `ToolCall.key` form (name and arguments as JSON values,
    however the arguments were written), comparable with parsed calls' keys."""
    keys = []
    for call in message.get("tool_calls") or []:
        fn = call.get("function", call)
        keys.append(ToolCall(name=fn["name"], arguments=maybe_json(fn.get("arguments")) or {}).key())
    return keys


def scored_turns(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The assistant messages that carry loss (not `train: false`), in order."""
    return [m for m in messages if m.get("role") == "assistant" and m.get("train", True) is not False]


class Scorer:
    """A model and its tokenizer loaded once, scoring dialogues (`score`)."""

    def __init__(self, model_path: str | None, max_new_tokens: int = 160) -> None:
        import torch

        from rollout.prepare import folder_template
        from train.sft import load_model, resolve_model

        folder = resolve_model("embedded" if model_path in (None, "embedded") else str(model_path))
        self.model, self.tokenizer = load_model(folder)
        self.model.eval()
        self.template = folder_template(Path(folder))
        self.max_new_tokens = max_new_tokens
        self.name = model_path or "embedded"
        self._torch = torch
        self.call_open = self.tokenizer.encode("<tool_call>", add_special_tokens=False)
        self._heads: list[tuple[list[int], Any]] = []  # kept heads and their caches, most recently used last
        self.forwarded = 0  # tokens run through the model's forward pass, for the figures

    def _encode(self, d: Dialogue) -> tuple[list[int], list[int]]:
        enc = self.tokenizer.apply_chat_template(
            d.messages, tools=d.tools or None, chat_template=self.template, tokenize=True, return_dict=True,
            return_assistant_tokens_mask=True)
        return list(enc["input_ids"]), list(enc["assistant_masks"])

    def _generate(self, prefix: list[int], cache: Any, max_new_tokens: int) -> list[int]:
        """Greedy tokens after `prefix`, reusing the dialogue's cache cropped to all but the
        last token of `prefix` (no second prefill)."""
        import copy

        torch = self._torch
        ids = torch.tensor([prefix])
        past = copy.deepcopy(cache)
        past.crop(len(prefix) - 1 - past.get_seq_length())  # a negative count: tokens to drop
        with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
            out = self.model.generate(ids, attention_mask=torch.ones_like(ids), cache=past,
                                      max_new_tokens=max_new_tokens, do_sample=False,
                                      pad_token_id=self.tokenizer.pad_token_id)
        return out[0, len(prefix):].tolist()

    def _shared_head(self, ids: list[int], first: int) -> tuple[int, Any]:
        """How many leading tokens of `ids` the best kept head (a dialogue's tokens before its
        first assistant turn: system prompt, tool schemas) already holds, and a copy of its
        cache cut to them; (0, None) when no head shares `MIN_SHARED` tokens. At least the
        token before `first` (the first scored position) is left to the forward pass."""
        import copy

        import numpy as np

        from rollout.kv_cache import common_prefix

        want = np.asarray(ids[:first - 1])
        best, n = None, 0
        for i, (head, _) in enumerate(self._heads):
            shared = common_prefix(want, np.asarray(head))
            if shared > n:
                best, n = i, shared
        if best is None or n < MIN_SHARED:
            return 0, None
        self._heads.append(self._heads.pop(best))  # most recently used last
        past = copy.deepcopy(self._heads[-1][1])
        past.crop(n - past.get_seq_length())  # a negative count: tokens to drop
        return n, past

    def _keep_head(self, ids: list[int], first: int, cache: Any) -> None:
        """Keep this dialogue's tokens before its first assistant turn and their cache for the
        later dialogues of its world (they share its system prompt and tool schemas); at most
        `MAX_HEADS`, the least recently used dropped."""
        import copy

        if cache is None:  # a stand-in model without a cache
            return
        head = ids[:first - 1]
        if any(kept == head for kept, _ in self._heads):
            return  # the head already kept: no second copy of the same cache
        past = copy.deepcopy(cache)
        past.crop(first - 1 - past.get_seq_length())
        self._heads = [*self._heads, (head, past)][-MAX_HEADS:]

    def _turn_text(self, tokens: list[int]) -> str:
        text = self.tokenizer.decode(tokens, skip_special_tokens=False)
        return text.split("<|im_end|>")[0]

    def picks(self, ids: list[int], positions: list[int]) -> tuple[dict[int, int], Any]:
        """The greedy pick at each of `positions` (ascending) after the reference prefix, and
        the dialogue's cache: one forward pass over the tokens the kept head does not hold."""
        torch = self._torch
        shared, past = self._shared_head(ids, positions[0])
        extra = {"cache": past} if past is not None else {}  # transformers 5 names it `cache`
        with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
            out = self.model(torch.tensor([ids[shared:]]), use_cache=True,
                             logits_to_keep=torch.tensor([t - 1 - shared for t in positions]), **extra)
        cache = out.cache
        self._keep_head(ids, positions[0], cache)
        self.forwarded += len(ids) - shared
        return dict(zip(positions, out.logits[0].argmax(-1).tolist(), strict=True)), cache

    def score(self, d: Dialogue) -> list[TurnResult]:
        """Every scored assistant turn of `d`, judged as the module docstring says."""
        ids, mask = self._encode(d)
        turns = scored_turns(d.messages)
        spans = assistant_spans(mask)
        if len(spans) != len(turns):
            raise ValueError(f"{d.task_id}: {len(spans)} marked spans for {len(turns)} assistant turns "
                             "(the chat template must mark each assistant turn with {% generation %})")
        positions = [t for s, e in spans for t in range(s, e)]
        if not positions:
            return []
        picks, cache = self.picks(ids, positions)
        results = []
        for index, ((s, e), msg) in enumerate(zip(spans, turns, strict=True)):
            miss = next((t for t in range(s, e) if picks[t] != ids[t]), None)
            want = reference_calls(msg)
            kind = "call" if want else "reply"
            if miss is None:
                right = True
            elif kind == "reply":  # right unless the greedy turn opens a tool call
                opens = miss == s and picks[s] == self.call_open[0]
                right = not opens or self._generate(ids[:s], cache, len(self.call_open)) != self.call_open
            elif '"arguments"' not in self.tokenizer.decode(ids[s:miss]):
                right = False  # the greedy turn leaves the reference's call before its arguments
            else:
                head = ids[s:miss] + [picks[miss]]
                budget = min(self.max_new_tokens, e - miss + 32)
                text = self._turn_text(head + self._generate(ids[:miss] + [picks[miss]], cache, budget))
                parsed = parse_model_output(text, d.tools or None)
                right = [c.key() for c in parsed.calls] == want and not parsed.malformed
            results.append(TurnResult(d.task_id, index, kind, right, miss is None))
        return results


def summarize(results: list[TurnResult]) -> dict[str, Any]:
    """Accuracy over all turns, over call turns and over reply turns, and the exact share."""
    def share(rs: list[TurnResult], key: str = "right") -> float | None:
        return round(sum(getattr(r, key) for r in rs) / len(rs), 4) if rs else None

    calls = [r for r in results if r.kind == "call"]
    replies = [r for r in results if r.kind == "reply"]
    return {"turns": len(results), "call_turns": len(calls), "reply_turns": len(replies),
            "accuracy": share(results), "call_accuracy": share(calls), "reply_accuracy": share(replies),
            "exact": share(results, "exact")}


def next_action_accuracy(model_path: str | None, dialogues: list[Dialogue],
                         max_new_tokens: int = 160) -> dict[str, Any]:
    """Score `dialogues` with the model at `model_path` (None or "embedded": the prepared
    base model): `summarize`'s figures, per-task right/total counts and wall time."""
    if not dialogues:
        raise ValueError("no dialogues to score")
    import torch

    from rollout.prepare import decode_threads

    started = time.monotonic()
    threads = torch.get_num_threads()
    torch.set_num_threads(decode_threads())  # as the embedded engine: 2 threads on a busy 2-core machine crawl
    try:
        scorer = Scorer(model_path, max_new_tokens)
        results = [r for d in dialogues for r in scorer.score(d)]
    finally:
        torch.set_num_threads(threads)
    per_task: dict[str, list[int]] = {}
    for r in results:
        counts = per_task.setdefault(r.task_id, [0, 0])
        counts[0] += r.right
        counts[1] += 1
    return {"model": scorer.name, "dialogues": len(dialogues), **summarize(results),
            "tokens_forwarded": scorer.forwarded,
            "per_task": {k: {"right": v[0], "turns": v[1]} for k, v in per_task.items()},
            "wall_s": round(time.monotonic() - started, 2), "turn_results": [asdict(r) for r in results]}
