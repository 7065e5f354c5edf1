"""Self-play generators: the scripted one (model-free templates over database records, a
world's own `self_play_templates` or `generic_template`) and the model one (a `ChatModel`
prompted with `generator_prompt`). Both draw each spec's records from one user's view of
the database (`envs.ownership.scoped`), so a question with two parts is about one user."""

from __future__ import annotations

import asyncio
import json
import random
import re
import sqlite3
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from data.records import Fact, Sampling, ToolCall
from data.self_play import Generation, Spec
from envs import state as st
from envs.contract import hook
from envs.ownership import account_table, scoped
from envs.templating import Out, pick, told
from envs.tools import ToolSpec
from envs.world import World
from rollout.generation import tag_block
from rollout.model import ChatModel, ChatResponse, ModelError
from synthesis.self_play.prompts import generator_prompt, world_context

# A template writes one grounded call: (arguments, a sentence stating every argument value
# [, the facts that answer it]), or None when the database has no suitable record.
Template = Callable[[sqlite3.Connection, random.Random], Out]


def accounts(conn: sqlite3.Connection) -> list[str]:
    """The ids of the world's accounts (users, customers, patients), in key order."""
    found = account_table(conn)
    if found is None:
        return []
    table, key = found
    return [str(r[0]) for r in conn.execute(f'SELECT "{key}" FROM "{table}" ORDER BY "{key}"')]


def user_view(conn: sqlite3.Connection, rng: random.Random) -> tuple[str | None, sqlite3.Connection]:
    """A user drawn with `rng` and the database as far as it is theirs (their records and the
    shared ones; a copy to close), or (None, `conn`) for a world without accounts."""
    ids = accounts(conn)
    if not ids:
        return None, conn
    account = rng.choice(ids)
    return account, scoped(conn, account)


@dataclass
class Note:
    """What a scripted generation knows beyond its text: the user it was drawn for and the
    facts that answer its questions (its reads' answers)."""

    account: str | None
    answer: list[Fact] = field(default_factory=list)



def generic_template(spec: ToolSpec) -> Template:
    """A template for any tool: argument values come from a database row whose columns are
    named like the parameters (``new_flight_id`` ~ ``flight_id``); enums and booleans are
    drawn; the sentence is the tool's summary plus every value, and for a read a question
    about one field of its result (the answer the user must be told)."""
    props: dict[str, Any] = spec.parameters.get("properties", {})
    required = set(spec.parameters.get("required", []))

    def template(conn: sqlite3.Connection, rng: random.Random) -> Out:
        columns = {t: [r[1] for r in conn.execute(f'PRAGMA table_info("{t}")')] for t in st.tables(conn)}
        col_of = {p: p.removeprefix("new_") for p in props}
        matches = {t: sum(c in cols for c in col_of.values()) for t, cols in columns.items()}
        table = max(matches, key=lambda t: matches[t], default=None)  # first table on ties
        row = pick(conn, rng, f'SELECT * FROM "{table}"') if table and matches[table] else None
        args: dict[str, Any] = {}
        for p, schema in props.items():
            if "enum" in schema:
                args[p] = rng.choice(schema["enum"])
            elif schema.get("type") == "boolean":
                args[p] = rng.random() < 0.5
            elif row is not None and col_of[p] in row and row[col_of[p]] is not None:
                args[p] = row[col_of[p]]
            else:
                other = next((t for t in columns if col_of[p] in columns[t]), None)
                val = pick(conn, rng, f'SELECT "{col_of[p]}" AS v FROM "{other}" WHERE "{col_of[p]}" IS NOT NULL'
                            ) if other else None
                if val is not None:
                    args[p] = val["v"]
                elif schema.get("type") == "integer":
                    args[p] = rng.randint(1, 3)
                elif p in required:
                    return None
        stated = ", ".join(f"{p.replace('_', ' ')} {v}" for p, v in args.items() if not isinstance(v, bool))
        flags = ", ".join(f"{p.replace('_', ' ')}: {'yes' if v else 'no'}" for p, v in args.items()
                          if isinstance(v, bool))
        sentence = spec.description.split(". ")[0].rstrip(".") + (f" — {stated}" if stated else "")
        sentence += (f" ({flags})" if flags else "") + "."
        asked = None if spec.write else _asked_field(spec, conn, args, rng)
        if asked is None:
            return args, sentence
        field, value = asked
        return args, f"{sentence} What is the {field.replace('_', ' ')}?", [told(field.replace("_", " "), value)]

    return template


