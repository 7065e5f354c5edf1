"""Self-audit of verifiers: on every task the gold solution must pass and its mutants must fail.

The gold, its mutants (`drop_write`, `change_argument`, `extra_write`, `stop_early`,
`drop_communication`, `world_mutation`, and a reference dialogue's) and its alternatives
(`reorder_writes`, `reorder_reads`, `skip_reads`, `extra_reads`, `other_identity`) are built
without a model by `verifiers.mutants` (its docstring says what each is); their names are
re-exported here.

A write mutant whose final state hashes to the gold final state is *equivalent* (say a
repeated write the rules refuse): it is not a verifier failure and is not counted. Each
verifier is held to the kinds it declares (`audit_kinds`, `alternative_kinds`; a composite
to those of its task's basis, see `verifiers.base.audit_kinds_for`). A task fails a
verifier's audit when the gold does not pass, a counted mutant passes or an alternative
fails; it is then excluded (with the reason). A verifier whose share of failed tasks exceeds
`max_failure_rate` raises `VerifierAuditError`, which must block the release. Verifiers that
need a model (`needs_model`) are not audited here.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple

from pydantic import BaseModel, Field

from data.records import Task, Trajectory
from verifiers.base import (
    ALTERNATIVE_KINDS,
    MUTATION_KINDS,
    WRITE_KINDS,
    Verifier,
    applies,
    audit_kinds_for,
    get_verifier,
    share_components,
)
from verifiers.mutants import (  # noqa: F401  (re-exported)
    Mutant,
    alternatives,
    build_dialogue,
    build_trajectory,
    dialogue_alternatives,
    dialogue_mutants,
    final_message,
    mutants,
    replay_hash,
)
from verifiers.state import replayer_for

DEFAULT_MAX_FAILURE_RATE = 0.1  # ours


class VerifierAuditError(RuntimeError):
    """A verifier failed its self-audit on too many tasks: its verdicts cannot be released."""


class KindStats(BaseModel):
    generated: int = 0
    equivalent: int = 0  # same final state as the gold: not counted
    killed: int = 0
    survived: int = 0

    @property
    def kill_rate(self) -> float | None:
        counted = self.killed + self.survived
        return round(self.killed / counted, 4) if counted else None


class AlternativeStats(BaseModel):
    generated: int = 0
    passed: int = 0
    failed: int = 0

    @property
    def pass_rate(self) -> float | None:
        return round(self.passed / self.generated, 4) if self.generated else None


class VerifierAudit(BaseModel):
    verifier: str
    version: str
    tasks_audited: int = 0
    gold_passed: int = 0
    mutants: dict[str, KindStats] = Field(default_factory=dict)
    alternatives: dict[str, AlternativeStats] = Field(default_factory=dict)
    excluded: dict[str, str] = Field(default_factory=dict)  # task id -> reason
    survivors: list[dict[str, Any]] = Field(default_factory=list)  # a few examples

    @property
    def gold_pass_rate(self) -> float:
        return round(self.gold_passed / self.tasks_audited, 4) if self.tasks_audited else 0.0

    @property
    def failure_rate(self) -> float:
        return round(len(self.excluded) / self.tasks_audited, 4) if self.tasks_audited else 0.0

    def summary(self) -> dict[str, Any]:
        return {
            "verifier": self.verifier,
            "version": self.version,
            "tasks_audited": self.tasks_audited,
            "gold_pass_rate": self.gold_pass_rate,
            "failure_rate": self.failure_rate,
            "mutant_kill_rate": {k: s.kill_rate for k, s in sorted(self.mutants.items())},
            "mutants": {k: s.model_dump() for k, s in sorted(self.mutants.items())},
            "alternative_pass_rate": {k: s.pass_rate for k, s in sorted(self.alternatives.items())},
            "alternatives": {k: s.model_dump() for k, s in sorted(self.alternatives.items())},
            "excluded_tasks": sorted(self.excluded),
        }


class AuditReport(BaseModel):
    verifiers: dict[str, VerifierAudit] = Field(default_factory=dict)
    excluded_tasks: dict[str, list[str]] = Field(default_factory=dict)  # task id -> reasons
    skipped_verifiers: dict[str, str] = Field(default_factory=dict)
    unaudited_tasks: dict[str, str] = Field(default_factory=dict)  # task id -> why
    max_failure_rate: float = DEFAULT_MAX_FAILURE_RATE
    tasks: int = 0

    def failing_verifiers(self) -> list[str]:
        return sorted(
            n for n, a in self.verifiers.items() if a.failure_rate > self.max_failure_rate
        )

    def kept(self, tasks: list[Task]) -> list[Task]:
        """`tasks` minus those excluded by the audit."""
        return [t for t in tasks if t.id not in self.excluded_tasks]

    def exclusion_counts(self) -> dict[str, int]:
        """Excluded tasks per failed check ("gold_failed", "mutant_survived:<kind>")."""

        def kind(reason: str) -> str:
            _, what, rest = (reason.split(":", 2) + ["", ""])[:3]
            return what if what == "gold_failed" else f"{what}:{rest.split(' ')[0]}"  # mutant_survived / alternative_failed

        return dict(
            Counter(k for rs in self.excluded_tasks.values() for k in {kind(r) for r in rs})
        )

    def card(self) -> dict[str, Any]:
        """The section for a dataset card / manifest stats."""
        return {
            "tasks": self.tasks,
            "excluded": len(self.excluded_tasks),
            "exclusion_reasons": self.exclusion_counts(),
            "max_failure_rate": self.max_failure_rate,
            "verifiers": {n: a.summary() for n, a in sorted(self.verifiers.items())},
            "skipped_verifiers": self.skipped_verifiers,
            "unaudited_tasks": len(self.unaudited_tasks),
        }

    def raise_if_failed(self) -> None:
        bad = self.failing_verifiers()
        if bad:
            lines = []
            for n in bad:
                a = self.verifiers[n]
                examples = "; ".join(f"{t}: {r}" for t, r in list(a.excluded.items())[:3])
                lines.append(f"{n} {a.version}: failed on {len(a.excluded)}/{a.tasks_audited} tasks "
                             f"({a.failure_rate:.1%}); e.g. {examples}")
            raise VerifierAuditError(
                f"verifier self-audit failed (allowed failure rate {self.max_failure_rate:.1%}); "
                "the release is blocked until the verifier is fixed:\n  " + "\n  ".join(lines)
            )


# -- the audit -------------------------------------------------------------------------------


@dataclass
class Case:
    """One audit case of a task: the gold, a mutant (expected to fail) or an alternative
    (expected to pass), as a model-free trajectory."""

    kind: str  # "gold", a mutation kind or an alternative kind
    note: str
    expected_pass: bool
    trajectory: Trajectory
    equivalent: bool = False  # a write mutant that reaches the gold's final state: not counted


class AuditCase(NamedTuple):
    kind: str
    note: str
    expected_pass: bool
    got_pass: bool


def cases(task: Task, max_per_kind: int = 3) -> list[Case]:
    """The gold, its mutants and its alternatives (`verifiers.mutants`), built once per task.
    A task with a reference dialogue gets its gold, the dialogue's mutants and its reordered
    writes from the dialogue; the other kinds are built from bare call lists."""
    gold_calls = list(task.reference_solution)
    gold_hash, _ = replay_hash(task, gold_calls)
    gold = build_dialogue(task, task.dialogue) if task.dialogue else build_trajectory(task, gold_calls)
    out = [Case("gold", "the reference", True, gold)]
    for i, m in enumerate(mutants(task, max_per_kind)):
        equivalent = m.kind in WRITE_KINDS and replay_hash(task, m.calls)[0] == gold_hash
        traj = build_trajectory(task, m.calls, name=f"{m.kind}-{i}", text=final_message(task, m.communicate))
        out.append(Case(m.kind, m.note, False, traj, equivalent))
    if task.dialogue:
        for i, (kind, note, turns) in enumerate(dialogue_mutants(task, max_per_kind)):
            calls = [c for t in turns for c in t.tool_calls]
            equivalent = kind == "detour" and replay_hash(task, calls)[0] == gold_hash
            out.append(Case(kind, note, False, build_dialogue(task, turns, f"{kind}-{i}"), equivalent))
        for i, (kind, note, turns) in enumerate(dialogue_alternatives(task)):
            out.append(Case(kind, note, True, build_dialogue(task, turns, f"{kind}-{i}")))
    for i, alt in enumerate(alternatives(task)):
        if task.dialogue and alt.kind == "reorder_writes":
            continue  # from the dialogue above
        out.append(Case(alt.kind, alt.note, True, build_trajectory(task, alt.calls, name=f"{alt.kind}-{i}")))
    return out


def counted(verifier: Verifier, task: Task, built: list[Case]) -> list[Case]:
    """The cases `verifier` is held to on `task`: the gold, the mutants of the kinds it must
    kill (equivalent ones left out) and the alternatives it must pass."""
    kills, goods = audit_kinds_for(verifier, task)
    return [c for c in built if c.kind == "gold" or (not c.expected_pass and c.kind in kills and not c.equivalent)
            or (c.expected_pass and c.kind in goods)]


def audit_cases(task: Task, verifier: str | Verifier, max_per_kind: int = 3) -> list[AuditCase]:
    """Each case `verifier` is held to on `task`, with the verdict it gave."""
    v = get_verifier(verifier) if isinstance(verifier, str) else verifier
    return [AuditCase(c.kind, c.note, c.expected_pass, v.verify(task, c.trajectory).passed)
            for c in counted(v, task, cases(task, max_per_kind))]


def audit(
    tasks: list[Task],
    verifiers: list[str | Verifier],
    max_failure_rate: float = DEFAULT_MAX_FAILURE_RATE,
    max_per_kind: int = 3,
    raise_on_failure: bool = True,
    max_examples: int = 5,
    options: Mapping[str, Any] | None = None,
) -> AuditReport:
    """Audit each verifier on the tasks it applies to; see the module docstring. `options`:
    the options the verifiers (given by name, or built) were built with, by name."""
    if not 0.0 <= max_failure_rate <= 1.0:
        raise ValueError(f"max_failure_rate must be within [0, 1], got {max_failure_rate}")
    built = [get_verifier(v, (options or {}).get(v)) if isinstance(v, str) else v for v in verifiers]
    if options is not None or all(isinstance(v, str) for v in verifiers):
        # a composite judges with the audited instances (built with the same options), each
        # remembering its verdicts on a task's cases: a case is judged once per verifier
        built = share_components(built, options, size=2 * (len(MUTATION_KINDS + ALTERNATIVE_KINDS)
                                                           * max(1, max_per_kind) + 1))
    report = AuditReport(max_failure_rate=max_failure_rate, tasks=len(tasks))
    active: list[Verifier] = []
    for v in built:
        if getattr(v, "needs_model", False):
            report.skipped_verifiers[v.name] = "needs a model"
        else:
            active.append(v)
            report.verifiers[v.name] = VerifierAudit(
                verifier=v.name, version=v.version, mutants={k: KindStats() for k in MUTATION_KINDS},
                alternatives={k: AlternativeStats() for k in ALTERNATIVE_KINDS},
            )
    for task in tasks:
        targets = [v for v in active if applies(v, task)]
        if not targets:
            continue
        if replayer_for(task.world, task.initial_state) is None:
            report.unaudited_tasks[task.id] = (
                f"world {task.world!r} cannot be replayed here (not a SQLite world)"
            )
            continue
        task_cases = cases(task, max_per_kind)
        for v in targets:
            a = report.verifiers[v.name]
            a.tasks_audited += 1
            reasons: list[str] = []
            kills, _ = audit_kinds_for(v, task)
            for c in task_cases:  # equivalent mutants are generated and counted as such
                if c.equivalent and c.kind in kills:
                    a.mutants[c.kind].generated += 1
                    a.mutants[c.kind].equivalent += 1
            for c in counted(v, task, task_cases):
                verdict = v.verify(task, c.trajectory)
                if c.kind == "gold":
                    if verdict.passed:
                        a.gold_passed += 1
                    else:
                        reasons.append(f"{v.name}:gold_failed:{'; '.join(verdict.reasons)[:300]}")
                elif c.expected_pass:
                    alt = a.alternatives[c.kind]
                    alt.generated += 1
                    alt.passed += verdict.passed
                    alt.failed += not verdict.passed
                    if not verdict.passed:
                        reasons.append(f"{v.name}:alternative_failed:{c.kind} ({c.note})")
                else:
                    stats = a.mutants[c.kind]
                    stats.generated += 1
                    if verdict.passed:
                        stats.survived += 1
                        reasons.append(f"{v.name}:mutant_survived:{c.kind} ({c.note})")
                        if len(a.survivors) < max_examples:
                            a.survivors.append({"task_id": task.id, "kind": c.kind, "note": c.note})
                    else:
                        stats.killed += 1
            if reasons:
                a.excluded[task.id] = reasons[0]
                report.excluded_tasks.setdefault(task.id, []).extend(reasons)
    if raise_on_failure:
        report.raise_if_failed()
    return report
