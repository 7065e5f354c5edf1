"""Constraint-guided synthesis (CoVe, methods.md §2): constraint sampling → fuzzification →
user goal from the descriptions → reference solution → validation by replay.

Per seed (cfg.seed, cfg.seed + 1, ...) the world's ``constraints.py`` draws solvable
constraint sets C from the seeded state, replaces every id with a description checked to
match exactly one record, and states the goal from those descriptions only (an id in the
user's text is a drop). The reference (reads + one write per constraint) is replayed on a
fresh copy of the initial state: every write must succeed and every constraint must hold
on the result, whose hash and cell diff become the target (so the state verifier applies
too). C goes to ``verification.constraints`` for the constraint verifier. Uniqueness is
checked again on a rebuilt initial state and after every prefix of the reference writes:
a task whose description matches another record once one of its own writes is done (a
booking that adds a look-alike of the reservation to change) is dropped, counted as
``ambiguous_after_write``.

A world whose ``sample_constraints`` takes `kind` gets its ``KINDS`` in turn (attempt i asks
for a first request of kind i mod len(KINDS)), so every kind, and with it every write tool
the world's constraints reach, comes up within a few tasks; other worlds draw their own.

Options (``cfg.options``): ``tasks_per_seed`` (6), ``p_extra`` (the world's default share
of sets with a second constraint).
"""

from __future__ import annotations

import inspect
import random
import sqlite3
from collections import Counter
from types import ModuleType
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from data.records import StateRef, Task, ToolCall, UserScenario, Verification
from envs import state as st
from envs.constraints import (
    Constraint,
    Fuzzification,
    FuzzifyError,
    dump_constraints,
    world_constraints,
)
from envs.contract import hook
from envs.cove import AFTER, ON_NEW
from envs.world import World
from synthesis.base import SynthesisConfig, SynthesisResult, register
from synthesis.dialogue import with_dialogue

METHOD = "constraint_guided"
PERSONA = "novice"


def _id_values(constraints: list[Constraint], identity: tuple[str, ...] = ("user_id",)) -> set[str]:
    """Every identifier of the set except the user's own id (`identity`: the fields the user
    knows, a world's ``IDENTITY_FIELDS``; default ``user_id``)."""
    return {str(v) for c in constraints for k, v in c.fields.items() if k.endswith("_id") and k not in identity}


def identity_fields(module: ModuleType) -> tuple[str, ...]:
    """The constraint fields the user knows and may say (the world's ``IDENTITY_FIELDS``)."""
    return tuple(hook(module, "IDENTITY_FIELDS", ("user_id",)))


def user_texts(task: Task) -> list[str]:
    """Everything the user simulator or the agent sees of the task's goal (user id excluded)."""
    u = task.user
    return [task.instruction, u.reason, u.task_instructions, u.persona, *u.unknown_info,
            *(f"{k} {v}" for k, v in u.known_info.items() if k != "user_id")]


def dependencies(constraints: list[Constraint]) -> dict[str, int]:
    """Write index -> the index of the write whose request it is part of: a write on the new
    record of an earlier one (``on_new``: bags on the booking being made) belongs to that
    write's request, and a write that makes a later one possible (``after``: paying the balance
    down so a booking can be made) to that later one's. Constraint i is met by the
    reference's i-th write."""
    out = {str(i): int(c.fields[ON_NEW]) for i, c in enumerate(constraints) if ON_NEW in c.fields}
    out.update({str(int(c.fields[AFTER])): i for i, c in enumerate(constraints) if AFTER in c.fields})
    return out


def _replay(world: World, ref: StateRef, calls: list[ToolCall]) -> tuple[sqlite3.Connection, str | None]:
    """Run `calls` on a fresh initial state; the live connection and the first failed write, if any."""
    env = world.env(ref)
    for call in calls:
        obs = env.call(call)
        if not obs.ok and world.tools[call.name].write:
            return env.conn, f"{call.name}: {obs.code}"
    return env.conn, None


