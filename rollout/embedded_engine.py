"""The embedded model's engine: the tokenizer and the model in the worker thread of
`rollout.embedded.EmbeddedModel`, rendering prompts, reusing cached prefixes' KV
(`rollout.kv_cache`), running one batched `generate` with per-request sampling, and parsing
the completions into tool calls.

torch and transformers are imported inside functions: importing this module is cheap.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from data.records import Sampling
from rollout.control_tokens import control_tokens, escape_messages
from rollout.kv_cache import REUSE_MODES, KVEntry, KVStore
from rollout.model import ChatResponse, ModelError
from rollout.parsing import tool_names_of
from rollout.pending import PendingChat
from rollout.prepare import decode_threads, folder_template, hub_offline, prepare_embedded_model
from rollout.response import decoded_response

log = logging.getLogger("rollout.embedded")  # the embedded model's logger, as before the split

DEFAULT_KV_BUDGET_MB = 1536.0  # bf16: about 23 KB per token, so ~68k tokens of cached prompts


@dataclass
class _Request(PendingChat):
    loop: asyncio.AbstractEventLoop

    def settle(
        self, result: ChatResponse | None = None, error: BaseException | None = None
    ) -> None:
        """Resolve the caller's future from any thread (ignored if the caller is gone)."""
        with contextlib.suppress(RuntimeError):  # the caller's loop is closed
            self.loop.call_soon_threadsafe(self.resolve, result, error)


