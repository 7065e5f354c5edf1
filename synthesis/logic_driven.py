"""Logic-driven task synthesis (LOGIGEN, methods.md §1): Set Designer → Explorer →
user-perspective projection → validation by replay.

For each boundary-adjacent state the Explorer enumerates reachable states; a goal state is
chosen (preferring the boundary records), its shortest path becomes the reference
solution, the world's `describe` hook states the goal as the user would, and the task is
kept only if replaying the reference on a fresh copy of the initial state reaches exactly
the target hash.

States are designed seed after seed (cfg.seed, cfg.seed + 1, ...). The first draws the
world's own cycle of boundary kinds; where a world's design declares ``KIND_WRITES`` and
its `variants` takes `kinds`, later ones draw first the kinds that target a write tool no
task calls yet, then the kinds drawn least (`kind_order`), so every write tool is some
task's target and the kinds come round in turn.

Options (`SynthesisConfig.options`, besides the Explorer's): `substitutes: int` and
`noise_rows: int` (default 0) add near-copies of the focus records and unrelated rows to
each designed state before the Explorer runs (`set_designer.with_haystack`); an added row
that makes the goal's wording fit another outcome is removed and counted as a drop
(`ambiguous_substitute` / `ambiguous_noise`). `paraphrase: true` with `paraphrase_model`
(a `ChatModel`, or a `ModelConfig`-shaped dict built like self-play's model generator)
rewords each instruction, kept only when it passes `synthesis.paraphrase.check_paraphrase`.
"""

from __future__ import annotations

import inspect
import random
from collections import Counter
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from data.records import StateRef, Task, ToolCall, UserScenario
from envs import state as st
from envs.contract import hook
from envs.conversation import conversation, identity_lookup
from envs.rules import trace_rules
from envs.world import World
from synthesis.base import SynthesisConfig, SynthesisResult, register
from synthesis.dialogue import with_dialogue
from synthesis.explorer import ExplorerConfig, explore
from synthesis.paraphrase import paraphrase_tasks
from synthesis.set_designer import (
    AddedRow,
    ambiguous_rows,
    design_states,
    distractors,
    path_uses,
    with_haystack,
)

METHOD = "logic_driven"


def replay(world: World, task: Task) -> str:
    """Hash of the state reached by replaying the task's reference on a fresh initial state."""
    env = world.env(task.initial_state)
    try:
        for call in task.reference_solution:
            obs = env.call(call)
            if not obs.ok and world.tools[call.name].write:
                raise ValueError(f"reference call {call.name} failed: {obs.detail}")
        return env.state_hash()
    finally:
        env.close()


class LogicOptions(BaseModel):
    """Options of logic-driven synthesis: the Explorer's search, the Set Designer's haystack
    and the optional paraphrase (see the module docstring)."""

    model_config = ConfigDict(extra="forbid", arbitrary_types_allowed=True)

    max_depth: int = Field(2, ge=1)
    beam_width: int = Field(6, ge=1)
    max_expansions: int = Field(2_000, ge=1)
    step_penalty: float = 0.5
    substitutes: int = Field(0, ge=0)
    noise_rows: int = Field(0, ge=0)
    paraphrase: bool = False
    paraphrase_model: Any = None  # a ChatModel, or a ModelConfig-shaped dict
    paraphrase_temperature: float = 0.7

    @model_validator(mode="after")
    def _paraphrase_has_a_model(self) -> LogicOptions:
        if self.paraphrase and self.paraphrase_model is None:
            raise ValueError("options.paraphrase needs options.paraphrase_model (a ChatModel or a model config)")
        return self

    def explorer(self) -> ExplorerConfig:
        return ExplorerConfig(max_depth=self.max_depth, beam_width=self.beam_width,
                              max_expansions=self.max_expansions, step_penalty=self.step_penalty)


def _supports(world: World) -> bool:
    return isinstance(world, World) and (world.folder / "design.py").exists()


