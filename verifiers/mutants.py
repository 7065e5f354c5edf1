"""The self-audit's cases, built without a model: the gold trajectory, its mutants (known-bad
variants a verifier must fail) and its alternatives (good variants it must pass).

Mutant trajectories are built from the task's reference solution without any model, by
replaying calls on the task's initial state (`build_trajectory`):

- `drop_write`: one write call removed;
- `change_argument`: one argument of one write changed (another enum value, a flipped flag,
  an integer + 1, or another value of the database column the argument's value comes from;
  values that keep the call succeeding are preferred);
- `extra_write`: one more successful write after the gold path (a gold write with another
  argument, the same write again, or a write tool with arguments drawn from the database);
- `stop_early`: the agent stops (cleanly) before one of the gold writes;
- `drop_communication`: for tasks with facts to communicate, the final message says nothing;
- `world_mutation`: the world's own known-bad variants of a constraint-guided reference
  (its ``constraints.py`` ``audit_mutations`` hook: a wrong item, payment or bag count).

and, the other way round, good variants of the gold that must still pass (*alternatives*):

- `reorder_writes`: the gold's writes in reverse order (when there are two or more and they
  reach the gold's final state that way: independent writes);
- `reorder_reads`: the reads moved after the writes, reversed;
- `skip_reads`: the reads left out.

A task with a reference dialogue gets its gold, mutants and alternatives from the dialogue
too (`build_dialogue`): the mutants of `dialogue_mutants` (skip_confirmation, ...) and the
alternatives of `dialogue_alternatives`: `reorder_writes` (the write blocks, each with its
announcement and the user's yes, in reverse order), `extra_reads` (every read made again
before the first write and after the last) and `other_identity` (the user identified by
another of the world's identity key sets they know, e.g. name and zip code for an email).

The audit that holds verifiers to these cases is `verifiers.audit`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from data.records import Step, Task, ToolCall, Trajectory, Turn
from envs.constraints import load_constraints, world_constraints
from envs.contract import hook as contract_hook
from envs.conversation import (
    argument_values,
    conversation,
    grounded_params,
    identity_lookup,
    mentions_value,
    tool_result,
)
from envs.registry import get_world
from envs.stock_tools import TRANSFER_TOOL
from envs.tools import ToolSpec
from envs.world import World
from verifiers.state import replayer_for


@dataclass
class Mutant:
    kind: str
    calls: list[ToolCall]
    note: str
    communicate: bool = True  # whether the final message states the required information


# -- trajectories without a model -------------------------------------------------------------


def final_message(task: Task, communicate: bool = True) -> str:
    info = [f.any_of[0] for f in task.verification.communicate if f.any_of] if communicate else []
    return "Your request is complete." + (" Details: " + "; ".join(info) + "." if info else "")


def build_trajectory(
    task: Task,
    calls: list[ToolCall],
    name: str = "gold",
    text: str | None = None,
    termination: str = "agent_stop",
) -> Trajectory:
    """A trajectory that makes `calls` (one per turn) and then says `text`, with the
    observations and final state of a real replay on the task's initial state."""
    r = replayer_for(task.world, task.initial_state)
    if r is None:
        raise RuntimeError("the replay cache is turned off (verifiers.state.REPLAY_CACHE_SIZE = 0)")
    messages: list[dict[str, Any]] = [{"role": "user", "content": task.instruction}]
    steps: list[Step] = []
    r.tracked.begin()
    try:
        for i, call in enumerate(calls):
            obs = r.env.call(call)
            cid = f"call_{i}"
            messages.append(
                {
                    "role": "assistant",
                    "content": "",
                    "tool_calls": [
                        {
                            "id": cid,
                            "type": "function",
                            "function": {
                                "name": call.name,
                                "arguments": json.dumps(call.arguments, ensure_ascii=False),
                            },
                        }
                    ],
                }
            )
            messages.append(
                {"role": "tool", "tool_call_id": cid, "name": call.name, "content": obs.content}
            )
            steps.append(
                Step(
                    index=i,
                    turn=i + 1,
                    action=call,
                    observation=obs.content,
                    error=obs.error,
                    error_detail=obs.detail,
                )
            )
        final_hash = r.tracked.current().hash
    finally:
        r.tracked.rollback()
    messages.append({"role": "assistant", "content": final_message(task) if text is None else text})
    steps.append(Step(index=len(steps), turn=len(calls) + 1))
    return Trajectory(
        id=f"audit-{task.id}-{name}",
        task_id=task.id,
        trial=0,
        model="audit",
        messages=messages,
        steps=steps,
        termination="transfer" if _transferred(steps) else termination,  # type: ignore[arg-type]
        final_state_hash=final_hash,  # type: ignore[arg-type]
        metadata={"audit": name},
    )


