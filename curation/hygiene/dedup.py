"""Deduplication: exact (content hash of the normalized instruction plus the tool-call
sequence) and near (MinHash LSH over character 5-gram shingles counted with multiplicity,
confirmed with the Jaccard estimated from signatures), within a release and against earlier
releases' texts; the first occurrence is kept."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from typing import Any

from pydantic import BaseModel, Field

from curation.hygiene.items import Item, item_of, normalize
from data.records import content_hash


def exact_key(item: Item) -> str:
    """Content hash of the normalized instruction and the tool-call sequence."""
    return content_hash(
        [normalize(item.instruction), [[n, a] for n, a in item.tool_calls]], length=32
    )


def shingles(item: Item, k: int = 5) -> set[str]:
    """Character k-grams of instruction + tool sequence, each occurrence counted separately."""
    text = normalize(item.instruction) + " || " + normalize(item.tool_text())
    seen: Counter[str] = Counter()
    out: set[str] = set()
    for i in range(max(1, len(text) - k + 1)):
        g = text[i : i + k]
        out.add(f"{g}\x00{seen[g]}")
        seen[g] += 1
    return out


def jaccard(a: set[str], b: set[str]) -> float:
    return len(a & b) / len(a | b) if a or b else 1.0


class DedupReport(BaseModel):
    input: int = 0
    kept: int = 0
    exact_duplicates: int = 0  # within the release
    near_duplicates: int = 0
    exact_vs_earlier: int = 0  # against earlier releases
    near_vs_earlier: int = 0
    earlier_items: int = 0
    threshold: float = 0.85
    examples: list[dict[str, Any]] = Field(default_factory=list)

    @property
    def removed(self) -> int:
        return self.input - self.kept


class BandIndex:
    """MinHash LSH in compact memory: the signatures of the rows added, as rows of a few
    large uint32 arrays, and per band a dict from the band's 64-bit hash to the rows that
    have it. `candidates` are the rows sharing at least one band with a signature, as in
    `datasketch.MinHashLSH` with the same `b` bands of `r` values (a hash collision can only
    add a candidate, and every candidate is then compared on its whole signature), in about
    a third of its memory: some 1.5 KB a row at 128 permutations, against 4 KB."""

    CHUNK = 4096  # rows per signature array

    def __init__(self, num_perm: int, b: int, r: int) -> None:
        if b * r > num_perm:
            raise ValueError(f"{b} bands of {r} values need {b * r} permutations, not {num_perm}")
        self.num_perm, self.b, self.r = num_perm, b, r
        self._chunks: list[Any] = []
        self.rows = 0
        self._bands: list[dict[int, Any]] = [{} for _ in range(b)]  # band hash -> row, or list of rows

    def signature(self, row: int) -> Any:
        return self._chunks[row // self.CHUNK][row % self.CHUNK]

    def _keys(self, sig: Any) -> list[int]:
        data = sig.tobytes()
        width = 4 * self.r
        return [hash(data[i * width:(i + 1) * width]) for i in range(self.b)]

    def add(self, sig: Any) -> int:
        """Add a signature (uint32 values); its row number."""
        import numpy as np

        row = self.rows
        if row % self.CHUNK == 0:
            self._chunks.append(np.zeros((self.CHUNK, self.num_perm), dtype=np.uint32))
        self._chunks[-1][row % self.CHUNK] = sig
        for band, key in zip(self._bands, self._keys(sig), strict=True):
            had = band.get(key)
            if had is None:
                band[key] = row
            elif isinstance(had, int):
                band[key] = [had, row]
            else:
                had.append(row)  # in place: a copy per add made a shared bucket quadratic
        self.rows += 1
        return row

    def agreement(self, sig: Any, rows: Any) -> Any:
        """The share of `sig`'s values each of `rows` (an int array) has equal: the MinHash
        estimate of their Jaccard, for all rows in a few array operations."""
        import numpy as np

        out = np.empty(len(rows), dtype=np.float64)
        chunk = rows // self.CHUNK
        for c in np.unique(chunk):
            at = chunk == c
            out[at] = (self._chunks[int(c)][rows[at] % self.CHUNK] == sig).mean(axis=1)
        return out

    def candidates(self, sig: Any) -> set[int]:
        out: set[int] = set()
        for band, key in zip(self._bands, self._keys(sig), strict=True):
            had = band.get(key)
            if had is not None:
                out.update((had,) if isinstance(had, int) else had)
        return out


class Deduper:
    """Exact and near deduplication over rows given batch by batch (`filter`), in memory that
    grows with the rows kept by about 1.6 KB each (an exact key, a MinHash signature of
    `num_perm` 32-bit values and its band hashes in a `BandIndex`, the item id), never with
    their text. `add_earlier` first loads earlier releases' items, which count as seen but
    are never kept."""

    def __init__(self, threshold: float = 0.85, num_perm: int = 128, shingle_size: int = 5,
                 max_examples: int = 10, seed: int = 1) -> None:
        from datasketch import MinHashLSH

        if not 0.0 < threshold <= 1.0:
            raise ValueError(f"threshold must be within (0, 1], got {threshold}")
        self.threshold, self.num_perm, self.shingle_size = threshold, num_perm, shingle_size
        self.max_examples, self.seed = max_examples, seed
        self.report = DedupReport(threshold=threshold)
        params = MinHashLSH(threshold=threshold, num_perm=num_perm)  # its bands and rows for the threshold
        self._index = BandIndex(num_perm, params.b, params.r)
        self._keys: dict[int, int] = {}  # exact key (as an int) -> row of the index
        self._ids: list[str] = []  # row -> item id
        self._earlier = bytearray()  # row -> 1 when from an earlier release

    def _sketch(self, item: Item) -> Any:
        """The item's MinHash signature as uint32 values (MinHash values are < 2**32)."""
        import numpy as np
        from datasketch import MinHash

        m = MinHash(num_perm=self.num_perm, seed=self.seed)
        m.update_batch([s.encode() for s in shingles(item, self.shingle_size)])
        return m.hashvalues.astype(np.uint32)

    def _insert(self, key: int, sig: Any, earlier: bool, item_id: str) -> None:
        row = self._index.add(sig)
        self._keys.setdefault(key, row)
        self._ids.append(item_id)
        self._earlier.append(earlier)

    def _example(self, item: Item, other: str, kind: str, earlier: bool, j: float) -> None:
        if len(self.report.examples) < self.max_examples:
            self.report.examples.append({"dropped": item.id, "duplicate_of": other, "kind": kind,
                                         "earlier": earlier, "jaccard": round(j, 4)})

    def add_earlier(self, items: Iterable[Any]) -> None:
        """Items of earlier releases: a row equal or near to one of them is dropped."""
        for x in items:
            item = item_of(x)
            self._insert(int(exact_key(item), 16), self._sketch(item), True, item.id)
            self.report.earlier_items += 1

    def filter(self, rows: Iterable[Any]) -> list[Any]:
        """The rows of a batch that duplicate nothing seen before (earlier items, kept rows)."""
        import numpy as np

        kept: list[Any] = []
        for x in rows:
            self.report.input += 1
            item = item_of(x)
            key = int(exact_key(item), 16)
            if key in self._keys:
                row = self._keys[key]
                old = bool(self._earlier[row])
                if old:
                    self.report.exact_vs_earlier += 1
                else:
                    self.report.exact_duplicates += 1
                self._example(item, self._ids[row], "exact", old, 1.0)
                continue
            sig = self._sketch(item)
            best: tuple[float, int] | None = None
            cands = self._index.candidates(sig)
            if cands:  # the closest at or above the threshold, the lowest row on a tie
                rows = np.fromiter(sorted(cands), dtype=np.int64, count=len(cands))
                js = self._index.agreement(sig, rows)  # the MinHash estimates of the Jaccard
                if (above := js >= self.threshold).any():
                    k = int(np.argmax(np.where(above, js, -1.0)))
                    best = (float(js[k]), int(rows[k]))
            if best is not None:
                j, row = best
                old = bool(self._earlier[row])
                if old:
                    self.report.near_vs_earlier += 1
                else:
                    self.report.near_duplicates += 1
                self._example(item, self._ids[row], "near", old, j)
                continue
            self._insert(key, sig, False, item.id)
            kept.append(x)
        self.report.kept += len(kept)
        return kept


def dedup(
    rows: Sequence[Any],
    earlier: Iterable[Any] = (),
    threshold: float = 0.85,
    num_perm: int = 128,
    shingle_size: int = 5,
    max_examples: int = 10,
    seed: int = 1,
) -> tuple[list[Any], DedupReport]:
    """Rows without exact or near duplicates (within `rows`, and of `earlier` items) and the
    report (`Deduper` over one batch)."""
    d = Deduper(threshold, num_perm, shingle_size, max_examples, seed)
    d.add_earlier(earlier)
    return d.filter(rows), d.report