@register(METHOD, options=LogicOptions, supports=_supports)
def synthesize(cfg: SynthesisConfig, world: World) -> SynthesisResult:
    opts: LogicOptions = cfg.method_options()
    ecfg = opts.explorer()
    rng = random.Random(cfg.seed)
    substitutes, noise_rows = opts.substitutes, opts.noise_rows
    hay_rng = random.Random(f"{cfg.seed}:haystack")  # its own stream: tasks without a haystack are unchanged
    haystack_skipped: Counter = Counter()
    para_model = opts.paraphrase_model
    result = SynthesisResult()
    attempted = 0
    rejections_total: dict[str, int] = {}
    tool_names = set(world.tools)
    seed = cfg.seed
    drawn: Counter = Counter()  # boundary kinds of the variants drawn so far
    while len(result.tasks) < cfg.n_tasks and attempted < 4 * cfg.n_tasks + 8:
        kinds = kind_order(world, drawn, result.tasks) if seed != cfg.seed else None
        for variant, ref in design_states(world, seed, cfg.scale, min(7, cfg.n_tasks - len(result.tasks)), kinds):
            attempted += 1
            drawn[variant.kind] += 1
            designed = ref
            ref, added, skipped = with_haystack(world, variant, ref, hay_rng, substitutes, noise_rows)
            haystack_skipped.update(skipped)
            env = world.env(ref)
            root, reached, rejections = explore(world, env, variant.focus, ecfg, rng)
            for code, n in rejections.items():
                rejections_total[code] = rejections_total.get(code, 0) + n
            before = st.restore(root.snapshot)
            diff_from = st.DiffFrom(before)
            candidates = []
            for r in reached.values():
                if r is root and not variant.allow_no_change:
                    continue
                after = st.restore(r.snapshot)
                changes = diff_from(after, r.written)  # the tables the path did not write are the root's
                goal = world.design.describe(changes, before, after, variant)
                if goal is not None:
                    # Shorter paths win ties: a compound goal must earn its extra steps.
                    score = world.design.goal_score(changes, variant) - ecfg.step_penalty * max(0, len(r.path) - 1)
                    candidates.append((score, rng.random(), r, changes, goal))
                after.close()
            before.close()
            env.close()
            if not candidates:
                result.drops["no_describable_goal"] += 1
                continue
            _, _, goal_state, changes, goal = max(candidates, key=lambda c: (c[0], c[1]))
            if any(name in goal.instruction for name in tool_names):
                result.drops["solution_leak"] += 1
                continue
            target_hash = goal_state.state_hash
            if added:
                bad = ambiguous_rows(world, ref, goal_state.path, goal.instruction, variant, added)
                for row in bad:
                    result.drops[f"ambiguous_{row.role}"] += 1
                if any(path_uses(goal_state.path, row) for row in bad):
                    continue  # the goal itself acts on a look-alike: no unambiguous task here
                if bad:
                    added = [a for a in added if a not in bad]
                    ref = world.state_ref(designed.seed, designed.scale, [*designed.patches, *(a.patch for a in added)])
                    reached_again = _reach(world, ref, goal_state.path)
                    if reached_again is None:
                        result.drops["replay_mismatch"] += 1
                        continue
                    target_hash, changes = reached_again
            reference = identified(world, [*world.design.lookup_calls(variant.focus), *goal_state.path],
                                   goal.known_info)
            touched = sorted({c for c in rejections if c.startswith("R")} | set(variant.rules))
            task = Task(
                world=world.name,
                method=METHOD,
                instruction=goal.instruction,
                user=UserScenario(
                    persona=variant.persona,
                    reason=goal.reason,
                    known_info=goal.known_info,
                    unknown_info=goal.unknown_info,
                    task_instructions=goal.instruction,
                ),
                initial_state=ref,
                target_state_hash=target_hash,
                target_diff=[c.as_dict() for c in changes],
                reference_solution=reference,
                difficulty=round(min(1.0, 0.25 * len(goal_state.path) + 0.25 * bool(variant.preference)
                                     + 0.25 * bool(set(variant.rules) & set(rejections))), 2),
                metadata={"boundary": variant.kind, "boundary_note": variant.note, "rules": touched,
                          **({"preference": dict(variant.preference)} if variant.preference else {}),
                          "naive_rejections": rejections, "explored_states": len(reached),
                          "path_length": len(goal_state.path), **_haystack_meta(added)},
            ).with_id()
            # Rule report: the rules whose guards the reference's writes evaluate, and of
            # those the ones it passes at their limit: a neighbouring call the Explorer
            # tried from this state was rejected by the same rule.
            evaluated = trace_rules(world, ref, reference)
            task.metadata["rules_evaluated"] = evaluated
            task.metadata["rules_crossed"] = sorted(set(evaluated) & set(rejections))
            initial = world.build_state(ref.seed, ref.scale, ref.patches)
            task.metadata["distractors"] = distractors(initial, variant, changes)
            initial.close()
            if result.has(task):
                result.drops["duplicate"] += 1
                continue
            if replay(world, task) != task.target_state_hash:
                result.drops["replay_mismatch"] += 1
                continue
            refused, rule = (refused_request(world, ref, variant) if goal_state is root else (None, None))
            if goal_state is root and refused is None:
                result.drops["refusal_without_rule"] += 1
                continue
            task, why = with_dialogue(world, task, refused, rule)
            if task is None:
                result.drops[why] += 1
                continue
            if result.keep(task, cfg.test_fraction, world) and len(result.tasks) >= cfg.n_tasks:
                break
        seed += 1
    if opts.paraphrase:
        result = _paraphrased(result, cfg, world, para_model, opts.paraphrase_temperature)
    result.stats = {**result.stats,
        "attempted": attempted,
        "emitted": len(result.tasks),
        "yield": round(len(result.tasks) / attempted, 3) if attempted else 0.0,
        "rule_rejections_during_search": rejections_total,
        "boundary_kinds": sorted({t.metadata["boundary"] for t in result.tasks}),
    }
    if substitutes or noise_rows:
        result.stats["haystack_skipped"] = dict(sorted(haystack_skipped.items()))
    return result




