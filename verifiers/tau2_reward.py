"""τ²-bench's reward for a trajforge trajectory in a τ² world, by τ²'s own evaluator.

`tau2_reward(task, messages, termination)` converts the trajectory's OpenAI messages to τ²'s
message types, wraps them in a τ² `SimulationRun` and calls τ²'s `evaluate_simulation`
(environment, action and communicate evaluators: τ² replays the agent's tool calls on a fresh
copy of its database and compares hashes with the gold actions' end state). The tool
messages handed to τ² are τ²'s own responses to the calls, replayed on τ²'s environment (τ²'s
evaluator refuses a history whose recorded results differ from its replay); where ours differ
from τ²'s (content of a successful call, or success against failure) the result counts them
in `mismatches`, which is how a trajforge world drifting from τ²'s runtime shows.

Natural-language assertions need an LLM judge: when the task's reward basis names
``NL_ASSERTION`` it is left out of the basis and named in `skipped` (the reward is then
τ²'s reward over the rest). Needs the ``tau2`` extra; imports τ² only when called.

The verifier ``tau2`` (`Tau2Verifier`) is this reward as a verdict: it applies to tasks of a
τ² world that carry their τ² task (``metadata["tau2_task"]``); passed = reward 1.0, the reasons
are τ²'s failed checks (`tau2_reasons`). A run adds it beside the configured verifiers for
such tasks (`pipelines.stages.verify.second_judges`): it never decides, and the card's
agreement table compares it with the deciding verdict.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import Any

from data.records import Task, Trajectory, Verdict
from verifiers.base import BaseVerifier, register

# τ² imports litellm, which otherwise fetches a model price map from the network on import.
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

# trajforge terminations -> τ²'s (τ² scores only agent_stop and user_stop; the rest is 0)
TERMINATIONS = {
    "agent_stop": "agent_stop", "user_stop": "user_stop", "transfer": "user_stop",
    "out_of_scope": "agent_stop", "max_turns": "max_steps", "context_exhausted": "max_steps",
    "model_error": "agent_error",
    "env_error": "too_many_errors", "user_error": "user_error",
}


@dataclass
class Tau2Reward:
    """τ²'s verdict on one trajectory: its reward, the checks behind it and the differences
    between trajforge's recorded tool results and τ²'s replay of the same calls."""

    reward: float
    basis: list[str]
    db_match: bool | None = None
    action_matches: list[bool] = field(default_factory=list)
    communicate_met: list[bool] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    mismatches: list[str] = field(default_factory=list)
    info: dict[str, Any] = field(default_factory=dict)

    @property
    def passed(self) -> bool:
        return self.reward >= 1.0 - 1e-9


def reference_messages(task: Any, calls: list[Any] | None = None, closing: str = "All done.") -> list[dict[str, Any]]:
    """A conversation that makes `calls` (default: the task's reference) in a fresh copy of the
    task's τ² world, each as one assistant turn with its result, then tells the user the facts
    the task says must be told: the gold as τ²'s evaluator replays it (tests, the benches)."""
    import json

    from envs.registry import get_world

    world = get_world(task.world)
    env = world.env(task.initial_state)
    msgs: list[dict[str, Any]] = [{"role": "system", "content": world.system_prompt("")},
                                  {"role": "user", "content": task.instruction}]
    for i, c in enumerate(task.reference_solution if calls is None else calls):
        msgs.append({"role": "assistant", "content": "", "tool_calls": [
            {"id": f"c{i}", "type": "function", "function": {"name": c.name, "arguments": json.dumps(c.arguments)}}]})
        msgs.append({"role": "tool", "tool_call_id": f"c{i}", "content": env.call(c).content})
    facts = "; ".join(f.any_of[0] for f in task.verification.communicate)
    msgs.append({"role": "assistant", "content": f"{closing} {facts}".strip()})
    return msgs


def tau2_task(task: Any) -> Any:
    """The τ² `Task` a trajforge task carries (``metadata["tau2_task"]``), or the τ² task itself."""
    from tau2.data_model.tasks import Task as T2Task

    if isinstance(task, T2Task):
        return task
    raw = (getattr(task, "metadata", None) or {}).get("tau2_task")
    if raw is None:
        raise ValueError(f"task {getattr(task, 'id', '?')} carries no τ² task (metadata['tau2_task'])")
    return T2Task.model_validate(raw)


def _arguments(raw: Any) -> dict[str, Any]:
    if isinstance(raw, dict):
        return raw
    try:
        value = json.loads(raw or "{}")
    except (TypeError, ValueError):
        return {}
    return value if isinstance(value, dict) else {}


def _ok(content: str | None) -> bool:
    """Whether a trajforge tool message reports success (not an `error_observation`)."""
    try:
        body = json.loads(content or "")
    except ValueError:
        return True
    return not (isinstance(body, dict) and set(body) == {"error", "code", "message"})


def to_tau2_messages(messages: list[dict[str, Any]], environment: Any) -> tuple[list[Any], list[str]]:
    """OpenAI-format messages as τ² messages, tool results from τ²'s `environment` (a fresh
    τ² `Environment` at the task's initial state, advanced by the calls); and the
    differences between the recorded results and τ²'s."""
    from tau2.data_model.message import AssistantMessage, ToolCall, UserMessage

    out: list[Any] = []
    mismatches: list[str] = []
    recorded: dict[str, str | None] = {m.get("tool_call_id", ""): m.get("content")
                                       for m in messages if m.get("role") == "tool"}
    for m in messages:
        role = m.get("role")
        if role == "user":
            out.append(UserMessage(role="user", content=m.get("content") or ""))
        elif role == "assistant":
            calls = [ToolCall(id=c.get("id") or f"call_{len(out)}_{i}", name=c["function"]["name"],
                              arguments=_arguments(c["function"].get("arguments")), requestor="assistant")
                     for i, c in enumerate(m.get("tool_calls") or [])]
            if calls:
                out.append(AssistantMessage(role="assistant", content=m.get("content") or None, tool_calls=calls))
                for call in calls:
                    response = environment.get_response(call)
                    out.append(response)
                    ours = recorded.get(call.id)
                    if ours is None:
                        mismatches.append(f"{call.name}: no recorded result")
                    elif _ok(ours) == response.error:
                        mismatches.append(f"{call.name}: {'ok' if _ok(ours) else 'error'} here, "
                                          f"{'error' if response.error else 'ok'} in τ²")
                    elif not response.error and _json(ours) != _json(response.content):
                        mismatches.append(f"{call.name}: result differs from τ²'s")
            else:
                out.append(AssistantMessage(role="assistant", content=m.get("content") or ""))
        elif role == "tool" or role == "system":
            continue  # tool results come from τ²'s replay; the system prompt is not part of τ²'s history
    return out, mismatches


def _json(text: str | None) -> Any:
    try:
        return json.loads(text or "")
    except ValueError:
        return text


def tau2_reward(task: Any, messages: list[dict[str, Any]], termination: str = "agent_stop",
                domain: str | None = None) -> Tau2Reward:
    """τ²'s reward of a conversation (a trajforge trajectory's `messages`) on `task` (a trajforge
    task of a τ² world, or a τ² `Task` with `domain`)."""
    from tau2.data_model.simulation import SimulationRun, TerminationReason
    from tau2.data_model.tasks import RewardType
    from tau2.evaluator.evaluator import EvaluationType, evaluate_simulation
    from tau2.registry import registry

    t2 = tau2_task(task)
    domain = domain or (getattr(task, "metadata", None) or {}).get("tau2_domain")
    if not domain:
        raise ValueError("which τ² domain? (a trajforge task of a τ² world names it in metadata['tau2_domain'])")
    skipped: list[str] = []
    if t2.evaluation_criteria is not None and RewardType.NL_ASSERTION in t2.evaluation_criteria.reward_basis:
        t2 = t2.model_copy(deep=True)
        assert t2.evaluation_criteria is not None
        t2.evaluation_criteria.reward_basis = [b for b in t2.evaluation_criteria.reward_basis
                                               if b != RewardType.NL_ASSERTION]
        skipped.append("NL_ASSERTION")
    environment = registry.get_env_constructor(domain)()
    init = t2.initial_state
    if init is not None:
        environment.set_state(initialization_data=init.initialization_data,
                              initialization_actions=init.initialization_actions,
                              message_history=init.message_history or [])
    t2_messages, mismatches = to_tau2_messages(messages, environment)
    reason = TerminationReason(TERMINATIONS.get(termination, "agent_error"))
    sim = SimulationRun(id="trajforge", task_id=str(t2.id), start_time="", end_time="", duration=0.0,
                        termination_reason=reason, messages=t2_messages)
    info = evaluate_simulation(sim, t2, EvaluationType.ALL, solo_mode=False, domain=domain)
    basis = [str(getattr(b, "value", b)) for b in (info.reward_basis or [])]
    return Tau2Reward(
        reward=float(info.reward), basis=basis,
        db_match=info.db_check.db_match if info.db_check is not None else None,
        action_matches=[c.action_match for c in info.action_checks or []],
        communicate_met=[c.met for c in info.communicate_checks or []],
        skipped=skipped, mismatches=mismatches, info=dict(info.info or {}),
    )


def tau2_reasons(result: Tau2Reward, termination: str = "agent_stop") -> list[str]:
    """τ²'s failed checks, one short reason each, in a form that counts across tasks (the
    values a check is about stay in the verdict's details)."""
    if result.passed:
        return []
    reasons: list[str] = []
    if TERMINATIONS.get(termination, "agent_error") not in ("agent_stop", "user_stop"):
        reasons.append(f"τ²: ended by {termination} (τ² scores only an agent or user stop)")
    if result.db_match is False:
        reasons.append("τ²: database differs from the gold actions' end state")
    if result.action_matches and not all(result.action_matches):
        reasons.append("τ²: a gold action was not taken")
    if result.communicate_met and not all(result.communicate_met):
        reasons.append("τ²: a fact to communicate was not told")
    return reasons or [f"τ²: reward {result.reward:g}"]


@register("tau2")
class Tau2Verifier(BaseVerifier):
    """τ²-bench's evaluator as a verdict (see the module docstring)."""

    name = "tau2"
    version = "1"

    def applies_to(self, task: Task) -> bool:
        return applies_to(task)

    def verify(self, task: Task, trajectory: Trajectory) -> Verdict:
        """τ²'s reward as a verdict; where τ²'s evaluator raises (a conversation it cannot read),
        a failing verdict whose details name the `error` (the agreement figures leave it out)."""
        try:
            result = tau2_reward(task, trajectory.messages, trajectory.termination)
        except Exception as exc:  # a second judge never takes a run down
            error = f"{type(exc).__name__}: {exc}"[:300]
            return self.verdict(task, trajectory, False, 0.0, [f"τ²: evaluator error ({type(exc).__name__})"],
                                {"error": error})
        details = {"db_match": result.db_match, "action_matches": result.action_matches,
                   "communicate_met": result.communicate_met, "basis": result.basis,
                   **({"skipped": result.skipped} if result.skipped else {}),
                   **({"mismatches": result.mismatches} if result.mismatches else {})}
        return self.verdict(task, trajectory, result.passed, result.reward,
                            tau2_reasons(result, trajectory.termination), details)


def applies_to(task: Task) -> bool:
    """Whether τ²'s evaluator can judge `task`: the τ² extra is installed, the task carries its
    τ² task and domain, and its world is a τ² world."""
    meta = task.metadata or {}
    if "tau2_task" not in meta or not meta.get("tau2_domain"):
        return False
    from envs.registry import get_world
    from envs.tau2_world import Tau2World, available

    if not available():
        return False
    try:
        return isinstance(get_world(task.world), Tau2World)
    except (KeyError, ValueError, FileNotFoundError):
        return False
