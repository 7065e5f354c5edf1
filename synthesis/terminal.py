"""Terminal-task synthesis (Terminal-Task-Gen, methods.md §5): seed-based and skill-based
tasks in a workspace world, templated on the CPU or adapted by a model.

- *seed*: a seed problem of the world's `seeds.py` re-drawn with new inputs (rng per seed).
- *skill*: 3-5 primitive skills of one domain chained into one task (`compose_skills`).
- *llm*: a `ChatModel` is shown a validated seed task and writes a variant as JSON
  (`options.generator: model`, or pass `model=` to `synthesize_terminal`).

Every candidate is validated by execution before it is emitted: the recipe builds, every
reference step succeeds (commands exit 0), the hidden tests run in a fresh sandbox on the
untouched workspace and on the reference's result, every test passes after the reference,
at least one fails before it (FAIL_TO_PASS; the others are PASS_TO_PASS), the instruction
does not quote the solution, and no answer is planted in the starting files.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import random
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from data.records import Sampling, Task, ToolCall, UserScenario, Verification
from envs.registry import get_world
from envs.workspace import TaskSpec, WorkspaceEnv, WorkspaceWorld, read_tree
from envs.world import World
from rollout.model import ChatModel, ModelError
from synthesis.base import SynthesisConfig, SynthesisResult, register

METHOD = "terminal"
DEFAULT_WORLD = "terminal"
MIN_LEAK_CHARS = 12


@dataclass
class Candidate:
    spec: TaskSpec
    origin: str  # seed | skill | llm
    rng_seed: str


def tests_digest(files: dict[str, str]) -> str:
    return hashlib.sha256(json.dumps(sorted(files.items())).encode()).hexdigest()


def tests_record(files: dict[str, str]) -> dict[str, Any]:
    """How a task stores its checks: the files, each file's sha256 and a digest of all."""
    return {"files": dict(files), "sha256": {n: hashlib.sha256(b.encode()).hexdigest() for n, b in files.items()},
            "digest": tests_digest(files)}


def leak(spec: TaskSpec) -> str | None:
    """Why the instruction gives the solution away, if it does."""
    text = spec.instruction
    for call in spec.solution:
        if call.name == "run_shell" and len(call.arguments.get("command", "")) >= 8 \
                and call.arguments["command"] in text:
            return "instruction quotes a reference command"
        for key in ("content", "new"):  # code quoted line by line (a required single line is fine)
            quoted = [ln for ln in str(call.arguments.get(key, "")).splitlines()
                      if len(ln.strip()) >= 20 and ln.strip() in text]
            if len(quoted) >= 2:
                return "instruction quotes reference code"
    return None


def planted(before: dict[str, str], after: dict[str, str]) -> str | None:
    """A file the reference creates or changes whose new content already sits inside a
    starting file (an answer an agent could copy). Moves and copies of whole files are fine."""
    whole = set(before.values())
    for path, text in after.items():
        if before.get(path) == text or len(text.strip()) < MIN_LEAK_CHARS or text in whole:
            continue
        if any(text in b for b in before.values()):
            return f"the result {path} is already in the starting files"
    return None


def _step_failed(call: ToolCall, content: str) -> bool:
    if call.name != "run_shell":
        return False
    try:
        return json.loads(content).get("exit_code") != 0
    except (json.JSONDecodeError, AttributeError):
        return True


def validate(world: WorkspaceWorld, candidates: list[Candidate], drops: Any,
             batch: int = 12) -> list[tuple[Candidate, Task]]:
    """The candidates that pass every check, as tasks; each rejection is counted in `drops`."""
    accepted: list[tuple[Candidate, Task]] = []
    for start in range(0, len(candidates), max(1, batch)):
        accepted += _validate_chunk(world, candidates[start:start + batch], drops)
    return accepted


