"""The verifier contract and registry.

A verifier judges one trajectory of one task and returns a `Verdict` carrying its name and
version. Verifiers execute; they never ask a model unless they say so (`needs_model`).
What the rest of the pipeline needs to know of a verifier is an attribute of it:

- `applies_to(task)`: whether it can judge the task (verifiers without one judge any task);
- `basis_name`: the reward-basis name a task's `verification.basis` calls it by ("DB", ...);
- `audit_kinds`: the mutation kinds its self-audit must see it kill (`verifiers/audit.py`),
  and `alternative_kinds`: the good variants of the gold it must pass;
- `needs_model` / `takes_model`: it is built with a model (`model=`), which it needs or may use.

A verifier is one typed object: its options are one pydantic model that forbids unknown
keys (`options_model`, a class attribute; `RunConfig.verifier_options[name]` is validated
against it), and it is built as ``cls(options, model=None)`` with an instance of it
(`BaseVerifier.__init__` keeps it as `self.options`). Register one with
``@register("name")`` and list its module in `VERIFIERS`' built-ins (or name it in a
``trajforge.verifiers`` entry point); registration refuses `audit_kinds` /
`alternative_kinds` that name no known kind (`UnknownKindError`, with the nearest name).
`get_verifier(name, options, model=...)` builds it. A verifier whose constructor takes its
options as keywords (no `options` parameter) is still built that way, from
``register("name", options=OptionsModel)``.
"""

from __future__ import annotations

import difflib
import functools
import inspect
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, ClassVar, Protocol, TypeVar

from pydantic import BaseModel, ConfigDict, ValidationError

from data.records import Task, Trajectory, Verdict
from data.registry import PluginOptionsError, Registry

# Mutation kinds of the self-audit (verifiers/audit.py): known-bad variants of the gold.
WRITE_KINDS = frozenset({"drop_write", "change_argument", "extra_write", "stop_early"})
MUTATION_KINDS = ("drop_write", "change_argument", "extra_write", "stop_early", "drop_communication",
                  "world_mutation", "detour", "skip_confirmation", "ungrounded_id", "skip_identity",
                  "write_after_decline", "claim_success", "omit_result")
# Good variants of the gold that a verifier of outcomes must still pass.
ALTERNATIVE_KINDS = ("reorder_writes", "reorder_reads", "skip_reads", "extra_reads", "other_identity")


class Verifier(Protocol):
    name: str
    version: str
    basis_name: str | None
    needs_model: bool
    audit_kinds: frozenset[str]
    alternative_kinds: frozenset[str]

    def applies_to(self, task: Task) -> bool: ...

    def verify(self, task: Task, trajectory: Trajectory) -> Verdict: ...


class VerifierOptions(BaseModel):
    """Options every execution verifier takes."""

    model_config = ConfigDict(extra="forbid")

    # Any termination other than the agent or the user stopping scores 0 (τ²-bench).
    require_clean_termination: bool = True


class BaseVerifier:
    """Defaults of the contract: judges every task, held to the write mutations, built from
    one options object (an `options_model` instance; None: its defaults; a mapping, or the
    options' fields as keywords, as code written before options objects does, is validated
    against it)."""

    name = ""
    version = "0"
    basis_name: str | None = None
    needs_model = False
    takes_model = False
    audit_kinds: frozenset[str] = WRITE_KINDS
    alternative_kinds: frozenset[str] = frozenset()
    options_model: ClassVar[type[BaseModel]] = VerifierOptions
    options: BaseModel

    def __init__(self, options: BaseModel | Mapping[str, Any] | None = None, model: Any = None,
                 **fields: Any) -> None:
        if fields:
            if options is not None:
                raise TypeError(f"verifier {self.name!r}: give an options object or its fields, not both")
            options = fields
        self.options = self.parse_options(options)
        self.model = model

    @classmethod
    def parse_options(cls, options: BaseModel | Mapping[str, Any] | None) -> BaseModel:
        """`options` as an instance of `options_model` (`PluginOptionsError` naming the
        verifier when they do not fit it)."""
        if isinstance(options, cls.options_model):
            return options
        if isinstance(options, BaseModel):
            options = {k: getattr(options, k) for k in type(options).model_fields}
        try:
            return cls.options_model.model_validate(dict(options or {}))
        except ValidationError as exc:
            raise PluginOptionsError(f"options of verifier {cls.name!r}: {exc}") from exc

    def applies_to(self, task: Task) -> bool:
        return True

    def verdict(self, task: Task, trajectory: Trajectory, passed: bool, score: float, reasons: list[str],
                details: dict[str, Any] | None = None) -> Verdict:
        """This verifier's verdict on `trajectory` of `task` (the score rounded to 6 places)."""
        return Verdict(trajectory_id=trajectory.id, task_id=task.id, verifier=self.name,
                       verifier_version=self.version, passed=passed, score=round(score, 6), reasons=reasons,
                       details=details or {})


