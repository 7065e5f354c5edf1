"""User scenarios (issue 16 §1): personas with content, reasons, reactions and outcome
assertions, written for every tool-use task on its way through the reference dialogue."""

from __future__ import annotations

import random
import re

import pytest

from data.records import Fact
from envs.conversation import conversation
from envs.registry import get_world
from rollout.user import ScriptedUser, first_person, user_system_prompt
from synthesis import scenario
from synthesis.base import SynthesisConfig, get_method
from synthesis.realism import prefix_share
from synthesis.scenario import REACTIONS, TRAITS, draw, outcome_assertions, rephrase, scenario_book

WORLDS = ["airline", "retail", "telecom", "clinic"]


def test_first_person_converts_only_second_person_sentences():
    text = ("Your manager moved the meeting, so you're flying out sooner. You need to move your "
            "reservation (you would prefer the later one). Can you check the fare? I'm Ana, user id a_1.")
    assert first_person(text) == (
        "My manager moved the meeting, so I'm flying out sooner. I need to move my reservation "
        "(I would prefer the later one). Can you check the fare? I'm Ana, user id a_1.")
    assert first_person("Yours is late. You'd like to fix it yourself.") == "Mine is late. I'd like to fix it myself."
    # "you" as an object is "me" ("asked I to" was released in a retail row)
    assert first_person("My office asked you to restock, and the budget is on you; you pay.") == (
        "My office asked me to restock, and the budget is on me; I pay.")


def test_draw_cycles_through_a_bank_before_repeating():
    options = [f"option {i}" for i in range(5)]
    with scenario_book():
        first = [draw("k", options, random.Random(i)) for i in range(5)]
        again = draw("k", options, random.Random(9))
    assert sorted(first) == options and again in options
    # without a book a draw depends on its seed alone
    assert draw("k", options, random.Random(3)) == draw("k", options, random.Random(3))


def test_every_world_declares_reasons_for_each_write_tool_and_callers():
    for name in WORLDS:
        world = get_world(name)
        module = conversation(world).module
        writes = {t for t, spec in world.tools.items() if spec.write}
        assert writes <= set(module.REASONS), (name, writes - set(module.REASONS))
        assert {"answer", "transfer"} <= set(module.REASONS)
        assert len(module.WHO) >= 10
        for key, bank in module.REASONS.items():
            assert len(bank) >= 8, (name, key)
            assert len({" ".join(r.split()[:4]) for r in bank}) == len(bank), (name, key)
            assert not any(ch.isdigit() for r in bank for ch in r), (name, key)


@pytest.fixture(scope="module")
def airline_tasks():
    cfg = SynthesisConfig(method="logic_driven", world="airline", n_tasks=10, seed=0, scale=20)
    return get_method(cfg.method)(cfg, get_world("airline")).tasks


def test_synthesized_tasks_carry_a_full_scenario(airline_tasks):
    world = get_world("airline")
    module = conversation(world).module
    reasons = {r for bank in module.REASONS.values() for r in bank}
    labels = set(TRAITS) | {"a customer"}
    assert len(airline_tasks) >= 8
    for task in airline_tasks:
        u = task.user
        assert u.persona not in labels and len(u.persona.split()) >= 12, u.persona
        # one reason per intent, the last intent's first: a sentence of each write's bank
        # (keyed by tool, or by tool and size: "book_reservation:group")
        writes = list(dict.fromkeys(
            module.reason_key(c) or c.name for c in reversed(task.reference_solution) if world.tools[c.name].write))
        parts, rest = [], u.reason
        while rest:
            head = next((r for r in reasons if rest.startswith(r)), None)
            assert head is not None, u.reason
            parts.append(head)
            rest = rest[len(head):].lstrip()
        bank = conversation(world).module.REASONS
        if task.verification.outcome == "change":
            assert [next(k for k in writes if p in bank[k]) for p in parts] == writes, (u.reason, writes)
            assert writes == scenario.reason_keys(world, task, "change", None)
        else:
            assert len(parts) == 1
        assert task.instruction.startswith(u.reason) and u.task_instructions == task.instruction
        assert u.reactions and any(u.reactions[0] in line for line in REACTIONS[task.verification.outcome])
        assert task.verification.nl_assertions
        if task.verification.outcome == "refusal":
            assert any(r in REACTIONS["refusal"][0] for r in u.reactions)
            assert any(a.startswith("The agent does not") for a in task.verification.nl_assertions)
        # the user's opening is the instruction in their own words, reason first
        opening = ScriptedUser(task).first_message()
        assert task.dialogue[0].content == opening and opening.startswith(first_person(u.reason))
        assert "How to react:" in user_system_prompt(task) and u.reactions[-1] in user_system_prompt(task)
    assert prefix_share(airline_tasks) >= 0.9
    assert len({t.user.persona for t in airline_tasks}) == len(airline_tasks)


