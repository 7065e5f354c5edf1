"""The run configuration: one pydantic model composed of each layer's own config,
loadable from YAML. Its hash is the lineage's `config_hash`."""

from __future__ import annotations

import difflib
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from curation.base import CURATORS
from data.records import content_hash, omit_when_none
from rollout.collector import ModelConfig, RolloutConfig
from rollout.vllm_server import VLLMServerConfig
from synthesis.base import SynthesisConfig
from train.config import GRPOStageConfig, SFTStageConfig
from verifiers.base import VERIFIERS


class SolverServeConfig(BaseModel):
    """Serve the round's frozen solver with vLLM (GPU machines): `vllm serve <solver
    checkpoint>` starts before the generator's GRPO step (whose r_diff queries the solver)
    and the generate/filter phase, the solver's OpenAI-compatible client points at it, and
    it stops before the solver's own GRPO step. `server.model` is replaced by the round's
    solver checkpoint; every other `vllm serve` option is taken as given."""

    model_config = ConfigDict(extra="forbid")

    server: VLLMServerConfig = Field(default_factory=lambda: VLLMServerConfig(
        model="<solver checkpoint>", served_model_name="solver", port=8011, gpu_memory_utilization=0.3))
    startup_timeout_s: float = Field(900.0, gt=0)
    max_in_flight: int = Field(64, ge=1)  # concurrent requests of the solver's client
    timeout_s: float = Field(120.0, gt=0)  # per request


class SelfPlayLoopConfig(BaseModel):
    """The Tool-R0 round loop (methods.md §3): freeze solver → generator GRPO → generate and
    filter → solver GRPO. CPU-smoke defaults; the paper runs 3 rounds × 50 steps."""

    model_config = ConfigDict(extra="forbid")

    rounds: int = Field(1, ge=0)
    generator_model: str = "embedded"  # starting generator (model folder or "embedded")
    solver_model: str = "embedded"  # starting solver
    generator_prompts: int = Field(2, ge=1)  # specs per generator GRPO step batch
    k_reward: int = Field(2, ge=1)  # solver samples per generator completion for r_diff (paper: 8)
    k_filter: int = Field(2, ge=1)  # solver re-solves per candidate in the filter (paper: 10)
    min_agreement: float = Field(0.2, ge=0, le=1)
    n_candidates: int = Field(4, ge=1)  # candidates the trained generator writes per round
    generator_max_tokens: int = Field(256, ge=1)
    solver_max_tokens: int = Field(96, ge=1)
    # When the trained generator yields fewer valid tasks than this, the scripted
    # generator tops the round up (labelled `generator: scripted` on each task) so the
    # solver still trains; set to 0 to train the solver on generated tasks only.
    min_solver_tasks: int = Field(2, ge=0)
    # Worlds the round writes tasks for (empty: `synthesis.world`); candidates are split
    # evenly over them and `per_world_quota` caps each world's share of the release.
    worlds: list[str] = Field(default_factory=list)
    # Curriculum (methods.md §3): the kept candidates are picked easy/medium/hard by p̂
    # (bands: hard < curriculum_bands[0] <= medium < curriculum_bands[1] <= easy) in the
    # `curriculum_mix` shares; `curriculum_size` tasks per round, or None for the largest
    # selection that keeps the mix exactly. Scripted top-up tasks are outside the mix.
    curriculum_mix: tuple[float, float, float] = (0.2, 0.5, 0.3)
    curriculum_bands: tuple[float, float] = (0.5, 0.9)
    curriculum_size: int | None = Field(None, ge=0)
    per_world_quota: int | None = Field(None, ge=1)
    solver_server: SolverServeConfig | None = None  # serve the frozen solver with vLLM (GPU)

    @model_validator(mode="after")
    def _check_curriculum(self) -> SelfPlayLoopConfig:
        if min(self.curriculum_mix) < 0 or sum(self.curriculum_mix) <= 0:
            raise ValueError(f"self_play.curriculum_mix must be non-negative with a positive sum, "
                             f"got {self.curriculum_mix}")
        lo, hi = self.curriculum_bands
        if not 0 <= lo <= hi <= 1:
            raise ValueError(f"self_play.curriculum_bands must satisfy 0 <= hard/medium <= medium/easy <= 1, "
                             f"got {self.curriculum_bands}")
        return self
    generator: GRPOStageConfig = Field(default_factory=lambda: GRPOStageConfig(
        max_steps=1, per_device_train_batch_size=2, num_generations=2, max_completion_length=96))
    solver: GRPOStageConfig = Field(default_factory=lambda: GRPOStageConfig(
        max_steps=1, per_device_train_batch_size=2, num_generations=2, max_completion_length=64))


