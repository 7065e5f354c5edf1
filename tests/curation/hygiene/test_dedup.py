"""Dedup: exact (normalized) and near (MinHash LSH) duplicates, within a release and
against earlier ones."""

from __future__ import annotations

import pytest

from curation.hygiene import BandIndex, dedup, item_of, shingles
from data.records import Task


def _edits(text: str) -> list[str]:
    words = text.split()
    return [
        text.upper(),  # case
        "  " + text.replace(" ", "   ") + " ",  # whitespace
        text.rstrip(".") + "!",  # punctuation
        " ".join(words[:3] + ["really"] + words[3:]),  # one word inserted
        " ".join(
            w if i != len(words) // 2 else w + "s" for i, w in enumerate(words)
        ),  # one word changed
    ]


def test_dedup_removes_small_edits_and_keeps_distinct_tasks(many_tasks: list[Task]) -> None:
    rows = [
        {
            "id": t.id,
            "instruction": t.instruction,
            "tool_calls": [
                {"name": c.name, "arguments": c.arguments} for c in t.reference_solution
            ],
        }
        for t in many_tasks
    ]
    variants = []
    for r in rows[::3]:
        for j, text in enumerate(_edits(r["instruction"])):
            variants.append({**r, "id": f"{r['id']}-edit{j}", "instruction": text})
    exact = [{**r, "id": r["id"] + "-copy"} for r in rows[:2]]
    kept, report = dedup(rows + variants + exact)
    assert [r["id"] for r in kept] == [r["id"] for r in rows]
    assert report.exact_duplicates == len(exact) + 2 * len(
        rows[::3]
    )  # case and whitespace edits normalize away
    assert report.near_duplicates == 3 * len(rows[::3])
    assert report.removed == len(variants) + len(exact)
    # Against an earlier release: its items (rows, records or texts) knock out their repeats.
    kept2, report2 = dedup(rows[:5] + variants[:5], earlier=[many_tasks[0], rows[1]])
    assert (
        report2.exact_vs_earlier == 2 + 2 and report2.near_vs_earlier == 3
    )  # rows 0-1, then row 0's edits
    assert {e["duplicate_of"] for e in report2.examples} == {many_tasks[0].id, rows[1]["id"]}
    assert [r["id"] for r in kept2] == [r["id"] for r in rows[2:5]]
    with pytest.raises(ValueError, match="threshold"):
        dedup(rows, threshold=0)


def test_band_index_finds_what_datasketch_lsh_finds(many_tasks: list[Task]) -> None:
    """The compact index's candidates are the rows `datasketch.MinHashLSH` returns for the
    same signatures, bands and rows (edited copies included, so bands do collide)."""
    import numpy as np
    from datasketch import MinHash, MinHashLSH

    items = [item_of(t) for t in many_tasks]
    items += [item_of({"id": f"e{i}-{j}", "instruction": text, "tool_calls": []})
              for i, t in enumerate(many_tasks[::2]) for j, text in enumerate(_edits(t.instruction))]
    lsh = MinHashLSH(threshold=0.85, num_perm=128)
    index = BandIndex(128, lsh.b, lsh.r)
    index.CHUNK = 7  # several signature arrays
    collided = 0
    for i, item in enumerate(items):
        m = MinHash(num_perm=128, seed=1)
        m.update_batch([s.encode() for s in shingles(item)])
        sig = m.hashvalues.astype(np.uint32)
        found = index.candidates(sig)
        assert found == set(lsh.query(m)), item.id
        collided += bool(found)
        assert index.add(sig) == i and np.array_equal(index.signature(i), sig)
        lsh.insert(i, m)
    assert collided >= len(many_tasks[::2])
    with pytest.raises(ValueError, match="permutations"):
        BandIndex(64, 8, 16)


def test_band_index_buckets_and_agreement_across_chunks() -> None:
    """Rows sharing a band all stay candidates (appended in place, issue 39: a copy per add
    made a shared bucket quadratic), and `agreement` is each row's share of equal values,
    across signature chunks."""
    import numpy as np

    rng = np.random.default_rng(3)
    index = BandIndex(16, 2, 4)
    index.CHUNK = 4  # several chunks with few rows
    sigs = rng.integers(0, 50, size=(11, 16), dtype=np.uint32)
    sigs[:, :4] = 9  # every row shares band 0
    for s in sigs:
        index.add(s)
    assert index.candidates(sigs[0]) >= set(range(11))
    rows = np.array([10, 0, 5, 3], dtype=np.int64)
    expected = [float(np.mean(sigs[0] == sigs[r])) for r in rows]
    assert index.agreement(sigs[0], rows).tolist() == expected and expected[1] == 1.0
