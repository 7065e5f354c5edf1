"""Self-play synthesis (methods.md §3): formulas on hand-computed cases, the parser, filter,
dedup and curriculum, grounding against the airline world, and the registered method."""

from __future__ import annotations

import json
import math
import random
from typing import Any

import pytest

from bench.self_play_stubs import (
    StubSolver,
    bandpass_curve,
    expected_r_diff,
    grounding_rejection_rate,
    plant_hallucination,
)
from data.records import Sampling, ToolCall
from data.self_play import Candidate, Generation, ParseError, Spec
from envs.conversation import leaked_ids
from envs.world import World
from rollout.generation import (
    check_format,
    is_placeholder,
    parse_generation,
    r_format,
    r_valid,
    solver_pass_rate,
    validity,
    value_in_question,
)
from rollout.model import ChatResponse
from rollout.parsing import parse_tool_calls
from synthesis.base import SynthesisConfig, get_method
from synthesis.logic_driven import replay
from synthesis.self_play import (
    ModelGenerator,
    ScriptedGenerator,
    chat_solver,
    cluster,
    curriculum,
    dedup,
    difficulty_band,
    filter_candidates,
    generator_prompt,
    generic_template,
    gold_calls,
    response_text,
    sample_spec,
    solver_question,
    synthesize_with,
    validate_on_world,
    world_context,
)
from train.rewards import (
    call_score,
    generator_reward,
    make_generator_reward,
    r_curr,
    r_diff,
    r_judge,
    score_generation,
    solver_accuracy,
    solver_format_score,
    solver_reward,
)

TOOLS = [
    {"type": "function", "function": {"name": "get_user_details", "description": "A user.", "parameters": {
        "type": "object", "properties": {"user_id": {"type": "string"}}, "required": ["user_id"]}}},
    {"type": "function", "function": {"name": "update_baggage", "description": "Bags.", "parameters": {
        "type": "object", "properties": {"reservation_id": {"type": "string"}, "total_bags": {"type": "integer"}},
        "required": ["reservation_id", "total_bags"]}}},
]
QUESTION = "I am raj_ahmed_1000. Please set reservation R0000030 to 2 checked bags in total."
GOLD = [{"name": "update_baggage", "arguments": {"reservation_id": "R0000030", "total_bags": 2}}]


def _text(question: str = QUESTION, tools: Any = TOOLS, gold: Any = GOLD) -> str:
    t = tools if isinstance(tools, str) else json.dumps(tools)
    g = gold if isinstance(gold, str) else json.dumps(gold)
    return f"<question>{question}</question>\n<available_tools>{t}</available_tools>\n<tool_call_answer>{g}</tool_call_answer>"


def _gen(question: str = QUESTION, gold: list[dict[str, Any]] | None = None, tools: Any = TOOLS) -> Generation:
    g = parse_generation(_text(question, tools, gold or GOLD))
    assert isinstance(g, Generation)
    return g


def _cand(p_hat: float | None, world: str = "airline", q: str = "q") -> Candidate:
    return Candidate(spec=Spec(world, 1, ["t"], []), generation=Generation(q, [], [ToolCall(name="t")]), p_hat=p_hat)


# --------------------------------------------------------------------------- r_diff, r_judge, r_curr


@pytest.mark.parametrize(("p", "expected"), [
    (0.0, 0.0),
    (0.12, 0.0),  # below 1/8
    (1 / 8, math.exp(-(0.125**2) / (2 * 0.12**2))),  # 0.5813: the Gaussian from edge 0.25
    (0.2, math.exp(-(0.05**2) / 0.0288)),
    (0.25, 1.0), (0.5, 1.0), (0.75, 1.0),
    (0.9, math.exp(-(0.15**2) / 0.0288)),  # 0.4578
    (1.0, math.exp(-(0.25**2) / 0.0288)),  # 0.1142
])
def test_r_diff_band_pass(p: float, expected: float) -> None:
    assert r_diff(p) == pytest.approx(expected)


def test_r_diff_hand_values() -> None:
    assert r_diff(1 / 8) == pytest.approx(0.58127, abs=1e-5)
    assert r_diff(0.9) == pytest.approx(0.45783, abs=1e-5)
    assert r_diff(1.0) == pytest.approx(0.11416, abs=1e-5)