def test_reasons_fit_the_size_of_the_request():
    """A booking for several passengers draws from the group bank and a one-seat booking from
    the solo one ("your manager approved a trip to see a client" is no reason to fly three);
    an order of several items or units likewise. Other writes keep their tool's bank."""
    from data.records import StateRef, Task, ToolCall, UserScenario, Verification

    cases = {
        "airline": ("book_reservation", lambda n: {"user_id": "u", "flight_id": "F", "cabin": "economy",
                                                   "passengers": n, "payment_id": "p"}, [1], [2, 3, 5]),
        "retail": ("place_order", lambda n: {"customer_id": "c", "variant_ids": ["v"] * len(n),
                                             "quantities": n, "payment_id": "p"}, [[1]], [[2], [1, 1], [3, 1]]),
    }
    for name, (tool, args, solo, group) in cases.items():
        world = get_world(name)
        banks = conversation(world).module.REASONS
        sized = f"{tool}:group" if name == "airline" else f"{tool}:several"
        assert set(banks[sized]).isdisjoint(banks[tool])
        for size, key in [(n, tool) for n in solo] + [(n, sized) for n in group]:
            task = Task(id=f"t-{name}-{size}", world=name, method="test", instruction="You want to do it.",
                        user=UserScenario(persona="novice", task_instructions="You want to do it."),
                        initial_state=StateRef(world=name, seed=0, scale=1, state_hash="h"),
                        target_state_hash="h",
                        reference_solution=[ToolCall(name=tool, arguments=args(size))],
                        verification=Verification(outcome="change"))
            assert scenario.reason_keys(world, task, "change", None) == [key]
            written = scenario.write_scenario(world, task, "change")
            assert written.user.reason in banks[key], (name, size, written.user.reason)
    # a key without a bank of its own falls back to the tool's bank, then the generic ones
    assert scenario.reason_bank({"t": ["x"]}, "t:big", "change") == ["x"]
    assert scenario.reason_bank({}, "t:big", "change") == scenario.GENERIC_REASONS["change"]


def test_outcome_assertions_say_what_is_done_told_and_never_claimed():
    facts = [Fact(label="new reservation id", any_of=["R7"], kind="id"),
             Fact(label="amount charged", any_of=["300"], kind="amount")]
    change = outcome_assertions("change", ["book 2 seats, paid with your card"], facts)
    assert "After the user agrees, the agent does this: book 2 seats, paid with the user's card." in change
    assert "The agent tells the user the new reservation id: R7." in change
    assert change[-1] == "The agent does not transfer the user to a human agent."
    refusal = outcome_assertions("refusal", [], [Fact(label="rule R03", any_of=["24 hours"], kind="rule")],
                                 refused="cancel your reservation R1", rule_text="Cancellations need 24 hours.")
    assert refusal[:3] == ["The agent does not cancel the user's reservation R1.",
                           "The agent explains the policy that forbids it: Cancellations need 24 hours.",
                           "The agent never says that the refused request was carried out."]
    assert outcome_assertions("transfer", [], [])[-1] == "The agent transfers the user to a human agent and says so."


