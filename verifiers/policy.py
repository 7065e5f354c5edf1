"""POLICY: the working rules a world's policy states, checked over the conversation.

The world declares its clauses (`envs/conversation.py`: `CLAUSES`, `IDENTITY`, `mentions`);
this verifier walks the trajectory's messages in order and checks, for every write call the
agent made (a successful one or a refused one):

- `identity`: before it, an identity lookup (`IDENTITY.lookups`) succeeded with an argument
  value the user had said;
- `confirm_identity`: before it, the user stated each `IDENTITY.confirm` field (a date of
  birth), as the identity lookup's result shows it;
- `grounded_arguments`: every record id or amount among its arguments appeared earlier in a
  user message or a tool result (never only in the agent's own words);
- `announce_and_confirm`: the last user message before it confirms (yes, go ahead) and came
  after the previous write (one yes per change), and the agent message just before that one
  names the write's records (the user's own account id aside: `Identity.own_ids`) (an id, or how the world
  names the record: a flight number, a card's last digits) and the amounts it moves (read
  from the world's ledger when it keeps one); a record an earlier write of the conversation
  created (a line just opened) is named as it is once those earlier writes are replayed;
- `no_write_after_decline`: the last user message before it is not a refusal ("no, don't").

What a user reply means is read by `envs.dialogue_acts.reply_act`: only an unambiguous yes
confirms; a hedge, a question, a condition or a yes to part of the plan is "unsure", and
unsure is never a confirmation. The announcement is what the agent said between the
previous write and that yes: a plan, the user's question, the agent's answer and its
"shall I go ahead?" count together. When a judge model is configured (`model`), it reads
the replies the rules find unsure, and its reading decides (`judge_act`).
The identity lookup's argument must be said by the user as a value of its own, not read out
of a longer code the user quoted (an account number inside a bill id).

And over every assistant message, whatever the world's clauses:

- `supported_facts`: every amount, id and date the agent states was shown before it (the
  policy, the user's words, tool results, the task's facts to tell, what the writes moved;
  `verifiers.facts`): an invented fee, discount, id or date fails.

Score = checks passed / checks made (1.0 for a trajectory without writes); `passed` = every
check passed and a clean termination. Each failed check is a reason naming its clause.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from pydantic import Field

from data.records import Sampling, Task, ToolCall, Trajectory, Verdict
from envs.conversation import (
    Conversation,
    argument_values,
    conversation,
    grounded_params,
    is_error_result,
    mentions_name,
    mentions_value,
    record_of,
    said_alone,
    tool_result,
    value_mentions,
)
from envs.dialogue_acts import Act, reply_act
from envs.registry import get_world
from envs.world import World
from verifiers.base import BaseVerifier, VerifierOptions, episode_checks, register
from verifiers.communicate import message_text
from verifiers.facts import stated, unsupported
from verifiers.llm_judge import judge_act
from verifiers.state import replayer_for


@dataclass
class _Write:
    call: ToolCall
    at: int  # index of the assistant message that made it
    seen: str  # user messages and tool results before it
    said_by_user: str  # user messages before it
    last_user: str | None  # the last user message before it
    announcement: str | None  # the agent message just before that user message
    identified: bool
    confirmed_fields: dict[str, bool] = field(default_factory=dict)
    last_user_at: int = -1  # index of the last user message before it


def _walk(world: World, conv: Conversation, trajectory: Trajectory) -> list[_Write]:
    """The trajectory's write calls, each with what had been said and shown before it."""
    tools = world.tools
    seen: list[str] = []
    by_user: list[str] = []
    last_user: str | None = None
    last_user_at = -1
    agent_texts: list[tuple[int, str]] = []  # (index, text) of the agent's messages to the user
    write_at: list[int] = []  # indexes of the assistant messages that made writes
    identified = False
    identity_record: dict[str, Any] = {}
    pending: dict[str, ToolCall] = {}  # tool_call_id -> identity lookup awaiting its result
    writes: list[_Write] = []
    for i, m in enumerate(trajectory.messages):
        role = m.get("role")
        text = message_text(m)
        if role == "user":
            by_user.append(text)
            seen.append(text)
            last_user = text
            last_user_at = i
        elif role == "tool":
            content = text
            seen.append(content)
            call = pending.pop(m.get("tool_call_id") or "", None)
            if call is not None and not is_error_result(content):
                args = conv.identity.lookups.get(call.name, [])
                if all(any(said_alone(u, str(call.arguments.get(a, ""))) for u in by_user) for a in args):
                    identified = True
                    body = tool_result(content)
                    if isinstance(body, dict):
                        identity_record = body
        elif role == "assistant":
            if text.strip():
                agent_texts.append((i, text))
            for wire in m.get("tool_calls") or []:
                fn = wire.get("function") or {}
                name = fn.get("name") or ""
                args = fn.get("arguments")
                if isinstance(args, str):
                    try:
                        args = json.loads(args)
                    except ValueError:
                        args = None
                call = ToolCall(name=name, arguments=args if isinstance(args, dict) else {})
                if name in conv.identity.lookups:
                    pending[wire.get("id") or ""] = call
                spec = tools.get(name)
                if spec is None or not spec.write or not isinstance(args, dict):
                    continue
                user_said = "\n".join(by_user)
                confirmed = {f: identity_record.get(f) is not None and mentions_value(user_said, str(identity_record[f]))
                             for f in conv.identity.confirm}
                # the plan: what the agent said since the last write before the user's reply
                since = max((j for j in write_at if j < last_user_at), default=-1)
                plan = "\n".join(t for j, t in agent_texts if since < j < last_user_at) or None
                writes.append(_Write(call, i, "\n".join(seen), user_said, last_user, plan,
                                     identified, confirmed, last_user_at))
                write_at.append(i)
    return writes