class RunnerConfig(BaseModel):
    """Where a flow's shards run: threads here (default), a Dask cluster, or a Ray cluster."""

    model_config = ConfigDict(extra="forbid")

    kind: Literal["thread", "dask", "ray"] = "thread"
    max_workers: int = Field(2, ge=1)  # thread pool size
    address: str | None = None  # dask scheduler ("tcp://host:8786") or ray address ("ray://host:10001")
    n_workers: int = Field(2, ge=1)  # local Dask cluster processes when no address is given
    threads_per_worker: int = Field(1, ge=1)
    # A stage fails loudly when no shard finishes for this long (a hung server, a stuck
    # sandbox) instead of waiting for ever; None disables the watchdog.
    stall_timeout_s: float | None = Field(1800.0, gt=0)
    # Synthesis task runs: the seed ranges (`synthesis_shard_tasks`) packed into at most this
    # many, in order; None: one task run a range. The tasks are the same either way.
    synthesis_shards: int | None = Field(None, ge=1)

    _without_unset_synthesis_shards = omit_when_none("synthesis_shards")


class AuditConfig(BaseModel):
    """Verifier self-audit before rollout (verifiers/audit.py): every task's gold solution must
    pass and its mutants fail; failing tasks are excluded and counted, and a verifier failing
    on more than `max_failure_rate` of its tasks blocks the run (and so the release)."""

    model_config = ConfigDict(extra="forbid")

    enabled: bool = True
    max_failure_rate: float = Field(0.1, ge=0, le=1)
    max_per_kind: int = Field(3, ge=0)  # mutants per mutation kind per task


class HygieneConfig(BaseModel):
    """Release hygiene (curation/hygiene/): secret/PII scrubbing, exact and MinHash
    near-duplicate removal, n-gram decontamination against registered evaluation sets."""

    model_config = ConfigDict(extra="forbid")

    enabled: bool = True
    dedup_threshold: float = Field(0.85, ge=0, le=1)
    # Releases here are full snapshots, so by default a row is not dropped for being in an
    # earlier release; turn this on for incremental releases.
    dedup_against_earlier: bool = False
    # Evaluation sets to keep out: name -> JSONL file of {"text": ..., "tool_calls": "..."}
    eval_sets: dict[str, str] = Field(default_factory=dict)
    drop_n: int | None = Field(13, ge=1)  # drop rows sharing an n-gram this long with an eval set (None: report only)
    # τ²-bench's test split (airline, retail, telecom; `curation.hygiene.decontamination.tau2_eval_sets`) as evaluation
    # sets too, when the tau2 extra is installed (without it there is nothing to check against).
    tau2_test: bool = True
    # Drop rows whose instruction text (user turns, a row's task scenario) is at least this similar
    # (character 5-gram Jaccard) to an eval-set text (None: n-grams only).
    similarity: float | None = Field(0.5, ge=0, le=1)
    # Judge every row that scrubbing changed again, on the scrubbed text (sft: the trajectory with the
    # task's primary verifier; rl: the scrubbed task's gold with the row's verifier); drop those that fail.
    replay: bool = True


