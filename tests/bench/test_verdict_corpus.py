"""bench/verdict_corpus: the committed corpus loads, covers the worlds, methods, classes and
hand-written phrasings it promises, copies no phrasing from the code it tests, rests on sound
tasks, and is rebuilt the same way twice."""

from __future__ import annotations

import ast
import re
from collections import Counter, defaultdict
from pathlib import Path

import pytest

from bench.verdict_corpus import (
    ACTS,
    REQUIRED_ACTS,
    CorpusCase,
    load,
    phrasings,
    rule_phrasings,
    trajectory,
)
from bench.verdict_corpus.build import BAD, GOOD, cases, write
from data.records import Task
from verifiers.audit import build_dialogue
from verifiers.base import get_verifier

ROOT = Path(__file__).resolve().parents[2]
WORLDS = {"airline", "retail", "telecom", "clinic"}
METHODS = {"logic_driven", "constraint_guided", "self_play"}
PARTS = {"DB", "CONSTRAINTS", "COMMUNICATE", "POLICY", "ACTION"}
# The code the corpus is held against: no phrasing may equal a string literal of these.
SOURCES = ["envs/worlds/*/conversation.py", "envs/worlds/*/templates.py", "rollout/user.py",
           "envs/conversation.py", "synthesis/dialogue.py", "synthesis/scenario.py", "verifiers/mutants.py"]


@pytest.fixture(scope="module")
def corpus() -> list[CorpusCase]:
    return load()


def _norm(text: str) -> str:
    return " ".join(re.sub(r"[^a-z0-9 ]+", " ", text.lower()).split())


def _literals(path: Path) -> set[str]:
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            out.add(_norm(node.value))
        elif isinstance(node, ast.JoinedStr):  # an f-string, its fields as one placeholder each
            out.add(_norm("".join(v.value if isinstance(v, ast.Constant) else "{x}" for v in node.values)))
    return out


def test_corpus_size_and_coverage(corpus: list[CorpusCase]) -> None:
    assert len(corpus) >= 2000
    assert len({c.id for c in corpus}) == len(corpus)
    assert {c.world for c in corpus} == WORLDS
    assert {c.method for c in corpus} == METHODS
    per = Counter((c.method, c.world) for c in corpus)
    assert all(per[(m, w)] >= 50 for m in METHODS for w in WORLDS), per
    classes = {c.cls for c in corpus}
    assert classes == set(GOOD) | set(BAD), classes ^ (set(GOOD) | set(BAD))
    good = [c for c in corpus if c.expected_pass]
    assert len(good) >= 800 and len(corpus) - len(good) >= 800


def test_labels(corpus: list[CorpusCase]) -> None:
    for c in corpus:
        assert c.expected_pass == (c.cls in GOOD), c.id
        if c.expected_pass:
            assert c.must_fail == [] and not c.safety, c.id
        else:
            assert c.must_fail and set(c.must_fail) <= PARTS and c.safety, c.id
        assert c.act in ACTS and (c.act, c.phrasing) in c.edits, c.id
        assert c.task.world == c.world and c.task.method == c.method, c.id


def test_each_case_says_its_phrasings(corpus: list[CorpusCase]) -> None:
    """Every phrasing a case names is in its conversation (its longest slot-free part), and
    the conversation differs from the reference."""
    for c in corpus:
        said = "\n".join(m.get("content") or "" for m in c.messages)
        for _, p in c.edits:
            part = max(re.split(r"\{\w+\}", p), key=len).strip()
            assert part in said, (c.id, p)
        gold = [t.content for t in c.task.dialogue]
        assert [m.get("content") or "" for m in c.messages if m["role"] != "tool"] != gold, c.id


def test_phrasings_are_many_and_distinct() -> None:
    for act in ACTS:
        texts = [p.text for p in phrasings(act)]
        assert len({_norm(t) for t in texts}) == len(texts), act  # no near-duplicate lines
        if act in REQUIRED_ACTS:
            hand = [p.text for p in phrasings(act) if p.source == "hand"]
            assert len(hand) >= 50, (act, len(hand))
    assert all(len(v) >= 2 for v in rule_phrasings().values())