class PolicyOptions(VerifierOptions):
    # a configured judge model reads the replies the rules find unsure (a yes or not)
    judge_unsure: bool = True
    judge_sampling: Sampling = Field(default_factory=lambda: Sampling(temperature=0.0, max_tokens=8, seed=0))


def _write_amounts(task: Task, calls: list[ToolCall]) -> list[list[float]]:
    """Per write call, the money amounts it moved, from the world's ledger (empty lists for a
    world without one, or for writes that failed): those the outcome's replay of the same
    writes just recorded, else from a replay of its own."""
    r = replayer_for(task.world, task.initial_state)
    if r is None or not r.has_ledger:
        return [[] for _ in calls]
    known = r.remembered_amounts(calls)
    if known is not None:
        return known
    out: list[list[float]] = []
    top = r.ledger_top
    r.tracked.begin()
    try:
        for call in calls:
            ok = r.env.call(call).ok
            got, top = r.ledger_added(top) if ok else ([], top)
            out.append(got)
    finally:
        r.tracked.rollback()
    r.remember_amounts(calls, out)
    return out


class PolicyVerifier(BaseVerifier):
    """The world's working rules over the trajectory (see the module docstring)."""

    name = "policy"
    version = "2.0.0"  # 2.0: replies read as acts (unsure is no yes), the plan since the last write, stated facts
    basis_name = "POLICY"
    audit_kinds = frozenset({"skip_confirmation", "ungrounded_id", "skip_identity", "write_after_decline"})
    alternative_kinds = frozenset({"reorder_writes", "extra_reads", "other_identity"})
    takes_model = True  # a judge model, when configured, reads the replies the rules find unsure
    options_model = PolicyOptions
    options: PolicyOptions

    def __init__(self, options: PolicyOptions | Mapping[str, Any] | None = None, model: Any = None,
                 **fields: Any) -> None:
        super().__init__(options, model, **fields)
        self._judged: dict[tuple[str, str], Act | None] = {}

    @property
    def require_clean_termination(self) -> bool:
        return self.options.require_clean_termination

    def act(self, plan: str, reply: str) -> Act:
        """What `reply` does to `plan`: the rules' reading, or the judge's where the rules are
        unsure and a judge model is configured (its answers are kept per plan and reply)."""
        act = reply_act(reply)
        if act != "unsure" or self.model is None or not self.options.judge_unsure:
            return act
        key = (plan, reply)
        if key not in self._judged:
            self._judged[key] = judge_act(self.model, plan, reply, self.options.judge_sampling)
        return self._judged[key] or "unsure"

    def applies_to(self, task: Task) -> bool:
        """Conversations in tool-use worlds: tasks with a reference dialogue or that name
        POLICY in their reward basis (single-question self-play tasks and workspace tasks
        are judged by their outcome and tests)."""
        try:
            world = get_world(task.world)
        except KeyError:
            return False
        return isinstance(world, World) and (bool(task.dialogue) or "POLICY" in task.verification.basis)

    def check(self, task: Task, trajectory: Trajectory) -> tuple[dict[str, list[int]], list[str]]:
        """(clause -> [checks made, failed], failures) of every clause over every write."""
        world = get_world(task.world)
        conv = conversation(world)
        writes = _walk(world, conv, trajectory)
        amounts = _write_amounts(task, [w.call for w in writes])
        r = replayer_for(task.world, task.initial_state)
        conn = r.env.conn if r is not None else None
        memo = r.memo if r is not None else {}

        def names_of(value: str) -> list[str | tuple[str, ...]]:
            """How `value` may be named to the user (from the initial state: kept per state)."""
            key = ("value_mentions", value)
            if key not in memo:
                memo[key] = value_mentions(conv, conn, value) if conn is not None else [value]
            return memo[key]

        replayed: dict[int, Any] = {}  # write index -> an env with the writes before it replayed

        def names_at(k: int, value: str) -> list[str | tuple[str, ...]]:
            """`names_of`, or for a record the initial state lacks (one an earlier write made)
            its names once the trajectory's writes before write `k` are replayed."""
            key = ("record_of", value)
            if key not in memo:
                memo[key] = conn is None or record_of(conn, value) is not None
            if memo[key] or k == 0:
                return names_of(value)
            if k not in replayed:
                env = world.env(task.initial_state)
                for earlier in writes[:k]:
                    env.call(earlier.call)
                replayed[k] = env
            return value_mentions(conv, replayed[k].conn, value)

        checks: dict[str, list[int]] = {}
        failures: list[str] = []

        def check(clause: str, ok: bool, why: str) -> None:
            if clause in conv.clauses:
                counts = checks.setdefault(clause, [0, 0])
                counts[0] += 1
                if not ok:
                    counts[1] += 1
                    failures.append(f"{clause}: {why}")

        own_ids = conv.identity.own_ids()  # the user's own id: named by being the user
        for k, w in enumerate(writes):
            label = f"{w.call.name} (write {k + 1})"
            check("identity", w.identified, f"{label} before the user was identified")
            for f, ok in w.confirmed_fields.items():
                check("confirm_identity", ok, f"{label} before the user confirmed their {f.replace('_', ' ')}")
            spec = world.tools[w.call.name]
            values = [(p, v) for p in grounded_params(spec) for v in argument_values(w.call.arguments.get(p))]
            unseen = [f"{p}={v}" for p, v in values if not mentions_value(w.seen, v)]
            check("grounded_arguments", not unseen, f"{label} uses {', '.join(unseen)}, never shown before")
            text = w.announcement or ""
            act = self.act(text, w.last_user) if w.last_user is not None else "unsure"
            check("no_write_after_decline", act != "decline", f"{label} after the user said {w.last_user!r:.80}")
            # one yes per write: a reply given before the previous write was already used by it
            fresh = k == 0 or w.last_user_at > writes[k - 1].at
            confirmed = fresh and act == "confirm"
            missing = []
            for p, v in values:
                if p in own_ids:
                    continue
                if not any(mentions_name(text, n) for n in names_at(k, v)):
                    missing.append(f"{p}={v}")
            missing += [f"amount {a:g}" for a in (amounts[k] if k < len(amounts) else [])
                        if not mentions_value(text, f"{a:g}")]
            if not confirmed:
                why = "the reply it followed was not a clear yes" if fresh and act == "unsure" else "no fresh yes"
                check("announce_and_confirm", False,
                      f"{label} without the user confirming it ({why}: {(w.last_user or '')!r:.80})")
            else:
                check("announce_and_confirm", bool(text) and not missing,
                      f"{label} was not announced with {', '.join(missing) or 'its values'}")
        for env in replayed.values():
            env.close()
        # stated facts: whatever the world's clauses, the agent tells the user nothing unsupported
        known = [world.policy] + [x for f in task.verification.communicate for x in f.any_of]
        moved = [a for got in amounts for a in got]
        wrong = unsupported(trajectory.messages, known, moved)
        stating = sum(1 for m in trajectory.messages if m.get("role") == "assistant" and stated(message_text(m)))
        if stating:
            counts = checks.setdefault("supported_facts", [0, 0])
            counts[0] += stating
            by_message: dict[int, list[str]] = {}
            for i, f in wrong:
                by_message.setdefault(i, []).append(f"{f.kind} {f.text!r}")
            counts[1] += len(by_message)
            failures += [f"supported_facts: message {i} states {', '.join(fs)}, which nothing before it shows"
                         for i, fs in by_message.items()]
        return checks, failures

    def verify(self, task: Task, trajectory: Trajectory) -> Verdict:
        clauses, failures = self.check(task, trajectory)
        checks = sum(n for n, _ in clauses.values())
        score = (checks - len(failures)) / checks if checks else 1.0
        score, clean, episode = episode_checks(trajectory, trajectory.final_state_hash or "", score,
                                               self.require_clean_termination, task)
        return Verdict(trajectory_id=trajectory.id, task_id=task.id, verifier=self.name, verifier_version=self.version,
                       passed=not failures and (clean or not self.require_clean_termination), score=round(score, 6),
                       reasons=failures + episode, details={"checks": checks, "failed": len(failures), "clauses": clauses})


register(PolicyVerifier.name)(PolicyVerifier)