def replay_hash(task: Task, calls: list[ToolCall]) -> tuple[str, int]:
    """(final state hash, failed writes) of `calls` on the task's initial state."""
    r = replayer_for(task.world, task.initial_state)
    assert r is not None
    out = r.replay(calls)
    if out is None:
        raise RuntimeError(f"task {task.id}: a tool ended the replay transaction")
    view, _, failed = out
    return view.hash, failed


# -- mutants ---------------------------------------------------------------------------------


def build_dialogue(task: Task, turns: list[Turn], name: str = "gold") -> Trajectory:
    """A trajectory that says `turns` (a task's reference dialogue, or a variant of it), with
    the observations and final state of a real replay of its tool calls."""
    r = replayer_for(task.world, task.initial_state)
    if r is None:
        raise RuntimeError("the replay cache is turned off (verifiers.state.REPLAY_CACHE_SIZE = 0)")
    messages: list[dict[str, Any]] = []
    steps: list[Step] = []
    r.tracked.begin()
    try:
        for i, turn in enumerate(turns):
            if turn.role == "user":
                messages.append({"role": "user", "content": turn.content})
                continue
            wire = [{"id": f"call_{i}_{k}", "type": "function",
                     "function": {"name": c.name, "arguments": json.dumps(c.arguments, ensure_ascii=False)}}
                    for k, c in enumerate(turn.tool_calls)]
            messages.append({"role": "assistant", "content": turn.content, **({"tool_calls": wire} if wire else {})})
            for call, w in zip(turn.tool_calls, wire, strict=True):
                obs = r.env.call(call)
                messages.append({"role": "tool", "tool_call_id": w["id"], "name": call.name, "content": obs.content})
                steps.append(Step(index=len(steps), turn=i + 1, action=call, observation=obs.content,
                                  error=obs.error, error_detail=obs.detail))
            if not wire:
                steps.append(Step(index=len(steps), turn=i + 1))
        final_hash = r.tracked.current().hash
    finally:
        r.tracked.rollback()
    return Trajectory(id=f"audit-{task.id}-{name}", task_id=task.id, trial=0, model="audit", messages=messages,
                      steps=steps, termination="transfer" if _transferred(steps) else "user_stop",
                      final_state_hash=final_hash, metadata={"audit": name})  # type: ignore[arg-type]


def _transferred(steps: list[Step]) -> bool:
    """Whether a step handed the user to a human agent (the agent loop then ends as "transfer")."""
    return any(s.action is not None and s.action.name == TRANSFER_TOOL and s.error is None for s in steps)


def _write_turns(world: World, turns: list[Turn]) -> list[int]:
    return [i for i, t in enumerate(turns) if t.role == "assistant" and any(_is_write(world, c) for c in t.tool_calls)]


