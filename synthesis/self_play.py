"""Self-play task generation (Tool-R0, methods.md §3): a Generator proposes a question, a
tool menu and gold calls per sampled spec; rewards, filter, dedup and curriculum pick the
tasks at the solver's competence frontier.

The pieces are plain functions so that a training loop can use them directly:

- specs and prompts: `sample_spec`, `world_context`, `generator_prompt`;
- parsing: `check_format`, `parse_generation` (``<question>``, ``<available_tools>``,
  ``<tool_call_answer>``);
- generator rewards: `r_format`, `r_valid` (with the grounding rule), `r_diff`, `r_judge`,
  `r_curr`, `solver_pass_rate`, `score_generation` and the TRL reward
  `generator_reward` / `make_generator_reward`;
- solver reward: `solver_format_score`, `solver_accuracy`, TRL reward `solver_reward`;
- selection: `filter_candidates`, `cluster`, `dedup`, `curriculum`, `max_mix_size`;
- grounding against the world: `validate_on_world`;
- the registered method `self_play` (scripted or model generator → validated `Task`s);
- benchmark tools (not product code): `StubSolver`, `bandpass_curve`,
  `plant_hallucination`, `grounding_rejection_rate`.

Choices the method text leaves open (marked "ours" where they are ours):

- **Placeholder question**: missing, shorter than `MIN_QUESTION_CHARS` or 3 words, or
  holding a template slot (``<user_id>``, ``{id}``, ``[insert ...]``, TODO/TBD/XXX,
  lorem ipsum). Every generator reward term is 0 for it.
- **Grounding**: a gold argument value "appears in the question" when its text occurs
  case-insensitively and not inside a longer alphanumeric token (so ``2`` is not found in
  ``2026``); ``_`` may be written as a space (``basic_economy`` ~ "basic economy"), an
  integral float may be written as an integer. Booleans and nulls are exempt; list and
  object values are checked leaf by leaf.
- **r_valid** terms are indicators over *all* gold calls, with required arguments read
  from the generation's own menu schema (the paper's rule; `validate_on_world` then checks
  the world's real tools). A call whose tool is not in the menu fails both the menu and
  the required-arguments term.
- **r_valid and r_curr need a fully parsed generation** (all tags well-formed, both JSON
  blocks valid); r_format alone gives partial credit.
- **r_judge** without a judge is 0 (score 1): no quality evidence, no credit (ours).
- **Solver reward** = format (0–1) + accuracy (0–1), range [0, 2] (ours: the paper's
  formula leaves the combination open). Predicted calls are matched to gold calls greedily
  by pair score (ties: earlier gold, then earlier prediction), each used once; an
  unmatched gold call scores 0. Values are equal when JSON-equal, with ``2 == 2.0`` but
  ``True != 1``.
- **Dedup**: "char-3-gram Jaccard < 0.3 → same cluster" is read as Jaccard *distance*
  (1 − similarity) below the threshold, i.e. similarity > 0.7 puts two questions in one
  cluster (a similarity below 0.3 would merge nearly unrelated questions). Clustering is
  leader-based: a question joins the first cluster whose first member is that close, so
  clusters do not chain.
- **Curriculum bands** (on the filter's p̂, which is ≥ `min_agreement` after the filter):
  hard p̂ < 0.5, medium 0.5 ≤ p̂ < 0.9, easy p̂ ≥ 0.9 (`DEFAULT_BANDS`, a parameter).
"""

from __future__ import annotations

import asyncio
import json
import math
import random
import re
import sqlite3
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from data.records import Sampling, StateRef, Task, ToolCall, UserScenario, canonical_json
from envs import state as st
from envs.templating import pick
from envs.tools import ToolSpec
from envs.world import World
from rollout.model import ChatModel, ChatResponse, ModelError
from rollout.parsing import decode_native_tool_calls, message_text, parse_tool_calls
from synthesis.base import SynthesisConfig, SynthesisResult, register

METHOD = "self_play"
TAGS = ("question", "available_tools", "tool_call_answer")
MIN_QUESTION_CHARS = 12
LOW_CUT = 1 / 8  # p̂ below this earns no difficulty reward
BAND = (0.25, 0.75)  # p̂ inside this band earns the full difficulty reward
SIGMA = 0.12
DEFAULT_BANDS = (0.5, 0.9)  # curriculum: hard < 0.5 <= medium < 0.9 <= easy

Completion = str | list[dict[str, Any]]
Answer = str | Sequence[ToolCall | dict[str, Any]]

# --------------------------------------------------------------------------- records


@dataclass
class Spec:
    """What to generate: a world, how many calls, which tools they use, the tool menu."""

    world: str
    n_calls: int
    tools: list[str]  # the tools the gold calls need, in order
    menu: list[dict[str, Any]]  # OpenAI tool schemas offered (contains `tools`)

    @property
    def menu_names(self) -> list[str]:
        return [_tool_name(s) for s in self.menu]

    def to_dict(self) -> dict[str, Any]:
        return {"world": self.world, "n_calls": self.n_calls, "tools": list(self.tools), "menu": self.menu}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Spec:
        return cls(world=d["world"], n_calls=int(d["n_calls"]), tools=list(d["tools"]), menu=list(d["menu"]))


