"""Key/value caches the embedded model keeps between requests.

Every agent request to the embedded model starts with the same ~2,400 tokens (the system
prompt with the policy, plus the tool schemas), and each later turn of a conversation repeats
all earlier turns. `KVStore` keeps the attention keys and values of token sequences already
computed, so that a request prefills only what is new:

- **prefix** entries hold the system prompt plus tools of a world and policy version. They are
  keyed by their exact token ids and match a request whose prompt starts with them.
- **conversation** entries hold an in-flight conversation: its last prompt plus the tokens the
  model generated for it. A later request matches the entry through their longest common
  prefix of token ids, so a re-rendered assistant turn that tokenises differently still reuses
  everything before the first differing token.

Memory is bounded by a byte budget with least-recently-used eviction over both kinds. Tensors
are stored per layer as ``(keys, values)`` of shape ``[1, kv_heads, length, head_dim]``; slicing
them to a shorter matched length makes views, never copies. torch is never imported here: the
store only moves the tensors it is given.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

Kind = Literal["prefix", "conversation"]
REUSE_MODES = ("none", "prefix", "full")


@dataclass
class KVEntry:
    """The keys and values of `tokens`, one ``(keys, values)`` pair per layer."""

    kind: Kind
    tokens: np.ndarray  # int64 token ids, shape [length]
    layers: list[tuple[Any, Any]]
    nbytes: int
    prompt_len: int = 0  # conversation entries: how many of `tokens` were the prompt

    def __len__(self) -> int:
        return int(self.tokens.shape[0])

    def sliced(self, length: int) -> list[tuple[Any, Any]]:
        """The layers cut to the first `length` positions (views)."""
        return [(k[:, :, :length], v[:, :, :length]) for k, v in self.layers]


@dataclass
class KVStats:
    """What the store did: lookups, hits by kind, tokens not prefilled, evictions."""

    lookups: int = 0
    prefix_hits: int = 0
    conversation_hits: int = 0
    reused_tokens: int = 0
    prefilled_tokens: int = 0
    evictions: int = 0
    released: int = 0
    peak_bytes: int = 0

    def as_dict(self) -> dict[str, int]:
        return dict(self.__dict__)


def common_prefix(a: np.ndarray, b: np.ndarray) -> int:
    """The length of the longest common prefix of two token-id arrays."""
    n = min(a.shape[0], b.shape[0])
    if n == 0:
        return 0
    diff = np.flatnonzero(a[:n] != b[:n])
    return int(diff[0]) if diff.size else n


@dataclass
class KVStore:
    """An LRU of `KVEntry`s under `budget_bytes` (0 disables storing)."""

    budget_bytes: int
    entries: OrderedDict[int, KVEntry] = field(default_factory=OrderedDict)
    stats: KVStats = field(default_factory=KVStats)
    _next: int = 0

    @property
    def nbytes(self) -> int:
        return sum(e.nbytes for e in self.entries.values())

    def put(self, kind: Kind, tokens: Sequence[int] | np.ndarray, layers: list[tuple[Any, Any]],
            prompt_len: int = 0) -> int | None:
        """Store `layers` (already owned by the store: clone views first) for `tokens`.

        Returns the entry's handle, or None when one entry alone exceeds the budget. An
        identical sequence of the same kind is replaced, not duplicated."""
        arr = np.asarray(tokens, dtype=np.int64)
        nbytes = sum(int(k.numel() * k.element_size() + v.numel() * v.element_size()) for k, v in layers)
        if nbytes > self.budget_bytes:
            return None
        for handle, e in list(self.entries.items()):
            if e.kind == kind and len(e) == arr.shape[0] and common_prefix(e.tokens, arr) == len(e):
                del self.entries[handle]
        handle = self._next
        self._next += 1
        self.entries[handle] = KVEntry(kind, arr, layers, nbytes, prompt_len or len(arr))
        self._evict()
        self.stats.peak_bytes = max(self.stats.peak_bytes, self.nbytes)
        return handle

    def find_prefix(self, ids: np.ndarray) -> tuple[int, KVEntry] | None:
        """The longest prefix entry whose tokens all start `ids`."""
        best: tuple[int, KVEntry] | None = None
        for handle, e in self.entries.items():
            if e.kind != "prefix" or len(e) > ids.shape[0] or (best and len(e) <= len(best[1])):
                continue
            if common_prefix(e.tokens, ids) == len(e):
                best = (handle, e)
        return best

    def lookup(self, ids: np.ndarray, conversations: bool) -> tuple[int, KVEntry, int] | None:
        """The entry sharing the longest prefix with `ids`, and that length (at most
        ``len(ids) - 1``: the last prompt token is always computed, for its logits)."""
        self.stats.lookups += 1
        limit = ids.shape[0] - 1
        best: tuple[int, KVEntry, int] | None = None
        found = self.find_prefix(ids[:limit])
        if found is not None:
            best = (found[0], found[1], len(found[1]))
        if conversations:
            for handle, e in self.entries.items():
                if e.kind != "conversation":
                    continue
                n = min(common_prefix(e.tokens, ids), limit)
                if n > (best[2] if best else 0):
                    best = (handle, e, n)
        if best is None or best[2] == 0:
            return None
        self.entries.move_to_end(best[0])
        if best[1].kind == "prefix":
            self.stats.prefix_hits += 1
        else:
            self.stats.conversation_hits += 1
        return best

    def drop(self, handle: int) -> None:
        self.entries.pop(handle, None)

    def release(self, ids: np.ndarray) -> int:
        """Drop the conversation entries of a finished conversation `ids`: those whose prompt
        it contains whole (the generated part may have been re-rendered differently); returns
        how many were dropped."""
        gone = [h for h, e in self.entries.items()
                if e.kind == "conversation" and common_prefix(e.tokens, ids) >= e.prompt_len]
        for h in gone:
            del self.entries[h]
        self.stats.released += len(gone)
        return len(gone)

    def _evict(self) -> None:
        total = self.nbytes
        while total > self.budget_bytes and self.entries:
            _, e = self.entries.popitem(last=False)
            total -= e.nbytes
            self.stats.evictions += 1