def test_r_judge_and_r_curr() -> None:
    assert [r_judge(s) for s in (1, 2, 3, 4, 5)] == [0.0, 0.25, 0.5, 0.75, 1.0]
    assert r_judge(7) == 1.0 and r_judge(0) == 0.0 and r_judge(None) == 0.0
    assert r_curr(QUESTION, 0.5, 3) == pytest.approx(0.5 * 1.0 + 0.5 * 0.5)
    assert r_curr(QUESTION, 1.0, None) == pytest.approx(0.5 * r_diff(1.0))
    assert r_curr("TODO", 0.5, 5) == 0.0


# --------------------------------------------------------------------------- placeholder, parser, r_format


@pytest.mark.parametrize("q", [None, "", "Hi there", "Book flight <flight_id> for me please.",
                               "Cancel reservation {reservation_id} for me please.", "TODO write the question here",
                               "Please cancel [insert reservation id] today.", "lorem ipsum dolor sit amet"])
def test_placeholders(q: str | None) -> None:
    assert is_placeholder(q)


def test_real_question_is_not_placeholder() -> None:
    assert not is_placeholder(QUESTION)
    assert not is_placeholder("What is 2 * (180 + 30)?")


def test_parser_good_output() -> None:
    gen = parse_generation(_text())
    assert isinstance(gen, Generation)
    assert gen.question == QUESTION
    assert gen.menu_names == ["get_user_details", "update_baggage"]
    assert gen.calls == [ToolCall(name="update_baggage", arguments={"reservation_id": "R0000030", "total_bags": 2})]
    assert parse_generation(gen.to_text()) == Generation(gen.question, gen.tools, gen.calls, gen.to_text())


def test_parser_lenient_forms() -> None:
    # fenced JSON, a bare {"name", "parameters"} tool, one call object instead of a list
    bare = [{"name": "get_user_details", "parameters": TOOLS[0]["function"]["parameters"]}]
    gen = parse_generation(_text(tools="```json\n" + json.dumps(bare) + "\n```", gold=json.dumps(GOLD[0])))
    assert isinstance(gen, Generation)
    assert gen.tools[0]["function"]["name"] == "get_user_details" and gen.tools[0]["type"] == "function"
    assert len(gen.calls) == 1


@pytest.mark.parametrize(("text", "reason"), [
    (_text().replace("</tool_call_answer>", ""), "tags"),  # unterminated
    (_text().replace("<question>", "").replace("</question>", ""), "tags"),  # missing
    (_text() + "<question>again</question>", "tags"),  # duplicated
    (_text(tools="[{'name': 'x'}]"), "tools_json"),
    (_text(tools="{}"), "tools_json"),
    (_text(tools="[]"), "tools_json"),
    (_text(tools='[{"description": "no name"}]'), "tools_json"),
    (_text(gold='[{"name": "update_baggage", "arguments": {"reservation_id": "R1"'), "gold_json"),
    (_text(gold='[{"arguments": {}}]'), "gold_json"),
    (_text(gold='[{"name": "x", "arguments": "R1"}]'), "gold_json"),
    (_text(gold="[]"), "gold_json"),
])
def test_parser_broken_outputs(text: str, reason: str) -> None:
    out = parse_generation(text)
    assert isinstance(out, ParseError)
    assert out.reason == reason


def test_r_format_partials() -> None:
    assert r_format(_text()) == 1.0
    assert r_format(_text(tools="not json")) == pytest.approx(2 / 3)
    assert r_format(_text(gold="[{oops")) == pytest.approx(2 / 3)
    assert r_format(_text(tools="nope", gold="nope")) == pytest.approx(1 / 3)
    # an unterminated last block still yields its JSON: tags fail, both JSON parts count
    unclosed = _text().replace("</tool_call_answer>", "")
    assert check_format(unclosed).calls is not None
    assert r_format(unclosed) == pytest.approx(2 / 3)
    # missing tools block: tags and tools fail
    assert r_format(f"<question>{QUESTION}</question><tool_call_answer>{json.dumps(GOLD)}</tool_call_answer>") \
        == pytest.approx(1 / 3)
    # a placeholder (or missing) question zeroes everything
    assert r_format(_text(question="Set <reservation_id> bags to {n} please")) == 0.0
    assert r_format("<available_tools>[]</available_tools>") == 0.0