@dataclass
class Generation:
    """A parsed generator output: the question, the tool menu and the gold calls."""

    question: str
    tools: list[dict[str, Any]]  # normalised OpenAI tool schemas
    calls: list[ToolCall]
    raw: str = ""

    @property
    def menu_names(self) -> list[str]:
        return [_tool_name(s) for s in self.tools]

    def to_text(self) -> str:
        """The tagged form the generator is asked to write."""
        gold = [{"name": c.name, "arguments": c.arguments} for c in self.calls]
        return (f"<question>{self.question}</question>\n"
                f"<available_tools>{json.dumps(self.tools, ensure_ascii=False)}</available_tools>\n"
                f"<tool_call_answer>{json.dumps(gold, ensure_ascii=False)}</tool_call_answer>")


@dataclass
class ParseError:
    """Why a generator output did not parse, with what could be read of it."""

    reason: str  # "tags", "tools_json" or "gold_json"
    detail: str
    question: str | None = None
    raw: str = ""


@dataclass
class FormatCheck:
    """The three format facts r_format rewards, plus the parts that could be read."""

    question: str | None
    tags_ok: bool
    tools: list[dict[str, Any]] | None  # None: not a valid JSON list of tool schemas
    calls: list[ToolCall] | None  # None: not a valid JSON list of {"name", "arguments"}
    tools_error: str = ""
    gold_error: str = ""
    tags_error: str = ""


@dataclass
class Candidate:
    """A generation with its spec and, once a solver has tried it, its pass rate p̂."""

    spec: Spec
    generation: Generation
    p_hat: float | None = None

    @property
    def world(self) -> str:
        return self.spec.world


Solve = Callable[[Candidate, int], Sequence[Answer]]
Judge = Callable[[Generation], float]


def _tool_name(schema: dict[str, Any]) -> str:
    fn = schema.get("function") if isinstance(schema.get("function"), dict) else schema
    return str(fn.get("name", ""))


def _tool_params(schema: dict[str, Any]) -> dict[str, Any]:
    fn = schema.get("function") if isinstance(schema.get("function"), dict) else schema
    params = fn.get("parameters")
    return params if isinstance(params, dict) else {}


def _gold_json(calls: Sequence[ToolCall]) -> str:
    return canonical_json([{"name": c.name, "arguments": c.arguments} for c in calls])


# --------------------------------------------------------------------------- specs and prompts


def sample_spec(world: World, rng: random.Random, n_calls: int | None = None) -> Spec:
    """A spec: 1–2 distinct gold tools and a menu of 2–8 world tools that contains them."""
    names = list(world.tools)
    if not names:
        raise ValueError(f"world {world.name!r} has no tools")
    n = n_calls if n_calls is not None else rng.choice([1, 2])
    n = max(1, min(n, 2, len(names)))
    needed = rng.sample(names, n)
    lo, hi = max(2, n), min(8, len(names))
    size = rng.randint(lo, hi) if hi >= lo else len(names)
    others = rng.sample([x for x in names if x not in needed], max(0, size - n))
    menu_names = needed + others
    rng.shuffle(menu_names)
    return Spec(world=world.name, n_calls=n, tools=needed, menu=[world.tools[m].schema() for m in menu_names])


def world_context(conn: sqlite3.Connection, rng: random.Random, per_table: int = 2) -> dict[str, list[dict[str, Any]]]:
    """A few real rows per table (all of a table with ≤ 3 rows, e.g. `meta`), for grounding."""
    out: dict[str, list[dict[str, Any]]] = {}
    for table in st.tables(conn):
        (count,) = conn.execute(f'SELECT COUNT(*) FROM "{table}"').fetchone()
        offsets = range(count) if count <= 3 else sorted(rng.sample(range(count), min(per_table, count)))
        rows = []
        for off in offsets:
            cur = conn.execute(f'SELECT * FROM "{table}" LIMIT 1 OFFSET ?', (off,))
            cols = [d[0] for d in cur.description]
            rows.append(dict(zip(cols, cur.fetchone(), strict=True)))
        out[table] = rows
    return out


GENERATOR_SYSTEM = (
    "You write training tasks for a tool-calling assistant. Each task is a realistic user "
    "request, the tools the assistant may use, and the exact tool calls that answer it."
)


def generator_prompt(spec: Spec, context: dict[str, list[dict[str, Any]]]) -> list[dict[str, str]]:
    """Chat messages asking the generator for one task of `spec`, grounded in `context` rows."""
    plural = "call" if spec.n_calls == 1 else "calls"
    user = "\n".join([
        f"Domain: {spec.world}.",
        f"Write one user request that is answered by exactly {spec.n_calls} tool {plural}, "
        f"using: {', '.join(spec.tools)}.",
        "",
        "Tools (copy them into <available_tools>):",
        json.dumps(spec.menu, ensure_ascii=False),
        "",
        "Real records from the database (take ids, codes, dates and amounts from here; never invent them):",
        json.dumps(context, ensure_ascii=False, default=str),
        "",
        "Rules:",
        "- The request states every argument value of the calls, written exactly as in the calls.",
        "- Use only tools from the list and give every required argument.",
        "- No placeholders or template slots; write a concrete request as a user would.",
        "",
        "Answer in exactly this format:",
        "<question>the user's request</question>",
        "<available_tools>JSON list of the tool schemas above</available_tools>",
        '<tool_call_answer>[{"name": "tool_name", "arguments": {"arg": "value"}}]</tool_call_answer>',
    ])
    return [{"role": "system", "content": GENERATOR_SYSTEM}, {"role": "user", "content": user}]


# --------------------------------------------------------------------------- parsing

_FENCE = re.compile(r"^```[a-zA-Z]*\s*|\s*```$")
_PLACEHOLDER = re.compile(
    r"<[^<>\n]{0,40}>|\{[^{}\n]{0,40}\}|\[(?:insert|placeholder|your)[^\]]*\]|\b(?:TODO|TBD|XXX+|lorem ipsum)\b",
    re.IGNORECASE,
)