def dialogue_mutants(task: Task, max_per_kind: int = 3) -> list[tuple[str, str, list[Turn]]]:
    """Known-bad variants of the reference dialogue: (kind, note, turns)."""
    world = get_world(task.world)
    conv = conversation(world)
    turns = list(task.dialogue)
    writes = _write_turns(world, turns)
    out: list[tuple[str, str, list[Turn]]] = []
    for k, i in enumerate(writes[:max_per_kind]):
        if i > 0 and turns[i - 1].role == "user":
            out.append(("skip_confirmation", f"write {k + 1} without the user's yes", turns[: i - 1] + turns[i:]))
            declined = Turn(role="user", content="No, please don't do that.")
            out.append(("write_after_decline", f"write {k + 1} after the user said no",
                        [*turns[: i - 1], declined, *turns[i:]]))
    identity = {j for j, t in enumerate(turns) if t.role == "assistant"
                and any(c.name in conv.identity.lookups for c in t.tool_calls)}
    grounding = [j for j, t in enumerate(turns) if t.role == "assistant" and t.tool_calls and j not in identity
                 and not any(_is_write(world, c) for c in t.tool_calls)]
    for j in grounding if writes else []:  # each read whose absence leaves a write's id unseen
        without = [t for n, t in enumerate(turns) if n != j]
        if _ungrounded(task, world, without):
            out.append(("ungrounded_id", f"the read {turns[j].tool_calls[0].name} left out", without))
            if sum(k == "ungrounded_id" for k, _, _ in out) >= max_per_kind:
                break
    if writes and identity:
        first = min(identity)
        ask = [j for j in range(1, first) if turns[j].role in ("assistant", "user")]  # the identity exchange
        out.append(("skip_identity", "no identity question, answer or lookup",
                    [t for j, t in enumerate(turns) if j not in identity and j not in ask]))
    texts = [j for j, t in enumerate(turns) if t.role == "assistant" and t.content and not t.tool_calls]
    if task.verification.outcome == "refusal" and texts:
        claim = Turn(role="assistant", content="Done. I've taken care of that and you will get your money back.")
        out.append(("claim_success", "the refusal replaced by a claim of success", [*turns[: texts[-1]], claim]))
    if writes and texts and task.verification.communicate:
        after = {j for j in texts if j > writes[0]}
        plain = [Turn(role="assistant", content="Your request is complete.") if j in after else t
                 for j, t in enumerate(turns)]
        out.append(("omit_result", "the replies after the first write say nothing of the result", plain))
    for k, i in enumerate(writes[:max_per_kind]):
        call = turns[i].tool_calls[0]
        prefix = [c for t in turns[:i] for c in t.tool_calls]
        changed = _changed_calls(task, world, call, prefix)
        if changed:
            _, detour = changed[0]
            extra = Turn(role="assistant", tool_calls=[detour])
            out.append(("detour", f"{detour.name} with another value before write {k + 1}, then the right one",
                        [*turns[:i], extra, *turns[i:]]))
    return out


def _ungrounded(task: Task, world: World, turns: list[Turn]) -> bool:
    """Whether some write in `turns` uses an id or amount no earlier user turn or tool result shows."""
    traj = build_dialogue(task, turns, "probe")
    seen: list[str] = []
    for m in traj.messages:
        if m["role"] in ("user", "tool"):
            seen.append(m.get("content") or "")
        for wire in m.get("tool_calls") or []:
            spec = world.tools.get(wire["function"]["name"])
            if spec is None or not spec.write:
                continue
            args = json.loads(wire["function"]["arguments"])
            text = "\n".join(seen)
            if any(not mentions_value(text, v) for p in grounded_params(spec) for v in argument_values(args.get(p))):
                return True
    return False


def dialogue_alternatives(task: Task) -> list[tuple[str, str, list[Turn]]]:
    """Good variants of the reference dialogue: independent write blocks in another order,
    the reads said again, the user identified another way the world allows."""
    world = get_world(task.world)
    turns = list(task.dialogue)
    return [*_reordered_writes(task, world, turns), *_extra_reads(world, turns),
            *_other_identities(task, world, turns)]