def _validate_chunk(world: WorkspaceWorld, candidates: list[Candidate], drops: Any) -> list[tuple[Candidate, Task]]:
    ready: list[tuple[Candidate, Task, WorkspaceEnv, dict[str, str]]] = []
    envs: list[WorkspaceEnv] = []
    try:
        for cand in candidates:
            spec = cand.spec
            why = leak(spec)
            if why:
                drops["solution_leak"] += 1
                continue
            try:
                ref = world.state_ref(spec.patches(), seed=_int_seed(cand.rng_seed))
            except ValueError:
                drops["setup_failed"] += 1
                continue
            env = world.env(ref)
            envs.append(env)
            failed = False
            for call in spec.solution:
                obs = env.call(call)
                if obs.error or _step_failed(call, obs.content):
                    failed = True
                    break
            if failed:
                drops["reference_failed"] += 1
                continue
            if planted(read_tree(world.build(ref)), read_tree(env.root)):
                drops["planted_answer"] += 1
                continue
            tests = spec.test_files()
            task = Task(
                world=world.name, method=METHOD, instruction=spec.instruction,
                user=UserScenario(persona="a developer", reason=f"a {spec.domain} task in their workspace",
                                  task_instructions=spec.instruction),
                initial_state=ref, target_state_hash=env.state_hash(), reference_solution=list(spec.solution),
                difficulty=spec.difficulty,
                verification=Verification(verifier="tests_pass", tests=tests_record(tests)),
                metadata={"domain": spec.domain, "seed": spec.name, "origin": cand.origin,
                          "rng_seed": cand.rng_seed, "skills": list(spec.skills)},
            ).with_id()
            ready.append((cand, task, env, tests))
        jobs = [(world.build(t.initial_state), tests) for _, t, _, tests in ready]
        jobs += [(env.root, tests) for _, _, env, tests in ready]
        reports = world.run_tests_batch(jobs) if jobs else []
    finally:
        for env in envs:
            env.close()
    out: list[tuple[Candidate, Task]] = []
    n = len(ready)
    for i, (cand, task, _, _) in enumerate(ready):
        before, after = reports[i], reports[n + i]
        if not (before.ok and after.ok):
            drops["tests_did_not_run"] += 1
            continue
        ids = sorted(set(before.outcomes) | set(after.outcomes))
        if not ids or not all(after.passed(t) for t in ids):
            drops["reference_fails_tests"] += 1
            continue
        f2p = [t for t in ids if not before.passed(t)]
        if not f2p:
            drops["no_fail_to_pass"] += 1
            continue
        task.verification.fail_to_pass = f2p
        task.verification.pass_to_pass = [t for t in ids if before.passed(t)]
        out.append((cand, task.with_id()))  # the id covers the verification block
    return out


def _int_seed(text: str) -> int:
    return int(hashlib.sha256(text.encode()).hexdigest()[:8], 16)


# -- candidates --------------------------------------------------------------------------------

def seed_candidate(world: WorkspaceWorld, name: str, rng_seed: str) -> Candidate:
    seeds = world.seeds.SEEDS
    if name not in seeds:
        raise KeyError(f"unknown terminal seed {name!r}; known: {', '.join(sorted(seeds))}")
    return Candidate(seeds[name](random.Random(rng_seed)), "seed", rng_seed)


def skill_candidate(world: WorkspaceWorld, domain: str, rng_seed: str) -> Candidate:
    rng = random.Random(rng_seed)
    return Candidate(world.seeds.compose_skills(domain, rng, rng.randint(3, 5)), "skill", rng_seed)


def builtin_candidates(world: WorkspaceWorld) -> list[Candidate]:
    """Every seed problem at rng seed 0: the built-in tasks."""
    return [seed_candidate(world, name, f"{name}:0") for name in world.seeds.SEEDS]


def builtin_tasks(world: WorkspaceWorld | None = None) -> tuple[list[Task], dict[str, int]]:
    """The validated built-in tasks and the drops (a healthy world drops none)."""
    world = world or _terminal_world(None)
    result = SynthesisResult()
    tasks = [t for _, t in validate(world, builtin_candidates(world), result.drops)]
    return tasks, dict(result.drops)


LLM_SYSTEM = """You write tasks for a software agent that works in a terminal. A task is a JSON
object with keys: "instruction" (what to achieve, never how), "files" (path -> text of the
starting workspace), "tests" (pytest functions; helpers read(path), rows(path), sh(cmd),
py(*args), call(module, function, *args) and WS, the workspace Path, are predefined; put the
expected values in the tests, never in the files), "solution" (a list of tool calls
{"name": "run_shell"|"write_file"|"apply_patch", "arguments": {...}} that solves it).
Reply with the JSON object only."""