def is_placeholder(question: str | None) -> bool:
    """True for a missing, too short, or templated question (see the module docstring)."""
    if question is None:
        return True
    q = question.strip()
    if len(q) < MIN_QUESTION_CHARS or len(q.split()) < 3:
        return True
    return bool(_PLACEHOLDER.search(q))


def _block(text: str, tag: str) -> tuple[str | None, str]:
    """The body of `<tag>…</tag>` and "" when well-formed, else the problem.

    An unterminated block runs to the next known opening tag or the end of the text.
    """
    open_t, close_t = f"<{tag}>", f"</{tag}>"
    i = text.find(open_t)
    if i < 0:
        return None, f"no <{tag}>"
    start = i + len(open_t)
    j = text.find(close_t, start)
    if j < 0:
        nexts = [p for p in (text.find(f"<{t}>", start) for t in TAGS) if p >= 0]
        return text[start:min(nexts, default=len(text))], f"<{tag}> is not closed"
    if text.count(open_t) != 1 or text.count(close_t) != 1:
        return text[start:j], f"<{tag}> appears more than once"
    return text[start:j], ""


def _load_json(body: str | None) -> tuple[Any, str]:
    if body is None:
        return None, "missing"
    body = _FENCE.sub("", body.strip()).strip()
    try:
        return json.loads(body), ""
    except json.JSONDecodeError as e:
        return None, f"bad JSON: {e}"


def _normalize_tool(item: Any) -> dict[str, Any] | None:
    if not isinstance(item, dict):
        return None
    fn = item["function"] if isinstance(item.get("function"), dict) else item
    name = fn.get("name")
    params = fn.get("parameters", {"type": "object", "properties": {}})
    if not isinstance(name, str) or not name.strip() or not isinstance(params, dict):
        return None
    return {"type": "function",
            "function": {"name": name.strip(), "description": str(fn.get("description", "")), "parameters": params}}


def _parse_tools(body: str | None) -> tuple[list[dict[str, Any]] | None, str]:
    value, err = _load_json(body)
    if err:
        return None, err
    if not isinstance(value, list) or not value:
        return None, "not a non-empty JSON list"
    tools = [_normalize_tool(v) for v in value]
    if any(t is None for t in tools):
        return None, "an item is not a tool schema with a name"
    return [t for t in tools if t is not None], ""


def _parse_gold(body: str | None) -> tuple[list[ToolCall] | None, str]:
    """A JSON list (or one object) of {"name": str, "arguments": object}; arguments may be omitted."""
    value, err = _load_json(body)
    if err:
        return None, err
    items = [value] if isinstance(value, dict) else value
    if not isinstance(items, list) or not items:
        return None, "not a non-empty JSON list of calls"
    calls = []
    for v in items:
        if not isinstance(v, dict) or not isinstance(v.get("name"), str) or not v["name"].strip():
            return None, "a call has no string name"
        args = v.get("arguments", {})
        if not isinstance(args, dict):
            return None, f"{v['name']}: arguments are not an object"
        calls.append(ToolCall(name=v["name"].strip(), arguments=args))
    return calls, ""


def check_format(text: str) -> FormatCheck:
    """Read the three tagged blocks of a generator output, leniently, noting each problem."""
    bodies: dict[str, str | None] = {}
    tag_errors = []
    for tag in TAGS:
        bodies[tag], err = _block(text, tag)
        if err:
            tag_errors.append(err)
    question = bodies["question"].strip() if bodies["question"] is not None else None
    tools, tools_err = _parse_tools(bodies["available_tools"])
    calls, gold_err = _parse_gold(bodies["tool_call_answer"])
    return FormatCheck(question=question, tags_ok=not tag_errors, tools=tools, calls=calls,
                       tools_error=tools_err, gold_error=gold_err, tags_error="; ".join(tag_errors))


def parse_generation(text: str) -> Generation | ParseError:
    """A `Generation` when every tag is well-formed and both JSON blocks are valid."""
    fc = check_format(text)
    if not fc.tags_ok:
        return ParseError("tags", fc.tags_error, fc.question, text)
    if fc.tools is None:
        return ParseError("tools_json", fc.tools_error, fc.question, text)
    if fc.calls is None:
        return ParseError("gold_json", fc.gold_error, fc.question, text)
    return Generation(question=fc.question or "", tools=fc.tools, calls=fc.calls, raw=text)


# --------------------------------------------------------------------------- generator rewards


def r_format(text: str | FormatCheck) -> float:
    """⅓[tags parse] + ⅓[tools are valid JSON] + ⅓[gold is valid JSON]; 0 for a placeholder."""
    fc = check_format(text) if isinstance(text, str) else text
    if is_placeholder(fc.question):
        return 0.0
    return (fc.tags_ok + (fc.tools is not None) + (fc.calls is not None)) / 3


def grounding_values(calls: Sequence[ToolCall]) -> list[tuple[str, Any]]:
    """(argument path, leaf value) of every gold value the grounding rule checks."""
    out: list[tuple[str, Any]] = []

    def walk(path: str, v: Any) -> None:
        if isinstance(v, bool) or v is None:
            return
        if isinstance(v, dict):
            for k, x in v.items():
                walk(f"{path}.{k}", x)
        elif isinstance(v, list):
            for i, x in enumerate(v):
                walk(f"{path}[{i}]", x)
        else:
            out.append((path, v))

    for i, c in enumerate(calls):
        for k, v in c.arguments.items():
            walk(f"{i}:{c.name}.{k}", v)
    return out


