"""`synthesis.self_play.selection`: the agreement filter, near-duplicate clustering and dedup,
and the curriculum's bands, mix and per-world quotas."""

from __future__ import annotations

import random

import pytest

from bench.self_play_stubs import StubSolver
from data.records import ToolCall
from data.self_play import Candidate, Generation, Spec
from synthesis.self_play import (
    cluster,
    curriculum,
    dedup,
    difficulty_band,
    filter_candidates,
    max_mix_size,
)


def _cand(p_hat: float | None, world: str = "airline", q: str = "q") -> Candidate:
    return Candidate(spec=Spec(world, 1, ["t"], []), generation=Generation(q, [], [ToolCall(name="t")]), p_hat=p_hat)


def test_filter_candidates_by_agreement() -> None:
    cands = [_cand(None, q=f"question {i}") for i in range(3)]
    answers = {0: 10, 1: 2, 2: 1}  # right answers out of 10

    def solve(c: Candidate, k: int) -> list[list[ToolCall]]:
        n = answers[cands.index(c)]
        return [list(c.generation.calls) if i < n else [] for i in range(k)]

    res = filter_candidates(cands, solve, k=10, min_agreement=0.2)
    assert [c.p_hat for c in res.kept] == [1.0, 0.2]
    assert [c.p_hat for c in res.dropped] == [0.1]
    rng = random.Random(0)
    assert filter_candidates(cands, StubSolver(0.0, rng)).kept == []
    assert len(filter_candidates(cands, StubSolver(1.0, rng)).kept) == 3


def test_cluster_near_duplicates() -> None:
    qs = ["Please cancel my reservation R0000280 today.", "Please cancel my reservation R0000281 today.",
          "Which flights go from SFO to JFK on 2026-05-12?", "please cancel my  reservation R0000280 TODAY."]
    assert cluster(qs) == [0, 0, 1, 0]
    assert cluster(qs, threshold=0.0) == [0, 1, 2, 3]  # nothing is closer than distance 0
    assert cluster(qs, threshold=1.01) == [0, 0, 0, 0]
    cands = [_cand(0.5, q=q) for q in qs]
    assert [c.generation.question for c in dedup(cands)] == [qs[0], qs[2]]


def test_curriculum_mix_bands_and_quotas() -> None:
    assert [difficulty_band(p) for p in (0.2, 0.49, 0.5, 0.89, 0.9, 1.0)] == \
        ["hard", "hard", "medium", "medium", "easy", "easy"]
    easy = [_cand(1.0, q=f"e{i}") for i in range(5)]
    medium = [_cand(0.6, q=f"m{i}") for i in range(10)]
    hard = [_cand(0.3, q=f"h{i}") for i in range(5)]
    picked = curriculum(easy + medium + hard + [_cand(None)], n=10)
    assert [difficulty_band(c.p_hat or 0) for c in picked] == ["easy"] * 2 + ["medium"] * 5 + ["hard"] * 3
    # the hard band is short: its slots go to medium
    picked = curriculum(easy + medium + hard[:1], n=10)
    assert [difficulty_band(c.p_hat or 0) for c in picked].count("medium") == 7
    # per-world quotas
    mixed = [_cand(0.6, world="airline", q=f"a{i}") for i in range(10)] + \
            [_cand(0.6, world="retail", q=f"r{i}") for i in range(10)]
    picked = curriculum(mixed, n=10, per_world_quota=3)
    assert len(picked) == 6
    picked = curriculum(mixed, n=10, per_world_quota={"airline": 2})
    assert sum(c.world == "airline" for c in picked) == 2 and len(picked) == 10
    assert len(curriculum(easy + medium + hard, n=100)) == 20


def test_max_mix_size() -> None:
    assert max_mix_size({"easy": 2, "medium": 5, "hard": 3}) == 10
    assert max_mix_size({"easy": 10, "medium": 1, "hard": 10}) == 3  # 3 -> (1, 1, 1); 4 -> (0, 2, 1) needs 2 medium
    assert max_mix_size({"easy": 0, "medium": 0, "hard": 0}) == 0
    with pytest.raises(ValueError, match="mix"):
        max_mix_size({"easy": 1}, (1.0, -1.0, 1.0))