def llm_prompt(example: TaskSpec, domain: str) -> list[dict[str, Any]]:
    shown = {"instruction": example.instruction, "files": example.files, "tests": example.tests,
             "solution": [c.model_dump(exclude={"id"}) for c in example.solution]}
    return [
        {"role": "system", "content": LLM_SYSTEM},
        {"role": "user", "content": f"An example {example.domain} task:\n{json.dumps(shown, indent=1)}\n\n"
                                    f"Write a different {domain} task of similar size, with new inputs and a "
                                    "different goal."},
    ]


def parse_llm_task(text: str, domain: str, name: str) -> TaskSpec:
    """A TaskSpec from a model's reply; ValueError names what is wrong."""
    start, end = text.find("{"), text.rfind("}")
    if start < 0 or end <= start:
        raise ValueError("no JSON object in the reply")
    try:
        raw = json.loads(text[start:end + 1])
    except json.JSONDecodeError as exc:
        raise ValueError(f"bad JSON: {exc}") from None
    if not isinstance(raw, dict):
        raise ValueError("the reply is not a JSON object")
    instruction, files, tests, solution = (raw.get(k) for k in ("instruction", "files", "tests", "solution"))
    if not isinstance(instruction, str) or not instruction.strip():
        raise ValueError("instruction must be a non-empty string")
    if not isinstance(files, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in files.items()):
        raise ValueError("files must map paths to strings")
    if not isinstance(tests, str) or "def test_" not in tests:
        raise ValueError("tests must be pytest source with at least one test function")
    if not isinstance(solution, list) or not solution:
        raise ValueError("solution must be a non-empty list of tool calls")
    calls = []
    for c in solution:
        if not isinstance(c, dict) or c.get("name") not in ("run_shell", "write_file", "apply_patch") \
                or not isinstance(c.get("arguments"), dict):
            raise ValueError(f"bad solution step {c!r}")
        calls.append(ToolCall(name=c["name"], arguments=c["arguments"]))
    return TaskSpec(name=name, domain=domain, instruction=instruction.strip(), files=files, tests=tests,
                    solution=calls, difficulty=0.5)


def llm_candidate(model: ChatModel, example: TaskSpec, rng_seed: str, sampling: Sampling, drops: Any,
                  loop: asyncio.AbstractEventLoop) -> Candidate | None:
    try:
        resp = loop.run_until_complete(model.chat(llm_prompt(example, example.domain), [], sampling))
    except ModelError:
        drops["llm_model_error"] += 1
        return None
    try:
        spec = parse_llm_task(resp.text, example.domain, f"llm_{example.name}")
    except ValueError:
        drops["llm_unparseable"] += 1
        return None
    return Candidate(spec, "llm", rng_seed)


# -- the method --------------------------------------------------------------------------------

def _terminal_world(world: World | WorkspaceWorld | None) -> WorkspaceWorld:
    if isinstance(world, WorkspaceWorld):
        return world
    found = get_world(DEFAULT_WORLD)
    if not isinstance(found, WorkspaceWorld):
        raise TypeError(f"world {DEFAULT_WORLD!r} is not a workspace world")
    return found