def value_in_question(value: Any, question: str) -> bool:
    """Whether `value` is written in `question` (see "Grounding" in the module docstring)."""
    forms = [str(value)]
    if isinstance(value, float) and value.is_integer():
        forms.append(str(int(value)))
    if isinstance(value, str) and "_" in value:
        forms.append(value.replace("_", " "))
    q = question.lower()
    for f in forms:
        f = f.strip().lower()
        if not f:
            return True
        left = r"(?<![0-9a-z])" if f[0].isalnum() else ""
        right = r"(?![0-9a-z])" if f[-1].isalnum() else ""
        if re.search(left + re.escape(f) + right, q):
            return True
    return False


@dataclass
class Validity:
    in_menu: bool
    required: bool
    grounded: bool
    missing: list[str] = field(default_factory=list)  # "tool.arg" required but absent
    ungrounded: list[str] = field(default_factory=list)  # argument paths not in the question

    @property
    def score(self) -> float:
        return 0.4 * self.in_menu + 0.4 * self.required + 0.2 * self.grounded


def validity(gen: Generation) -> Validity:
    """The three r_valid facts over all gold calls, against the generation's own menu."""
    menu = {_tool_name(s): s for s in gen.tools}
    in_menu = all(c.name in menu for c in gen.calls)
    missing = []
    for c in gen.calls:
        if c.name not in menu:
            missing.append(f"{c.name}.*")
            continue
        required = _tool_params(menu[c.name]).get("required") or []
        missing += [f"{c.name}.{r}" for r in required if isinstance(r, str) and r not in c.arguments]
    ungrounded = [p for p, v in grounding_values(gen.calls) if not value_in_question(v, gen.question)]
    return Validity(in_menu=in_menu, required=not missing, grounded=not ungrounded, missing=missing,
                    ungrounded=ungrounded)


def r_valid(gen: Generation) -> float:
    """0.4[gold tools in menu] + 0.4[required args present] + 0.2[grounded]; 0 for a placeholder."""
    if is_placeholder(gen.question):
        return 0.0
    return validity(gen).score


def r_diff(p_hat: float) -> float:
    """Band-pass difficulty reward: 0 below 1/8, 1 on [0.25, 0.75], a Gaussian (σ 0.12) outside."""
    if p_hat < LOW_CUT:
        return 0.0
    lo, hi = BAND
    if lo <= p_hat <= hi:
        return 1.0
    edge = lo if p_hat < lo else hi
    return math.exp(-((p_hat - edge) ** 2) / (2 * SIGMA**2))


def r_judge(score: float | None) -> float:
    """(s − 1)/4 for a 1–5 quality score (clipped to [1, 5]); 0 without a score."""
    if score is None:
        return 0.0
    return (min(5.0, max(1.0, float(score))) - 1.0) / 4.0


def r_curr(question: str | None, p_hat: float | None, judge_score: float | None) -> float:
    """0.5·r_diff(p̂) + 0.5·r_judge(s); 0 for a placeholder question (or no p̂ and no score)."""
    if is_placeholder(question):
        return 0.0
    return 0.5 * (r_diff(p_hat) if p_hat is not None else 0.0) + 0.5 * r_judge(judge_score)


def answer_calls(answer: Answer) -> list[ToolCall]:
    """The calls of one solver answer: model text (parsed) or a list of calls/dicts."""
    if isinstance(answer, str):
        return parse_tool_calls(answer)[1]
    return [a if isinstance(a, ToolCall) else ToolCall(name=str(a.get("name", "")), arguments=a.get("arguments") or {})
            for a in answer]


def solver_pass_rate(candidate: Candidate | Generation | Sequence[ToolCall], solver_answers: Sequence[Answer]) -> float:
    """p̂: share of the answers whose calls equal the gold calls exactly (canonical JSON, in order)."""
    if not solver_answers:
        return 0.0
    gold = _gold_calls_of(candidate)
    target = _gold_json(gold)
    return sum(_gold_json(answer_calls(a)) == target for a in solver_answers) / len(solver_answers)


def _gold_calls_of(candidate: Candidate | Generation | Sequence[ToolCall]) -> list[ToolCall]:
    if isinstance(candidate, Candidate):
        return candidate.generation.calls
    if isinstance(candidate, Generation):
        return candidate.calls
    return list(candidate)


@dataclass
class GeneratorScore:
    """The generator reward of one output and its parts."""

    r_format: float
    r_valid: float = 0.0
    r_curr: float = 0.0
    r_diff: float = 0.0
    r_judge: float = 0.0
    p_hat: float | None = None
    placeholder: bool = False

    @property
    def total(self) -> float:
        return self.r_format + self.r_valid + self.r_curr


def score_generation(text: str, solve: Solve | None = None, judge: Judge | None = None, k: int = 8,
                     spec: Spec | None = None) -> GeneratorScore:
    """r_format + r_valid + r_curr of one generator output.

    r_valid and r_curr need a fully parsed generation; p̂ comes from `k` answers of
    `solve` (sample them at T=0.7, as the method does), r_judge from `judge`.
    """
    fc = check_format(text)
    if is_placeholder(fc.question):
        return GeneratorScore(r_format=0.0, placeholder=True)
    score = GeneratorScore(r_format=r_format(fc))
    gen = parse_generation(text)
    if isinstance(gen, ParseError):
        return score
    score.r_valid = r_valid(gen)
    if solve is not None:
        cand = Candidate(spec=spec or _spec_of(gen), generation=gen)
        score.p_hat = solver_pass_rate(gen, solve(cand, k))
        score.r_diff = r_diff(score.p_hat)
    judge_score = judge(gen) if judge is not None else None
    score.r_judge = r_judge(judge_score)
    score.r_curr = r_curr(gen.question, score.p_hat, judge_score)
    return score


