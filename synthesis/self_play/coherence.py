"""Self-play tasks as conversations a user can have (issue 16 §3): `as_conversation` makes a
valid generation one (the records it touches belong to one user, checked on the world's
database with `envs.ownership`; that user's identity is in what they know; they say no
world-internal id; a reference dialogue tells them the answer; a transfer comes last), and
`figures` counts, over a set of tasks, the problems the method is there to prevent."""

from __future__ import annotations

import random
import re
from collections import Counter
from collections.abc import Sequence
from typing import Any

from data.records import Fact, StateRef, Task, ToolCall, UserScenario
from data.self_play import Generation
from envs.conversation import (
    conversation,
    identity_lookup,
    identity_values,
    leaked_ids,
    mentions_value,
    record_of,
    record_phrase,
    user_words,
)
from envs.ownership import account_table, call_owners, result_accounts
from envs.stock_tools import TRANSFER_TOOL
from envs.world import World
from rollout.generation import grounding_values
from synthesis.base import internal_id_leaks, user_facing_texts
from synthesis.dialogue import with_dialogue
from synthesis.dialogue_checks import past_dates
from synthesis.self_play.generators import Note, accounts
from synthesis.self_play.world_check import WorldCheck

CALCULATE = "calculate"


def run_owners(world: World, task: Task, calls: Sequence[ToolCall] | None = None) -> set[str]:
    """The accounts whose records `calls` (default: the reference) touch, run in order from
    the task's initial state: records named by their arguments, on the state each call
    starts from, and accounts named by their results."""
    env = world.env(task.initial_state)
    try:
        out: set[str] = set()
        for call in calls if calls is not None else task.reference_solution:
            out |= call_owners(env.conn, [call])
            obs = env.call(ToolCall(name=call.name, arguments=dict(call.arguments)))
            if obs.ok:
                out |= result_accounts(env.conn, obs.content)
        return out
    finally:
        env.close()


def identity_of(world: World, task: Task) -> str | None:
    """The account the user's known info identifies (the world's identity lookup run on the
    initial state), or None when they know no identity key set or it finds no one."""
    conv = conversation(world)
    known = task.user.known_info
    norm = {k.strip().lower().replace(" ", "_") for k in known}
    env = world.env(task.initial_state)
    try:
        for keys in conv.identity.keys:
            if not all(k.strip().lower().replace(" ", "_") in norm for k in keys):
                continue
            call = identity_lookup(conv, keys, known)
            if call is None:
                continue
            obs = env.call(call)
            found = result_accounts(env.conn, obs.content) if obs.ok else set()
            if found:
                return next(iter(found))
        return None
    finally:
        env.close()


def has_write(world: World, task: Task) -> bool:
    return any(world.tools[c.name].write and c.name != TRANSFER_TOOL for c in task.reference_solution
               if c.name in world.tools)


def task_figures(world: World, task: Task) -> dict[str, bool]:
    """The coherence facts of one task (True = a problem, except `write`, `transfer` and
    `calculator`: it has a write, a transfer, a calculator call). `transfer_first`: the
    reference transfers before anything else (on the user's first ask); `calculator_only`:
    it only calls the calculator (an identity lookup aside)."""
    owners = run_owners(world, task)
    names = [c.name for c in task.reference_solution]
    lookups = set(conversation(world).identity.lookups)
    transfer = [i for i, n in enumerate(names) if n == TRANSFER_TOOL]
    write = has_write(world, task)
    needs_identity = write or bool(owners)
    identity = identity_of(world, task) if needs_identity else None
    return {
        "write": write,
        "leak": bool(internal_id_leaks(world, task)),
        "no_identity": needs_identity and identity is None,
        "wrong_identity": identity is not None and bool(owners) and owners != {identity},
        "cross_user": len(owners) > 1,
        "transfer_first": bool(transfer) and transfer[0] == 0 and task.verification.outcome != "transfer",
        "transfer_continues": bool(transfer) and transfer[-1] != len(names) - 1,
        "transfer_unasked": bool(transfer) and task.verification.outcome != "transfer",
        "transfer": bool(transfer),
        "calculator": CALCULATE in names,
        "calculator_only": bool(names) and all(n in (CALCULATE, *lookups) for n in names) and CALCULATE in names,
        "nothing_checked": (task.target_state_hash == task.initial_state.state_hash
                            and not task.verification.communicate
                            and task.verification.outcome not in ("refusal", "transfer")),
    }


def write_ids(world: World, task: Task) -> tuple[int, int]:
    """(internal ids among the task's write arguments, how many of them its user-facing text
    states verbatim), on its initial state."""
    values = sorted({str(v) for c in gold_calls(task) if c.name in world.tools and world.tools[c.name].write
                     for _, v in grounding_values([c])})
    env = world.env(task.initial_state)
    try:
        internal = leaked_ids(world, env.conn, values)
        said = leaked_ids(world, env.conn, user_facing_texts(task))
    finally:
        env.close()
    return len(internal), len(set(internal) & set(said))