def _asked_field(spec: ToolSpec, conn: sqlite3.Connection, args: dict[str, Any], rng: random.Random
                 ) -> tuple[str, Any] | None:
    """A field of the read's result (run on `conn`, undone) for a question to ask about it: a
    text or number at the result's top level that is no argument and no id; None if none."""
    conn.execute("SAVEPOINT generic_read")
    try:
        result = spec.fn(conn, **spec.validate(args))
    except Exception:  # a read the record does not allow: no question about it
        return None
    finally:
        conn.execute("ROLLBACK TO generic_read")
        conn.execute("RELEASE generic_read")
    if not isinstance(result, dict):
        return None
    fields = [(k, v) for k, v in result.items() if k not in args and not k.endswith("_id") and not isinstance(v, bool)
              and isinstance(v, (str, int, float)) and str(v).strip()]
    return rng.choice(fields) if fields else None


class ScriptedGenerator:
    """A model-free generator: per spec, a user and one grounded call per needed tool from
    that user's records (`user_view`), written in the tagged format. Per-tool templates come
    from the world's `design.py` hook `self_play_templates()` (see `envs/templating.py`);
    tools without one, or worlds without the hook, use `generic_template`. A draw whose calls
    do not all run, in order, on the user's view is drawn again; a spec none of `tries` users
    can fill gives None. `notes` maps each text written to its `Note`."""

    name = "scripted"

    def __init__(self, world: World, tries: int = 8) -> None:
        templates = hook(world.design, "self_play_templates")
        own: dict[str, Template] = templates() if callable(templates) else {}
        self.templates = {n: own.get(n) or generic_template(t) for n, t in world.tools.items()}
        self.tries = tries
        self.world = world
        self.notes: dict[str, Note] = {}

    def _draw(self, spec: Spec, conn: sqlite3.Connection, rng: random.Random) -> tuple[list[Any], str | None] | None:
        account, view = user_view(conn, rng)
        try:
            outs = []
            for name in spec.tools:
                out = self.templates[name](view, rng)
                if out is None:
                    return None
                outs.append(out)
            if view is not conn:  # the parts run one after another (no booking cancelled, then changed)
                env = self.world.env(conn=view)
                if not all(env.call(ToolCall(name=n, arguments=dict(o[0]))).ok for n, o in zip(spec.tools, outs,
                                                                                              strict=True)):
                    return None
            return outs, account
        finally:
            if view is not conn:
                view.close()

    def generate(self, spec: Spec, conn: sqlite3.Connection, rng: random.Random) -> str | None:
        for _ in range(self.tries):
            drawn = self._draw(spec, conn, rng)
            if drawn is not None:
                break
        else:
            return None
        outs, account = drawn
        calls, sentences, answer = [], [], []
        for name, out in zip(spec.tools, outs, strict=True):
            calls.append(ToolCall(name=name, arguments=out[0]))
            sentences.append(out[1])
            answer += list(out[2]) if len(out) > 2 else []
        question = join_parts(sentences, rng)
        text = Generation(question=question, tools=spec.menu, calls=calls).to_text()
        self.notes[text] = Note(account=account, answer=answer)
        return text

    def __call__(self, specs: Sequence[Spec], conn: sqlite3.Connection, rng: random.Random) -> list[str | None]:
        return [self.generate(s, conn, rng) for s in specs]


# "I'm user X." / "I'm patient X." / "I'm customer X." in a template's sentence.
IDENTITY_SENTENCE = re.compile(r"\b(?:I'm|I am) (?:user|customer|patient) [^\s.,]+\.\s*")
# How a second request follows the first (a capital stays after "Then:" and "One more thing:").
PART_JOINS = ("Then: ", "After that, ", "Also, ", "One more thing: ")