def _spec_of(gen: Generation, world: str = "") -> Spec:
    return Spec(world=world, n_calls=len(gen.calls), tools=[c.name for c in gen.calls], menu=gen.tools)


def completion_text(completion: Completion) -> str:
    """Model text of a completion: the string, or the assistant messages' contents joined."""
    if isinstance(completion, str):
        return completion
    parts = []
    for m in completion:
        if m.get("role", "assistant") != "assistant":
            continue
        parts.append(message_text(m))
    return "\n".join(parts)


def generator_reward(completions: Sequence[Completion], *, solver: Solve | None = None, judge: Judge | None = None,
                     k: int = 8, spec: Sequence[str | dict[str, Any]] | None = None, **kwargs: Any) -> list[float]:
    """TRL reward: r_format + r_valid + r_curr of each generator completion.

    `solver(candidate, k)` returns k solver answers (bind it with `make_generator_reward`);
    an optional `spec` column (JSON or dict of `Spec`) is passed on to the solver. With
    TRL's `log_metric`, the batch means of the parts are logged under `gen/`.
    """
    if solver is None:
        raise ValueError("generator_reward needs a solver; bind one with make_generator_reward(solver)")
    scores = []
    for i, c in enumerate(completions):
        s = None
        if spec is not None:
            raw = spec[i]
            s = Spec.from_dict(json.loads(raw) if isinstance(raw, str) else raw)
        scores.append(score_generation(completion_text(c), solver, judge, k, s))
    log_metric: Callable[[str, float], None] | None = kwargs.get("log_metric")
    if log_metric is not None and scores:
        n = len(scores)
        for name in ("r_format", "r_valid", "r_curr", "r_diff"):
            log_metric(f"gen/{name}", sum(getattr(x, name) for x in scores) / n)
        log_metric("gen/placeholder", sum(x.placeholder for x in scores) / n)
    return [x.total for x in scores]


def make_generator_reward(solver: Solve, judge: Judge | None = None, k: int = 8) -> Callable[..., list[float]]:
    """`generator_reward` with its solver (and judge) bound, named for TRL's logs."""

    def reward(completions: Sequence[Completion], **kwargs: Any) -> list[float]:
        return generator_reward(completions, solver=solver, judge=judge, k=k, **kwargs)

    reward.__name__ = "generator_reward"
    return reward


def chat_solver(model: ChatModel | Callable[[], ChatModel], temperature: float = 0.7, max_tokens: int = 256,
                seed: int = 0) -> Solve:
    """A `Solve` backed by a `ChatModel`: k samples of the question with the menu as tools.

    Runs its own event loop, so call it from synchronous code (TRL reward functions are).
    `model` may be a factory instead: a client bound to an event loop (an HTTP client, e.g.
    `OpenAICompatibleModel` in front of a served solver) is then made, and closed, per call.
    """

    async def run(candidate: Candidate, k: int) -> list[list[ToolCall]]:
        client = model if hasattr(model, "chat") else model()  # type: ignore[operator]
        gen = candidate.generation
        messages = [{"role": "system", "content": SOLVER_SYSTEM}, {"role": "user", "content": gen.question}]
        try:
            jobs = [client.chat(messages, gen.tools, Sampling(temperature=temperature, max_tokens=max_tokens,
                                                              seed=seed * 1000 + i)) for i in range(k)]
            answers = await asyncio.gather(*jobs, return_exceptions=True)
        finally:
            if client is not model:
                await client.aclose()
        return [[ToolCall(name=c.name, arguments=c.arguments) for c in r.tool_calls]
                if isinstance(r, ChatResponse) else [] for r in answers]

    return lambda candidate, k: asyncio.run(run(candidate, k))


SOLVER_SYSTEM = ("Answer the user's request by calling the tools. Write each call as "
                 '<tool_call>{"name": ..., "arguments": {...}}</tool_call> and nothing else.')

# --------------------------------------------------------------------------- solver reward

_TOOL_BLOCK = re.compile(r"<tool_call>.*?</tool_call>", re.DOTALL)


def solver_format_score(completion: Completion) -> float:
    """0.3[a <tool_call>…</tool_call> block] + 0.3[it parses: no malformed call] + 0.4[≥ 1 call].

    Native `tool_calls` on assistant messages count as tagged, parsed calls.
    """
    calls, tagged, malformed = _solver_calls(completion)
    return 0.3 * tagged + 0.3 * (tagged and not malformed) + 0.4 * bool(calls)


def _solver_calls(completion: Completion) -> tuple[list[ToolCall], bool, int]:
    text = completion_text(completion)
    _, calls, malformed = parse_tool_calls(text)
    tagged = bool(_TOOL_BLOCK.search(text))
    bad = len(malformed)
    messages = [] if isinstance(completion, str) else completion
    for m in messages:
        if m.get("role", "assistant") != "assistant":
            continue
        native, malformed = decode_native_tool_calls(m.get("tool_calls") or [])
        calls += native
        bad += len(malformed)
        tagged = tagged or bool(native)
    return calls, tagged, bad


def _norm_value(v: Any) -> Any:
    if isinstance(v, bool) or v is None or isinstance(v, str):
        return v
    if isinstance(v, (int, float)):
        return float(v)
    if isinstance(v, list):
        return [_norm_value(x) for x in v]
    if isinstance(v, dict):
        return {k: _norm_value(x) for k, x in v.items()}
    return str(v)