def kind_order(world: World, drawn: Counter, tasks: list[Task]) -> list[str] | None:
    """The boundary kinds the next state's variants are drawn from, in order, for a world
    whose design declares ``KIND_WRITES`` (kind -> the write tools its goal calls) and whose
    `variants` takes `kinds`; None for any other (it draws its own cycle).

    First, greedily, the kinds that target a write tool no accepted task calls yet (fewest
    draws first, so a kind that keeps failing gives way); then every other kind, fewest
    draws first, in the world's order. So a run covers every write tool as soon as it can,
    then cycles through the kinds instead of redrawing the ones it already has."""
    declared = hook(world.design, "KIND_WRITES")
    if declared is None or "kinds" not in inspect.signature(world.design.variants).parameters:
        return None
    names = list(declared)
    covered = {c.name for t in tasks for c in t.reference_solution}
    by_draws = sorted(names, key=lambda k: (drawn[k], names.index(k)))
    first: list[str] = []
    wanted = {w for k in names for w in declared[k]} - covered
    for kind in by_draws:
        if wanted & set(declared[kind]):
            first.append(kind)
            wanted -= set(declared[kind])
    return first + [k for k in by_draws if k not in first]


def identified(world: World, reference: list[ToolCall], known: dict[str, Any]) -> list[ToolCall]:
    """`reference` with the user's identity lookup (`identity_lookup` on their `known` info)
    in front when none of its calls is one: a design whose lookups name only the records in
    question (a compiled spec world's, for a loan renewal) would otherwise write before the
    user is identified, which the policy verifier fails. Unchanged when it has one, as every
    hand-built world's `lookup_calls` does, or when the user knows no identity key set."""
    conv = conversation(world)
    if any(c.name in conv.identity.lookups for c in reference):
        return reference
    for keys in conv.identity.keys:
        call = identity_lookup(conv, keys, known)
        if call is not None:
            return [call, *reference]
    return reference


def refused_request(world: World, ref: StateRef, variant: Any) -> tuple[ToolCall | None, str | None]:
    """For a task whose right outcome is to change nothing: the request the user makes (a
    candidate write on the variant's records) and the rule of the variant that refuses it."""
    conn = world.build_state(ref.seed, ref.scale, ref.patches)
    try:
        calls = world.design.candidate_calls(conn, variant.focus)
    finally:
        conn.close()
    for call in calls:
        env = world.env(ref)
        try:
            obs = env.call(call)
        finally:
            env.close()
        if obs.error == "rule_violation" and obs.code in variant.rules:
            return call, obs.code
    return None, None


def _haystack_meta(added: list[AddedRow]) -> dict[str, Any]:
    """Which records of the initial state the Set Designer added as substitutes and noise."""
    if not added:
        return {}
    return {"substitutes": [a.as_dict() for a in added if a.role == "substitute"],
            "noise": [a.as_dict() for a in added if a.role == "noise"]}


def _reach(world: World, ref: StateRef, path: list[ToolCall]) -> tuple[str, list[st.CellChange]] | None:
    """(hash, cell changes) that `path` reaches from `ref`; None if one of its writes fails."""
    env = world.env(ref)
    before = world.build_state(ref.seed, ref.scale, ref.patches)
    try:
        for call in path:
            if not env.call(call).ok and world.tools[call.name].write:
                return None
        return env.state_hash(), st.diff_states(before, env.conn)
    finally:
        env.close()
        before.close()


def _paraphrased(result: SynthesisResult, cfg: SynthesisConfig, world: World, model: Any,
                 temperature: float) -> SynthesisResult:
    """The accepted tasks with their instructions paraphrased where the check allows it."""
    tasks, outcomes = paraphrase_tasks(result.tasks, model, world.tools, seed=cfg.seed,
                                       temperature=temperature)
    out = SynthesisResult(drops=result.drops, stats={"paraphrase": dict(sorted(outcomes.items()))})
    for task in tasks:
        out.keep(task, cfg.test_fraction, world)  # a paraphrase may name an id the original did not
    return out
