"""Logic-driven task synthesis (LOGIGEN, methods.md §1): Set Designer → Explorer →
user-perspective projection → validation by replay.

For each boundary-adjacent state the Explorer enumerates reachable states; a goal state is
chosen (preferring the boundary records), its shortest path becomes the reference
solution, the world's `describe` hook states the goal as the user would, and the task is
kept only if replaying the reference on a fresh copy of the initial state reaches exactly
the target hash.
"""

from __future__ import annotations

import random

from data.records import Task, UserScenario
from envs import state as st
from envs.rules import trace_rules
from envs.world import World
from synthesis.base import SynthesisConfig, SynthesisResult, register
from synthesis.explorer import ExplorerConfig, explore
from synthesis.set_designer import design_states, distractors

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


@register(METHOD)
def synthesize(cfg: SynthesisConfig, world: World) -> SynthesisResult:
    ecfg = ExplorerConfig(**{k: v for k, v in cfg.options.items() if k in ExplorerConfig.__dataclass_fields__})
    rng = random.Random(cfg.seed)
    result = SynthesisResult()
    attempted = 0
    rejections_total: dict[str, int] = {}
    tool_names = set(world.tools)
    seed = cfg.seed
    while len(result.tasks) < cfg.n_tasks and attempted < 4 * cfg.n_tasks + 8:
        for variant, ref in design_states(world, seed, cfg.scale, min(7, cfg.n_tasks - len(result.tasks))):
            attempted += 1
            env = world.env(ref)
            root, reached, rejections = explore(world, env, variant.focus, ecfg, rng)
            for code, n in rejections.items():
                rejections_total[code] = rejections_total.get(code, 0) + n
            before = st.restore(root.snapshot)
            before_dump = st.canonical_dump(before)
            candidates = []
            for r in reached.values():
                if r is root and not variant.allow_no_change:
                    continue
                after = st.restore(r.snapshot)
                changes = st.diff_dumps(before_dump, st.canonical_dump(after))
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
            reference = [*world.design.lookup_calls(variant.focus), *goal_state.path]
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
                target_state_hash=goal_state.state_hash,
                target_diff=[c.as_dict() for c in changes],
                reference_solution=reference,
                difficulty=round(min(1.0, 0.25 * len(goal_state.path) + 0.25 * bool(variant.preference)
                                     + 0.25 * bool(set(variant.rules) & set(rejections))), 2),
                metadata={"boundary": variant.kind, "boundary_note": variant.note, "rules": touched,
                          "naive_rejections": rejections, "explored_states": len(reached),
                          "path_length": len(goal_state.path)},
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
            result.accept(task, cfg.test_fraction)
            if len(result.tasks) >= cfg.n_tasks:
                break
        seed += 1
    result.stats = {
        "attempted": attempted,
        "emitted": len(result.tasks),
        "yield": round(len(result.tasks) / attempted, 3) if attempted else 0.0,
        "rule_rejections_during_search": rejections_total,
        "boundary_kinds": sorted({t.metadata["boundary"] for t in result.tasks}),
    }
    return result