class _Engine:
    """Tokenizer and model, used by one worker thread only."""

    def __init__(self, model_dir: Path | None, dtype: str, kv_reuse: str = "full",
                 kv_budget_mb: float = DEFAULT_KV_BUDGET_MB) -> None:
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        t0 = time.monotonic()
        folder = model_dir if model_dir is not None else prepare_embedded_model()
        with hub_offline():
            self.tokenizer = AutoTokenizer.from_pretrained(folder, local_files_only=True)
            self.model = AutoModelForCausalLM.from_pretrained(
                folder, dtype=getattr(torch, dtype), local_files_only=True
            )
        self.model.eval()
        # the folder's own template (a trained model's), ours for the prepared SmolLM2 or a folder without one
        self.tokenizer.chat_template = folder_template(model_dir)
        self.threads = decode_threads()
        torch.set_num_threads(self.threads)
        tok = self.tokenizer
        eos = {tok.eos_token_id, tok.convert_tokens_to_ids("<|endoftext|>")}
        gen_eos = self.model.generation_config.eos_token_id
        eos |= set(gen_eos) if isinstance(gen_eos, list) else {gen_eos}
        self.eos_ids = sorted(i for i in eos if isinstance(i, int) and i >= 0)
        self.pad_id = tok.pad_token_id if tok.pad_token_id is not None else self.eos_ids[0]
        self.max_positions = int(getattr(self.model.config, "max_position_embeddings", 8192))
        self.last_generate_calls = 0
        self.last_batch_size = 0
        if kv_reuse not in REUSE_MODES:
            raise ValueError(f"kv_reuse must be one of {REUSE_MODES}, not {kv_reuse!r}")
        self.kv_reuse = kv_reuse
        self.kv = KVStore(int(kv_budget_mb * 2**20))
        self.decoder = ReusingDecoder(self.model, self.kv, self.eos_ids, keep_conversations=kv_reuse == "full")
        log.info("embedded model loaded from %s in %.1f s (%d threads)", folder, time.monotonic() - t0, self.threads)

    def render(self, request: _Request) -> list[int]:
        # Content is rendered to text and tokenised: control tokens in it must stay text.
        text = self.tokenizer.apply_chat_template(
            escape_messages(request.messages, control_tokens(self.tokenizer)),
            tools=request.tools or None,
            add_generation_prompt=True,
            tokenize=False,
        )
        return list(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def prefix_ids(self, request: _Request) -> list[int]:
        """The request's shared prefix: its system turn with the tool schemas, as token ids
        (none when the conversation has no system message of its own)."""
        if not request.messages or request.messages[0].get("role") != "system":
            return []
        msgs = request.messages[:1]
        text = self.tokenizer.apply_chat_template(
            escape_messages(msgs, control_tokens(self.tokenizer)),
            tools=request.tools or None,
            add_generation_prompt=False,
            tokenize=False,
        )
        return list(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def release(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> int:
        """Forget the cached turns of a finished conversation (`messages` as it ended)."""
        if self.kv_reuse != "full" or not messages:
            return 0
        text = self.tokenizer.apply_chat_template(
            escape_messages(messages, control_tokens(self.tokenizer)),
            tools=tools or None, add_generation_prompt=False, tokenize=False,
        )
        ids = self.tokenizer(text, add_special_tokens=False)["input_ids"]
        return self.kv.release(np.asarray(ids, dtype=np.int64))

    def _prepare(self, batch: list[_Request]) -> tuple[list[ChatResponse | ModelError], list[tuple[int, list[int]]]]:
        """Render every request; a request that cannot run gets its error, the others a row."""
        results: list[ChatResponse | ModelError] = []
        rows: list[tuple[int, list[int]]] = []
        for i, r in enumerate(batch):
            try:
                ids = self.render(r)
            except Exception as e:
                results.append(ModelError(f"could not render the prompt: {type(e).__name__}: {e}"))
                continue
            if len(ids) + r.sampling.max_tokens > self.max_positions:
                results.append(
                    ModelError(
                        f"prompt of {len(ids)} tokens plus max_tokens={r.sampling.max_tokens} "
                        f"exceeds the model's {self.max_positions} positions",
                        reason="context_length",
                    )
                )
                continue
            results.append(ModelError("not generated"))  # placeholder, replaced below
            rows.append((i, ids))
        return results, rows

    def generate(
        self, batch: list[_Request], stop: threading.Event
    ) -> list[ChatResponse | ModelError]:
        """One batched generation; with `kv_reuse` other than "none" through `_generate_reusing`."""
        self.last_generate_calls = self.last_batch_size = 0
        results, rows = self._prepare(batch)
        if not rows:
            return results
        if self.kv_reuse == "none":
            outputs = self._generate_plain(batch, rows, stop)
            reused = [0] * len(rows)
        else:
            outputs, reused = self._generate_reusing(batch, rows, stop)
        self.last_generate_calls, self.last_batch_size = 1, len(rows)
        eos = set(self.eos_ids)
        for (i, ids), new, n_reused in zip(rows, outputs, reused, strict=True):
            end = next((k + 1 for k, t in enumerate(new) if t in eos), None)
            tokens = new if end is None else new[:end]
            completion = self.tokenizer.decode(tokens, skip_special_tokens=True)
            results[i] = decoded_response(
                completion, "length" if end is None else None, len(ids), len(tokens),
                {"completion": completion, "batch_size": len(rows), "reused_prompt_tokens": n_reused},
                tool_names_of(batch[i].tools))
        return results

    def _generate_plain(
        self, batch: list[_Request], rows: list[tuple[int, list[int]]], stop: threading.Event
    ) -> list[list[int]]:
        """Left-padded batched `generate`, every prompt prefilled whole (no reuse)."""
        import torch
        from transformers import GenerationConfig, LogitsProcessorList, StoppingCriteriaList

        width = max(len(ids) for _, ids in rows)
        input_ids = torch.full((len(rows), width), self.pad_id, dtype=torch.long)
        attention = torch.zeros((len(rows), width), dtype=torch.long)
        for row, (_, ids) in enumerate(rows):
            input_ids[row, width - len(ids) :] = torch.tensor(ids, dtype=torch.long)
            attention[row, width - len(ids) :] = 1
        max_new = batch[rows[0][0]].sampling.max_tokens
        config = GenerationConfig(
            max_new_tokens=max_new,
            do_sample=False,  # sampling, per row, happens in _RowSampler
            eos_token_id=self.eos_ids,
            pad_token_id=self.pad_id,
        )
        sampler = row_sampler([batch[i].sampling for i, _ in rows])
        with torch.inference_mode():
            out = self.model.generate(
                input_ids=input_ids,
                attention_mask=attention,
                generation_config=config,
                logits_processor=LogitsProcessorList([sampler]),
                stopping_criteria=StoppingCriteriaList([_stop_criterion(stop)]),
            )
        return [out[row, width:].tolist() for row in range(len(rows))]

    # -- generation with key/value reuse

    def _generate_reusing(
        self, batch: list[_Request], rows: list[tuple[int, list[int]]], stop: threading.Event
    ) -> tuple[list[list[int]], list[int]]:
        """`ReusingDecoder.generate` over the rows, each request's shared prefix its system
        turn with the tools (`prefix_ids`, rendered only on a miss)."""
        samplings = [batch[i].sampling for i, _ in rows]
        return self.decoder.generate([ids for _, ids in rows], lambda k: self.prefix_ids(batch[rows[k][0]]),
                                     row_sampler(samplings), samplings[0].max_tokens, stop)


class ReusingDecoder:
    """Batched decoding that reuses cached keys and values (`rollout.kv_cache.KVStore`):
    each row is prefilled after its longest cached prefix (a conversation's earlier turns,
    or a shared prefix, computed once and stored when missing), then the rows decode
    together (left-padded into one cache, with per-row positions); finished rows leave the
    batch and, with `keep_conversations`, their keys and values are kept for the
    conversation's next turn. `model` is any causal LM (the embedded model, or a trainer's
    model between optimizer steps); the caller owns the store's lifetime (a store must not
    outlive the weights its entries were computed with)."""

    def __init__(self, model: Any, kv: KVStore, eos_ids: list[int], keep_conversations: bool = True) -> None:
        self.model, self.kv, self.eos_ids = model, kv, list(eos_ids)
        self.keep_conversations = keep_conversations
        self.device = next(model.parameters()).device  # sampling runs on the CPU, the model where it is

    def cached_start(self, prefix_of: Any, k: int, ids: np.ndarray) -> tuple[int | None, list[tuple[Any, Any]], int]:
        """Where row `k`'s prefill can start: (the conversation entry used, its layers cut to
        the reused length, that length). Computes and stores the shared prefix
        (`prefix_of(k)`) when missing."""
        hit = self.kv.lookup(ids, conversations=self.keep_conversations)
        if hit is None or hit[1].kind == "conversation":
            prefix = list(prefix_of(k))
            n_prefix = len(prefix)
            if 0 < n_prefix < ids.shape[0] and list(ids[:n_prefix]) == prefix and (
                hit is None or hit[2] < n_prefix
            ):
                if self.kv.find_prefix(ids[:n_prefix]) is None:
                    layers, _ = self.forward([], prefix, 0)
                    self.kv.put("prefix", prefix, layers)
                    hit = (-1, KVEntry("prefix", ids[:n_prefix], layers, 0), n_prefix)
                else:
                    hit = self.kv.lookup(ids, conversations=False)
        if hit is None:
            return None, [], 0
        handle, entry, n = hit
        return (handle if entry.kind == "conversation" else None), entry.sliced(n), n

    def forward(self, past: list[tuple[Any, Any]], tokens: list[int], start: int) -> tuple[list[tuple[Any, Any]], Any]:
        """Prefill `tokens` at positions `start`.. after the cached `past`; returns the layers
        of the whole sequence and the last position's logits."""
        import torch
        from transformers import DynamicCache

        cache = DynamicCache()
        for layer, (k, v) in enumerate(past):
            cache.update(k, v, layer)
        total = start + len(tokens)
        out = self.model(
            input_ids=torch.tensor([tokens], dtype=torch.long, device=self.device),
            attention_mask=torch.ones((1, total), dtype=torch.long, device=self.device),
            position_ids=torch.arange(start, total, dtype=torch.long, device=self.device)[None],
            cache=cache,
            use_cache=True,
            logits_to_keep=1,
        )
        layers = [(lay.keys, lay.values) for lay in out.cache.layers]
        return layers, out.logits[:, -1].cpu()

    def generate(self, rows: list[list[int]], prefix_of: Any, sampler: Any, max_new: int,
                 stop: threading.Event) -> tuple[list[list[int]], list[int]]:
        """The new token ids of each row (ending at an end-of-sequence id or after
        `max_new`), and how many of each row's prompt tokens came from the cache.
        `prefix_of(k)`: row k's shared prefix ids ([] for none); `sampler`: a
        `row_sampler` over the rows."""
        import torch
        from transformers import DynamicCache

        eos = set(self.eos_ids)
        arrays = [np.asarray(ids, dtype=np.int64) for ids in rows]
        per_row: list[list[tuple[Any, Any]]] = []
        logits: list[Any] = []
        reused: list[int] = []
        superseded: list[int | None] = []
        with torch.inference_mode():
            for k, (ids, arr) in enumerate(zip(rows, arrays, strict=True)):
                handle, past, n = self.cached_start(prefix_of, k, arr)
                layers, last = self.forward(past, ids[n:], n)
                self.kv.stats.reused_tokens += n
                self.kv.stats.prefilled_tokens += len(ids) - n
                per_row.append(layers)
                logits.append(last)
                reused.append(n)
                entry = self.kv.entries.get(handle) if handle is not None else None
                superseded.append(handle if entry is not None and n >= entry.prompt_len else None)

            lengths = [len(ids) for ids in rows]
            width = max(lengths)
            n_rows = len(rows)
            cache = DynamicCache()
            for layer in range(len(per_row[0])):
                k0, v0 = per_row[0][layer]
                keys = k0.new_zeros((n_rows, k0.shape[1], width, k0.shape[3]))
                values = v0.new_zeros((n_rows, v0.shape[1], width, v0.shape[3]))
                for row, layers in enumerate(per_row):
                    k, v = layers[layer]
                    keys[row, :, width - lengths[row] :] = k[0]
                    values[row, :, width - lengths[row] :] = v[0]
                cache.update(keys, values, layer)
            del per_row
            mask = torch.zeros((n_rows, width), dtype=torch.long, device=self.device)
            for row, n in enumerate(lengths):
                mask[row, width - n :] = 1

            active = list(range(n_rows))  # batch position -> row
            outputs: list[list[int]] = [[] for _ in rows]
            chosen = sampler.choose(torch.cat(logits, dim=0), active)
            step = 0
            while True:
                for pos, row in enumerate(active):
                    outputs[row].append(int(chosen[pos]))
                done = [pos for pos, row in enumerate(active)
                        if outputs[row][-1] in eos or len(outputs[row]) >= max_new]
                if stop.is_set():
                    break
                if done:
                    self.keep(cache, done, active, arrays, outputs, width, lengths)
                    keep = [pos for pos in range(len(active)) if pos not in set(done)]
                    if not keep:
                        break
                    active = [active[pos] for pos in keep]
                    index = torch.tensor(keep, dtype=torch.long)
                    cache.batch_select_indices(index.to(self.device))
                    mask = mask[index.to(self.device)]
                    chosen = chosen[index]
                step += 1
                mask = torch.cat([mask, mask.new_ones((len(active), 1))], dim=1)
                positions = torch.tensor([[lengths[row] + step - 1] for row in active], dtype=torch.long,
                                         device=self.device)
                out = self.model(
                    input_ids=chosen[:, None].long().to(self.device),
                    attention_mask=mask,
                    position_ids=positions,
                    cache=cache,
                    use_cache=True,
                )
                cache = out.cache
                chosen = sampler.choose(out.logits[:, -1].cpu(), active)
        for handle in superseded:
            if handle is not None:
                self.kv.drop(handle)
        return outputs, reused

    def keep(self, cache: Any, done: list[int], active: list[int], arrays: list[np.ndarray],
             outputs: list[list[int]], width: int, lengths: list[int]) -> None:
        """Store, for each finished row, its prompt plus what it generated (the last token,
        never fed, excluded) as a conversation entry (with `keep_conversations` only)."""
        if not self.keep_conversations:
            return
        seq = cache.get_seq_length()
        for pos in done:
            row = active[pos]
            start = width - lengths[row]
            fed = seq - width  # generated tokens already in the cache
            tokens = np.concatenate([arrays[row], np.asarray(outputs[row][:fed], dtype=np.int64)])
            layers = [(lay.keys[pos : pos + 1, :, start:seq].clone(), lay.values[pos : pos + 1, :, start:seq].clone())
                      for lay in cache.layers]
            self.kv.put("conversation", tokens, layers, prompt_len=lengths[row])


def row_sampler(samplings: list[Sampling]) -> Any:
    """A logits processor that picks each row's next token by that row's own settings.

    Greedy rows take the argmax; others sample with temperature/top_p from their own
    generator. Called by `generate`, it returns scores that are -inf except at the chosen
    token, so `generate` runs with `do_sample=False` and its argmax takes that token. Its
    `choose(scores, rows)` returns the chosen ids directly, for the rows (indices into
    `samplings`) that `scores` holds, in that order.
    """
    import torch
    from transformers import LogitsProcessor

    generators: list[Any] = []
    for s in samplings:
        g = torch.Generator()
        if s.seed is not None:
            g.manual_seed(int(s.seed))
        else:
            g.seed()
        generators.append(g)
    all_temps = torch.tensor([max(s.temperature, 0.0) for s in samplings], dtype=torch.float32)
    all_top_ps = torch.tensor([min(max(s.top_p, 0.0), 1.0) for s in samplings], dtype=torch.float32)

    def choose(scores: Any, rows: list[int]) -> Any:
        scores = scores.float()
        chosen = scores.argmax(dim=-1)
        index = torch.tensor(rows, dtype=torch.long)
        temps, top_ps = all_temps[index], all_top_ps[index]
        greedy = temps <= 0
        if not bool(greedy.all()):
            logits = scores / torch.where(greedy, 1.0, temps)[:, None]
            probs = torch.softmax(logits, dim=-1)
            if bool(((top_ps < 1) & ~greedy).any()):
                sorted_p, order = probs.sort(dim=-1, descending=True)
                drop = (sorted_p.cumsum(dim=-1) - sorted_p) >= top_ps[:, None]
                drop[:, 0] = False  # always keep the most likely token
                sorted_p = sorted_p.masked_fill(drop, 0.0)
                probs = torch.zeros_like(probs).scatter(-1, order, sorted_p)
            for k, row in enumerate(rows):
                if not greedy[k]:
                    chosen[k] = torch.multinomial(probs[k], 1, generator=generators[row])[0]
        return chosen

    every = list(range(len(samplings)))

    class _RowSampler(LogitsProcessor):
        def __call__(self, input_ids: Any, scores: Any) -> Any:
            chosen = choose(scores, every)
            out = torch.full_like(scores, float("-inf"), dtype=torch.float32)
            return out.scatter(-1, chosen[:, None], 0.0)

    sampler = _RowSampler()
    sampler.choose = choose  # type: ignore[attr-defined]
    return sampler


def _stop_criterion(stop: threading.Event) -> Any:
    """Ends `generate` early once the model is being closed."""
    import torch
    from transformers import StoppingCriteria

    class _StopOnClose(StoppingCriteria):
        def __call__(self, input_ids: Any, scores: Any, **kwargs: Any) -> Any:
            return torch.full((input_ids.shape[0],), stop.is_set(), dtype=torch.bool)

    return _StopOnClose()
