"""Self-play generators: the scripted one (model-free templates over database records, a
world's own `self_play_templates` or `generic_template`) and the model one (a `ChatModel`
prompted with `generator_prompt`)."""

from __future__ import annotations

import asyncio
import json
import random
import re
import sqlite3
from collections.abc import Callable, Sequence
from typing import Any

from data.records import Sampling, ToolCall
from data.self_play import Generation, Spec
from envs import state as st
from envs.templating import pick
from envs.tools import ToolSpec
from envs.world import World
from rollout.generation import tag_block
from rollout.model import ChatModel, ChatResponse, ModelError
from synthesis.self_play.prompts import generator_prompt, world_context

# A template writes one grounded call: (arguments, a sentence stating every argument value),
# or None when the database has no suitable record.
Template = Callable[[sqlite3.Connection, random.Random], tuple[dict[str, Any], str] | None]




def generic_template(spec: ToolSpec) -> Template:
    """A template for any tool: argument values come from a database row whose columns are
    named like the parameters (``new_flight_id`` ~ ``flight_id``); enums and booleans are
    drawn; the sentence is the tool's summary plus every value."""
    props: dict[str, Any] = spec.parameters.get("properties", {})
    required = set(spec.parameters.get("required", []))

    def template(conn: sqlite3.Connection, rng: random.Random) -> tuple[dict[str, Any], str] | None:
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
        return args, sentence + (f" ({flags})" if flags else "") + "."

    return template


class ScriptedGenerator:
    """A model-free generator: per spec, one grounded call per needed tool from database
    records, written in the tagged format. Per-tool templates come from the world's
    `design.py` hook `self_play_templates()` (see `envs/templating.py`); tools without one,
    or worlds without the hook, use `generic_template`."""

    name = "scripted"

    def __init__(self, world: World) -> None:
        hook = getattr(world.design, "self_play_templates", None)
        own: dict[str, Template] = hook() if callable(hook) else {}
        self.templates = {n: own.get(n) or generic_template(t) for n, t in world.tools.items()}

    def generate(self, spec: Spec, conn: sqlite3.Connection, rng: random.Random) -> str | None:
        calls, sentences = [], []
        for name in spec.tools:
            out = self.templates[name](conn, rng)
            if out is None:
                return None
            args, sentence = out
            calls.append(ToolCall(name=name, arguments=args))
            sentences.append(sentence)
        question = sentences[0] if len(sentences) == 1 else " Then: ".join(sentences)
        return Generation(question=question, tools=spec.menu, calls=calls).to_text()

    def __call__(self, specs: Sequence[Spec], conn: sqlite3.Connection, rng: random.Random) -> list[str | None]:
        return [self.generate(s, conn, rng) for s in specs]


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
    spec, with fresh context rows). Give a model, or a `ModelConfig`-shaped dict that is
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
        prompts = [generator_prompt(s, world_context(conn, rng)) for s in specs]
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