class OutcomeVerifier(BaseVerifier):
    """A verifier of outcomes: it must pass every good variant of the gold
    (`ALTERNATIVE_KINDS`) and takes the options of every execution verifier."""

    alternative_kinds = frozenset(ALTERNATIVE_KINDS)

    options: VerifierOptions  # built from one options object (`BaseVerifier.__init__`)


CLEAN_TERMINATIONS = {"user_stop", "agent_stop", "transfer", "out_of_scope"}


def episode_checks(trajectory: Trajectory, replay_hash: str, score: float,
                   require_clean_termination: bool, task: Task | None = None) -> tuple[float, bool, list[str]]:
    """Checks every execution verifier makes of the episode itself.

    Returns (score, clean, reasons): any termination other than the agent or the user
    stopping scores 0 (τ²-bench) when `require_clean_termination`; a transfer to a human is a
    clean ending only for a task whose expected outcome is a transfer (`task` given), and for
    such a task any other ending is not clean (it was to end with a human agent); a replay
    that does not reproduce the state recorded during rollout is reported.
    """
    reasons: list[str] = []
    clean = trajectory.termination in CLEAN_TERMINATIONS
    if clean and trajectory.termination == "transfer" and task is not None and task.verification.outcome != "transfer":
        clean = False
        reasons.append("transferred to a human, but the task can be done within the policy")
    elif task is not None and task.verification.outcome == "transfer" and trajectory.termination != "transfer":
        clean = False
        if require_clean_termination:
            reasons.append("the policy sends this request to a human agent, but the conversation never transferred")
    elif require_clean_termination and not clean:
        reasons.append(f"terminated by {trajectory.termination}")
    if require_clean_termination and not clean:
        score = 0.0
    if trajectory.final_state_hash and trajectory.final_state_hash != replay_hash:
        reasons.append("replayed state differs from the state recorded during rollout")
    return score, clean, reasons


class RecentVerdicts:
    """A verifier that gives a verdict again (a copy) when asked about the same task and
    trajectory objects as one of its last `size` calls: a run's standalone verifiers and
    the composite's components judge the same trajectories, so a shared instance runs once
    for both (`share_components`)."""

    def __init__(self, inner: Verifier, size: int = 1) -> None:
        self.inner = inner
        self.size = size
        self._recent: OrderedDict[tuple[int, int], tuple[Task, Trajectory, Verdict]] = OrderedDict()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def verify(self, task: Task, trajectory: Trajectory) -> Verdict:
        key = (id(task), id(trajectory))  # the entry holds both: their ids stay theirs
        hit = self._recent.get(key)
        if hit is not None and hit[0] is task and hit[1] is trajectory:
            return hit[2].model_copy(deep=True)
        verdict = self.inner.verify(task, trajectory)
        self._recent[key] = (task, trajectory, verdict)
        while len(self._recent) > self.size:
            self._recent.popitem(last=False)
        return verdict


def share_components(verifiers: list[Verifier], options: Mapping[str, Any] | None = None,
                     size: int = 1) -> list[RecentVerdicts]:
    """`verifiers` wrapped in `RecentVerdicts(size)`, each composite among them judging with
    the others (`share`) where it would build them with the same `options[name]`."""
    options = options or {}
    wrapped = [RecentVerdicts(v, size) for v in verifiers]
    for w in wrapped:
        share = getattr(w.inner, "share", None)
        if callable(share):
            for other in wrapped:
                if other is not w:
                    share(other, options.get(other.name))
    return wrapped


def applies(verifier: Verifier, task: Task) -> bool:
    """Whether `verifier` can judge `task` (a verifier may define `applies_to(task)`)."""
    check = getattr(verifier, "applies_to", None)
    return True if check is None else bool(check(task))


def audit_kinds_for(verifier: Verifier, task: Task) -> tuple[frozenset[str], frozenset[str]]:
    """(mutation kinds it must kill, alternative kinds it must pass) on `task`: its own
    `audit_kinds_for(task)` when it has one (the composite's depend on the task's basis)."""
    own = getattr(verifier, "audit_kinds_for", None)
    if callable(own):
        return own(task)
    return (frozenset(getattr(verifier, "audit_kinds", WRITE_KINDS)),
            frozenset(getattr(verifier, "alternative_kinds", frozenset())))


def primary_verifier(task: Task, names: list[str]) -> str:
    """The verifier whose verdict decides curation for `task`: the composite verdict (every
    part of the task's reward basis) when it is configured, else the task's own
    (`verification.verifier`, or constraint satisfaction for tasks with a constraint set)
    when it is configured, else the first configured one."""
    if "composite" in names:
        return "composite"
    v = task.verification
    own = v.verifier or ("constraint_satisfaction" if v.constraints is not None else None)
    return own if own in names else names[0]


