"""SFT steps that run the rows' shared head once (`SFTStageConfig.shared_head`).

Agent rows of one world open with the same tokens: the system prompt with the policy and
the tool schemas, about 2,400 of a row's 3,000-4,400 tokens. Trained the usual way, every
row of a step runs them forward and backward again. Here a step's rows are grouped by the
tokens they open with (`head_groups`); each group runs its head once, and each row then
runs only its own tokens, attending to the head's keys and values:

1. the head runs forward, with gradients, keeping its per-layer keys and values;
2. each row runs its rest with a cache holding detached copies of them (leaves that
   collect their gradient), and backpropagates its loss at once, so only one row's
   activations are alive at a time;
3. the head backpropagates once, with the gradient its keys and values collected.

Causal attention makes the head's keys and values independent of what follows, so the
loss and the gradient are the ones of running each row whole (`tests/train/test_shared_head.py`
compares them with TRL's step). Nothing the model sees changes: not the text, the template,
the positions or the loss. The head ends before the first token with a label, so no label
is lost at the cut. torch is imported inside the functions.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

MIN_HEAD = 512  # fewer shared tokens than this: the rows run whole (worlds share only ~80)
HEAD_KEY = 512  # rows opening with the same this many tokens are batched together


@dataclass(frozen=True)
class Row:
    """One row of a batch without its padding: token ids and labels (-100: no loss)."""

    ids: list[int]
    labels: list[int]

    @property
    def first_label(self) -> int:
        """The position of the first token with a label (len(ids) when none has)."""
        return next((i for i, label in enumerate(self.labels) if label != -100), len(self.ids))


def batch_rows(input_ids: Any, labels: Any, attention_mask: Any) -> list[Row] | None:
    """The batch's rows without padding; None when a row's tokens are not one run of 1s in
    `attention_mask` (left padding or packed rows): such batches take TRL's own step."""
    rows = []
    for ids, labs, mask in zip(input_ids.tolist(), labels.tolist(), attention_mask.tolist(), strict=True):
        n = sum(mask)
        if mask[:n] != [1] * n:
            return None
        rows.append(Row(ids[:n], labs[:n]))
    return rows


def head_length(rows: list[Row]) -> int:
    """How many leading tokens all of `rows` share and may run once: their common prefix,
    ending before every row's first labelled token (so each row's first label is predicted
    from a token of its own rest)."""
    import numpy as np

    from rollout.kv_cache import common_prefix

    n = max(min(min(r.first_label for r in rows), min(len(r.ids) for r in rows) - 1), 0)
    first = np.asarray(rows[0].ids[:n])
    for r in rows[1:]:
        n = common_prefix(first[:n], np.asarray(r.ids[:n]))
    return n


def head_groups(rows: list[Row], min_head: int = MIN_HEAD) -> list[tuple[list[Row], int]]:
    """`rows` grouped (in order of first appearance) with the length of the head each group
    runs once: a row joins the first group whose head it shares for at least `min_head`
    tokens; a group of one runs its row whole (head 0)."""
    groups: list[list[Row]] = []
    for row in rows:
        for group in groups:
            if head_length([*group, row]) >= min_head:
                group.append(row)
                break
        else:
            groups.append([row])
    return [(g, head_length(g) if len(g) > 1 else 0) for g in groups]


def head_key(ids: list[int], labels: list[int]) -> tuple[int, ...]:
    """What rows batched together should share: their first `HEAD_KEY` tokens before the
    first label."""
    return tuple(ids[:min(Row(ids, labels).first_label, HEAD_KEY)])


def grouped_order(keys: list[Any], batch_size: int, seed: int) -> list[int]:
    """A random order of the rows (by `keys`, one per row) in which each run of `batch_size`
    rows shares its key where the key's rows allow: every key's rows in a random order are cut
    into batches, the batches shuffled, and what is left of each key (fewer than a batch)
    filled into the last batches. Every row once; the same `seed`, the same order."""
    import random

    rng = random.Random(seed)
    order = list(range(len(keys)))
    rng.shuffle(order)
    buckets: dict[Any, list[int]] = {}
    for i in order:
        buckets.setdefault(keys[i], []).append(i)
    batches: list[list[int]] = []
    rest: list[int] = []
    for bucket in buckets.values():
        whole = len(bucket) - len(bucket) % batch_size
        batches += [bucket[i:i + batch_size] for i in range(0, whole, batch_size)]
        rest += bucket[whole:]
    rng.shuffle(batches)
    return [i for b in batches for i in b] + rest


class HeadGroupedSampler:
    """A training sampler (`grouped_order`), reshuffled each epoch (`set_epoch`)."""

    def __init__(self, keys: list[Any], batch_size: int, seed: int) -> None:
        self.keys, self.batch_size, self.seed, self.epoch = keys, batch_size, seed, 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __len__(self) -> int:
        return len(self.keys)

    def __iter__(self) -> Any:
        return iter(grouped_order(self.keys, self.batch_size, self.seed * 1000 + self.epoch))


def _cache_of(layers: list[tuple[Any, Any]]) -> Any:
    """A fresh `DynamicCache` holding `layers`' keys and values (the rows must not append
    to one shared cache)."""
    from transformers import DynamicCache

    cache = DynamicCache()
    for index, (keys, values) in enumerate(layers):
        cache.update(keys, values, index)
    return cache


def group_backward(model: Any, rows: list[Row], head: int, scale: float, backward: Any,
                   score: Any) -> list[Any]:
    """Forward and backward of `rows` sharing their first `head` tokens (0: each row whole),
    each row's summed token loss times `scale`. `backward(loss)` runs a backward pass (the
    accelerator's); `score(model, ids, shift_labels, cache)` runs the fused LM head forward
    and returns TRL's `FusedCausalLMOutput`. Returns the outputs, one per row, for metrics."""
    import torch

    device = next(model.parameters()).device
    layers: list[tuple[Any, Any]] = []
    leaves: list[tuple[Any, Any]] = []
    if head:
        out = model(input_ids=torch.tensor([rows[0].ids[:head]], device=device), use_cache=True, logits_to_keep=1)
        layers = [(layer.keys, layer.values) for layer in out.cache.layers]
        leaves = [(k.detach().requires_grad_(), v.detach().requires_grad_()) for k, v in layers]
    outputs = []
    for row in rows:
        ids = torch.tensor([row.ids[head:]], device=device)
        shift = torch.tensor([[*row.labels[head + 1:], -100]], device=device)  # the label each position predicts
        output = score(model, ids, shift, _cache_of(leaves) if head else None)
        backward(-output.log_probs.sum() * scale)
        outputs.append(output)
    if head:
        tensors = [t for pair in layers for t in pair]
        grads = [t.grad if t.grad is not None else torch.zeros_like(t) for pair in leaves for t in pair]
        torch.autograd.backward(tensors, grads)
    return outputs