# --------------------------------------------------------------------------- r_valid and grounding


def test_value_in_question_rules() -> None:
    assert value_in_question("R0000030", "Cancel r0000030 now")  # case-insensitive
    assert not value_in_question(2, "Fly on 2026-05-12")  # not inside a longer number
    assert value_in_question(2, "Add 2 bags")
    assert value_in_question(2.0, "Add 2 bags")
    assert value_in_question("basic_economy", "in basic economy please")
    assert not value_in_question("R0000030", "Cancel R00000301")
    assert value_in_question("2 * (180 + 30)", "What is 2 * (180 + 30)?")


def test_r_valid_cases() -> None:
    assert r_valid(_gen()) == 1.0
    # tool outside the menu: no menu credit, its required args cannot be checked; still grounded
    other = [{"name": "cancel_reservation", "arguments": {"reservation_id": "R0000030"}}]
    assert r_valid(_gen(gold=other)) == pytest.approx(0.2)
    # a required argument missing
    missing = [{"name": "update_baggage", "arguments": {"reservation_id": "R0000030"}}]
    v = validity(_gen(gold=missing))
    assert (v.in_menu, v.required, v.grounded, v.missing) == (True, False, True, ["update_baggage.total_bags"])
    assert r_valid(_gen(gold=missing)) == pytest.approx(0.6)
    # grounding: a value the question does not state (hallucinated)
    halluc = [{"name": "update_baggage", "arguments": {"reservation_id": "R0000099", "total_bags": 2}}]
    assert r_valid(_gen(gold=halluc)) == pytest.approx(0.8)
    assert validity(_gen(gold=halluc)).ungrounded == ["0:update_baggage.reservation_id"]
    # all gold calls count: a second, ungrounded call fails grounding
    two = [*GOLD, {"name": "get_user_details", "arguments": {"user_id": "mia_li_1003"}}]
    assert r_valid(_gen(gold=two)) == pytest.approx(0.8)
    assert r_valid(_gen(gold=[*GOLD, {"name": "get_user_details", "arguments": {"user_id": "raj_ahmed_1000"}}])) == 1.0
    # booleans are exempt from grounding
    menu = [*TOOLS, {"type": "function", "function": {"name": "book", "parameters": {
        "type": "object", "properties": {"insurance": {"type": "boolean"}}, "required": []}}}]
    assert r_valid(_gen(gold=[{"name": "book", "arguments": {"insurance": True}}], tools=menu)) == 1.0
    # placeholder question: 0
    assert r_valid(Generation("TODO", TOOLS, [ToolCall(name="get_user_details", arguments={"user_id": "x"})])) == 0.0


def test_planted_hallucinations_are_rejected(airline: World) -> None:
    rng = random.Random(3)
    gen = ScriptedGenerator(airline)
    conn = airline.build_state(0, 30)
    clean = []
    while len(clean) < 60:
        text = gen.generate(sample_spec(airline, rng), conn, rng)
        if text is not None:
            g = parse_generation(text)
            assert isinstance(g, Generation)
            clean.append(g)
    conn.close()
    assert grounding_rejection_rate(clean) == 0.0
    planted = [plant_hallucination(g, rng) for g in clean]
    assert grounding_rejection_rate(planted) == 1.0
    assert all(r_valid(p) == pytest.approx(0.8) for p in planted)
    assert grounding_rejection_rate([]) == 0.0


# --------------------------------------------------------------------------- pass rate, generator reward


