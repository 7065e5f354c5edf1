"""Instruction similarity (`data.similarity`): character n-grams, Jaccard, a task's text."""

from __future__ import annotations

from data.similarity import char_ngrams, jaccard, scenario_text, task_text


def test_grams_and_jaccard() -> None:
    a, b = char_ngrams("Cancel my  ORDER", 5), char_ngrams("cancel my order", 5)
    assert a == b and jaccard(a, b) == 1.0
    assert 0 < jaccard(a, char_ngrams("cancel my flight", 5)) < 1
    assert jaccard(a, char_ngrams("zzzzzzz", 5)) == 0.0 and jaccard(frozenset(), frozenset()) == 1.0
    assert char_ngrams("ab", 5) == frozenset(["ab"])


def test_task_text_joins_the_scenario_once() -> None:
    assert scenario_text(["a", "", None, "a", " b "]) == "a b"
    d = {"instruction": "Refund me", "user": {"reason": "Refund me", "known_info": {"id": "u1"},
                                               "task_instructions": "Be brief", "reactions": ["ok"]}}
    assert task_text(d) == "Refund me u1 Be brief ok"