def synthesize_terminal(cfg: SynthesisConfig, world: World | WorkspaceWorld | None = None,
                        model: ChatModel | None = None, close_model: bool = False) -> SynthesisResult:
    """Up to `cfg.n_tasks` validated terminal tasks.

    Options: `modes` (subset of seed, skill, llm; default seed+skill, plus llm with a model),
    `domains` (restrict seeds and skills), `batch` (candidates per sandboxed test run).
    `close_model` closes the model at the end, on the event loop its calls ran on.
    A world that is not a workspace world (the CLI's default) is replaced by "terminal".
    """
    ws = _terminal_world(world)
    opts = TerminalOptions.model_validate(cfg.options)
    modes = list(opts.modes or (["seed", "skill"] + (["llm"] if model else [])))
    if not modes:
        raise ValueError(f"options.modes must be a non-empty subset of seed, skill, llm; got {modes}")
    if "llm" in modes and model is None:
        raise ValueError("mode 'llm' needs a model (options.generator: model, or model=...)")
    seeds = ws.seeds
    domains = list(opts.domains or sorted({s(random.Random(0)).domain for s in seeds.SEEDS.values()}))
    seed_names = [n for n in seeds.SEEDS if seeds.SEEDS[n](random.Random(0)).domain in domains]
    skill_domains = [d for d in domains if d in seeds.SKILLS]
    if not seed_names and not skill_domains:
        raise ValueError(f"no seeds or skills in domains {domains}")
    sampling = Sampling(temperature=0.8, max_tokens=opts.max_tokens, seed=cfg.seed)
    result = SynthesisResult()
    counts = {"seed": 0, "skill": 0, "llm": 0}
    limit = 4 * cfg.n_tasks + 8
    batch = opts.batch
    loop = asyncio.new_event_loop()  # one loop for every model call (clients bind to their loop)
    try:
        _run(cfg, ws, model, modes, seed_names, skill_domains, sampling, result, counts, limit, batch, loop)
    finally:
        if model is not None and close_model:
            loop.run_until_complete(model.aclose())
        loop.close()
    result.stats = {"attempted": result.stats.pop("attempted", 0), "emitted": len(result.tasks), "by_origin": counts,
                    "domains": sorted({t.metadata["domain"] for t in result.tasks})}
    result.stats["yield"] = round(len(result.tasks) / result.stats["attempted"], 3) if result.stats["attempted"] else 0.0
    return result


def _run(cfg: SynthesisConfig, ws: WorkspaceWorld, model: ChatModel | None, modes: list[str], seed_names: list[str],
         skill_domains: list[str], sampling: Sampling, result: SynthesisResult, counts: dict[str, int], limit: int,
         batch: int, loop: asyncio.AbstractEventLoop) -> None:
    i = attempted = 0
    while len(result.tasks) < cfg.n_tasks and attempted < limit:
        cands: list[Candidate] = []
        while len(cands) < min(batch, cfg.n_tasks - len(result.tasks) + 2) and attempted < limit:
            mode = modes[i % len(modes)]
            tag = f"{cfg.seed}:{i}"
            i += 1
            attempted += 1
            if mode == "seed" and seed_names:
                name = seed_names[(i // len(modes)) % len(seed_names)]
                cands.append(seed_candidate(ws, name, f"{name}:{tag}"))
            elif mode == "skill" and skill_domains:
                cands.append(skill_candidate(ws, skill_domains[(i // len(modes)) % len(skill_domains)], tag))
            elif mode == "llm" and model is not None and seed_names:
                example = seed_candidate(ws, seed_names[(i // len(modes)) % len(seed_names)], f"example:{tag}")
                cand = llm_candidate(model, example.spec, tag, sampling, result.drops, loop)
                if cand is not None:
                    cands.append(cand)
        for cand, task in validate(ws, cands, result.drops, batch):
            if result.has(task):
                result.drops["duplicate"] += 1
                continue
            if len(result.tasks) < cfg.n_tasks:
                result.accept(task, cfg.test_fraction)
                counts[cand.origin] += 1
        result.stats["attempted"] = attempted


class TerminalOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")

    generator: Literal["template", "model"] = "template"
    model: dict[str, Any] = Field(default_factory=dict)  # a ModelConfig, for generator: model
    modes: list[Literal["seed", "skill", "llm"]] | None = None  # default seed+skill, plus llm with a model
    domains: list[str] | None = None  # restrict seeds and skills
    batch: int = Field(12, ge=1)  # candidates per sandboxed test run
    max_tokens: int = Field(2048, ge=1)  # per model-written candidate


def _supports(world: World | WorkspaceWorld) -> bool:
    return isinstance(world, WorkspaceWorld)


@register(METHOD, options=TerminalOptions, supports=_supports)
def synthesize(cfg: SynthesisConfig, world: World) -> SynthesisResult:
    opts: TerminalOptions = cfg.method_options()
    if opts.generator == "template":
        return synthesize_terminal(cfg, world)
    from rollout.backends import ModelConfig, build_model

    model, owned = build_model(ModelConfig.model_validate(opts.model))
    return synthesize_terminal(cfg, world, model, close_model=owned)
