"""Typed, versioned records that cross every stage boundary.

A `Task` comes out of synthesis, a `Trajectory` out of rollout, a `Verdict` out of
verification. Records are plain pydantic models: no I/O, no behaviour beyond hashing.
Each carries `schema_version`; readers refuse versions they do not know.
"""

from __future__ import annotations

import hashlib
import json
import zlib
from collections.abc import Iterable, Iterator, Sequence
from typing import Any, Literal, overload

from pydantic import BaseModel, ConfigDict, Field, model_serializer, model_validator

TASK_SCHEMA_VERSION = 3  # 2: the `verification` block (was metadata keys); 3: `user.reactions`
# 2: turn_tokens (token ids and logprobs per turn); 3: `reference`; 4: termination `context_exhausted`
TRAJECTORY_SCHEMA_VERSION = 4
VERDICT_SCHEMA_VERSION = 1


def canonical_json(value: Any) -> str:
    """JSON with sorted keys and no whitespace: the form every content hash is taken of.
    Strict: NaN and infinities are not JSON, so they raise `ValueError`."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str,
                      allow_nan=False)


def content_hash(value: Any, length: int = 16) -> str:
    """Short sha256 hex digest of the canonical JSON of `value`."""
    return hashlib.sha256(canonical_json(value).encode()).hexdigest()[:length]


class PackedTasks(Sequence["Task"]):
    """Tasks held compactly (each as zlib-compressed JSON: about a tenth of the memory of
    the `Task` objects) and parsed again when read; their ids stay at hand (`ids`). A run's
    driver holds its task shards this way, so a run of any size keeps little of them."""

    def __init__(self, tasks: Iterable[Task] = ()) -> None:
        self._blobs: list[bytes] = []
        self.ids: list[str] = []
        for t in tasks:
            self.append(t)

    def append(self, task: Task) -> None:
        self._blobs.append(zlib.compress(task.model_dump_json().encode(), 1))
        self.ids.append(task.id)

    @classmethod
    def concat(cls, packs: Iterable[PackedTasks]) -> PackedTasks:
        """The tasks of `packs` in order as one (sharing their packed bytes)."""
        out = cls()
        for p in packs:
            out._blobs += p._blobs
            out.ids += p.ids
        return out

    def __len__(self) -> int:
        return len(self._blobs)

    @overload
    def __getitem__(self, i: int) -> Task: ...

    @overload
    def __getitem__(self, i: slice) -> list[Task]: ...

    def __getitem__(self, i: int | slice) -> Task | list[Task]:
        if isinstance(i, slice):
            return [Task.model_validate_json(zlib.decompress(b)) for b in self._blobs[i]]
        return Task.model_validate_json(zlib.decompress(self._blobs[i]))

    def __iter__(self) -> Iterator[Task]:
        for b in self._blobs:
            yield Task.model_validate_json(zlib.decompress(b))


def omit_when_none(*names: str) -> Any:
    """A model serializer (assign it in the class body) that leaves the fields `names` out of
    the dump while they are None: a field added later does not change the dump, and so every
    config hash, of a model that does not set it."""

    @model_serializer(mode="wrap")
    def _omit(self: BaseModel, handler: Any) -> dict[str, Any]:
        data = handler(self)
        for name in names:
            if data.get(name) is None:
                data.pop(name, None)
        return data

    return _omit


class Record(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=False)


class _VersionedRecord(Record):
    """A record whose raw data names its schema version (1 when it names none): data of an
    older version is upgraded as it is read (`_upgraded`), data of a version newer than the
    one this code writes (the default of `schema_version`) refused."""

    @model_validator(mode="before")
    @classmethod
    def _upgrade(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        version = data.get("schema_version") or 1
        newest = cls.model_fields["schema_version"].default
        if version > newest:
            raise ValueError(f"{cls.__name__.lower()} schema version {version} is newer than this code's"
                             f" {newest}; upgrade trajforge to read it")
        return cls._upgraded(data, version)

    @classmethod
    def _upgraded(cls, data: dict[str, Any], version: int) -> dict[str, Any]:
        return data


class ToolCall(Record):
    """One call the agent (or a reference path) makes: a tool name and its arguments."""

    name: str
    arguments: dict[str, Any] = Field(default_factory=dict)
    id: str | None = None

    def key(self) -> str:
        """Canonical form used for comparing and deduplicating calls."""
        return canonical_json({"name": self.name, "arguments": self.arguments})


class UserScenario(Record):
    """What the simulated user is and knows (τ²-bench's user scenario)."""

    persona: str = "a customer"
    reason: str = ""
    known_info: dict[str, str] = Field(default_factory=dict)
    unknown_info: list[str] = Field(default_factory=list)
    task_instructions: str = ""
    reactions: list[str] = Field(default_factory=list)  # how to act on a summary, a refusal, a question


class StateRef(Record):
    """How to rebuild a task's initial state: a world's generator seed and scale plus
    the Set Designer's patches (SQL statements), and the hash the result must have."""

    world: str
    seed: int
    scale: int
    patches: list[str] = Field(default_factory=list)
    state_hash: str


class Fact(Record):
    """Something the agent must tell the user (an id it created, an amount charged, the
    reason a request is refused). It counts as told when any of `any_of` appears in an
    assistant message, compared after `verifiers.communicate.normalize`."""

    label: str  # what it is, e.g. "new reservation id", "amount charged", "rule R06"
    any_of: list[str]
    kind: Literal["id", "amount", "date", "count", "rule", "text"] = "text"


ExpectedOutcome = Literal[
    "change",  # the request is carried out: the world changes
    "refusal",  # the policy forbids it: nothing changes and the user is told why
    "answer",  # a question: nothing changes and the user is told the answer
    "transfer",  # the policy says to hand the user to a human agent
]


class Verification(Record):
    """How a task is judged: everything verifiers read of a task besides its states.

    `basis` names the checks whose product is the reward (τ²-bench's reward basis; empty:
    the synthesis method's default); `verifier` is the task's own deciding verifier when it
    has one (`tests_pass` for workspace tasks); `outcome` is what a good conversation ends
    in; `communicate` the facts the user must be told; `constraints` a CoVe constraint set;
    `tests`, `fail_to_pass` and `pass_to_pass` a workspace task's hidden tests;
    `nl_assertions` statements about the conversation an LLM judge checks.
    """

    basis: list[str] = Field(default_factory=list)
    verifier: str | None = None
    outcome: ExpectedOutcome = "change"
    communicate: list[Fact] = Field(default_factory=list)
    constraints: list[dict[str, Any]] | None = None
    tests: dict[str, Any] | None = None
    fail_to_pass: list[str] = Field(default_factory=list)
    pass_to_pass: list[str] = Field(default_factory=list)
    nl_assertions: list[str] = Field(default_factory=list)


class Turn(Record):
    """One turn of a task's reference conversation: what the user says (the opening, then the
    scripted user's answers) or an assistant reply (text, or one tool call whose result comes
    from the world)."""

    role: Literal["assistant", "user"]
    content: str = ""
    tool_calls: list[ToolCall] = Field(default_factory=list)


# Task metadata keys that schema version 1 used for what `Verification` holds now.
_V1_VERIFICATION_KEYS = {"reward_basis": "basis", "verifier": "verifier", "constraints": "constraints",
                         "tests": "tests", "fail_to_pass": "fail_to_pass", "pass_to_pass": "pass_to_pass",
                         "nl_assertions": "nl_assertions"}


def _facts_from_v1(info: Any) -> list[dict[str, Any]]:
    """Version 1's `communicate_info` (a list of strings) as facts."""
    return [{"label": str(x), "any_of": [str(x)]} for x in info or []]


class Task(_VersionedRecord):
    """A verifiable task in an executable world. `id` is a hash of the content."""

    schema_version: int = TASK_SCHEMA_VERSION
    id: str = ""
    world: str
    method: str
    split: Literal["train", "test"] = "train"
    instruction: str
    user: UserScenario
    initial_state: StateRef
    target_state_hash: str
    target_diff: list[dict[str, Any]] = Field(default_factory=list)
    reference_solution: list[ToolCall] = Field(default_factory=list)
    # The reference conversation (from the user's opening message) that carries out the
    # reference solution the way the policy says: identify, look up, announce and confirm,
    # act, report. Empty for tasks without one (workspace tasks, schema version 1).
    dialogue: list[Turn] = Field(default_factory=list)
    verification: Verification = Field(default_factory=Verification)
    difficulty: float = 0.0
    metadata: dict[str, Any] = Field(default_factory=dict)

    @classmethod
    def _upgraded(cls, data: dict[str, Any], version: int) -> dict[str, Any]:
        """Read schema version 1, which kept the verification block in `metadata`."""
        if version == 1:
            data = dict(data)
            meta = dict(data.get("metadata") or {})
            block = dict(data.get("verification") or {})
            for old, new in _V1_VERIFICATION_KEYS.items():
                if old in meta:
                    value = meta.pop(old)
                    if value is not None:
                        block[new] = value
            if "communicate_info" in meta:
                block["communicate"] = _facts_from_v1(meta.pop("communicate_info"))
            data.update(metadata=meta, verification=block, schema_version=TASK_SCHEMA_VERSION)
        return data

    def compute_id(self) -> str:
        body = self.model_dump(exclude={"id", "split", "metadata"})
        return "task-" + content_hash(body)

    def with_id(self) -> Task:
        self.id = self.compute_id()
        return self


TerminationReason = Literal[
    "user_stop",  # the user simulator ended the conversation (###STOP###)
    "transfer",  # the agent or the user transferred to a human
    "out_of_scope",
    "agent_stop",  # the agent answered and the user had nothing left to say
    "max_turns",
    "context_exhausted",  # the conversation outgrew the model's context (the agent's doing, like max_turns)
    "model_error",  # the model backend failed after its retries
    "env_error",  # the environment itself failed (a bug, not an agent mistake)
    "user_error",  # the user simulator failed (its model erred or answered with garbage)
]


class Step(Record):
    """One agent action and what came back from it."""

    index: int
    turn: int
    action: ToolCall | None = None  # None when the model produced text only
    observation: str = ""
    error: str | None = None  # error class, e.g. "rule_violation", "bad_json", "unknown_tool"
    error_detail: str | None = None
    state_hash: str | None = None  # world state after the step
    latency_s: float = 0.0


class Sampling(Record):
    temperature: float = 0.7
    top_p: float = 1.0
    max_tokens: int = 256
    seed: int | None = None


class Usage(Record):
    prompt_tokens: int = 0
    completion_tokens: int = 0
    model_calls: int = 0


class TurnTokens(Record):
    """Token-exact record of one assistant turn, as the server reported it (vLLM with
    `return_token_ids`, `logprobs`, `prompt_logprobs`). Fields the server did not send
    are None. `message_index` points at the assistant message in `Trajectory.messages`."""

    turn: int
    message_index: int
    prompt_token_ids: list[int] | None = None
    completion_token_ids: list[int] | None = None
    completion_logprobs: list[float] | None = None
    prompt_logprobs: list[float | None] | None = None
    finish_reason: str | None = None


# Tool-schema lists shared by trajectories (`Trajectory.model_post_init`), by content; a few
# per world and version, capped so a stream of unusual lists cannot grow it without bound.
_SHARED_TOOLS: dict[str, list[dict[str, Any]]] = {}
_MAX_SHARED_TOOLS = 256


class Trajectory(_VersionedRecord):
    """One rollout of a task: OpenAI-format messages plus per-step records; `turn_tokens`
    holds token ids and logprobs per assistant turn when the backend provides them."""

    schema_version: int = TRAJECTORY_SCHEMA_VERSION
    id: str = ""
    task_id: str
    trial: int
    model: str
    sampling: Sampling = Field(default_factory=Sampling)
    messages: list[dict[str, Any]] = Field(default_factory=list)
    tools: list[dict[str, Any]] = Field(default_factory=list)
    steps: list[Step] = Field(default_factory=list)
    usage: Usage = Field(default_factory=Usage)
    termination: TerminationReason = "agent_stop"
    error_counts: dict[str, int] = Field(default_factory=dict)
    final_state_hash: str | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)
    turn_tokens: list[TurnTokens] = Field(default_factory=list)
    reference: bool = False  # a gold trajectory that replays the task's verified reference path

    @property
    def infra_failed(self) -> bool:
        """Whether the episode ended on infrastructure, not on anything the agent did: the
        model backend failed after its retries (`model_error`: connection, HTTP error,
        timeout, unknown model), or the user simulator's model did. Such a trajectory is
        never data: it is not cached as done, judged, curated or counted as a failure."""
        return self.termination == "model_error" or (
            self.termination == "user_error" and self.metadata.get("user_error_reason") == "model_error")

    def model_post_init(self, context: Any, /) -> None:
        # Every trajectory of a world carries the same tool schemas: hold one copy of each
        # (a third of a trajectory's memory). Treat `tools` as read-only; replace, never edit.
        if self.tools:
            key = json.dumps(self.tools)  # order kept: a copy in another key order is not shared
            shared = _SHARED_TOOLS.get(key)
            if shared is None and len(_SHARED_TOOLS) < _MAX_SHARED_TOOLS:
                shared = _SHARED_TOOLS[key] = self.tools
            if shared is not None:
                self.tools = shared

    @classmethod
    def _upgraded(cls, data: dict[str, Any], version: int) -> dict[str, Any]:
        """Read schema versions 1 and 2 (no `turn_tokens` in 1; `reference` in metadata)."""
        if version < 3:
            data = dict(data)
            meta = dict(data.get("metadata") or {})
            data["reference"] = bool(meta.pop("reference", data.get("reference", False)))
            data.update(metadata=meta, turn_tokens=data.get("turn_tokens") or [],
                        schema_version=TRAJECTORY_SCHEMA_VERSION)
        return data

    @staticmethod
    def make_id(task_id: str, trial: int, model: str, sampling: Sampling) -> str:
        return "traj-" + content_hash([task_id, trial, model, sampling.model_dump()])

    def actions(self) -> list[ToolCall]:
        return [s.action for s in self.steps if s.action is not None]


class Verdict(Record):
    """A verifier's judgement of one trajectory."""

    schema_version: int = VERDICT_SCHEMA_VERSION
    trajectory_id: str
    task_id: str
    verifier: str
    verifier_version: str
    passed: bool
    score: float
    reasons: list[str] = Field(default_factory=list)
    details: dict[str, Any] = Field(default_factory=dict)