def test_solver_pass_rate_exact_canonical_match() -> None:
    gen = _gen()
    right = [ToolCall(name="update_baggage", arguments={"total_bags": 2, "reservation_id": "R0000030"})]
    wrong = [ToolCall(name="update_baggage", arguments={"total_bags": 3, "reservation_id": "R0000030"})]
    text = '<tool_call>{"name": "update_baggage", "arguments": {"reservation_id": "R0000030", "total_bags": 2}}</tool_call>'
    assert solver_pass_rate(gen, [right, wrong, wrong, text]) == 0.5
    assert solver_pass_rate(gen, [right + right]) == 0.0  # an extra call is not an exact match
    assert solver_pass_rate(gen, []) == 0.0


def _fixed_solver(n_right: int) -> Any:
    def solve(c: Candidate, k: int) -> list[list[ToolCall]]:
        return [list(c.generation.calls) if i < n_right else [] for i in range(k)]

    return solve


def test_score_generation_and_trl_reward() -> None:
    good = _text()
    s = score_generation(good, _fixed_solver(4), judge=lambda g: 5, k=8)
    assert (s.r_format, s.r_valid, s.p_hat, s.r_diff, s.r_judge, s.r_curr) == (1.0, 1.0, 0.5, 1.0, 1.0, 1.0)
    assert s.total == 3.0
    reward = make_generator_reward(_fixed_solver(8), k=8)
    assert reward.__name__ == "generator_reward"
    logged: dict[str, float] = {}
    out = reward([good, _text(question="TODO"), _text(gold="oops"),
                  [{"role": "assistant", "content": good}]], log_metric=logged.__setitem__)
    full = 1.0 + 1.0 + 0.5 * r_diff(1.0)  # no judge: r_judge = 0
    assert out == pytest.approx([full, 0.0, 2 / 3, full])
    assert logged["gen/placeholder"] == 0.25
    with pytest.raises(ValueError):
        generator_reward([good])
    spec = Spec("airline", 1, ["update_baggage"], TOOLS).to_dict()
    seen: list[Spec] = []
    generator_reward([good], solver=lambda c, k: seen.append(c.spec) or [], spec=[json.dumps(spec)])
    assert seen[0].world == "airline"


# --------------------------------------------------------------------------- solver reward


def test_solver_format_score() -> None:
    ok = '<tool_call>{"name": "a", "arguments": {}}</tool_call>'
    assert solver_format_score(ok) == pytest.approx(1.0)
    assert solver_format_score('<tool_call>{"name": "a", "arguments": </tool_call>') == pytest.approx(0.3)
    assert solver_format_score(ok + '<tool_call>{"name": </tool_call>') == pytest.approx(0.7)  # tag + call
    assert solver_format_score('{"name": "a", "arguments": {}}') == pytest.approx(0.4)  # untagged call
    assert solver_format_score("I cannot help.") == 0.0
    native = [{"role": "assistant", "content": "", "tool_calls": [{"function": {"name": "a", "arguments": "{}"}}]}]
    assert solver_format_score(native) == pytest.approx(1.0)


def test_solver_accuracy_hand_computed() -> None:
    a = ToolCall(name="get_user_details", arguments={"user_id": "u1"})
    b = ToolCall(name="update_baggage", arguments={"reservation_id": "R1", "total_bags": 2})
    b_wrong = ToolCall(name="update_baggage", arguments={"reservation_id": "R1", "total_bags": 3})
    c = ToolCall(name="calculate", arguments={})
    assert call_score(b_wrong, b) == pytest.approx(0.2 + 0.3 + 0.5 * 0.5)  # 0.75
    # name wrong, keys {user_id} vs {user_id, x}: F1 = 2/3, shared value equal
    assert call_score(ToolCall(name="get_usr", arguments={"user_id": "u1"}),
                      ToolCall(name="get_user_details", arguments={"user_id": "u1", "x": 1})) == pytest.approx(0.7)
    assert call_score(c, c) == 1.0
    assert call_score(ToolCall(name="update_baggage", arguments={"total_bags": 2.0, "reservation_id": "R1"}), b) == 1.0
    flag = ToolCall(name="book", arguments={"insurance": True})
    assert call_score(ToolCall(name="book", arguments={"insurance": 1}), flag) == pytest.approx(0.5)  # True != 1
    # out of order, one wrong value and one extra call: mean(1, 0.75) / (1 + 0.25)
    assert solver_accuracy([b_wrong, a, c], [a, b]) == pytest.approx(0.875 / 1.25)
    assert solver_accuracy([a, b], [a, b]) == 1.0
    assert solver_accuracy([a], [a, b]) == pytest.approx(0.5)  # an unmatched gold call scores 0
    assert solver_accuracy([a, a, a], [a]) == pytest.approx(1 / 1.5)
    assert solver_accuracy([], [a]) == 0.0


