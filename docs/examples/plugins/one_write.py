"""Example synthesis method `one_write`: one task per boundary state, whose goal is a single
successful write the world's Explorer hooks propose (a smaller cousin of logic-driven).

Adding it to trajforge is this file plus one line: its module in `METHODS`' built-ins
(`synthesis/base.py`), or an entry point ``[project.entry-points."trajforge.methods"]
one_write = "mypkg.one_write"`` in another package. `docs/architecture.md` walks through it
and `tests/verifiers/test_recipes.py` runs it.
"""

from __future__ import annotations

import random

from pydantic import BaseModel, ConfigDict, Field

from data.records import Task, UserScenario, Verification
from envs import state as st
from envs.world import World
from synthesis.base import SynthesisConfig, SynthesisResult, register
from synthesis.set_designer import design_states


class OneWriteOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")

    candidates: int = Field(8, ge=1)  # write calls tried per designed state


def _supports(world: World) -> bool:
    return isinstance(world, World) and (world.folder / "design.py").exists()


@register("one_write", options=OneWriteOptions, supports=_supports)
def synthesize(cfg: SynthesisConfig, world: World) -> SynthesisResult:
    opts: OneWriteOptions = cfg.method_options()
    rng = random.Random(cfg.seed)
    result = SynthesisResult()
    for variant, ref in design_states(world, cfg.seed, cfg.scale, 3 * cfg.n_tasks):
        if len(result.tasks) >= cfg.n_tasks:
            break
        before = world.build_state(ref.seed, ref.scale, ref.patches)
        calls = world.design.candidate_calls(before, variant.focus)
        rng.shuffle(calls)
        for call in calls[: opts.candidates]:
            env = world.env(ref)
            if not env.call(call).ok:
                env.close()
                continue
            changes = st.diff_states(before, env.conn)
            goal = world.design.describe(changes, before, env.conn, variant)
            target = env.state_hash()
            env.close()
            if goal is None:
                continue
            task = Task(world=world.name, method="one_write", instruction=goal.instruction,
                        user=UserScenario(reason=goal.reason, known_info=goal.known_info,
                                          task_instructions=goal.instruction),
                        initial_state=ref, target_state_hash=target, target_diff=[c.as_dict() for c in changes],
                        reference_solution=[*world.design.lookup_calls(variant.focus), call],
                        verification=Verification(basis=["DB"])).with_id()
            if not result.has(task):
                result.accept(task, cfg.test_fraction)
            break
        else:
            result.drops["no_single_write_goal"] += 1
        before.close()
    return result
