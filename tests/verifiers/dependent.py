"""Tasks whose requests depend on each other (issue 16 §2): per world, the record a write
creates and the follow-up writes aimed at it; a task's writes split by dependence."""

from __future__ import annotations

from data.records import Task, ToolCall
from envs.world import World

# world -> the table of the record a write creates, its key, its owner column, which of the
# owner's other records a follow-up could be aimed at, the creating constraint's kind, and the
# follow-up tools
NEW_RECORD = {
    "airline": ("reservations", "reservation_id", "user_id", "status = 'active'", "book", {"update_baggage"}),
    "telecom": ("lines", "line_id", "customer_id", "status = 'active'", "new_line", {"add_addon", "set_roaming"}),
    "retail": ("orders", "order_id", "customer_id", "1 = 1", "order",
               {"modify_order_address"}),
}


def writes_of(world: World, task: Task) -> list[ToolCall]:
    """The writes of the task's reference solution, in order."""
    return [c for c in task.reference_solution if world.tools[c.name].write]


def dependent_writes(world: World, task: Task) -> list[ToolCall]:
    """The writes aimed at a record another write of the task creates."""
    return [c for i, c in enumerate(writes_of(world, task)) if str(i) in task.metadata["depends_on"]]


def independent_writes(world: World, task: Task) -> list[ToolCall]:
    """The other writes (each a request of its own)."""
    return [c for i, c in enumerate(writes_of(world, task)) if str(i) not in task.metadata["depends_on"]]