class CardConfig(BaseModel):
    """Hub metadata of the release cards (the YAML header of each release's README.md)."""

    model_config = ConfigDict(extra="forbid")

    # A Hub license id (apache-2.0, cc-by-4.0, other, ...). "unknown" until you decide: the
    # rows hold your model's outputs and your worlds' data.
    license: str = "unknown"
    language: list[str] = Field(default_factory=lambda: ["en"])
    pretty_name: str | None = None  # default: "<run name> <sft|rl>"


class ReleaseConfig(BaseModel):
    """How a run publishes. A run whose release fingerprint (its rows and its config, these
    options excepted: `RunConfig.content_hash`) equals the one `releases/LATEST.json` names
    publishes nothing new and reports the release "unchanged"; `force_new_version` publishes
    a new version of the same content anyway."""

    model_config = ConfigDict(extra="forbid")

    force_new_version: bool = False


class FailureConfig(BaseModel):
    """When infrastructure failures fail the run. A trajectory that ended on one (the model
    server unreachable, an HTTP error after retries, a timeout, a wrong model name: the
    `model_error` termination, or a user simulator whose model failed) is recorded as such,
    never cached as done, and never data. The run checks the endpoint before rolling out
    (`preflight`), and exits non-zero and publishes nothing when any shard's policy
    trajectories all failed so, or more than `max_infra_failure_rate` of them did, unless
    `allow_partial` (`trajforge run --allow-partial`)."""

    model_config = ConfigDict(extra="forbid")

    max_infra_failure_rate: float = Field(0.05, ge=0.0, le=1.0)
    allow_partial: bool = False
    preflight: bool = True


class RetentionConfig(BaseModel):
    """How many versions of each intermediate dataset (`datasets/tasks`, `trajectories`,
    `verdicts`, `curated_*`) are kept; older ones are removed after a run, except those the
    release `LATEST.json` names in its lineage. None keeps every version."""

    model_config = ConfigDict(extra="forbid")

    keep_versions: int | None = Field(10, ge=1)


class VLLMLaunchConfig(BaseModel):
    """Start vLLM for the rollout stage (GPU machines): `replicas` servers of `server` on
    consecutive ports, one per `gpus_per_replica` GPUs; the rollout's model becomes an
    OpenAI-compatible client over all of them, and the servers stop when rollouts are done."""

    model_config = ConfigDict(extra="forbid")

    server: VLLMServerConfig
    replicas: int = Field(1, ge=1)
    gpus_per_replica: int = Field(1, ge=1)
    startup_timeout_s: float = Field(900.0, gt=0)


class TeachConfig(BaseModel):
    """What `trajforge teach` (`pipelines.teach.teach_flow`) does after the run: SFT on the
    sft release, then (with `grpo`) GRPO from the SFT model on the rl release, each model
    judged against the base on the held-out tasks (`train.value.evaluate_pair`)."""

    model_config = ConfigDict(extra="forbid")

    sft: bool = True
    grpo: bool = False
    eval_split: str = "test"
    eval_trials: int = Field(1, ge=1)
    eval_max_turns: int = Field(12, ge=1)
    eval_max_tasks: int | None = Field(None, ge=1)  # held-out tasks played as episodes (None: all)
    eval_max_dialogues: int | None = Field(None, ge=1)  # reference dialogues scored (None: those tasks')
    eval_max_tokens: int = Field(256, ge=1)  # tokens an episode turn may take (greedy)
    episodes: bool = True  # episode pass rate (scripted user, composite verdict)
    next_action: bool = True  # teacher-forced next-action accuracy on the reference dialogues
    # Benchmarks whose own test tasks each model also plays against the base, e.g.
    # "tau2:airline" (τ²-bench's tasks and evaluator: tasks no template of ours wrote).
    benchmarks: list[str] = Field(default_factory=list)
    benchmark_max_tasks: int | None = Field(None, ge=1)  # tasks of each benchmark (None: all)

    @field_validator("benchmarks")
    @classmethod
    def _known_benchmarks(cls, names: list[str]) -> list[str]:
        if names:
            from train.evaluate import parse_benchmark

            for name in names:
                parse_benchmark(name)
        return names


class RunConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = "airline-default"
    synthesis: SynthesisConfig = Field(default_factory=SynthesisConfig)
    # More task sources for the same run (another world or method), e.g. terminal tasks next
    # to tool-use ones: each is synthesized like `synthesis` and the tasks are concatenated.
    synthesis_mix: list[SynthesisConfig] = Field(default_factory=list)
    rollout: RolloutConfig = Field(default_factory=RolloutConfig)
    audit: AuditConfig = Field(default_factory=AuditConfig)
    hygiene: HygieneConfig = Field(default_factory=HygieneConfig)
    vllm: VLLMLaunchConfig | None = None  # launch vLLM servers for the rollout stage
    reference_trials: int = Field(1, ge=0)  # gold trajectories per task from the verified reference path
    # Every configured verifier judges the tasks it applies to; the task's primary one
    # (verifiers.base.primary_verifier) decides curation.
    # The composite (the task's reward basis: outcome, communication, process) decides; the
    # parts are also recorded on their own for the card.
    verifiers: list[str] = Field(default_factory=lambda: ["composite", "state_equivalence", "constraint_satisfaction",
                                                          "tests_pass", "communicate", "policy"])
    # Options of each verifier by name, validated against its options model.
    verifier_options: dict[str, dict[str, Any]] = Field(default_factory=dict)
    # The model verifiers that take one are built with (the LLM judge; the composite's judge).
    judge: ModelConfig | None = None
    curation: str = "outcome"
    curation_options: dict[str, Any] = Field(default_factory=dict)  # e.g. topology: {sft_per_task: 2}
    report: bool = True  # write report.html (funnel, pass rates, topology graphs) into each release
    shard_size: int = Field(4, ge=1)  # tasks per Prefect task
    # Tasks per synthesis seed range (`pipelines.stages.synthesis.seed_ranges`; None: 50): a
    # source of more tasks is synthesized range by range, each its own shard. A data setting
    # (like a seed): changing it changes the tasks of sources larger than one range.
    synthesis_shard_tasks: int | None = Field(None, ge=1)
    # Shard results are cached by a key of their inputs (pipelines.keys): an identical
    # rerun, or a killed run started again, recomputes only shards whose inputs changed.
    cache: bool = True
    # a shard cache shared beyond `out` (default: synthesis in <out>/cache, shards as their parts)
    cache_dir: str | None = None
    # Where shards write their parts (`data.parts`): default <out>/parts; an fsspec URL
    # (s3://bucket/parts, gs://..., file:///nfs/parts) that every worker can reach lets a
    # cluster without a shared file system write them (the driver then copies them).
    parts_url: str | None = None
    runner: RunnerConfig = Field(default_factory=RunnerConfig)
    # Mirror every release to this fsspec URL (s3://bucket/trajforge, gs://..., file://...)
    # after it is committed locally; `_SUCCESS` and LATEST.json are written last there.
    publish_to: str | None = None
    card: CardConfig = Field(default_factory=CardConfig)
    release: ReleaseConfig = Field(default_factory=ReleaseConfig)
    failures: FailureConfig = Field(default_factory=FailureConfig)
    retention: RetentionConfig = Field(default_factory=RetentionConfig)
    sft: SFTStageConfig = Field(default_factory=SFTStageConfig)
    grpo: GRPOStageConfig = Field(default_factory=GRPOStageConfig)
    self_play: SelfPlayLoopConfig = Field(default_factory=SelfPlayLoopConfig)
    teach: TeachConfig = Field(default_factory=TeachConfig)

    @model_validator(mode="before")
    @classmethod
    def _known_names(cls, data: Any) -> Any:
        """Worlds, synthesis methods, model backends, verifiers and the curation strategy are
        looked up in their registries before anything else is validated, so a misspelled name
        is one error naming the setting and the known names (not a KeyError from deep inside)."""
        if isinstance(data, dict):
            for where, what, name, known in _named_plugins(data):
                if name not in known:
                    raise ValueError(unknown_name(where, what, name, known))
        return data

    @model_validator(mode="after")
    def _counts_of_tasks(self) -> RunConfig:
        for where, s in [("synthesis", self.synthesis),
                         *((f"synthesis_mix[{i}]", m) for i, m in enumerate(self.synthesis_mix))]:
            if s.n_tasks < 1:
                raise ValueError(f"{where}.n_tasks must be at least 1, got {s.n_tasks}")
            if not 0 <= s.test_fraction <= 1:
                raise ValueError(f"{where}.test_fraction must be between 0 and 1, got {s.test_fraction}")
        return self

    @model_validator(mode="after")
    def _plugins_and_their_options(self) -> RunConfig:
        """Every named plugin exists and its options fit its options model."""
        for name in self.verifiers:
            VERIFIERS.plugin(name)
        stray = sorted(set(self.verifier_options) - set(self.verifiers))
        if stray:
            raise ValueError(f"verifier_options for {stray}, which are not in verifiers {self.verifiers}")
        for name, options in self.verifier_options.items():
            VERIFIERS.parse_options(name, options)
        needs = [n for n in self.verifiers if getattr(VERIFIERS.get(n), "needs_model", False)]
        if needs and self.judge is None:
            raise ValueError(f"verifiers {needs} need a model: set judge (a model config, e.g. kind: openai)")
        CURATORS.parse_options(self.curation, self.curation_options)
        return self

    _without_unset_parts_url = omit_when_none("parts_url", "synthesis_shard_tasks")

    def config_hash(self) -> str:
        return content_hash(self.model_dump(mode="json"))

    def content_hash(self) -> str:
        """The hash of every setting but the release options (`release`), where parts are
        kept (`parts_url`) and how many dataset versions are kept (`retention`): the part of
        the config a release's fingerprint goes by. Any other change, even one that does not
        change a row (runner, cache), counts as new content."""
        return content_hash(self.model_dump(mode="json", exclude={"release", "parts_url", "retention"}))