def test_corpus_uses_the_phrasings(corpus: list[CorpusCase]) -> None:
    used: dict[str, set[str]] = defaultdict(set)
    for c in corpus:
        for act, p in c.edits:
            used[act].add(p)
    for act in REQUIRED_ACTS:
        assert len(used[act]) >= 25, (act, len(used[act]))
        assert used[act] <= {p.text for p in phrasings(act)}, act


def test_no_phrasing_is_copied_from_the_code() -> None:
    literals: set[str] = set()
    for pattern in SOURCES:
        files = sorted(ROOT.glob(pattern))
        assert files, pattern
        for f in files:
            literals |= _literals(f)
    assert _norm("Yes, please go ahead.") in literals or len(literals) > 100  # the scan sees the code
    mine = [(act, p.text) for act in ACTS for p in phrasings(act)]
    mine += [("rules", t) for ts in rule_phrasings().values() for t in ts]
    copied = [(act, t) for act, t in mine if _norm(t) in literals]
    assert not copied, copied


def test_tasks_are_sound(corpus: list[CorpusCase]) -> None:
    """Every task validates, keeps its id, and its unedited reference dialogue passes the composite."""
    composite = get_verifier("composite")
    tasks = {c.task.id: c.task for c in corpus}
    assert len(tasks) >= 150
    for task in tasks.values():
        again = Task.model_validate(task.model_dump(mode="json"))
        assert again.compute_id() == task.id
        v = composite.verify(task, build_dialogue(task, list(task.dialogue)))
        assert v.passed, (task.id, v.reasons[:3])


def test_trajectory_replays_the_stored_messages(corpus: list[CorpusCase]) -> None:
    seen: set[str] = set()
    for c in corpus:
        if c.cls in seen:
            continue
        seen.add(c.cls)
        traj = trajectory(c)
        assert traj.messages == c.messages, c.id
        assert traj.final_state_hash and traj.task_id == c.task.id


def test_build_is_deterministic(tmp_path: Path) -> None:
    one = list(cases(methods=("self_play",), worlds=("retail",), n=2))
    two = list(cases(methods=("self_play",), worlds=("retail",), n=2))
    assert one and [c.to_json() for c in one] == [c.to_json() for c in two]
    write(tmp_path / "a.jsonl.gz", one)
    write(tmp_path / "b.jsonl.gz", two)
    assert (tmp_path / "a.jsonl.gz").read_bytes() == (tmp_path / "b.jsonl.gz").read_bytes()
    back = load(tmp_path / "a.jsonl.gz")
    assert [c.to_json() for c in back] == [c.to_json() for c in one]


class _Writer:
    """A model that answers a numbered list with one line repeated and one hand-written line."""

    async def chat(self, messages: list, tools: list, sampling: object) -> object:
        assert "Write 5\ndifferent replies" in messages[0]["content"]
        return type("Reply", (), {"text": "1. Yep, that's grand.\n2. \"Yep, that's grand!\"\n3. Hmm, I'm not sure yet."})()


def test_model_written_phrasings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Where a model is configured, its replies are cleaned, deduplicated against the
    hand-written ones and written per act; `phrasings` then reads them as model-written."""
    import bench.verdict_corpus as vc
    from bench.verdict_corpus import model_phrasings as mp

    counts = mp.write(_Writer(), n=5, out=tmp_path / "model")
    # the repeated line is kept once; the hedge line is among the hand-written hedges already
    assert counts["confirm"] == 2 and counts["hedge"] == 1
    assert (tmp_path / "model" / "hedge.txt").read_text().splitlines()[1:] == ["Yep, that's grand."]
    monkeypatch.setattr(vc, "PHRASINGS", tmp_path.parent / tmp_path.name)
    (tmp_path / "hedge.txt").write_text("Let me think.\n")
    vc.phrasings.cache_clear()
    try:
        got = vc.phrasings("hedge")
        assert [(p.text, p.source) for p in got] == [("Let me think.", "hand"), ("Yep, that's grand.", "model")]
    finally:
        vc.phrasings.cache_clear()
