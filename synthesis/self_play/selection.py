"""Which candidates become tasks (Tool-R0, methods.md §3): the solver-agreement filter,
near-duplicate clustering and the easy/medium/hard curriculum.

Choices the method text leaves open (ours):

- **Dedup**: "char-3-gram Jaccard < 0.3 → same cluster" is read as Jaccard *distance*
  (1 − similarity) below the threshold, i.e. similarity > 0.7 puts two questions in one
  cluster (a similarity below 0.3 would merge nearly unrelated questions). Clustering is
  leader-based: a question joins the first cluster whose first member is that close, so
  clusters do not chain.
- **Curriculum bands** (on the filter's p̂, which is ≥ `min_agreement` after the filter):
  hard p̂ < 0.5, medium 0.5 ≤ p̂ < 0.9, easy p̂ ≥ 0.9 (`DEFAULT_BANDS`, a parameter).
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass, replace

from data.self_play import Candidate, Solve
from data.similarity import char_ngrams, jaccard  # noqa: F401  (re-exported: realism, tests)
from rollout.generation import solver_pass_rate

DEFAULT_BANDS = (0.5, 0.9)  # curriculum: hard < 0.5 <= medium < 0.9 <= easy


@dataclass
class FilterResult:
    kept: list[Candidate]
    dropped: list[Candidate]


def filter_candidates(candidates: Sequence[Candidate], solve: Solve, k: int = 10,
                      min_agreement: float = 0.2) -> FilterResult:
    """Re-solve each candidate k times (at low temperature); keep it when the share of
    answers exactly matching its gold calls is ≥ `min_agreement`. Sets `p_hat` to that share."""
    kept, dropped = [], []
    for c in candidates:
        scored = replace(c, p_hat=solver_pass_rate(c, solve(c, k)))
        (kept if scored.p_hat is not None and scored.p_hat >= min_agreement else dropped).append(scored)
    return FilterResult(kept=kept, dropped=dropped)


def cluster(questions: Sequence[str], threshold: float = 0.3) -> list[int]:
    """Cluster label per question: same cluster when the char-3-gram Jaccard *distance* to the
    cluster's first member is < `threshold` (similarity > 1 − threshold). Labels 0, 1, … in
    order of first appearance."""
    leaders: list[frozenset[str]] = []
    labels = []
    for q in questions:
        grams = char_ngrams(q)
        for i, lead in enumerate(leaders):
            if 1 - jaccard(grams, lead) < threshold:
                labels.append(i)
                break
        else:
            labels.append(len(leaders))
            leaders.append(grams)
    return labels


def dedup(candidates: Sequence[Candidate], threshold: float = 0.3) -> list[Candidate]:
    """The first candidate of each near-duplicate cluster of questions."""
    seen: set[int] = set()
    out = []
    for c, label in zip(candidates, cluster([c.generation.question for c in candidates], threshold), strict=True):
        if label not in seen:
            seen.add(label)
            out.append(c)
    return out


def difficulty_band(p_hat: float, bands: tuple[float, float] = DEFAULT_BANDS) -> str:
    """"hard" below bands[0], "easy" at or above bands[1], else "medium"."""
    if p_hat < bands[0]:
        return "hard"
    return "easy" if p_hat >= bands[1] else "medium"


def _largest_remainder(n: int, mix: Sequence[float]) -> list[int]:
    total = sum(mix)
    raw = [n * m / total for m in mix]
    out = [math.floor(x) for x in raw]
    for i in sorted(range(len(mix)), key=lambda i: (out[i] - raw[i], i))[: n - sum(out)]:
        out[i] += 1
    return out


def max_mix_size(available: dict[str, int], mix: tuple[float, float, float] = (0.2, 0.5, 0.3)) -> int:
    """The largest n whose easy/medium/hard quotas under `mix` (largest-remainder rounding,
    as `curriculum` splits n) fit the candidates available per band: the biggest selection
    that keeps the mix exactly."""
    if len(mix) != 3 or min(mix) < 0 or sum(mix) <= 0:
        raise ValueError(f"mix must be three non-negative shares with a positive sum, got {mix}")
    n = sum(available.get(b, 0) for b in ("easy", "medium", "hard"))
    while n > 0 and any(q > available.get(b, 0)
                        for q, b in zip(_largest_remainder(n, mix), ("easy", "medium", "hard"), strict=True)):
        n -= 1
    return n


def curriculum(candidates: Sequence[Candidate], n: int, mix: tuple[float, float, float] = (0.2, 0.5, 0.3),
               per_world_quota: int | dict[str, int] | None = None, bands: tuple[float, float] = DEFAULT_BANDS,
               rng: random.Random | None = None) -> list[Candidate]:
    """Pick up to `n` candidates as easy/medium/hard by `mix` (largest-remainder rounding).

    Bands come from `difficulty_band(p_hat)`; candidates without p̂ are skipped. A world
    never gets more than its quota (an int for every world, or a dict; a world missing from
    the dict is unlimited). Within a band candidates are taken in order (shuffled first when
    `rng` is given). Slots a band cannot fill go to the leftovers, medium first, then hard,
    then easy. The result is ordered easy, medium, hard.
    """
    names = ("easy", "medium", "hard")
    pools: dict[str, list[Candidate]] = {b: [] for b in names}
    for c in candidates:
        if c.p_hat is not None:
            pools[difficulty_band(c.p_hat, bands)].append(c)
    if rng is not None:
        for pool in pools.values():
            rng.shuffle(pool)
    per_world: dict[str, int] = {}

    def room(c: Candidate) -> bool:
        if per_world_quota is None:
            return True
        quota = per_world_quota if isinstance(per_world_quota, int) else per_world_quota.get(c.world)
        return quota is None or per_world.get(c.world, 0) < quota

    picked: dict[str, list[Candidate]] = {b: [] for b in names}
    taken: set[int] = set()

    def take(band: str, limit: int) -> None:
        for c in pools[band]:
            if len(picked[band]) >= limit or sum(len(v) for v in picked.values()) >= n:
                return
            if id(c) not in taken and room(c):
                picked[band].append(c)
                taken.add(id(c))
                per_world[c.world] = per_world.get(c.world, 0) + 1

    for band, target in zip(names, _largest_remainder(n, mix), strict=True):
        take(band, target)
    for band in ("medium", "hard", "easy"):
        take(band, n)
    return [c for b in names for c in picked[b]]