def _build(world: World, module: ModuleType, ref: StateRef, conn: sqlite3.Connection, constraints: list[Constraint],
           fuzzy: Fuzzification, result: SynthesisResult) -> Task | None:
    goal = module.goal(constraints, fuzzy.texts())
    known_identity = hook(module, "known_identity")
    if known_identity is not None:  # how the user authenticates, when not by a constraint field
        goal.known_info = {**known_identity(conn, constraints), **goal.known_info}
    reference: list[ToolCall] = module.reference_calls(conn, constraints)
    task = Task(
        world=world.name, method=METHOD, instruction=goal.instruction,
        user=UserScenario(persona=PERSONA, reason=goal.reason, known_info=goal.known_info,
                          unknown_info=goal.unknown_info, task_instructions=goal.instruction),
        initial_state=ref, target_state_hash=ref.state_hash, reference_solution=reference,
        difficulty=round(min(1.0, 0.3 * len(constraints) + 0.1 * fuzzy.redraws), 2),  # (ours)
        verification=Verification(constraints=dump_constraints(constraints)),
        metadata={"fuzzy": fuzzy.texts(),
                  "fuzzy_attributes": fuzzy.attributes(), "constraint_kinds": [c.kind for c in constraints],
                  "fuzzy_redraws": fuzzy.redraws,
                  **({"depends_on": depends} if (depends := dependencies(constraints)) else {})},
    )
    if any(name in goal.instruction for name in world.tools):
        result.drops["solution_leak"] += 1
        return None
    texts = user_texts(task)
    if any(i in text for i in _id_values(constraints, identity_fields(module)) for text in texts):
        result.drops["id_leak"] += 1
        return None
    final, failed = _replay(world, ref, reference)
    try:
        if failed:
            result.drops["reference_failed"] += 1
            return None
        satisfied, _ = module.check(conn, final, constraints)
        if not all(satisfied):
            result.drops["reference_unsatisfied"] += 1
            return None
        task.target_state_hash = st.state_hash(final)
        task.target_diff = [c.as_dict() for c in st.diff_states(conn, final)]
    finally:
        final.close()
    done, why = with_dialogue(world, task.with_id(), basis=["CONSTRAINTS", "COMMUNICATE", "POLICY"])
    if done is None:
        result.drops[why] += 1
    return done


def _described(task: Task) -> list[tuple[str, str, dict[str, Any], Any]]:
    """(slot, entity, attributes, the record's id) of every description of the task."""
    constraints = task.verification.constraints or []
    out = []
    attrs: dict[str, dict[str, Any]] = task.metadata["fuzzy_attributes"]
    for slot, a in attrs.items():
        index, field = slot.split(".", 1)
        out.append((slot, a["entity"], a["where"], constraints[int(index[1:])]["fields"][field]))
    return out


def recheck_unique(world: World, task: Task) -> tuple[int, int]:
    """(descriptions matching exactly their record, descriptions) on a rebuilt initial state."""
    module = world_constraints(world)
    ref = task.initial_state
    conn = world.build_state(ref.seed, ref.scale, ref.patches)
    try:
        described = _described(task)
        unique = sum(module.matching_ids(conn, entity, where) == [record] for _, entity, where, record in described)
        return unique, len(described)
    finally:
        conn.close()


def ambiguous_after_writes(world: World, task: Task) -> dict[str, tuple[int, list[str]]]:
    """Descriptions that stop pointing at their record part-way through the reference: for
    each prefix of its writes (the first write, the first two, ..., all of them) applied to
    the initial state, a description that matches any record other than its own. -> slot:
    (the number of writes after which it first did, the ids it matched then).

    The user keeps describing a record as it was; a write of the task itself can add a look-
    alike (a booking to the same city as the reservation to change) or give another record
    the described attributes. A description that no longer matches even its own record (a
    balance the write spent) points at nothing else and is not counted."""
    module = world_constraints(world)
    described = _described(task)
    out: dict[str, tuple[int, list[str]]] = {}
    env = world.env(task.initial_state)
    try:
        done = 0
        for call in task.reference_solution:
            spec = world.tools.get(call.name)
            if spec is None or not spec.write:
                continue
            obs = env.call(call)
            if not obs.ok:
                raise ValueError(f"reference write {call.name} failed on replay: {obs.code}")
            done += 1
            for slot, entity, where, record in described:
                if slot in out:
                    continue
                ids = module.matching_ids(env.conn, entity, where)
                if any(i != record for i in ids):
                    out[slot] = (done, ids)
    finally:
        env.close()
    return out


class ConstraintGuidedOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")

    tasks_per_seed: int = Field(6, ge=1)  # constraint sets sampled from one seeded state
    p_extra: float | None = Field(None, ge=0, le=1)  # share of sets with a second constraint (world default)


def _supports(world: World) -> bool:
    return isinstance(world, World) and (world.folder / "constraints.py").exists()


@register(METHOD, options=ConstraintGuidedOptions, supports=_supports)
def synthesize(cfg: SynthesisConfig, world: World) -> SynthesisResult:
    module = world_constraints(world)
    opts: ConstraintGuidedOptions = cfg.method_options()
    per_seed = opts.tasks_per_seed
    sample_kw = {"p_extra": opts.p_extra} if opts.p_extra is not None else {}
    rng = random.Random(cfg.seed)
    result = SynthesisResult()
    attempted = described = first_unique = redraws = unique = 0
    kinds: Counter = Counter()
    turns = (list(module.KINDS) if "kind" in inspect.signature(module.sample_constraints).parameters
             and hook(module, "KINDS") else None)
    seed = cfg.seed
    while len(result.tasks) < cfg.n_tasks and attempted < 4 * cfg.n_tasks + 8:
        ref = world.state_ref(seed, cfg.scale)
        conn = world.build_state(seed, cfg.scale)
        try:
            for _ in range(per_seed):  # the same draws whatever n_tasks: more tasks extend the list
                if len(result.tasks) >= cfg.n_tasks:
                    break
                turn = {"kind": turns[attempted % len(turns)]} if turns else {}
                attempted += 1
                constraints = module.sample_constraints(conn, rng, **sample_kw, **turn)
                if not constraints:
                    result.drops["no_solvable_constraints"] += 1
                    continue
                try:
                    fuzzy = module.fuzzify(conn, constraints, rng)
                except FuzzifyError:
                    result.drops["fuzzy_ambiguous"] += 1
                    continue
                task = _build(world, module, ref, conn, constraints, fuzzy, result)
                if task is None:
                    continue
                if result.has(task):
                    result.drops["duplicate"] += 1
                    continue
                u, n = recheck_unique(world, task)
                if u != n:
                    result.drops["fuzzy_not_unique_on_rebuild"] += 1
                    continue
                if ambiguous_after_writes(world, task):
                    result.drops["ambiguous_after_write"] += 1
                    continue
                if not result.keep(task, cfg.test_fraction, world):
                    continue
                described += n
                unique += u
                first_unique += fuzzy.first_draw_unique
                redraws += fuzzy.redraws
                kinds.update(task.metadata["constraint_kinds"])
        finally:
            conn.close()
        seed += 1
    result.stats = {
        "attempted": attempted,
        "emitted": len(result.tasks),
        "yield": round(len(result.tasks) / attempted, 3) if attempted else 0.0,
        "fuzzy_descriptions": described,
        "fuzzy_unique_rate": round(unique / described, 4) if described else 0.0,
        "fuzzy_first_draw_unique_rate": round(first_unique / described, 4) if described else 0.0,
        "fuzzy_redraws": redraws,
        "ambiguous_after_write": result.drops["ambiguous_after_write"],  # dropped: a write made a description ambiguous
        "constraint_kinds": dict(sorted(kinds.items())),
        "mean_constraints": round(sum(kinds.values()) / len(result.tasks), 3) if result.tasks else 0.0,
    }
    return result
