"""LLM paraphrase of a templated user instruction, accepted only when it is safe (LOGIGEN §1:
the user-perspective projection may be reworded by a model, but never reveal what the user
would not know).

A paraphrase is kept only if it keeps every value the user knows (the `known_info` values
and the names, codes, dates, times and amounts the template states), introduces no id-like
token the template does not have (an internal id the user never saw), names no tool, is
not empty, too short or too long, and carries no chat markup. Otherwise the template stays
and the reason is counted as `paraphrase_rejected:<reason>`.
"""

from __future__ import annotations

import asyncio
import re
from collections import Counter
from collections.abc import Iterable, Sequence
from typing import Any

from data.records import Sampling, Task
from rollout.model import ChatModel, ModelError
from synthesis.texts import with_text

SYSTEM = (
    "You rewrite what a customer wants to tell a support agent, in the customer's own words, "
    "as one short message. Keep every name, id, code, date, time and amount exactly as written. "
    "Do not add ids, facts, steps or explanations. Answer with the rewritten message only."
)
MAX_RATIO = 2.0  # a paraphrase may be at most this many times the template's length (+ 80 chars)
MIN_RATIO = 0.3  # and at least this share of it

_TOKEN = re.compile(r"[A-Za-z0-9][A-Za-z0-9_\-.@]*[A-Za-z0-9]|[A-Za-z0-9]")
_DATE = re.compile(r"\b\d{4}-\d{2}-\d{2}\b")
_TIME = re.compile(r"\b\d{1,2}:\d{2}\b")
_NUMBER = re.compile(r"(?<![\w.:-])\d+(?:\.\d+)?(?![\w:-]|\.\d)")
_CODE = re.compile(r"\b[A-Z]{3,}\b")  # airport codes and other upper-case codes
_NAME = re.compile(r"(?<![.!?]\s)(?<!^)(?<!\()\b[A-Z][a-z]+\b")  # a capitalised word inside a sentence
_UNITLIKE = re.compile(r"^\d+(st|nd|rd|th|am|pm|gb|mb|kb|kg|h|hr|hrs|min|mins|s|x)$", re.I)
_MARKUP = re.compile(r"<\|[^|]*\|>|```|</?[a-z_]+>|\{\s*\"")
_WORDS = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten",
          "eleven", "twelve", "thirteen", "fourteen", "fifteen", "sixteen", "seventeen", "eighteen",
          "nineteen", "twenty"]
_FILLER = {"You", "I", "The", "A", "An", "And", "Or", "But", "If", "In", "On", "At", "For", "With", "To", "Your"}


def is_id_like(token: str) -> bool:
    """A token that looks like an internal identifier: letters and digits mixed, or joined by
    an underscore (`RX1A2F`, `credit_card_00071`, `ln_000085`); `3pm` or `10GB` are not."""
    token = token.strip(".-")
    if _UNITLIKE.match(token):
        return False
    has_digit = any(ch.isdigit() for ch in token)
    has_alpha = any(ch.isalpha() for ch in token)
    return (has_digit and has_alpha) or ("_" in token and len(token) > 2)


def required_values(template: str, known_info: dict[str, Any]) -> list[str]:
    """What the paraphrase must keep: the user's known values that the template states, and
    the template's ids, dates, times, amounts, codes and names."""
    found: list[str] = [str(v) for v in known_info.values()
                        if isinstance(v, str | int) and str(v) and _contains(template, str(v))]
    found += [t.strip(".-") for t in _TOKEN.findall(template) if is_id_like(t) or "@" in t]
    found += _DATE.findall(template) + _TIME.findall(template) + _CODE.findall(template)
    found += [n for n in _NUMBER.findall(template)]
    found += [n for n in _NAME.findall(template) if n not in _FILLER]
    out: list[str] = []
    for v in found:
        if v and v not in out:
            out.append(v)
    return out


def _contains(text: str, value: str) -> bool:
    pattern = r"(?<![A-Za-z0-9_])" + re.escape(value) + r"(?![A-Za-z0-9_]|\.\d)"
    if re.search(pattern, text, flags=re.IGNORECASE):
        return True
    if re.fullmatch(r"\d+", value) and int(value) < len(_WORDS):  # "2 passengers" as "two passengers"
        return re.search(rf"\b{_WORDS[int(value)]}\b", text, flags=re.IGNORECASE) is not None
    return False