def test_solver_reward_trl() -> None:
    gold = [{"name": "get_user_details", "arguments": {"user_id": "u1"}},
            {"name": "update_baggage", "arguments": {"reservation_id": "R1", "total_bags": 2}}]
    calls = [{"name": "update_baggage", "arguments": {"reservation_id": "R1", "total_bags": 3}},
             {"name": "get_user_details", "arguments": {"user_id": "u1"}}, {"name": "calculate", "arguments": {}}]
    text = "".join(f"<tool_call>{json.dumps(c)}</tool_call>" for c in calls)
    logged: dict[str, float] = {}
    out = solver_reward([text, "no calls", text], [json.dumps(gold), gold, {"reference_solution": gold}],
                        log_metric=logged.__setitem__)
    assert out == pytest.approx([1.0 + 0.7, 0.0, 1.7])
    assert logged["solver/format"] == pytest.approx(2 / 3)
    with pytest.raises(ValueError):
        solver_reward([text], [])


# --------------------------------------------------------------------------- filter, cluster, curriculum


def test_filter_candidates_by_agreement() -> None:
    cands = [_cand(None, q=f"question {i}") for i in range(3)]
    answers = {0: 10, 1: 2, 2: 1}  # right answers out of 10

    def solve(c: Candidate, k: int) -> list[list[ToolCall]]:
        n = answers[cands.index(c)]
        return [list(c.generation.calls) if i < n else [] for i in range(k)]

    res = filter_candidates(cands, solve, k=10, min_agreement=0.2)
    assert [c.p_hat for c in res.kept] == [1.0, 0.2]
    assert [c.p_hat for c in res.dropped] == [0.1]
    rng = random.Random(0)
    assert filter_candidates(cands, StubSolver(0.0, rng)).kept == []
    assert len(filter_candidates(cands, StubSolver(1.0, rng)).kept) == 3


def test_cluster_near_duplicates() -> None:
    qs = ["Please cancel my reservation R0000280 today.", "Please cancel my reservation R0000281 today.",
          "Which flights go from SFO to JFK on 2026-05-12?", "please cancel my  reservation R0000280 TODAY."]
    assert cluster(qs) == [0, 0, 1, 0]
    assert cluster(qs, threshold=0.0) == [0, 1, 2, 3]  # nothing is closer than distance 0
    assert cluster(qs, threshold=1.01) == [0, 0, 0, 0]
    cands = [_cand(0.5, q=q) for q in qs]
    assert [c.generation.question for c in dedup(cands)] == [qs[0], qs[2]]


def test_curriculum_mix_bands_and_quotas() -> None:
    assert [difficulty_band(p) for p in (0.2, 0.49, 0.5, 0.89, 0.9, 1.0)] == \
        ["hard", "hard", "medium", "medium", "easy", "easy"]
    easy = [_cand(1.0, q=f"e{i}") for i in range(5)]
    medium = [_cand(0.6, q=f"m{i}") for i in range(10)]
    hard = [_cand(0.3, q=f"h{i}") for i in range(5)]
    picked = curriculum(easy + medium + hard + [_cand(None)], n=10)
    assert [difficulty_band(c.p_hat or 0) for c in picked] == ["easy"] * 2 + ["medium"] * 5 + ["hard"] * 3
    # the hard band is short: its slots go to medium
    picked = curriculum(easy + medium + hard[:1], n=10)
    assert [difficulty_band(c.p_hat or 0) for c in picked].count("medium") == 7
    # per-world quotas
    mixed = [_cand(0.6, world="airline", q=f"a{i}") for i in range(10)] + \
            [_cand(0.6, world="retail", q=f"r{i}") for i in range(10)]
    picked = curriculum(mixed, n=10, per_world_quota=3)
    assert len(picked) == 6
    picked = curriculum(mixed, n=10, per_world_quota={"airline": 2})
    assert sum(c.world == "airline" for c in picked) == 2 and len(picked) == 10
    assert len(curriculum(easy + medium + hard, n=100)) == 20