def figures(world: World, tasks: Sequence[Task]) -> dict[str, Any]:
    """Counts of each coherence problem over `tasks` (see `task_figures`), with the leaks and
    missing identities of the write tasks apart (`write_leak`, `write_no_identity` of `writes`)
    and the internal ids among write arguments (`write_ids`) the user says verbatim
    (`write_ids_verbatim`)."""
    per = [task_figures(world, t) for t in tasks]
    counts = Counter(k for f in per for k, v in f.items() if v)
    for t in tasks:  # the internal ids among the write arguments, and those the user says verbatim
        ids, said = write_ids(world, t)
        counts["write_ids"] += ids
        counts["write_ids_verbatim"] += said
    counts["write_leak"] = sum(f["write"] and f["leak"] for f in per)
    counts["write_no_identity"] = sum(f["write"] and f["no_identity"] for f in per)
    keys = ["write_ids", "write_ids_verbatim", "leak", "write_leak", "no_identity", "write_no_identity", "wrong_identity", "cross_user", "transfer",
            "transfer_first", "transfer_continues", "transfer_unasked", "calculator", "calculator_only",
            "nothing_checked"]
    return {"tasks": len(tasks), "writes": counts["write"], **{k: counts[k] for k in keys}}


# -- a generation as a conversation ----------------------------------------------------------

BASIS = ["DB", "ACTION", "COMMUNICATE", "POLICY"]


def identity_for(world: World, ref: StateRef, account: str,
                 calls: Sequence[ToolCall] = ()) -> tuple[dict[str, str], ToolCall] | None:
    """What the holder of `account` identifies with: the values of every identity key set of
    the world's conversation contract whose lookup, run on the state `ref`, finds them, and
    the first such lookup; None when none does. When `calls` (the question's own) hold one of
    those lookups, the user identifies that way only ("I forgot my email; I'm Ana Silva, zip
    code 37242"): that set's values, and that lookup."""
    conv = conversation(world)
    env = world.env(ref)
    try:
        found = account_table(env.conn)
        if found is None:
            return None
        table, key = found
        cur = env.conn.execute(f'SELECT * FROM "{table}" WHERE "{key}" = ?', (account,))
        row = cur.fetchone()
        if row is None:
            return None
        holder = dict(zip([d[0] for d in cur.description], row, strict=True))
        known: dict[str, str] = {}
        first: ToolCall | None = None
        for keys in conv.identity.keys:
            values = identity_values(conv, list(keys), holder, key)
            call = identity_lookup(conv, list(keys), values) if values else None
            if call is None:
                continue
            obs = env.call(call)
            if obs.ok and result_accounts(env.conn, obs.content) == {account}:
                if any(call.key() == c.key() for c in calls):
                    return dict(values), call
                known.update(values)
                first = first or call
        return (known, first) if first is not None else None
    finally:
        env.close()


def account_read(world: World, conn: Any, account: str, lookup: ToolCall) -> ToolCall | None:
    """The read of the account's own record (its profile, payment methods and bookings): the
    read tool whose one parameter is the account key, with `account`; None when `lookup` is
    that read already or the world has none."""
    found = account_table(conn)
    if found is None:
        return None
    key = found[1]
    tool = next((t for t in world.tools.values() if not t.write and list(t.params) == [key]), None)
    if tool is None or tool.name == lookup.name:
        return None
    return ToolCall(name=tool.name, arguments={key: account})


def _known_key(path: str) -> str:
    """The known-info key of a grounded argument ("0:book.payment_id" -> "payment_id")."""
    return path.split(".", 1)[1]


def user_known_info(world: World, conn: Any, gen: Generation, identity: dict[str, str]) -> dict[str, str]:
    """What the user knows: their identity, then each argument value of the gold calls the
    way they would say it (an internal id by how they name its record, under its argument's
    name without "_id": "payment" -> "my credit card ending in 1885")."""
    conv = conversation(world)
    internal = set(leaked_ids(world, conn, [str(v) for _, v in grounding_values(gen.calls)]))
    known = dict(identity)
    for i, (path, v) in enumerate(grounding_values(gen.calls)):
        key, value = _known_key(path), str(v)
        if value in internal:
            found = record_of(conn, value)
            words = record_phrase(conv, conn, *found) if found is not None else None
            if not words:
                continue  # the leak check drops a task that needs it
            key, value = re.sub(r"_ids?(\[\d+\])?$", "", key).replace("_", " "), words
        if known.get(key, value) != value:
            key = f"{key}_{i}"
        known[key] = value
    return known