def test_phrasings_keep_every_value():
    """Each world's alternative wordings keep every captured group (ids, dates, amounts), and
    a goal said in several ways keeps its values in each."""
    import re

    def values(text: str) -> list[str]:
        return sorted(v.strip(".") for v in re.findall(r"[\w#@.-]*\d[\w#@.-]*", text))

    for name in WORLDS:
        assert all(len(ways) >= 3 for _, ways in conversation(get_world(name)).module.PHRASINGS), name
        seen: list[tuple[str, str]] = []

        def spy(module, world, goal, rng, _real=scenario.rephrase, seen=seen):
            out = _real(module, world, goal, rng)
            seen.append((goal, out))
            return out

        for method in ("logic_driven", "constraint_guided"):
            cfg = SynthesisConfig(method=method, world=name, n_tasks=6, seed=0)
            with pytest.MonkeyPatch.context() as mp:
                mp.setattr(scenario, "rephrase", spy)
                get_method(method)(cfg, get_world(name))
        assert sum(a != b for a, b in seen) >= len(seen) // 2, name
        for before, after in seen:
            assert values(before) == values(after), (before, after)
    module = conversation(get_world("airline")).module
    goal = ("You want to book 2 passengers in economy on flight HAT015 from JFK to ORD on 2026-05-13 at "
            "18:45, paying with your credit card ending in 1885, without travel insurance; and cancel your "
            "reservation RX7520.")
    said = {rephrase(module, "airline", goal, random.Random(i)) for i in range(12)}
    assert len(said) >= 6
    values = sorted(re.findall(r"\d[\w:-]*\d|RX\d+", goal))
    assert all(sorted(re.findall(r"\d[\w:-]*\d|RX\d+", s)) == values for s in said)


def test_reference_checks_a_conditional_preference_before_the_fallback():
    """"You would prefer the 14th if it has room": the reference looks the 14th up and says
    why it books the other flight (issue 16: the reference never checked the preference)."""
    cfg = SynthesisConfig(method="logic_driven", world="airline", n_tasks=20, seed=0)
    tasks = [t for t in get_method(cfg.method)(cfg, get_world("airline")).tasks
             if t.metadata.get("preference", {}).get("preferred_flight")]
    assert tasks
    for task in tasks:
        calls = [c for turn in task.dialogue for c in turn.tool_calls]
        booked = next(c for c in calls if c.name == "book_reservation")
        preferred = task.metadata["preference"]["preferred_flight"]
        assert booked.arguments["flight_id"] != preferred
        day = preferred.rsplit("-", 3)[-3:]
        assert any(c.name == "search_flights" and c.arguments["date"] == "-".join(day) for c in calls)
        plan = next(t.content for t in task.dialogue if "not enough for" in t.content)
        assert "seat" in plan and plan.index("not enough for") < plan.index("?")


def test_the_card_shows_how_the_tasks_read(airline_tasks):
    from data.card import run_sections
    from pipelines.stages import task_realism

    figures = task_realism(airline_tasks)
    row = figures["logic_driven@airline"]
    assert row["tasks"] == len(airline_tasks) and row["nl_assertion_coverage"] == 1.0 and row["leaked_tasks"] == 0
    card = run_sections({"realism": figures})
    assert "## How the tasks read" in card and "| logic_driven@airline |" in card