# --------------------------------------------------------------------------- the world


def test_sample_spec(airline: World) -> None:
    rng = random.Random(0)
    for _ in range(200):
        spec = sample_spec(airline, rng)
        assert spec.world == "airline" and spec.n_calls in (1, 2) and len(spec.tools) == spec.n_calls
        assert 2 <= len(spec.menu) <= 8 and set(spec.tools) <= set(spec.menu_names)
        assert len(set(spec.menu_names)) == len(spec.menu_names)
        assert Spec.from_dict(json.loads(json.dumps(spec.to_dict()))) == spec


def test_generator_prompt_holds_spec_and_context(airline: World) -> None:
    rng = random.Random(1)
    conn = airline.build_state(0, 30)
    context = world_context(conn, rng)
    conn.close()
    assert set(context) == {"meta", "users", "payment_methods", "flights", "reservations", "ledger"}
    assert len(context["users"]) == 2 and context["meta"][0]["key"] == "now"
    spec = sample_spec(airline, rng)
    messages = generator_prompt(spec, context)
    assert [m["role"] for m in messages] == ["system", "user"]
    body = messages[1]["content"]
    for name in spec.tools:
        assert name in body
    assert context["users"][0]["user_id"] in body
    assert "<tool_call_answer>" in body


def test_validate_on_world(airline: World) -> None:
    ref = airline.state_ref(0, 30)
    conn = airline.build_state(0, 30)
    user = conn.execute("SELECT user_id FROM users LIMIT 1").fetchone()[0]
    res = conn.execute("SELECT reservation_id, bags FROM reservations JOIN flights f USING (flight_id)"
                       " WHERE reservations.status = 'active' AND f.status <> 'departed'"
                       " AND bags < 3 * passengers LIMIT 1").fetchone()
    conn.close()
    tools = [airline.tools["get_user_details"].schema(), airline.tools["update_baggage"].schema()]
    ok = Generation(f"I am {user}; set {res[0]} to {res[1] + 1} bags please.", tools, [
        ToolCall(name="get_user_details", arguments={"user_id": user}),
        ToolCall(name="update_baggage", arguments={"reservation_id": res[0], "total_bags": res[1] + 1})])
    check = validate_on_world(airline, ok, ref=ref)
    assert check.ok and check.initial_state == ref and check.target_state_hash != ref.state_hash
    assert any(d["table"] == "reservations" for d in check.target_diff) and len(check.observations) == 2
    bad_user = Generation("q", tools, [ToolCall(name="get_user_details", arguments={"user_id": "nobody_0"})])
    assert validate_on_world(airline, bad_user, ref=ref).reason == "call_failed"
    assert validate_on_world(airline, Generation("q", tools, [ToolCall(name="fly")]), ref=ref).reason == "unknown_tool"
    invented = [*tools, {"type": "function", "function": {"name": "teleport", "parameters": {}}}]
    assert validate_on_world(airline, Generation("q", invented, ok.calls), ref=ref).reason == "unknown_menu_tool"


def test_generic_template_is_grounded(airline: World) -> None:
    rng = random.Random(5)
    conn = airline.build_state(0, 30)
    ref = airline.state_ref(0, 30)
    for name in ("get_user_details", "get_reservation_details", "get_flight_details", "search_flights"):
        spec = airline.tools[name]
        out = generic_template(spec)(conn, rng)
        assert out is not None
        args, sentence = out[:2]
        gen = Generation(sentence, [spec.schema()], [ToolCall(name=name, arguments=args)])
        assert r_valid(gen) == 1.0, sentence
        assert validate_on_world(airline, gen, ref=ref).ok, sentence
    conn.close()