def call_score(pred: ToolCall, gold: ToolCall) -> float:
    """0.2·[same name] + 0.3·F1(argument keys) + 0.5·(share of shared keys with equal values)."""
    pk, gk = set(pred.arguments), set(gold.arguments)
    if not pk and not gk:
        f1 = share = 1.0
    else:
        shared = pk & gk
        f1 = 2 * len(shared) / (len(pk) + len(gk))
        share = (sum(_norm_value(pred.arguments[x]) == _norm_value(gold.arguments[x]) for x in shared) / len(shared)
                 if shared else 0.0)
    return 0.2 * (pred.name == gold.name) + 0.3 * f1 + 0.5 * share


def solver_accuracy(pred: Sequence[ToolCall], gold: Sequence[ToolCall]) -> float:
    """Mean per-gold-call score (greedy one-to-one matching) × 1/(1 + 0.25·extra calls)."""
    if not gold:
        return 1.0 if not pred else 0.0
    pairs = sorted(((call_score(p, g), -gi, -pi, gi, pi) for gi, g in enumerate(gold) for pi, p in enumerate(pred)),
                   reverse=True)
    used_g: set[int] = set()
    used_p: set[int] = set()
    total = 0.0
    for score, _, _, gi, pi in pairs:
        if gi in used_g or pi in used_p:
            continue
        used_g.add(gi)
        used_p.add(pi)
        total += score
    extra = max(0, len(pred) - len(gold))
    return (total / len(gold)) / (1 + 0.25 * extra)


def gold_calls(value: str | Task | dict[str, Any] | Sequence[ToolCall | dict[str, Any]]) -> list[ToolCall]:
    """Gold calls from a column value: JSON or list of calls, one call, or a `Task` (its reference)."""
    if isinstance(value, str):
        value = json.loads(value)
    if isinstance(value, Task):
        return list(value.reference_solution)
    if isinstance(value, dict):
        if "reference_solution" in value:
            return [ToolCall.model_validate(c) for c in value["reference_solution"]]
        value = [value]
    return answer_calls(value)


def solver_reward(completions: Sequence[Completion], gold: Sequence[Any], **kwargs: Any) -> list[float]:
    """TRL reward: format (0–1) + accuracy (0–1) of each solver completion against its gold calls.

    `gold` is one column value per completion (see `gold_calls`). With `log_metric`, batch
    means are logged as `solver/format` and `solver/accuracy`.
    """
    if len(completions) != len(gold):
        raise ValueError(f"{len(completions)} completions but {len(gold)} gold answers")
    fmts, accs = [], []
    for c, g in zip(completions, gold, strict=True):
        calls, _, _ = _solver_calls(c)
        fmts.append(solver_format_score(c))
        accs.append(solver_accuracy(calls, gold_calls(g)))
    log_metric: Callable[[str, float], None] | None = kwargs.get("log_metric")
    if log_metric is not None and fmts:
        log_metric("solver/format", sum(fmts) / len(fmts))
        log_metric("solver/accuracy", sum(accs) / len(accs))
    return [f + a for f, a in zip(fmts, accs, strict=True)]


# --------------------------------------------------------------------------- filter, dedup, curriculum


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


def char_ngrams(text: str, n: int = 3) -> frozenset[str]:
    """Character n-grams of the lowercased, whitespace-collapsed text."""
    t = " ".join(text.lower().split())
    return frozenset(t[i:i + n] for i in range(len(t) - n + 1)) if len(t) >= n else frozenset([t])


def jaccard(a: frozenset[str], b: frozenset[str]) -> float:
    return len(a & b) / len(a | b) if a or b else 1.0


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


# --------------------------------------------------------------------------- grounding in the world


@dataclass
class WorldCheck:
    """Whether a generation's gold calls run on the world's base state, and where they lead."""

    ok: bool
    reason: str | None = None  # unknown_tool, unknown_menu_tool, call_failed
    detail: str = ""
    initial_state: StateRef | None = None
    target_state_hash: str | None = None
    target_diff: list[dict[str, Any]] = field(default_factory=list)
    observations: list[str] = field(default_factory=list)


def validate_on_world(world: World, generation: Generation, seed: int = 0, scale: int = 30,
                      ref: StateRef | None = None) -> WorldCheck:
    """Every gold and menu tool exists in `world`, and the gold calls, run in order on a fresh
    copy of the base state (`ref`, or seed/scale), all succeed (reads included)."""
    unknown = [c.name for c in generation.calls if c.name not in world.tools]
    if unknown:
        return WorldCheck(False, "unknown_tool", f"not tools of {world.name}: {unknown}")
    unknown_menu = [n for n in generation.menu_names if n not in world.tools]
    if unknown_menu:
        return WorldCheck(False, "unknown_menu_tool", f"menu tools not in {world.name}: {unknown_menu}")
    ref = ref or world.state_ref(seed, scale)
    env = world.env(ref)
    try:
        before = st.canonical_dump(env.conn)
        observations = []
        for call in generation.calls:
            obs = env.call(ToolCall(name=call.name, arguments=dict(call.arguments)))
            if not obs.ok:
                return WorldCheck(False, "call_failed", f"{call.name}: {obs.error} {obs.code}: {obs.detail}", ref)
            observations.append(obs.content)
        diff = st.diff_dumps(before, st.canonical_dump(env.conn))
        return WorldCheck(True, None, "", ref, env.state_hash(), [c.as_dict() for c in diff], observations)
    finally:
        env.close()


