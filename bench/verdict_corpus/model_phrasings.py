"""Model-written phrasings for the verdict corpus, where a capable model is configured.

    python bench/verdict_corpus/model_phrasings.py --url http://HOST:8000/v1 --model NAME [--n 60]

For each user act (confirm, decline, hedge, ask, confirm_condition, confirm_partial) the model
is told what the act is (the description at the top of the hand-written file) and asked for
`n` different replies a customer might type; the lines it returns are cleaned, deduplicated
against the hand-written phrasings and against every string the templates, the scripted user
and the checks hold (`tests/bench/test_verdict_corpus.py` keeps that rule for both kinds),
and written to `phrasings/model/<act>.txt`. `build.py` then uses them beside the hand-written
ones, and each case records which kind it drew. Nothing here runs without a model: no model
is to be had offline on the project's own machines, so the committed corpus is hand-written.
"""

from __future__ import annotations

import argparse
import asyncio
import re
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1]))

from bench.verdict_corpus import PHRASINGS, phrasings  # noqa: E402
from data.records import Sampling  # noqa: E402

MODEL_ACTS = ("confirm", "decline", "hedge", "ask", "confirm_condition", "confirm_partial")
MODEL_DIR = PHRASINGS / "model"
PROMPT = """A customer-service agent has just described a change it is about to make to the
customer's account (its values: dates, amounts, ids) and asked whether to go ahead. Write {n}
different replies the customer might type, each on its own line, no numbering, no quotes.
Each reply must do this: {what}
Vary the length, tone and wording a lot; write like real people type."""


def description(act: str) -> str:
    """What `act` is, from the `#` lines at the top of its hand-written file."""
    lines = (PHRASINGS / f"{act}.txt").read_text(encoding="utf-8").splitlines()
    head = [s.lstrip("# ").strip() for s in lines if s.startswith("#")]
    return " ".join(head) or act.replace("_", " ")


def clean(text: str, taken: Iterable[str]) -> list[str]:
    """The distinct replies of a model's answer: one a line, numbering and quotes stripped,
    none already among `taken` (compared case- and punctuation-insensitively)."""
    def key(s: str) -> str:
        return re.sub(r"[^a-z0-9 ]", "", s.lower()).strip()

    seen = {key(t) for t in taken}
    out: list[str] = []
    for line in text.splitlines():
        s = re.sub(r"^\s*(?:[-*•]|\d+[.)])\s*", "", line).strip().strip('"').strip()
        if 2 <= len(s) <= 200 and "{" not in s and key(s) and key(s) not in seen:
            seen.add(key(s))
            out.append(s)
    return out


async def ask(model: Any, act: str, n: int, taken: Iterable[str]) -> list[str]:
    messages = [{"role": "user", "content": PROMPT.format(n=n, what=description(act))}]
    reply = await model.chat(messages, [], Sampling(temperature=0.9, max_tokens=40 * n, seed=0))
    return clean(str(getattr(reply, "text", "") or ""), taken)


def write(model: Any, n: int = 60, out: Path = MODEL_DIR, banned: Iterable[str] = ()) -> dict[str, int]:
    """Ask `model` for each act's phrasings and write them under `out`; counts per act."""
    out.mkdir(parents=True, exist_ok=True)
    counts: dict[str, int] = {}
    banned = list(banned)
    for act in MODEL_ACTS:
        got = asyncio.run(ask(model, act, n, [p.text for p in phrasings(act)] + banned))
        (out / f"{act}.txt").write_text(f"# model-written: {description(act)}\n" + "\n".join(got) + "\n",
                                        encoding="utf-8")
        counts[act] = len(got)
    return counts


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--url", required=True, help="an OpenAI-compatible endpoint")
    ap.add_argument("--model", required=True)
    ap.add_argument("--n", type=int, default=60)
    args = ap.parse_args()
    from rollout.backends import ModelConfig, build_model

    model, _ = build_model(ModelConfig(kind="openai", name=args.model, base_url=args.url))
    print(write(model, args.n))


if __name__ == "__main__":
    main()