def test_scripted_self_play_tasks_validate(airline: World) -> None:
    result = get_method("self_play")(SynthesisConfig(method="self_play", n_tasks=24, seed=4), airline)
    assert len(result.tasks) == 24
    assert result.stats["yield"] > 0.8
    assert set(result.stats["calls_per_task"]) == {"1", "2"} and all(result.stats["calls_per_task"].values())
    for task in result.tasks:
        assert task.method == "self_play" and task.world == "airline" and task.id == task.compute_id()
        assert replay(airline, task) == task.target_state_hash
        gold = gold_calls(task)  # the solver's question states every gold value (Tool-R0)
        gen = Generation(solver_question(task), [airline.tools[n].schema() for n in task.metadata["menu"]], gold)
        assert r_valid(gen) == 1.0 and task.metadata["r_valid"] == 1.0
        assert {c.name for c in gold} <= set(task.metadata["menu"])
        assert {c.key() for c in gold} <= {c.key() for c in task.reference_solution}  # with the lookups
        assert set(task.metadata["spec"]) == {"world", "n_calls", "tools", "menu"}
        assert "p_hat" not in task.metadata
        assert task.dialogue and task.verification.outcome in ("change", "answer", "transfer")
    assert any(t.target_state_hash != t.initial_state.state_hash for t in result.tasks)  # some writes
    env = airline.env(result.tasks[0].initial_state)
    for task in result.tasks:  # the user knows who they are and every gold value, in their own words
        assert task.user.known_info["user_id"] == task.metadata["account"]
        stated = {str(v) for c in gold_calls(task) for v in c.arguments.values() if not isinstance(v, bool)}
        internal = set(leaked_ids(airline, env.conn, sorted(stated)))
        assert stated - internal <= set(task.user.known_info.values()), task.user.known_info
        assert not internal & set(task.user.known_info.values()) and not leaked_ids(airline, env.conn, [task.instruction])
    env.close()


def test_self_play_with_stub_filter_and_dedup(airline: World) -> None:
    cfg = SynthesisConfig(method="self_play", n_tasks=6, seed=2, options={"dedup_threshold": 0.3})
    result = synthesize_with(cfg, airline, ScriptedGenerator(airline), solve=StubSolver(0.0, random.Random(0)))
    assert result.tasks == [] and sum(result.drops.values()) == result.stats["attempted"]
    assert result.drops["low_agreement"] and set(result.drops) <= {"low_agreement", "calculator_cap", "no_generation"}
    result = synthesize_with(cfg, airline, ScriptedGenerator(airline), solve=StubSolver(1.0, random.Random(0)))
    assert len(result.tasks) == 6
    assert all(t.metadata["p_hat"] == 1.0 and t.difficulty == 0.0 for t in result.tasks)
    labels = cluster([t.instruction for t in result.tasks])
    assert labels == list(range(6))


class _FakeModel:
    """A ChatModel that answers generator prompts with fixed texts, in turn."""

    name = "fake"

    def __init__(self, texts: list[str]) -> None:
        self.texts = texts
        self.calls = 0

    async def chat(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]], sampling: Sampling
                   ) -> ChatResponse:
        assert messages[0]["role"] == "system" and "<tool_call_answer>" in messages[1]["content"]
        text = self.texts[self.calls % len(self.texts)]
        self.calls += 1
        rest, calls, malformed = parse_tool_calls(text)  # what an OpenAI-compatible backend returns
        return ChatResponse(text=rest, tool_calls=calls, malformed=malformed)

    async def aclose(self) -> None:
        return None


def test_model_generator_path_counts_drops(airline: World) -> None:
    rng = random.Random(9)
    conn = airline.build_state(0, 30)
    good = ScriptedGenerator(airline).generate(sample_spec(airline, rng, n_calls=1), conn, rng)
    conn.close()
    assert good is not None
    g = parse_generation(good)
    assert isinstance(g, Generation)
    halluc = plant_hallucination(g, rng).to_text()
    placeholder = good.replace(g.question, "Do the thing for <user_id> please")
    unknown = good.replace(g.question, g.question + " Thanks a lot.").replace(
        f'"name": "{g.calls[0].name}", "arguments"', '"name": "fly_me", "arguments"')
    fake = _FakeModel([good, halluc, placeholder, "no tags at all", unknown])
    cfg = SynthesisConfig(method="self_play", n_tasks=3, seed=0, options={"max_attempts": 5, "batch_size": 5})
    result = synthesize_with(cfg, airline, ModelGenerator(model=fake))
    assert fake.calls == 5 and len(result.tasks) == 1
    assert result.tasks[0].metadata["generator"] == "model"
    assert dict(result.drops) == {"ungrounded_value": 1, "placeholder_question": 1, "format_tags": 1,
                                  "gold_not_in_menu": 1}