VERIFIERS: Registry[Callable[..., Verifier]] = Registry("verifier", [
    "verifiers.state", "verifiers.constraints", "verifiers.communicate", "verifiers.actions",
    "verifiers.llm_judge", "verifiers.composite", "verifiers.tests", "verifiers.policy", "verifiers.tau2_reward"],
    group="verifiers")

V = TypeVar("V")


class UnknownKindError(ValueError):
    """A verifier declares an audit or alternative kind the self-audit does not know."""


def check_kinds(name: str, verifier: Any) -> None:
    """`verifier`'s `audit_kinds` are known mutation kinds (`MUTATION_KINDS`) and its
    `alternative_kinds` known alternative kinds (`ALTERNATIVE_KINDS`); otherwise
    `UnknownKindError` naming the kind and the nearest known one (a misspelled kind would
    otherwise hold the verifier to zero mutants)."""
    for attr, known in (("audit_kinds", MUTATION_KINDS), ("alternative_kinds", ALTERNATIVE_KINDS)):
        kinds: Iterable[Any] = getattr(verifier, attr, ())
        if isinstance(kinds, str):
            raise UnknownKindError(f"verifier {name!r}: {attr} must be a set of kinds, not the string {kinds!r}")
        for kind in sorted(kinds, key=str):
            if kind not in known:
                near = difflib.get_close_matches(str(kind), known, n=1)
                hint = f" (did you mean {near[0]!r}?)" if near else ""
                raise UnknownKindError(f"verifier {name!r}: unknown {attr[:-1].replace('_', ' ')} {kind!r}{hint}; "
                                       f"known: {', '.join(known)}")


@functools.cache
def takes_options_object(cls: Any) -> bool:
    """Whether `cls` is built from one options object (its constructor has `options`)."""
    if not isinstance(cls, type):
        return False
    try:
        return "options" in inspect.signature(cls).parameters
    except (TypeError, ValueError):
        return False


def register(name: str, options: type[BaseModel] | None = None, **attrs: Any) -> Callable[[V], V]:
    """Register verifier `name` (`VERIFIERS.register`) after checking its kinds
    (`check_kinds`). Its options model is its `options_model` when it is built from an
    options object; `options` is for a verifier that takes its options as keywords."""

    def deco(item: V) -> V:
        check_kinds(name, item)
        declared = getattr(item, "options_model", None) if takes_options_object(item) else None
        if declared is not None and options is not None and options is not declared:
            raise TypeError(f"verifier {name!r}: options declared twice ({declared.__name__} as "
                            f"options_model, {options.__name__} to register); keep options_model")
        return VERIFIERS.register(name, options=options or declared, **attrs)(item)

    return deco


def verdict_versions() -> dict[str, str]:
    """Every registered verifier's version: what a kept judgement (an evaluation's settings)
    records, so one judged by other checks is judged again rather than read back."""
    return {name: str(getattr(VERIFIERS.get(name), "version", "")) for name in VERIFIERS.names()}


def get_verifier(name: str, options: Mapping[str, Any] | BaseModel | None = None, model: Any = None) -> Verifier:
    """The verifier `name` built with its options and, when it takes one, a model: as
    ``cls(options_object, model=...)``, or with the options as keywords for a verifier whose
    constructor has no `options` parameter."""
    cls = VERIFIERS.get(name)
    wants_model = getattr(cls, "takes_model", False) or getattr(cls, "needs_model", False)
    if takes_options_object(cls):
        parsed = VERIFIERS.parse_options(name, options)
        return cls(parsed, model=model) if wants_model else cls(parsed)  # type: ignore[call-arg]
    if model is None and getattr(cls, "needs_model", False):
        # built without a model it can still be audited-skipped or named; it fails when asked to judge
        return VERIFIERS.build(name, options)
    if getattr(cls, "takes_model", False) or getattr(cls, "needs_model", False):
        return VERIFIERS.build(name, options, model=model)
    return VERIFIERS.build(name, options)


def basis_names() -> dict[str, str]:
    """Reward-basis name -> verifier name, for every registered verifier with a basis."""
    out: dict[str, str] = {}
    for name in VERIFIERS.names():
        basis = getattr(VERIFIERS.get(name), "basis_name", None)
        if basis:
            out[basis] = name
    return out


# Verifiers a run adds beside the configured ones for the tasks they apply to (never deciding):
# τ²-bench's own evaluator for tasks of τ² worlds (`verifiers.tau2_reward`).
SECOND_JUDGES = ("tau2",)


def second_judges(tasks: Iterable[Task], configured: Sequence[str]) -> list[str]:
    """The second judges (`SECOND_JUDGES`) not configured already that apply to some of `tasks`."""
    tasks = list(tasks)
    out = []
    for name in SECOND_JUDGES:
        if name in configured or name not in VERIFIERS.names():
            continue
        verifier = get_verifier(name)
        if any(applies(verifier, t) for t in tasks):
            out.append(name)
    return out