def join_parts(sentences: Sequence[str], rng: random.Random) -> str:
    """The requests of a multi-part question as one message: the user says who they are once,
    first (a later part's "I'm user X." is dropped), and the parts follow one another with
    varied joins."""
    if len(sentences) == 1:
        return sentences[0]
    ids: list[str] = []
    parts: list[str] = []
    for text in sentences:
        m = IDENTITY_SENTENCE.search(text)
        if m:
            ids.append(m.group(0).strip())
            text = (text[:m.start()] + text[m.end():]).strip()
        parts.append(text)
    if len(set(ids)) > 1:  # not one user (the coherence check drops it): leave it as written
        return " Then: ".join(sentences)
    out = parts[0]
    for part in parts[1:]:
        join = rng.choice(PART_JOINS)
        lower = join.endswith(", ") and not part.startswith(("I ", "I'm", "I'd"))
        out += " " + join + (part[:1].lower() + part[1:] if lower else part)
    return f"{ids[0]} {out}" if ids else out


def response_text(resp: ChatResponse) -> str:
    """The full generator text of a chat response.

    Backends lift JSON call objects out of model text into `tool_calls`, which empties the
    `<tool_call_answer>` block; the embedded backend keeps the raw completion, and for the
    others the lifted calls are written back into an empty answer block.
    """
    raw = resp.raw.get("completion") if isinstance(resp.raw, dict) else None
    if isinstance(raw, str) and raw:
        return raw
    text = resp.text
    if not resp.tool_calls:
        return text
    body, _ = tag_block(text, "tool_call_answer")
    gold = json.dumps([{"name": c.name, "arguments": c.arguments} for c in resp.tool_calls], ensure_ascii=False)
    if body is None:
        return f"{text}\n<tool_call_answer>{gold}</tool_call_answer>"
    if re.fullmatch(r"[\s\[\],]*", body):
        return text.replace(f"<tool_call_answer>{body}", f"<tool_call_answer>{gold}", 1)
    return text


class ModelGenerator:
    """A generator backed by a `ChatModel` prompted with `generator_prompt` (one request per
    spec, with fresh context rows of one user's records and the shared ones). Give a model, or a `ModelConfig`-shaped dict that is
    built with `rollout.collector.build_model_for` inside each batch's event loop."""

    name = "model"

    def __init__(self, model: ChatModel | None = None, model_cfg: dict[str, Any] | None = None,
                 temperature: float = 1.0, max_tokens: int = 768, concurrency: int = 8) -> None:
        if model is None and model_cfg is None:
            raise ValueError("ModelGenerator needs a model or a model config")
        self.model = model
        self.model_cfg = model_cfg
        self.temperature = temperature
        self.max_tokens = max_tokens
        self.concurrency = concurrency

    def __call__(self, specs: Sequence[Spec], conn: sqlite3.Connection, rng: random.Random) -> list[str | None]:
        prompts = []
        for s in specs:  # each prompt shows one user's records (and the shared ones)
            _, view = user_view(conn, rng)
            try:
                prompts.append(generator_prompt(s, world_context(view, rng)))
            finally:
                if view is not conn:
                    view.close()
        seeds = [rng.randrange(2**31) for _ in specs]
        return asyncio.run(self._run(prompts, seeds))

    async def _run(self, prompts: list[list[dict[str, str]]], seeds: list[int]) -> list[str | None]:
        model, owned = self.model, False
        if model is None:
            from rollout.backends import ModelConfig, build_model

            mcfg = ModelConfig.model_validate(self.model_cfg or {})
            if mcfg.kind == "scripted":
                raise ValueError("a scripted ChatModel replays tasks; use options.generator = 'scripted'")
            model, owned = build_model(mcfg)
        sem = asyncio.Semaphore(max(1, self.concurrency))

        async def one(messages: list[dict[str, str]], seed: int) -> str | None:
            async with sem:
                try:
                    resp = await model.chat(messages, [], Sampling(temperature=self.temperature,
                                                                   max_tokens=self.max_tokens, seed=seed))
                except ModelError:
                    return None
                return response_text(resp)

        try:
            return list(await asyncio.gather(*(one(m, s) for m, s in zip(prompts, seeds, strict=True))))
        finally:
            if owned:
                await model.aclose()

Generator = Callable[[Sequence[Spec], sqlite3.Connection, random.Random], list[str | None]]