def _reordered_writes(task: Task, world: World, turns: list[Turn]) -> list[tuple[str, str, list[Turn]]]:
    writes = _write_turns(world, turns)
    if len(writes) < 2:
        return []
    starts = [w - 2 if w >= 2 and turns[w - 1].role == "user" else w for w in writes]
    blocks = [turns[a: w + 1] for a, w in zip(starts, writes, strict=True)]
    if any(len(b) < 3 for b in blocks) or any(starts[k + 1] != writes[k] + 1 for k in range(len(writes) - 1)):
        return []
    swapped = [*turns[: starts[0]], *[t for b in reversed(blocks) for t in b], *turns[writes[-1] + 1:]]
    calls = [c for t in swapped for c in t.tool_calls]
    if replay_hash(task, calls) != replay_hash(task, [c for t in turns for c in t.tool_calls]):
        return []
    return [("reorder_writes", "the write blocks in reverse order", swapped)]


def _extra_reads(world: World, turns: list[Turn]) -> list[tuple[str, str, list[Turn]]]:
    """Every read of the dialogue made again: after the user's go-ahead, just before the
    first write, and after the last write (after the last read when there is no write)."""
    reads = [j for j, t in enumerate(turns) if t.role == "assistant" and t.tool_calls
             and not any(_is_write(world, c) for c in t.tool_calls)]
    if not reads:
        return []
    again = [Turn(role="assistant", tool_calls=list(turns[j].tool_calls)) for j in reads]
    writes = _write_turns(world, turns)
    if writes:
        first, last = writes[0], writes[-1]
        out = [*turns[:first], *again, *turns[first: last + 1], *again, *turns[last + 1:]]
        return [("extra_reads", "the reads made again before the first write and after the last", out)]
    return [("extra_reads", "the reads made again before the reply",
             [*turns[: reads[-1] + 1], *again, *turns[reads[-1] + 1:]])]


def _leaves(value: Any) -> set[str]:
    if isinstance(value, dict):
        return {x for v in value.values() for x in _leaves(v)}
    if isinstance(value, list):
        return {x for v in value for x in _leaves(v)}
    return {str(value)}


def _read(task: Task, call: ToolCall) -> Any:
    """The result of the read `call` on the task's initial state (None when it fails)."""
    r = replayer_for(task.world, task.initial_state)
    assert r is not None
    r.tracked.begin()
    try:
        obs = r.env.call(call)
    finally:
        r.tracked.rollback()
    return tool_result(obs.content) if obs.ok else None


def _other_identities(task: Task, world: World, turns: list[Turn]) -> list[tuple[str, str, list[Turn]]]:
    """The dialogue with the user identified by another of the world's identity key sets
    (`IDENTITY.keys`, e.g. name and zip code instead of email) that they know: the agent asks
    for those, the user gives them, the world's lookup for them (`identity_lookup`) replaces
    the reference's. Only a lookup that finds exactly the account the reference's found."""
    conv = conversation(world)
    at = next((j for j, t in enumerate(turns) if t.role == "assistant"
               and any(c.name in conv.identity.lookups for c in t.tool_calls)), None)
    if at is None or turns[0].role != "user":
        return []
    gold_call = next(c for c in turns[at].tool_calls if c.name in conv.identity.lookups)
    gold_found = _read(task, gold_call)
    known = {k: str(v) for k, v in task.user.known_info.items()}
    out: list[tuple[str, str, list[Turn]]] = []
    for keys in conv.identity.keys:
        call = identity_lookup(conv, keys, known)
        if call is None or (call.name, call.arguments) == (gold_call.name, gold_call.arguments):
            continue
        found = _read(task, call)
        if found is None or gold_found is None or _leaves(found) != _leaves(gold_found):
            continue
        said = [*keys, *(c for c in conv.identity.confirm if c in known and c not in keys)]
        if not all(k in known for k in said):
            continue
        words = [k.replace("_", " ") for k in said]
        ask = Turn(role="assistant", content=f"I can help with that. Could you tell me your {' and '.join(words)}?")
        answer = Turn(role="user", content=" ".join(f"My {w} is {known[k]}." for k, w in zip(said, words, strict=True)))
        lookup = Turn(role="assistant", content=turns[at].content,
                      tool_calls=[call if c is gold_call else c for c in turns[at].tool_calls])
        kept = [t for t in turns[1:at] if t.role == "assistant" and t.tool_calls]  # the identity exchange goes
        out.append(("other_identity", f"identified by {' and '.join(words)} ({call.name})",
                    [turns[0], ask, answer, *kept, lookup, *turns[at + 1:]]))
    return out