def _merge(base: dict[str, Any], update: dict[str, Any]) -> dict[str, Any]:
    """`update` laid over `base`, mappings merged key by key."""
    out = dict(base)
    for key, value in update.items():
        out[key] = _merge(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
    return out


class ConfigError(ValueError):
    """A run config that cannot be used, said in one line that names the setting."""


def unknown_name(where: str, what: str, name: object, known: list[str]) -> str:
    """`<where>: unknown <what> 'x' (known: a, b, c)`, with a close match suggested."""
    close = difflib.get_close_matches(str(name), known, n=1)
    hint = f"; did you mean {close[0]!r}?" if close else ""
    return f"{where}: unknown {what} {name!r} (known: {', '.join(known)}){hint}"


def _named_plugins(data: dict[str, Any]) -> list[tuple[str, str, Any, list[str]]]:
    """(setting, what it names, name, known names) for every registry name a raw config
    holds. The registries are the ones the sections' own validators load anyway."""
    from envs.registry import list_worlds
    from rollout.backends import BACKENDS
    from synthesis.base import METHODS, canonical_method

    found: list[tuple[str, str, Any, list[str]]] = []
    sources = [("synthesis", data.get("synthesis"))]
    sources += [(f"synthesis_mix[{i}]", m) for i, m in enumerate(data.get("synthesis_mix") or [])]
    for where, s in sources:
        if isinstance(s, dict):
            if "world" in s:
                found.append((f"{where}.world", "world", s["world"], list_worlds()))
            if "method" in s:
                name = s["method"]
                found.append((f"{where}.method", "synthesis method",
                              canonical_method(name) if isinstance(name, str) else name, METHODS.names()))
    rollout = data.get("rollout") if isinstance(data.get("rollout"), dict) else {}
    user = rollout.get("user") if isinstance(rollout.get("user"), dict) else {}
    for where, model in (("rollout.model", rollout.get("model")), ("rollout.user.model", user.get("model")),
                         ("judge", data.get("judge"))):
        if isinstance(model, dict) and "kind" in model:
            found.append((f"{where}.kind", "model kind", model["kind"], BACKENDS.names()))
    verifiers = data.get("verifiers")
    if isinstance(verifiers, list):
        found += [(f"verifiers[{i}]", "verifier", v, VERIFIERS.names()) for i, v in enumerate(verifiers)]
    if "curation" in data:
        found.append(("curation", "curation strategy", data["curation"], CURATORS.names()))
    return found


def describe(exc: ValidationError) -> str:
    """A validation error in one line: each problem as `setting: what is wrong`, an unknown
    key with the section's known keys."""
    problems = []
    for err in exc.errors():
        loc = ".".join(str(p) if isinstance(p, str) else f"[{p}]" for p in err["loc"]).replace(".[", "[")
        msg = str(err["msg"]).removeprefix("Value error, ").removeprefix("Assertion failed, ").replace(
            "Input should be", "must be")
        if err["type"] == "extra_forbidden":
            known = _section_keys(err["loc"][:-1])
            close = difflib.get_close_matches(str(err["loc"][-1]), known, n=1)
            msg = "unknown setting" + (f"; did you mean {'.'.join([*map(str, err['loc'][:-1]), close[0]])!r}?"
                                       if close else f" (known: {', '.join(known)})" if known else "")
        elif "input" in err and err["type"] not in ("value_error", "assertion_error", "missing"):
            msg += f", got {err['input']!r}"
        problems.append(f"{loc}: {msg}" if loc and not msg.startswith(loc) else msg)
    return " ".join("; ".join(problems).split())


def _section_keys(loc: tuple[Any, ...]) -> list[str]:
    """The field names of the config section at `loc` (empty when it is not a model)."""
    model: Any = RunConfig
    for part in loc:
        field = model.model_fields.get(part) if isinstance(part, str) and hasattr(model, "model_fields") else None
        if field is None:
            return []
        model = next((a for a in (field.annotation, *getattr(field.annotation, "__args__", ()))
                      if isinstance(a, type) and issubclass(a, BaseModel)), None)
        if model is None:
            return []
    return sorted(model.model_fields)


def read_config_file(path: Path | str) -> dict[str, Any]:
    """The mapping a YAML config file holds; `ConfigError` for a missing, unreadable or
    malformed file, with the line and column of a YAML syntax error."""
    path = Path(path)
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise ConfigError(f"config file {path} not found") from None
    except OSError as exc:
        raise ConfigError(f"config file {path} cannot be read: {exc.strerror or exc}") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise ConfigError(f"config file {path} is not valid YAML{where}: {problem}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: a config file must hold a mapping at the top level, not {type(data).__name__}")
    return data


def load_config(path: Path | str | None, overrides: dict[str, Any] | None = None) -> RunConfig:
    """Read a YAML config (or the defaults) and apply dotted overrides like {"rollout.trials": 4}.

    Both are merged onto the full default config, so setting one field of a section keeps
    the section's other defaults (including defaults that differ from the section class's
    own, e.g. `self_play.generator.max_steps`). Any problem is a `ConfigError` (a
    `ValueError`) whose message is one line naming the setting.
    """
    data: dict[str, Any] = read_config_file(path) if path is not None else {}
    for dotted, value in (overrides or {}).items():
        node = data
        *parents, leaf = dotted.split(".")
        for i, p in enumerate(parents):
            node = node.setdefault(p, {})
            if not isinstance(node, dict):
                raise ConfigError(f"cannot set {dotted}: {'.'.join(parents[:i + 1])} is not a section")
        node[leaf] = value
    try:
        return RunConfig.model_validate(_merge(RunConfig().model_dump(mode="json"), data))
    except ValidationError as exc:
        where = f"{path}: " if path is not None else ""
        raise ConfigError(f"{where}{describe(exc)}") from exc
    except KeyError as exc:  # a registry lookup the name checks above do not cover
        raise ConfigError(str(exc.args[0]) if exc.args else repr(exc)) from exc