@pytest.mark.parametrize("name", ["airline", "retail", "clinic", "telecom"])
def test_every_unmet_preference_is_looked_up_and_explained(name):
    """The world's `preference` hook's reads come before the write, and its sentence is said
    in the write's plan, for every logic-driven task whose write does not take a preference."""
    world = get_world(name)
    hook = conversation(world).hook("preference")
    cfg = SynthesisConfig(method="logic_driven", world=name, n_tasks=20, seed=0)
    explained = 0
    for task in get_method(cfg.method)(cfg, world).tasks:
        # a preference is the user's own reasoning, never an aside in parentheses
        assert not re.search(r"\((?:you|I) (?:would|asked)", task.instruction), task.instruction
        wanted = task.metadata.get("preference")
        if not wanted:
            continue
        env = world.env(task.initial_state)
        try:
            calls = [c for turn in task.dialogue for c in turn.tool_calls]
            for write in [c for c in calls if world.tools[c.name].write]:
                why = hook(env.conn, write, wanted)
                if not why:
                    continue
                reads, sentence = why
                first_write = next(i for i, c in enumerate(calls) if world.tools[c.name].write)
                assert all(r.key() in {c.key() for c in calls[:first_write]} for r in reads), task.id
                assert any(sentence in t.content and t.content.index(sentence) < t.content.index("?")
                           for t in task.dialogue if t.role == "assistant"), (task.id, sentence)
                explained += 1
        finally:
            env.close()
    assert explained, name


def test_retail_refund_elsewhere_is_explained_with_the_rule():
    """A return the customer wants refunded to a card that did not pay: the hook reads the
    order and says where a refund may go (R09), naming the card."""
    world = get_world("retail")
    hook = conversation(world).hook("preference")
    cfg = SynthesisConfig(method="logic_driven", world="retail", n_tasks=30, seed=0)
    for task in get_method(cfg.method)(cfg, world).tasks:
        ret = next((c for c in task.reference_solution if c.name == "return_item"), None)
        if ret is None:
            continue
        env = world.env(task.initial_state)
        try:
            other = env.conn.execute(
                "SELECT p.payment_id FROM payment_methods p JOIN orders o USING (customer_id) WHERE o.order_id = ?"
                " AND p.payment_id != ? AND p.kind != 'gift_card'",
                (ret.arguments["order_id"], ret.arguments["refund_payment_id"])).fetchone()
            if other is None:
                continue
            reads, sentence = hook(env.conn, ret, {"preferred_refund": other[0]})
            assert hook(env.conn, ret, {"preferred_refund": ret.arguments["refund_payment_id"]}) is None
        finally:
            env.close()
        assert [r.name for r in reads] == ["get_order_details"]
        assert "original payment method" in sentence and ret.arguments["order_id"] in sentence
        return
    pytest.fail("no return with another card of the customer among 30 tasks")


def test_a_reason_that_says_rather_is_no_preference():
    """"since you would rather not haul everything through the airport" explains bags; the
    user is not told to hold out for a preference the task does not have."""
    preference = set(REACTIONS["preference"][0])
    cfg = SynthesisConfig(method="constraint_guided", world="airline", n_tasks=30, seed=0)
    tasks = get_method(cfg.method)(cfg, get_world("airline")).tasks
    rather = [t for t in tasks if "rather" in t.instruction and not t.metadata.get("preference")]
    assert rather
    assert not any(preference & set(t.user.reactions) for t in rather)


def test_the_cards_realism_sample_is_the_smallest_ids(airline_tasks, monkeypatch):
    """Read in one pass, the card's realism figures are those of the tasks of smallest id, and
    the counts and write tools are those of every task."""
    from pipelines import figures
    from synthesis.realism import realism_figures

    monkeypatch.setattr(figures, "REALISM_SAMPLE", 3)
    row = figures.task_realism(iter(airline_tasks))["logic_driven@airline"]
    smallest = sorted(airline_tasks, key=lambda t: t.id)[:3]
    assert row["sampled"] == 3 and row["tasks"] == len(airline_tasks)
    expected = realism_figures(get_world("airline"), smallest)
    assert {k: row[k] for k in ("prefix_share", "median_nn_similarity", "mean_words")} == {
        k: expected[k] for k in ("prefix_share", "median_nn_similarity", "mean_words")}
    full = figures.task_realism(airline_tasks)["logic_driven@airline"]
    assert row["write_tools_covered"] == full["write_tools_covered"]