def test_response_text_restores_lifted_calls() -> None:
    text = _text()
    rest, calls, _ = parse_tool_calls(text)
    # JSON inside <tool_call_answer> is prose, not call syntax: nothing is lifted (issue 34)
    assert not calls and rest == text
    gen = parse_generation(response_text(ChatResponse(text=rest)))
    assert isinstance(gen, Generation) and gen.calls == _gen().calls
    assert response_text(ChatResponse(text="x", raw={"completion": text})) == text
    # a server that returns the gold as native tool calls leaves the answer block empty:
    # the calls are written back into it
    two = [*GOLD, {"name": "get_user_details", "arguments": {"user_id": "raj_ahmed_1000"}}]
    emptied = _text(gold="[]")
    native = [ToolCall(name=c["name"], arguments=c["arguments"]) for c in two]
    gen = parse_generation(response_text(ChatResponse(text=emptied, tool_calls=native)))
    assert isinstance(gen, Generation) and [c.name for c in gen.calls] == ["update_baggage", "get_user_details"]


class _SolverModel:
    """Answers every question with the same tool calls (as a backend would parse them)."""

    name = "solver"

    def __init__(self, text: str) -> None:
        self.text = text
        self.seeds: list[int | None] = []

    async def chat(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]], sampling: Sampling
                   ) -> ChatResponse:
        assert messages[-1]["content"] == QUESTION and tools
        self.seeds.append(sampling.seed)
        rest, calls, malformed = parse_tool_calls(self.text)
        return ChatResponse(text=rest, tool_calls=calls, malformed=malformed)

    async def aclose(self) -> None:
        return None


def test_chat_solver_feeds_the_generator_reward() -> None:
    model = _SolverModel("<tool_call>" + json.dumps(GOLD[0]) + "</tool_call>")
    solve = chat_solver(model, temperature=0.7)
    cand = Candidate(Spec("airline", 1, ["update_baggage"], TOOLS), _gen())
    answers = solve(cand, 8)
    assert len(answers) == 8 and len(set(model.seeds)) == 8
    assert solver_pass_rate(cand, answers) == 1.0
    assert make_generator_reward(solve)([_text()]) == pytest.approx([2.0 + 0.5 * r_diff(1.0)])


def test_model_generator_refuses_scripted_backend(airline: World) -> None:
    conn = airline.build_state(0, 30)
    with pytest.raises(ValueError, match="scripted"):
        ModelGenerator(model_cfg={"kind": "scripted"})([sample_spec(airline, random.Random(0))], conn,
                                                       random.Random(0))
    conn.close()
    with pytest.raises(ValueError):
        get_method("self_play")(SynthesisConfig(method="self_play", options={"generator": "magic"}), airline)


# --------------------------------------------------------------------------- benchmark tools


def test_bandpass_curve_follows_expectation() -> None:
    curve = bandpass_curve([0.0, 0.5, 1.0], n_candidates=400, k=8, rng=random.Random(0))
    assert curve[0] == [0.0, 0.0]
    assert curve[2] == pytest.approx([1.0, r_diff(1.0)])
    assert curve[1][1] == pytest.approx(expected_r_diff(0.5, 8), abs=0.05)
    assert expected_r_diff(0.5, 8) > expected_r_diff(0.1, 8) and expected_r_diff(0.5, 8) > expected_r_diff(0.95, 8)


def test_stub_solver_and_perturbation() -> None:
    gen = _gen()
    answers = StubSolver(0.0, random.Random(1))(gen, 20)
    assert solver_pass_rate(gen, answers) == 0.0
    assert solver_pass_rate(gen, StubSolver(1.0, random.Random(1))(gen, 5)) == 1.0