# --------------------------------------------------------------------------- scripted generator

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
    body, _ = _block(text, "tool_call_answer")
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


# --------------------------------------------------------------------------- the registered method


def _drop_reason(text: str | None, world: World, ref: StateRef) -> tuple[str, Generation | None, WorldCheck | None]:
    """("", generation, check) for a candidate passing format, validity and the world, else a reason."""
    if text is None:
        return "no_generation", None, None
    gen = parse_generation(text)
    if isinstance(gen, ParseError):
        return f"format_{gen.reason}", None, None
    if is_placeholder(gen.question):
        return "placeholder_question", None, None
    v = validity(gen)
    if not v.in_menu:
        return "gold_not_in_menu", None, None
    if not v.required:
        return "missing_required_args", None, None
    if not v.grounded:
        return "ungrounded_value", None, None
    check = validate_on_world(world, gen, ref=ref)
    if not check.ok:
        return f"world_{check.reason}", None, None
    return "", gen, check


def synthesize_with(cfg: SynthesisConfig, world: World, generator: Generator, solve: Solve | None = None
                    ) -> SynthesisResult:
    """Self-play synthesis with a given generator (and, optionally, a solver for the filter).

    Specs are sampled in batches (`options.batch_size`, 8) until `n_tasks` tasks are emitted
    or `options.max_attempts` (4·n + 8) candidates were tried. A candidate becomes a task
    only if it parses, its question is no placeholder, r_valid is 1 and its gold calls run on
    the base state (seed, scale); with `solve`, also if the solver agrees on ≥
    `options.min_agreement` (0.2) of `options.filter_k` (10) answers. `options.dedup_threshold`
    (off by default) drops near-duplicate questions. Every drop is counted by reason.
    """
    opts = cfg.options
    rng = random.Random(cfg.seed)
    ref = world.state_ref(cfg.seed, cfg.scale)
    conn = world.build_state(cfg.seed, cfg.scale)
    batch = int(opts.get("batch_size", 8))
    max_attempts = int(opts.get("max_attempts", 4 * cfg.n_tasks + 8))
    k, min_agree = int(opts.get("filter_k", 10)), float(opts.get("min_agreement", 0.2))
    dedup_threshold = opts.get("dedup_threshold")
    result = SynthesisResult()
    leaders: list[frozenset[str]] = []
    attempted = 0
    try:
        while len(result.tasks) < cfg.n_tasks and attempted < max_attempts:
            specs = [sample_spec(world, rng) for _ in range(min(batch, max_attempts - attempted))]
            for spec, text in zip(specs, generator(specs, conn, rng), strict=True):
                attempted += 1
                reason, gen, check = _drop_reason(text, world, ref)
                if gen is None or check is None:
                    result.drops[reason] += 1
                    continue
                cand = Candidate(spec=spec, generation=gen)
                if solve is not None:
                    cand = replace(cand, p_hat=solver_pass_rate(cand, solve(cand, k)))
                    if cand.p_hat is not None and cand.p_hat < min_agree:
                        result.drops["low_agreement"] += 1
                        continue
                if dedup_threshold is not None:
                    grams = char_ngrams(gen.question)
                    if any(1 - jaccard(grams, lead) < float(dedup_threshold) for lead in leaders):
                        result.drops["near_duplicate"] += 1
                        continue
                    leaders.append(grams)
                task = _task(world, cand, check, generator_name=getattr(generator, "name", "custom"))
                if result.has(task):
                    result.drops["duplicate"] += 1
                    continue
                result.accept(task, cfg.test_fraction)
                if len(result.tasks) >= cfg.n_tasks:
                    break
    finally:
        conn.close()
    result.stats = {
        "generator": getattr(generator, "name", "custom"),
        "attempted": attempted,
        "emitted": len(result.tasks),
        "yield": round(len(result.tasks) / attempted, 3) if attempted else 0.0,
        "calls_per_task": {str(n): sum(len(t.reference_solution) == n for t in result.tasks) for n in (1, 2)},
        "tools": sorted({c.name for t in result.tasks for c in t.reference_solution}),
    }
    return result


def _task(world: World, cand: Candidate, check: WorldCheck, generator_name: str) -> Task:
    gen = cand.generation
    assert check.initial_state is not None and check.target_state_hash is not None
    known: dict[str, str] = {}
    for i, (path, v) in enumerate(grounding_values(gen.calls)):
        key = path.split(".", 1)[1]
        known[key if known.get(key, str(v)) == str(v) else f"{key}_{i}"] = str(v)
    metadata: dict[str, Any] = {
        "spec": {"world": cand.spec.world, "n_calls": cand.spec.n_calls, "tools": cand.spec.tools,
                 "menu": cand.spec.menu_names},
        "menu": gen.menu_names,
        "r_valid": r_valid(gen),
        "r_format": r_format(gen.raw) if gen.raw else 1.0,
        "generator": generator_name,
        "follows_spec": [c.name for c in gen.calls] == cand.spec.tools,
    }
    if cand.p_hat is not None:
        metadata["p_hat"] = cand.p_hat
    return Task(
        world=world.name,
        method=METHOD,
        instruction=gen.question,
        user=UserScenario(reason=gen.question, known_info=known, task_instructions=gen.question),
        initial_state=check.initial_state,
        target_state_hash=check.target_state_hash,
        target_diff=check.target_diff,
        reference_solution=[ToolCall(name=c.name, arguments=dict(c.arguments)) for c in gen.calls],
        difficulty=round(1 - cand.p_hat, 3) if cand.p_hat is not None else 0.0,
        metadata=metadata,
    ).with_id()