def _is_write(world: World, call: ToolCall) -> bool:
    spec = world.tools.get(call.name)
    return spec is not None and spec.write


def _column_values(task: Task, value: Any) -> list[Any]:
    """Other values of the database columns in which `value` occurs (sorted, deterministic)."""
    r = replayer_for(task.world, task.initial_state)
    assert r is not None
    found: set[Any] = set()
    for rows in r.tracked.rows.values():
        cols = {c for row in rows.values() for c, v in row.items() if v == value}
        for c in cols:
            found.update(row[c] for row in rows.values() if row.get(c) is not None)
    found.discard(value)
    return sorted(found, key=str)


def _alternatives(task: Task, spec: ToolSpec, arg: str, value: Any, limit: int = 6) -> list[Any]:
    schema = spec.parameters.get("properties", {}).get(arg, {})
    if "enum" in schema:
        return [v for v in schema["enum"] if v != value]
    if isinstance(value, bool):
        return [not value]
    if isinstance(value, int):
        return [value + 1, value - 1] if value > 0 else [value + 1]
    if isinstance(value, str):
        others = _column_values(task, value)
        if not others:
            return [value + "X"]
        start = next(
            (i for i, v in enumerate(others) if str(v) > value), 0
        )  # the next values, cyclically
        return (others[start:] + others[:start])[:limit]
    return []


def _changed_calls(
    task: Task, world: World, call: ToolCall, prefix: list[ToolCall]
) -> list[tuple[str, ToolCall]]:
    """Variants of `call` with one argument changed: (argument, call), one per argument,
    preferring a value with which the call still succeeds after `prefix` (the gold before it)."""
    spec = world.tools[call.name]
    out: list[tuple[str, ToolCall]] = []
    for arg in sorted(call.arguments):
        options = [
            ToolCall(name=call.name, arguments={**call.arguments, arg: v})
            for v in _alternatives(task, spec, arg, call.arguments[arg])
        ]
        if options:
            out.append((arg, options[0]))
            for opt in options:
                _, failed = replay_hash(task, [*prefix, opt])
                if not failed:
                    out[-1] = (arg, opt)
                    break
    return out


def _drawn_writes(task: Task, world: World, limit: int = 8) -> list[ToolCall]:
    """Write calls with every argument drawn from one database row (a column of the same
    name), preferring rows of the task's user: extra writes for tasks without gold writes."""
    r = replayer_for(task.world, task.initial_state)
    assert r is not None
    users = {str(v) for k, v in task.user.known_info.items() if k.endswith("user_id")}
    out: list[ToolCall] = []
    for spec in world.tools.values():
        if not spec.write:
            continue
        required = [p for p, prm in spec.params.items() if prm.default is prm.empty]
        for rows in r.tracked.rows.values():
            sample = next(iter(rows.values()), {})
            if not required or not all(p in sample for p in required):
                continue
            mine = sorted((k for k, row in rows.items() if str(row.get("user_id")) in users))
            for key in (mine or sorted(rows))[:limit]:
                out.append(ToolCall(name=spec.name, arguments={p: rows[key][p] for p in required}))
    # The same calls with one argument moved to a neighbouring value (another flight, say).
    out += [
        ToolCall(name=c.name, arguments={**c.arguments, p: alt[0]})
        for c in list(out)
        for p in sorted(c.arguments)
        if (alt := _alternatives(task, world.tools[c.name], p, c.arguments[p], limit=1))
    ]
    return out


