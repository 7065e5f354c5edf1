"""A task's user-facing text: what the user simulator may say, the world-internal ids it
states, and the task rewritten to say a new text. A leaf module (it imports no other
synthesis module), shared by `synthesis.base`, `synthesis.writer` and `synthesis.paraphrase`,
which re-export what they exported before."""

from __future__ import annotations

from typing import Any

from data.records import Task
from envs.world import World


def user_facing_texts(task: Task) -> list[str]:
    """Everything of a task the user simulator may say: the goal, the scenario, the known info."""
    u = task.user
    return [task.instruction, u.task_instructions, u.reason, u.persona, *u.unknown_info,
            *(str(v) for v in u.known_info.values())]


def internal_id_leaks(world: Any, task: Task) -> list[str]:
    """World-internal ids (`envs.conversation.leaked_ids`) the task's user-facing text states:
    a task that has the user say a payment or slot code is not what a real user says."""
    if not isinstance(world, World):  # a workspace world has no database of ids
        return []
    from envs.conversation import leaked_ids

    env = world.env(task.initial_state)
    try:
        return leaked_ids(world, env.conn, user_facing_texts(task))
    finally:
        env.close()


def with_text(task: Task, text: str, outcome: str) -> Task:
    """`task` saying `text`, with its new content id: the instruction, the user's
    `task_instructions` and the reference dialogue's first user turn (the scripted user's
    opening of the new text) change; `metadata["writer"]` is `outcome` and
    `metadata["instruction_template"]` the old instruction."""
    from rollout.user import ScriptedUser

    meta = {**task.metadata, "writer": outcome, "instruction_template": task.instruction}
    new = task.model_copy(update={"instruction": text, "metadata": meta,
                                  "user": task.user.model_copy(update={"task_instructions": text})})
    if new.dialogue and new.dialogue[0].role == "user":
        first = new.dialogue[0].model_copy(update={"content": ScriptedUser(new).first_message()})
        new = new.model_copy(update={"dialogue": [first, *new.dialogue[1:]]})
    return new.with_id()