@register(METHOD)
def synthesize(cfg: SynthesisConfig, world: World) -> SynthesisResult:
    """Self-play tasks. `options.generator`: "scripted" (default; model-free templates over
    database records) or "model" (a ChatModel from `options.model`, a `ModelConfig` dict,
    prompted with `generator_prompt`; `options.temperature`, `max_tokens`, `concurrency`)."""
    kind = cfg.options.get("generator", "scripted")
    if kind == "scripted":
        generator: Generator = ScriptedGenerator(world)
    elif kind == "model":
        generator = ModelGenerator(model_cfg=dict(cfg.options.get("model", {})),
                                   temperature=float(cfg.options.get("temperature", 1.0)),
                                   max_tokens=int(cfg.options.get("max_tokens", 768)),
                                   concurrency=int(cfg.options.get("concurrency", 8)))
    else:
        raise ValueError(f"unknown self_play generator {kind!r}; use 'scripted' or 'model'")
    return synthesize_with(cfg, world, generator)


# --------------------------------------------------------------------------- benchmark tools
# Not product code: a stub solver and helpers for the small-scale checks of methods.md §3.


def perturb_calls(calls: Sequence[ToolCall], rng: random.Random) -> list[ToolCall]:
    """A copy of `calls` that differs from them: one argument value changed (or, for a call
    without arguments, its tool name)."""
    out = [ToolCall(name=c.name, arguments=dict(c.arguments)) for c in calls]
    if not out:
        return [ToolCall(name="noop", arguments={})]
    c = rng.choice(out)
    if not c.arguments:
        c.name += "_x"
        return out
    key = rng.choice(sorted(c.arguments))
    v = c.arguments[key]
    if isinstance(v, bool):
        c.arguments[key] = not v
    elif isinstance(v, (int, float)):
        c.arguments[key] = v + rng.randint(1, 9)
    else:
        c.arguments[key] = f"{v}_x"
    return out


class StubSolver:
    """Benchmark tool, not a solver: each of k answers is the gold calls with probability q,
    else `perturb_calls` of them. A `Solve`, so it plugs into rewards and the filter."""

    def __init__(self, q: float, rng: random.Random) -> None:
        self.q = q
        self.rng = rng

    def __call__(self, candidate: Candidate | Generation, k: int) -> list[list[ToolCall]]:
        gold = _gold_calls_of(candidate)
        return [[ToolCall(name=c.name, arguments=dict(c.arguments)) for c in gold] if self.rng.random() < self.q
                else perturb_calls(gold, self.rng) for _ in range(k)]


def expected_r_diff(q: float, k: int = 8) -> float:
    """E[r_diff(X/k)] for X ~ Binomial(k, q): the band-pass curve a q-solver should trace."""
    return sum(math.comb(k, x) * q**x * (1 - q) ** (k - x) * r_diff(x / k) for x in range(k + 1))


def bandpass_curve(qs: Sequence[float], n_candidates: int, k: int = 8, rng: random.Random | None = None
                   ) -> list[list[float]]:
    """[q, mean r_diff] per q: `n_candidates` synthetic one-call candidates, each solved k
    times by a `StubSolver(q)`."""
    rng = rng or random.Random(0)
    schema = {"type": "function", "function": {"name": "lookup", "description": "Look up a record.", "parameters": {
        "type": "object", "properties": {"record_id": {"type": "string"}}, "required": ["record_id"]}}}
    cands = [Candidate(spec=Spec("synthetic", 1, ["lookup"], [schema]), generation=Generation(
        question=f"Please look up record rec{i:05d}.", tools=[schema],
        calls=[ToolCall(name="lookup", arguments={"record_id": f"rec{i:05d}"})])) for i in range(n_candidates)]
    curve = []
    for q in qs:
        solver = StubSolver(q, rng)
        values = [r_diff(solver_pass_rate(c, solver(c, k))) for c in cands]
        curve.append([q, sum(values) / len(values) if values else 0.0])
    return curve


def plant_hallucination(gen: Generation, rng: random.Random) -> Generation:
    """A copy of `gen` with one gold argument value replaced by a plausible invented one that
    the question does not state (digits and letters resampled, e.g. mia_li_1003 → mia_li_7361)."""
    paths = [(i, k) for i, c in enumerate(gen.calls) for k, v in c.arguments.items()
             if not isinstance(v, bool) and v is not None and not isinstance(v, (list, dict))]
    if not paths:
        raise ValueError("no argument value to replace")
    i, key = rng.choice(paths)
    value = gen.calls[i].arguments[key]
    for attempt in range(100):
        if isinstance(value, (int, float)):
            new: Any = value + rng.randint(10 + attempt, 999)
        else:
            new = "".join(rng.choice("0123456789") if ch.isdigit() else
                          rng.choice("ABCDEFGHJKLMNPQRSTUVWXYZ") if ch.isupper() else ch for ch in str(value))
            if new == str(value):
                new = f"{value}_{rng.randrange(10**6)}"
        if not value_in_question(new, gen.question):
            break
    calls = [ToolCall(name=c.name, arguments=dict(c.arguments)) for c in gen.calls]
    calls[i].arguments[key] = new
    return Generation(question=gen.question, tools=gen.tools, calls=calls)


def grounding_rejection_rate(generations: Sequence[Generation]) -> float:
    """Share of generations the grounding rule rejects (some gold value not in the question)."""
    if not generations:
        return 0.0
    return sum(not validity(g).grounded for g in generations) / len(generations)