def check_paraphrase(template: str, known_info: dict[str, Any], text: str | None,
                     tool_names: Iterable[str] = ()) -> tuple[str | None, str]:
    """(the cleaned paraphrase, "") if it is safe to use, else (None, reason)."""
    if text is None:
        return None, "model_error"
    text = " ".join(text.split()).strip().strip('"').strip("'").strip()
    if not text:
        return None, "empty"
    if len(text) > MAX_RATIO * len(template) + 80:
        return None, "too_long"
    if len(text) < MIN_RATIO * len(template):
        return None, "too_short"
    if _MARKUP.search(text):
        return None, "markup"
    if any(name in text for name in tool_names):
        return None, "tool_name"
    if any(not _contains(text, v) for v in required_values(template, known_info)):
        return None, "missing_value"
    known = {t.strip(".-").lower() for t in _TOKEN.findall(template)}
    known |= {str(v).lower() for v in known_info.values()}
    if any(is_id_like(t) and t.strip(".-").lower() not in known for t in _TOKEN.findall(text)):
        return None, "new_id"
    return text, ""


def paraphrase_messages(template: str) -> list[dict[str, str]]:
    return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": template}]


async def _generate(model: ChatModel | dict[str, Any], prompts: Sequence[list[dict[str, str]]],
                    max_tokens: Sequence[int], seed: int, temperature: float, concurrency: int) -> list[str | None]:
    owned = False
    if isinstance(model, dict):  # a ModelConfig-shaped dict, built inside this event loop
        from rollout.backends import ModelConfig, build_model

        mcfg = ModelConfig.model_validate(model)
        if mcfg.kind == "scripted":
            raise ValueError("a scripted policy cannot write text; give a ChatModel "
                             "or an embedded/openai model config")
        chat_model, owned = build_model(mcfg)
    else:
        chat_model = model
    sem = asyncio.Semaphore(max(1, concurrency))

    async def one(i: int, messages: list[dict[str, str]]) -> str | None:
        sampling = Sampling(temperature=temperature, max_tokens=max_tokens[i], seed=seed + i)
        async with sem:
            try:
                resp = await chat_model.chat(messages, [], sampling)
            except ModelError:
                return None
        return resp.text

    try:
        return list(await asyncio.gather(*(one(i, m) for i, m in enumerate(prompts))))
    finally:
        if owned:
            await chat_model.aclose()


def generate(model: ChatModel | dict[str, Any], prompts: Sequence[list[dict[str, str]]],
             max_tokens: Sequence[int], seed: int = 0, temperature: float = 0.7,
             concurrency: int = 8) -> list[str | None]:
    """One completion per chat prompt (None where the model failed), `concurrency` in flight;
    `model` is a `ChatModel` or a `ModelConfig` dict (built and closed here)."""
    if not isinstance(model, dict) and not isinstance(model, ChatModel):
        raise ValueError(f"the model must be a ChatModel or a model config dict, not {type(model).__name__}")
    if not prompts:
        return []
    return asyncio.run(_generate(model, prompts, max_tokens, seed, temperature, concurrency))


def paraphrase(model: ChatModel | dict[str, Any], items: Sequence[tuple[str, dict[str, Any]]],
               tool_names: Iterable[str] = (), seed: int = 0, temperature: float = 0.7,
               concurrency: int = 8) -> tuple[list[str], list[str]]:
    """Paraphrase each (template, known_info). Returns the instruction to use for each (the
    paraphrase, or the template when it was rejected) and each outcome: "accepted" or
    "paraphrase_rejected:<reason>". `model` is a `ChatModel` or a `ModelConfig` dict."""
    if not isinstance(model, dict) and not isinstance(model, ChatModel):
        raise ValueError("paraphrase_model must be a ChatModel or a model config dict, "
                         f"not {type(model).__name__}")
    names = list(tool_names)
    texts = generate(model, [paraphrase_messages(t) for t, _ in items], [max(64, len(t) // 2) for t, _ in items],
                     seed, temperature, concurrency)
    chosen: list[str] = []
    outcomes: list[str] = []
    for (template, known), text in zip(items, texts, strict=True):
        ok, reason = check_paraphrase(template, known, text, names)
        chosen.append(ok if ok is not None else template)
        outcomes.append("accepted" if ok is not None else f"paraphrase_rejected:{reason}")
    return chosen, outcomes


def paraphrase_tasks(tasks: list[Task], model: ChatModel | dict[str, Any], tool_names: Iterable[str] = (),
                     seed: int = 0, **kw: Any) -> tuple[list[Task], Counter]:
    """Tasks with paraphrased instructions where a paraphrase was accepted (new content ids;
    the template kept in `metadata["instruction_template"]`), and the outcome counts."""
    chosen, outcomes = paraphrase(model, [(t.instruction, t.user.known_info) for t in tasks], tool_names,
                                  seed=seed, **kw)
    out: list[Task] = []
    for task, text, outcome in zip(tasks, chosen, outcomes, strict=True):
        new = with_text(task, text, outcome)  # the reference dialogue's opening follows the text
        meta = {k: v for k, v in new.metadata.items() if k != "writer"}
        out.append(new.model_copy(update={"metadata": {**meta, "paraphrase": outcome}}).with_id())
    return out, Counter(outcomes)