def mutants(task: Task, max_per_kind: int = 3) -> list[Mutant]:
    """The task's mutants of each kind (at most `max_per_kind` each)."""
    world = get_world(task.world)
    gold = list(task.reference_solution)
    w_idx = [i for i, c in enumerate(gold) if _is_write(world, c)]
    out: list[Mutant] = []
    for i in w_idx[:max_per_kind]:
        out.append(Mutant("drop_write", gold[:i] + gold[i + 1 :], f"without {gold[i].name} #{i}"))
    changed = [
        (i, arg, new) for i in w_idx for arg, new in _changed_calls(task, world, gold[i], gold[:i])
    ]
    for i, arg, new in changed[:max_per_kind]:
        out.append(
            Mutant(
                "change_argument",
                gold[:i] + [new] + gold[i + 1 :],
                f"{gold[i].name} #{i} with {arg}={new.arguments[arg]!r}",
            )
        )
    extras = [(f"{new.name} with {arg}={new.arguments[arg]!r}", new) for _, arg, new in changed]
    extras += [(f"{gold[i].name} #{i} again", gold[i]) for i in w_idx]
    extras += [(f"drawn {c.name}", c) for c in _drawn_writes(task, world)]
    gold_hash, _ = replay_hash(task, gold)
    picked: list[Mutant] = []
    for note, call in extras:
        calls = [*gold, call]
        h, failed = replay_hash(task, calls)
        if h != gold_hash and failed == 0:
            picked.append(Mutant("extra_write", calls, "extra " + note))
        if len(picked) >= max_per_kind:
            break
    if not picked and extras:
        picked.append(Mutant("extra_write", [*gold, extras[0][1]], "extra " + extras[0][0]))
    out += picked
    for i in list(reversed(w_idx))[:max_per_kind]:
        out.append(Mutant("stop_early", gold[:i], f"stops before {gold[i].name} #{i}"))
    if task.verification.communicate:
        out.append(
            Mutant(
                "drop_communication",
                gold,
                "final message omits the required information",
                communicate=False,
            )
        )
    out += _world_mutations(task, world, gold)[:max_per_kind]
    return out


def _world_mutations(task: Task, world: World, gold: list[ToolCall]) -> list[Mutant]:
    """The world's known-bad variants of a constraint-guided reference (its ``audit_mutations``)."""
    if task.verification.constraints is None:
        return []
    try:
        module = world_constraints(world)
    except LookupError:
        return []
    hook = contract_hook(module, "audit_mutations")
    if hook is None:
        return []
    ref = task.initial_state
    conn = world.build_state(ref.seed, ref.scale, ref.patches)
    try:
        found = hook(conn, load_constraints(task.verification.constraints), gold)
    finally:
        conn.close()
    return [Mutant("world_mutation", calls, name) for name, calls in sorted(found.items())]


def alternatives(task: Task) -> list[Mutant]:
    """Good variants of the gold that a verifier of outcomes must pass (module docstring)."""
    world = get_world(task.world)
    gold = list(task.reference_solution)
    reads = [c for c in gold if not _is_write(world, c)]
    writes = [c for c in gold if _is_write(world, c)]
    out: list[Mutant] = []
    if len(writes) >= 2:
        swapped = [*reads, *reversed(writes)]
        if replay_hash(task, swapped) == replay_hash(task, gold):  # independent writes only
            out.append(Mutant("reorder_writes", swapped, "writes in reverse order"))
    if reads and writes:
        out.append(Mutant("reorder_reads", [*writes, *reversed(reads)], "reads after the writes"))
        out.append(Mutant("skip_reads", writes, "no reads"))
    return out
