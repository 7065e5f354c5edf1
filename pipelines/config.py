"""The run configuration: one pydantic model composed of each layer's own config,
loadable from YAML. Its hash is the lineage's `config_hash`."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, model_serializer, model_validator

from curation.base import CURATORS
from data.records import content_hash
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

    rounds: int = 1
    generator_model: str = "embedded"  # starting generator (model folder or "embedded")
    solver_model: str = "embedded"  # starting solver
    generator_prompts: int = 2  # specs per generator GRPO step batch
    k_reward: int = 2  # solver samples per generator completion for r_diff (paper: 8)
    k_filter: int = 2  # solver re-solves per candidate in the filter (paper: 10)
    min_agreement: float = 0.2
    n_candidates: int = 4  # candidates the trained generator writes per round
    generator_max_tokens: int = 256
    solver_max_tokens: int = 96
    # When the trained generator yields fewer valid tasks than this, the scripted
    # generator tops the round up (labelled `generator: scripted` on each task) so the
    # solver still trains; set to 0 to train the solver on generated tasks only.
    min_solver_tasks: int = 2
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
    max_workers: int = 2  # thread pool size
    address: str | None = None  # dask scheduler ("tcp://host:8786") or ray address ("ray://host:10001")
    n_workers: int = 2  # local Dask cluster processes when no address is given
    threads_per_worker: int = 1
    # A stage fails loudly when no shard finishes for this long (a hung server, a stuck
    # sandbox) instead of waiting for ever; None disables the watchdog.
    stall_timeout_s: float | None = 1800.0


class AuditConfig(BaseModel):
    """Verifier self-audit before rollout (verifiers/audit.py): every task's gold solution must
    pass and its mutants fail; failing tasks are excluded and counted, and a verifier failing
    on more than `max_failure_rate` of its tasks blocks the run (and so the release)."""

    model_config = ConfigDict(extra="forbid")

    enabled: bool = True
    max_failure_rate: float = 0.1
    max_per_kind: int = 3  # mutants per mutation kind per task


class HygieneConfig(BaseModel):
    """Release hygiene (curation/hygiene.py): secret/PII scrubbing, exact and MinHash
    near-duplicate removal, n-gram decontamination against registered evaluation sets."""

    model_config = ConfigDict(extra="forbid")

    enabled: bool = True
    dedup_threshold: float = 0.85
    # Releases here are full snapshots, so by default a row is not dropped for being in an
    # earlier release; turn this on for incremental releases.
    dedup_against_earlier: bool = False
    # Evaluation sets to keep out: name -> JSONL file of {"text": ..., "tool_calls": "..."}
    eval_sets: dict[str, str] = Field(default_factory=dict)
    drop_n: int | None = 13  # drop rows sharing an n-gram this long with an eval set (None: report only)
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


class VLLMLaunchConfig(BaseModel):
    """Start vLLM for the rollout stage (GPU machines): `replicas` servers of `server` on
    consecutive ports, one per `gpus_per_replica` GPUs; the rollout's model becomes an
    OpenAI-compatible client over all of them, and the servers stop when rollouts are done."""

    model_config = ConfigDict(extra="forbid")

    server: VLLMServerConfig
    replicas: int = 1
    gpus_per_replica: int = 1
    startup_timeout_s: float = 900.0


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
    reference_trials: int = 1  # gold trajectories per task from the verified reference path
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
    shard_size: int = 4  # tasks per Prefect task
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
    sft: SFTStageConfig = Field(default_factory=SFTStageConfig)
    grpo: GRPOStageConfig = Field(default_factory=GRPOStageConfig)
    self_play: SelfPlayLoopConfig = Field(default_factory=SelfPlayLoopConfig)

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

    @model_serializer(mode="wrap")
    def _without_unset_parts_url(self, handler: Any) -> dict[str, Any]:
        # no parts_url: the dump (and so every config hash) is what it was before the field
        data = handler(self)
        if data.get("parts_url") is None:
            data.pop("parts_url", None)
        return data

    def config_hash(self) -> str:
        return content_hash(self.model_dump(mode="json"))

    def content_hash(self) -> str:
        """The hash of every setting but the release options (`release`) and where parts are
        kept (`parts_url`): the part of the config a release's fingerprint goes by. Any other
        change, even one that does not change a row (runner, cache), counts as new content."""
        return content_hash(self.model_dump(mode="json", exclude={"release", "parts_url"}))


def _merge(base: dict[str, Any], update: dict[str, Any]) -> dict[str, Any]:
    """`update` laid over `base`, mappings merged key by key."""
    out = dict(base)
    for key, value in update.items():
        out[key] = _merge(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
    return out


def load_config(path: Path | str | None, overrides: dict[str, Any] | None = None) -> RunConfig:
    """Read a YAML config (or the defaults) and apply dotted overrides like {"rollout.trials": 4}.

    Both are merged onto the full default config, so setting one field of a section keeps
    the section's other defaults (including defaults that differ from the section class's
    own, e.g. `self_play.generator.max_steps`).
    """
    data: dict[str, Any] = {}
    if path is not None:
        text = Path(path).read_text()
        data = yaml.safe_load(text) or {}
        if not isinstance(data, dict):
            raise ValueError(f"{path}: a config file must hold a mapping at the top level")
    for dotted, value in (overrides or {}).items():
        node = data
        *parents, leaf = dotted.split(".")
        for p in parents:
            node = node.setdefault(p, {})
        node[leaf] = value
    return RunConfig.model_validate(_merge(RunConfig().model_dump(mode="json"), data))
