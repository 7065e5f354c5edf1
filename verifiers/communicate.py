"""COMMUNICATE (τ²-bench, methods.md §6): the agent told the user what it had to, and did not
tell them what is not so.

`task.verification.communicate` lists the facts the user must be told (a new reservation id,
an amount charged or refunded, a new flight; for a refused request, the rule that forbids
it in the policy's words). A fact counts as told when one of its spellings appears in the
text of an assistant message (tool calls and results do not count: the user never sees
them), compared by `envs.conversation.mentions_value`: numbers as numbers (520 = $520.00),
dates in any common form, ids case-insensitively. The facts of a change count only when
said after the agent's first successful write: the result must be reported, not just the
plan. By the task's expected outcome (`verification.outcome`):

- "refusal": no assistant message may claim that a change was made (`claims_change`, in any
  of the common wordings, "…but I went ahead and processed it anyway" included; the words a
  sentence only shares with the world's policy claim nothing, `without_policy`), and the
  replies must say that the request cannot be done (`signals_refusal`). The rule's fact is
  told when a reply states its substance, in the policy's words or its own
  (`states_rule`: the rule's numbers and most of its content words, or their synonyms);
- "answer": the facts are the answer (any assistant message counts).

Whatever the outcome, a trajectory that wrote nothing must not claim a change ("Done, it's
cancelled" with no write behind it).

Score (ours) = share of the checks passed; `passed` = all passed and a clean termination.
A task with nothing to tell and no refusal passes, as in τ²-bench.
"""

from __future__ import annotations

from typing import Any

from data.records import Task, Trajectory, Verdict
from envs.conversation import is_error_result, mentions_value
from envs.dialogue_acts import claims_change, signals_refusal, states_rule
from verifiers.base import OutcomeVerifier, episode_checks, register


def normalize(text: str) -> str:
    """Lower-cased, commas stripped (τ²-bench's comparison form)."""
    return text.lower().replace(",", "")


def message_text(message: dict[str, Any]) -> str:
    """The text of one OpenAI-format message (string content or a list of text parts)."""
    content = message.get("content") or ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return " ".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return str(content)


def agent_messages_to_user(trajectory: Trajectory) -> list[str]:
    """The text the agent addressed to the user: every assistant message's content."""
    return [
        message_text(m)
        for m in trajectory.messages
        if m.get("role") == "assistant" and message_text(m)
    ]


def wrote(trajectory: Trajectory, write_tools: set[str]) -> bool:
    """Whether any write call of the trajectory succeeded."""
    results = {m.get("tool_call_id"): m for m in trajectory.messages if m.get("role") == "tool"}
    for m in trajectory.messages:
        for call in m.get("tool_calls") or [] if m.get("role") == "assistant" else []:
            result = results.get(call.get("id"))
            if ((call.get("function") or {}).get("name") in write_tools and result is not None
                    and not is_error_result(message_text(result))):
                return True
    return False


def replies_after_first_write(trajectory: Trajectory, write_tools: set[str]) -> list[str]:
    """The agent's replies to the user after its first successful write (all replies when it
    made none)."""
    results = {m.get("tool_call_id"): m for m in trajectory.messages if m.get("role") == "tool"}
    texts: list[str] = []
    started = False
    for m in trajectory.messages:
        if m.get("role") != "assistant":
            continue
        if started and message_text(m):
            texts.append(message_text(m))
        for call in m.get("tool_calls") or []:
            name = (call.get("function") or {}).get("name")
            result = results.get(call.get("id"))
            if name in write_tools and result is not None and not is_error_result(message_text(result)):
                started = True
    return texts if started else agent_messages_to_user(trajectory)


class CommunicateVerifier(OutcomeVerifier):
    """The facts the user must hear were said; a refusal was said, and no success was claimed."""

    name = "communicate"
    # 3.0: claims in any wording, claims with nothing written, rules in own words;
    # 3.1: a rule's words the user said anyway are no evidence that it was stated;
    # 3.2: words a sentence only shares with the world's policy claim no change (`without_policy`);
    # 3.2.1: a reason names a rule once ("the rule R06…", not "the the rule R06…")
    version = "3.2.1"
    basis_name = "COMMUNICATE"
    audit_kinds = frozenset({"drop_communication", "claim_success", "omit_result"})

    def applies_to(self, task: Task) -> bool:
        """Tasks with something to tell, a refusal or an answer to give, or that name
        COMMUNICATE in their reward basis."""
        v = task.verification
        return bool(v.communicate) or v.outcome != "change" or "COMMUNICATE" in v.basis

    def verify(self, task: Task, trajectory: Trajectory) -> Verdict:
        v = task.verification
        facts = v.communicate
        write_tools, policy = _world_terms(task.world)
        replies = (agent_messages_to_user(trajectory) if v.outcome in ("refusal", "answer", "transfer")
                   else replies_after_first_write(trajectory, write_tools))
        context = " ".join(message_text(m) for m in trajectory.messages if m.get("role") == "user")
        found = [any(states_rule(r, f.any_of, context=context) for r in replies) if f.kind == "rule"
                 else any(mentions_value(r, x) for x in f.any_of for r in replies) for f in facts]
        reasons = [f"never told the user the {f.label.removeprefix('the ')} ({f.any_of[0]!r})" for f, ok in zip(facts, found, strict=True)
                   if not ok]
        checks = len(facts)
        if v.outcome == "refusal":
            said = agent_messages_to_user(trajectory)
            claims = [r for r in said if claims_change(r, policy=policy)]
            checks += 2
            if claims:
                reasons.append(f"claimed a change on a request the policy refuses: {claims[0][:120]!r}")
            if not any(signals_refusal(r) for r in said):
                reasons.append("never told the user that the request cannot be done")
        elif write_tools and not wrote(trajectory, write_tools):
            claims = [r for r in agent_messages_to_user(trajectory) if claims_change(r, strict=False, policy=policy)]
            checks += 1
            if claims:
                reasons.append(f"claimed a change, but nothing was written: {claims[0][:120]!r}")
        score = (checks - len(reasons)) / checks if checks else 1.0
        score, clean, episode = episode_checks(
            trajectory, trajectory.final_state_hash or "", score, self.options.require_clean_termination, task
        )
        passed = not reasons and (clean or not self.options.require_clean_termination)
        return self.verdict(task, trajectory, passed, score, reasons + episode,
                            {"required": [f.label for f in facts], "found": found, "outcome": v.outcome,
                             "assistant_messages": len(replies)})


def _world_terms(world: str) -> tuple[set[str], str]:
    """The world's write tools and its policy text (none and "" for a world not registered)."""
    from envs.registry import get_world

    try:
        found = get_world(world)
    except KeyError:
        return set(), ""
    return {n for n, t in found.tools.items() if t.write}, found.policy


register(CommunicateVerifier.name)(CommunicateVerifier)