def _told_in(fact: Fact, texts: Sequence[str]) -> bool:
    return any(mentions_value(t, x) for x in fact.any_of for t in texts)


def as_conversation(world: World, gen: Generation, check: WorldCheck, note: Note | None, rng: random.Random,
                    metadata: dict[str, Any]) -> tuple[Task | None, str]:
    """A valid generation as a task a user can have a conversation about, or (None, why).

    The records its calls touch (their arguments and results, on the world's state) belong
    to one user (else ``cross_user``): the one they name, else the one a scripted generator
    drew them for (`note.account`), else any. The user knows their identity keys (the
    world's identity lookup finds them by them, else ``no_identity``) and each argument
    value as they would say it; the instruction is the question in their words
    (`user_words`). The reference is the identity lookup (and the read of the account, when
    the lookup is not that read), then the gold calls, written as a
    reference dialogue (`synthesis.dialogue.with_dialogue`) that tells the user each fact of
    a change and of the answer (`note.answer`, each found in a read's result, else
    ``answer_not_in_result``); a task that changes nothing and has nothing to tell is
    ``nothing_to_tell``. A task whose user-facing text still states an internal id is an
    ``internal_id_leak``, one that asks about a date before the world's today
    ``asks_about_past``; a transfer to a human agent must be the last call of a task that
    changes nothing (else ``transfer_not_last``)."""
    assert check.initial_state is not None and check.target_state_hash is not None
    names = [c.name for c in gen.calls]
    if TRANSFER_TOOL in names and (names[-1] != TRANSFER_TOOL or any(world.tools[n].write for n in names)):
        return None, "transfer_not_last"  # a handover to a human ends a conversation that changed nothing
    ref = check.initial_state
    conn = world.build_state(ref.seed, ref.scale, ref.patches)
    try:
        owners = call_owners(conn, gen.calls)
        for content in check.observations:
            owners |= result_accounts(conn, content)
        if len(owners) > 1:
            return None, "cross_user"
        account = next(iter(owners), None) or (note.account if note is not None else None)
        if account is None and accounts(conn):  # records of no one (a flight search): any user asks
            account = rng.choice(accounts(conn))
        if account is None:
            return None, "no_identity"
        identity = identity_for(world, ref, account, gen.calls)
        if identity is None:
            return None, "no_identity"
        known_identity, lookup = identity
        details = account_read(world, conn, account, lookup)
        instruction = user_words(world, conn, gen.question)
        known = user_known_info(world, conn, gen, known_identity)
    finally:
        conn.close()
    answer = list(note.answer) if note is not None else []
    reads = [o for c, o in zip(gen.calls, check.observations, strict=True) if not world.tools[c.name].write]
    if any(not _told_in(f, reads) for f in answer):
        return None, "answer_not_in_result"
    calls = [ToolCall(name=c.name, arguments=dict(c.arguments)) for c in gen.calls]
    first = [c for c in (lookup, details) if c is not None and all(c.key() != g.key() for g in calls)]
    at = next((i + 1 for i, c in enumerate(calls) if c.key() == lookup.key()), 0)  # the question's own lookup
    reference = calls[:at] + first + calls[at:]
    task = Task(
        world=world.name,
        method="self_play",
        instruction=instruction,
        user=UserScenario(reason=instruction, known_info=known, task_instructions=instruction),
        initial_state=ref,
        target_state_hash=check.target_state_hash,
        target_diff=check.target_diff,
        reference_solution=reference,
        difficulty=round(1 - float(metadata["p_hat"]), 3) if metadata.get("p_hat") is not None else 0.0,
        metadata={**metadata, "account": account, "solver_question": gen.question,
                  "gold_calls": [c.model_dump(exclude={"id"}) for c in calls]},
    ).with_id()
    if internal_id_leaks(world, task):
        return None, "internal_id_leak"
    if past_dates(world, task):
        return None, "asks_about_past"
    done, why = with_dialogue(world, task, basis=list(BASIS), answer=answer)
    if done is None:
        return None, why
    if internal_id_leaks(world, done):
        return None, "internal_id_leak"
    if run_owners(world, done) != {account}:
        return None, "cross_user"
    return done, ""


def solver_question(task: Task) -> str:
    """The question a self-play solver is asked: the generation's, which states every
    argument value (`metadata["solver_question"]`; a task made before it: the instruction)."""
    return str(task.metadata.get("solver_question") or task.instruction)


def gold_calls(task: Task) -> list[ToolCall]:
    """The generation's gold calls, which the solver answers with in one turn
    (`metadata["gold_calls"]`; a task made before it: the reference solution)."""
    gold = task.metadata.get("gold_calls")
    return [ToolCall.model_validate(c) for c in gold] if gold else list(task.reference_solution)
