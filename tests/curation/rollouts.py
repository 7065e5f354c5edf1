"""Hand-built rollouts for the TopoCurate tests: turns, trajectories, verdicts, and task A,
whose quotient graph, Φ, EBR, SH and recoveries are worked out by hand in its docstring."""

from __future__ import annotations

from curation.quotient import QuotientIndex, build_index
from data.records import StateRef, Step, Task, ToolCall, Trajectory, UserScenario, Verdict

# A turn: (tool, args, error, observation); tool None = a plain message to the user.
Turn = tuple[str | None, dict, str | None, str]
OK_U1: Turn = ("get_user", {"id": "u1"}, None, '{"user": "u1"}')
ERR_U2: Turn = ("get_user", {"id": "u2"}, "tool_error", '{"error": "not_found"}')
BOOK_F1: Turn = ("book", {"flight": "f1", "n": 2}, None, '{"booked": "f1"}')
BOOK_F2: Turn = ("book", {"flight": "f2", "n": 2}, None, '{"booked": "f2"}')
MSG: Turn = (None, {}, None, "")


def make_task(name: str) -> Task:
    """A bare airline task named `name` (curators read only its id)."""
    return Task(
        id=name,
        world="airline",
        method="test",
        instruction="do it",
        user=UserScenario(),
        initial_state=StateRef(world="airline", seed=0, scale=1, state_hash="h"),
        target_state_hash="t",
    )


def traj(task: str, trial: int, turns: list[Turn], reference: bool = False) -> Trajectory:
    """Trial `trial` of `task`, one step per turn (a reference dialogue when `reference`)."""
    steps = [
        Step(
            index=i,
            turn=i,
            action=ToolCall(name=n, arguments=dict(a)) if n else None,
            error=e,
            observation=o,
        )
        for i, (n, a, e, o) in enumerate(turns)
    ]
    return Trajectory(
        id=f"{task}-{trial}{'-ref' if reference else ''}",
        task_id=task,
        trial=trial,
        model="m",
        steps=steps,
        metadata={"reference": True} if reference else {},
    )


def verdict(t: Trajectory, passed: bool) -> Verdict:
    """A state verdict on `t`."""
    return Verdict(
        trajectory_id=t.id,
        task_id=t.task_id,
        verifier="state_equivalence",
        verifier_version="1",
        passed=passed,
        score=float(passed),
    )


def task_a() -> tuple[list[Trajectory], list[bool]]:
    """root ─ n1 get(u1) ─ n3 book(f1) ─ n5 msg        r0 ✓, r3 ✓ (same path)
                        └ n4 book(f2) ─ n6 msg        r1 ✗
            └ n2 get(u2)! ─ n7 get(u1) ─ n8 book(f1) ─ n9 msg   r2 ✓
    Φ: root 4/6, n1 3/5, n2 2/3, n3 3/4, n4 1/3, n7..n9 2/3.
    EBR: branching nodes root (0 of 2 failing) and n1 (n4 failing): 1/4.
    SH: successful action sequences {[u1,f1], [u2,u1,f1]} over 3 successes: 2/3.
    Recoveries: r2 has an error turn (n2) followed by a clean one: 1; r0 and r3: 0.
    Diversity: −log(s(leaf)/s(root)): r0, r3 −log(2/3); r2 −log(1/3).
    """
    trajs = [
        traj("A", 0, [OK_U1, BOOK_F1, MSG]),
        traj("A", 1, [OK_U1, BOOK_F2, MSG]),
        traj("A", 2, [ERR_U2, OK_U1, BOOK_F1, MSG]),
        traj("A", 3, [OK_U1, BOOK_F1, MSG]),
    ]
    return trajs, [True, False, True, True]


def index(trajs: list[Trajectory], passed: list[bool]) -> QuotientIndex:
    """The quotient graphs of `trajs`, each passed or not as `passed` says."""
    return build_index(trajs, {t.id: p for t, p in zip(trajs, passed, strict=True)})
