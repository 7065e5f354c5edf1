"""Release hygiene: scrubbing planted secrets, dedup, decontamination."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from curation.base import RLPick, Selection
from curation.hygiene import (
    EVAL_SETS,
    BandIndex,
    Synthetic,
    clean_release,
    decontaminate,
    dedup,
    item_of,
    register_eval_set,
    scrub_record,
    scrub_rows,
    scrub_text,
    shingles,
)
from data.card import run_sections
from data.records import Task, ToolCall, Trajectory, canonical_json
from envs.registry import get_world
from pipelines.config import RunConfig
from pipelines.stages import clean_rows, release_rows
from synthesis.base import SynthesisConfig, get_method
from verifiers.audit import build_dialogue, build_trajectory, replay_hash
from verifiers.base import get_verifier

# Canaries, assembled at run time so that no real-looking secret sits in the source.
A = "Zq7"  # filler
CANARIES: dict[str, str] = {
    "API_KEY": "sk-proj-" + "Ab3dE5gH7jK9mN1pQ3sT5vX7" + "zZ",
    "AWS_ACCESS_KEY": "AKIA" + "IOSFODNN7" + "EXAMPL2",
    "AWS_SECRET_KEY": "aws_secret_access_key=" + "wJalrXUtnFEMI/K7MDENG/" + "bPxRfiCYEXAMPLEKEY",
    "GITHUB_TOKEN": "ghp_" + "a1B2c3D4e5F6g7H8i9J0" + "k1L2m3N4o5P6q7R8",
    "SLACK_TOKEN": "xoxb-" + "123456789012-" + "1234567890123-" + A * 8,
    "HF_TOKEN": "hf_" + "AbCdEfGhIjKlMnOpQrStUvWxYz" + "012345",
    "JWT": "eyJhbGciOiJIUzI1NiJ9"
    + ".eyJzdWIiOiIxMjM0NTY3ODkwIn0"
    + ".dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U",
    "PRIVATE_KEY": "-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEA"
    + A * 10
    + "\n"
    + A * 12
    + "\n-----END RSA PRIVATE KEY-----",
    "EMAIL": "jane.doe+travel@" + "example-mail.co.uk",
    "PHONE": "+1 (415) 555-" + "0132",
}


def _secret_part(kind: str, text: str) -> str:
    return text.split("=", 1)[1] if kind == "AWS_SECRET_KEY" else text


def _row_with_canaries() -> dict[str, Any]:
    all_text = "; ".join(f"my {k.lower()} is {v} ok" for k, v in CANARIES.items())
    return {
        "messages": [
            {"role": "system", "content": "You are an agent."},
            {"role": "user", "content": "Hi, " + all_text},
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [
                    {
                        "id": "c0",
                        "type": "function",
                        "function": {
                            "name": "transfer_to_human_agents",
                            "arguments": json.dumps({"summary": all_text}),
                        },
                    }
                ],
            },
            {
                "role": "tool",
                "tool_call_id": "c0",
                "name": "transfer_to_human_agents",
                "content": json.dumps({"status": "ok", "echo": {"notes": [all_text]}}),
            },
        ],
        "tools": "[]",
        "task_id": "task-1",
        "trajectory_id": "traj-1",
        "score": 1.0,
    }


def test_every_planted_secret_is_caught_everywhere() -> None:
    row = _row_with_canaries()
    [clean], report = scrub_rows([row])
    dumped = json.dumps(clean)
    for kind, value in CANARIES.items():
        secret = _secret_part(kind, value)
        for piece in (secret, secret.split("\n")[0][-12:]):
            assert piece not in dumped and json.dumps(piece)[1:-1] not in dumped, kind
        assert report.replacements.get(kind) == 3, (
            kind,
            report.replacements,
        )  # message, arguments, observation
        assert f"[REDACTED_{kind}]" in clean["messages"][1]["content"]
    assert report.rows_changed == 1 and report.by_column == {"messages": 30} and report.total == 30
    args = json.loads(clean["messages"][2]["tool_calls"][0]["function"]["arguments"])
    obs = json.loads(clean["messages"][3]["content"])
    assert (
        "[REDACTED_PRIVATE_KEY]" in args["summary"] and "[REDACTED_JWT]" in obs["echo"]["notes"][0]
    )
    assert "aws_secret_access_key=[REDACTED_AWS_SECRET_KEY]" in args["summary"]
    assert clean["score"] == 1.0 and clean["task_id"] == "task-1"
    assert row["messages"][1]["content"].startswith(
        "Hi, my api_key is sk-"
    )  # input rows are not modified


def test_no_false_positives_on_real_trajectories(tasks: list[Task]) -> None:
    """Ids, dates, times, prices and hashes of the airline world survive; only e-mail
    addresses (user records the tools return) are PII there."""
    for task in tasks:
        traj = build_trajectory(task, task.reference_solution)
        row = {
            "messages": traj.messages,
            "task": json.dumps(task.model_dump()),
            "tools": json.dumps(traj.tools),
        }
        [clean], report = scrub_rows([row])
        assert set(report.replacements) <= {"EMAIL"}, report.replacements
        assert clean["task"] == row["task"]
        if not report.replacements:
            assert clean == row
        cleaned = scrub_record(traj)
        assert cleaned.steps[0].action == traj.steps[0].action
    assert (
        scrub_text(
            "Flight HAT012-2026-05-14 departs 2026-05-14 12:15, total 1,234.50 (R0300000), 4242"
        )
        == "Flight HAT012-2026-05-14 departs 2026-05-14 12:15, total 1,234.50 (R0300000), 4242"
    )


@pytest.fixture(scope="module")
def many_tasks() -> list[Task]:
    world = get_world("airline")
    out: list[Task] = []
    for method in ("logic_driven", "constraint_guided"):
        for seed in (0, 1):
            out += get_method(method)(
                SynthesisConfig(method=method, n_tasks=7, seed=seed), world
            ).tasks
    assert len({t.id for t in out}) == len(out)
    return out


def _edits(text: str) -> list[str]:
    words = text.split()
    return [
        text.upper(),  # case
        "  " + text.replace(" ", "   ") + " ",  # whitespace
        text.rstrip(".") + "!",  # punctuation
        " ".join(words[:3] + ["really"] + words[3:]),  # one word inserted
        " ".join(
            w if i != len(words) // 2 else w + "s" for i, w in enumerate(words)
        ),  # one word changed
    ]


def test_dedup_removes_small_edits_and_keeps_distinct_tasks(many_tasks: list[Task]) -> None:
    rows = [
        {
            "id": t.id,
            "instruction": t.instruction,
            "tool_calls": [
                {"name": c.name, "arguments": c.arguments} for c in t.reference_solution
            ],
        }
        for t in many_tasks
    ]
    variants = []
    for r in rows[::3]:
        for j, text in enumerate(_edits(r["instruction"])):
            variants.append({**r, "id": f"{r['id']}-edit{j}", "instruction": text})
    exact = [{**r, "id": r["id"] + "-copy"} for r in rows[:2]]
    kept, report = dedup(rows + variants + exact)
    assert [r["id"] for r in kept] == [r["id"] for r in rows]
    assert report.exact_duplicates == len(exact) + 2 * len(
        rows[::3]
    )  # case and whitespace edits normalize away
    assert report.near_duplicates == 3 * len(rows[::3])
    assert report.removed == len(variants) + len(exact)
    # Against an earlier release: its items (rows, records or texts) knock out their repeats.
    kept2, report2 = dedup(rows[:5] + variants[:5], earlier=[many_tasks[0], rows[1]])
    assert (
        report2.exact_vs_earlier == 2 + 2 and report2.near_vs_earlier == 3
    )  # rows 0-1, then row 0's edits
    assert {e["duplicate_of"] for e in report2.examples} == {many_tasks[0].id, rows[1]["id"]}
    assert [r["id"] for r in kept2] == [r["id"] for r in rows[2:5]]
    with pytest.raises(ValueError, match="threshold"):
        dedup(rows, threshold=0)


def test_band_index_finds_what_datasketch_lsh_finds(many_tasks: list[Task]) -> None:
    """The compact index's candidates are the rows `datasketch.MinHashLSH` returns for the
    same signatures, bands and rows (edited copies included, so bands do collide)."""
    import numpy as np
    from datasketch import MinHash, MinHashLSH

    items = [item_of(t) for t in many_tasks]
    items += [item_of({"id": f"e{i}-{j}", "instruction": text, "tool_calls": []})
              for i, t in enumerate(many_tasks[::2]) for j, text in enumerate(_edits(t.instruction))]
    lsh = MinHashLSH(threshold=0.85, num_perm=128)
    index = BandIndex(128, lsh.b, lsh.r)
    index.CHUNK = 7  # several signature arrays
    collided = 0
    for i, item in enumerate(items):
        m = MinHash(num_perm=128, seed=1)
        m.update_batch([s.encode() for s in shingles(item)])
        sig = m.hashvalues.astype(np.uint32)
        found = index.candidates(sig)
        assert found == set(lsh.query(m)), item.id
        collided += bool(found)
        assert index.add(sig) == i and np.array_equal(index.signature(i), sig)
        lsh.insert(i, m)
    assert collided >= len(many_tasks[::2])
    with pytest.raises(ValueError, match="permutations"):
        BandIndex(64, 8, 16)


def test_dedup_reads_release_rows(tasks: list[Task]) -> None:
    trajs = [build_trajectory(t, t.reference_solution) for t in tasks[:3]]
    sft = [{"messages": t.messages, "tools": "[]", "trajectory_id": t.id} for t in trajs]
    kept, report = dedup(sft + [dict(sft[0], trajectory_id="again")])
    assert len(kept) == 3 and report.exact_duplicates == 1
    item = item_of(sft[0])
    assert item.instruction == tasks[0].instruction
    assert [n for n, _ in item.tool_calls] == [c.name for c in tasks[0].reference_solution]
    with pytest.raises(ValueError, match="no messages, prompt or instruction"):
        item_of({"foo": 1})


EVAL_TEXT = (
    "I need to change my flight from Boston to Denver next Tuesday because my meeting moved, and I "
    "want to keep the same cabin and use my travel certificate for any fare difference please"
)


@pytest.fixture()
def eval_set() -> Any:
    register_eval_set(
        "toy_eval",
        [EVAL_TEXT, "What is the baggage allowance for a gold member?"],
        tool_sequences=['update_baggage({"reservation_id":"RZZ1","total_bags":3})'],
    )
    yield "toy_eval"
    EVAL_SETS.pop("toy_eval", None)


def test_decontamination_flags_planted_overlap(eval_set: str, many_tasks: list[Task]) -> None:
    words = EVAL_TEXT.split()
    contaminated = {
        "id": "dirty",
        "instruction": "Hello. " + " ".join(words[2:20]) + ". Thanks!",
        "tool_calls": [],
    }
    nine = {
        "id": "nine",
        "instruction": "Well " + " ".join(words[5:14]) + " ok",
        "tool_calls": [],
    }  # 9 tokens
    tools_dirty = {
        "id": "dirty-tools",
        "instruction": "please add bags",
        "tool_calls": [
            {"name": "update_baggage", "arguments": {"reservation_id": "RZZ1", "total_bags": 3}}
        ],
    }
    clean = [
        {
            "id": t.id,
            "instruction": t.instruction,
            "tool_calls": [
                {"name": c.name, "arguments": c.arguments} for c in t.reference_solution
            ],
        }
        for t in many_tasks
    ]
    kept, report = decontaminate([contaminated, nine, tools_dirty, *clean], [eval_set])
    r = report.eval_sets[eval_set]
    assert r.checked == 3 + len(clean)
    assert r.flagged == {"instruction@8": 2, "instruction@13": 1, "tool_calls@8": 1}
    assert r.flagged_any == 3 and r.longest_match == 18 and r.removed == 1
    assert [x["id"] for x in kept] == ["nine", "dirty-tools", *[c["id"] for c in clean]]
    ex = next(e for e in r.examples if e["row"] == "dirty" and e["n"] == 13)
    assert ex["longest_match"] == 18 and ex["match"].startswith("to change my flight")
    kept8, report8 = decontaminate([contaminated, nine, tools_dirty, *clean], [eval_set], drop_n=8)
    assert [x["id"] for x in kept8] == [c["id"] for c in clean]
    with pytest.raises(KeyError, match="unknown eval set"):
        decontaminate(clean, ["nope"])
    with pytest.raises(ValueError, match="drop_n"):
        decontaminate(clean, [eval_set], drop_n=5)


def test_clean_release_runs_all_three(eval_set: str) -> None:
    rows = [
        _row_with_canaries(),
        dict(_row_with_canaries(), trajectory_id="traj-2"),
        {"messages": [{"role": "user", "content": EVAL_TEXT}], "trajectory_id": "leak"},
    ]
    out, report = clean_release(rows, eval_sets=[eval_set])
    assert [r["trajectory_id"] for r in out] == ["traj-1"]
    assert report.scrub.total == 60 and report.dedup.exact_duplicates == 1
    assert report.contamination.eval_sets[eval_set].removed == 1
    json.dumps(report.card())


# -- world-synthetic values, one placeholder per value, re-judging scrubbed rows ---------------

PLANTED_PHONE = "+44 20 7946 " + "0958"  # real-looking, in no world's data


@pytest.fixture(scope="module")
def world_tasks() -> dict[str, list[Task]]:
    return {
        w: get_method("logic_driven")(SynthesisConfig(world=w, n_tasks=3, seed=1), get_world(w)).tasks
        for w in ("retail", "telecom")
    }


def _released(tasks: list[Task], trajectories: list[Trajectory] | None = None) -> tuple[dict, Selection]:
    """The sft rows (of gold dialogues, or `trajectories`) and rl rows of `tasks`, made by the
    release code."""
    trajs = trajectories or [build_dialogue(t, t.dialogue) for t in tasks]
    by_id = {t.id: t for t in tasks}
    verdicts = [get_verifier("composite").verify(by_id[g.task_id], g) for g in trajs]
    assert all(v.passed for v in verdicts), [v.reasons for v in verdicts]
    selection = Selection(sft=list(zip(trajs, verdicts, strict=True)),
                          rl=[RLPick(t, 0.5, 2, "test") for t in tasks])
    return release_rows(selection, tasks), selection


def _calls(row: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    return [(c["function"]["name"], json.loads(c["function"]["arguments"]))
            for m in row["messages"] if m["role"] == "assistant" for c in m.get("tool_calls") or []]


def test_world_synthetic_emails_stay_intact(world_tasks: dict[str, list[Task]], tmp_path: Any) -> None:
    tasks = world_tasks["retail"]
    rows, selection = _released(tasks)
    emails = [a["email"] for r in rows["sft"] for n, a in _calls(r) if n == "find_customer_by_email"]
    assert emails and all("@example." in e for e in emails)
    for name in ("sft", "rl"):
        [clean], report = clean_rows(RunConfig(), tmp_path, name, rows[name][:1], tasks, selection)
        assert clean == rows[name][0], name  # nothing rewritten: no placeholder, score as it was
        assert report["scrub"]["replacements"] == {} and report["scrub"]["synthetic_kept"]["EMAIL"] > 0
        assert report["replay"]["checked"] == 0
    # Without the world's values the same e-mail would be taken for the user's PII.
    [blind], _ = scrub_rows(rows["sft"][:1])
    assert [a["email"] for n, a in _calls(blind) if n == "find_customer_by_email"][0] == "[REDACTED_EMAIL]"


def test_world_phone_numbers_stay_intact(world_tasks: dict[str, list[Task]], tmp_path: Any) -> None:
    tasks = world_tasks["telecom"]
    task = next(t for t in tasks if "555-" in t.instruction)
    rows, selection = _released([task])
    number = re.search(r"555-\d{3}-\d{4}", task.instruction).group(0)  # type: ignore[union-attr]
    for name, text_col in (("sft", "messages"), ("rl", "prompt")):
        [clean], report = clean_rows(RunConfig(), tmp_path, name, rows[name], [task], selection)
        assert clean == rows[name][0]
        assert report["scrub"]["replacements"] == {} and report["scrub"]["synthetic_kept"]["PHONE"] > 0
        assert number in json.dumps(clean[text_col])
    obs = [m["content"] for m in rows["sft"][0]["messages"] if m["role"] == "tool"]
    assert any('"phone_number"' in o for o in obs)  # the tool results list the lines, numbers intact
    assert number in json.loads(rows["rl"][0]["task"])["instruction"]


def test_minted_numbers_in_tool_results_are_the_worlds() -> None:
    """A phone number that first comes out of a tool result was minted by the world (a new
    line); one the user typed first is theirs, and stays scrubbed when a tool echoes it."""
    row = {"messages": [
        {"role": "user", "content": "Please add a line. My other number is " + PLANTED_PHONE},
        {"role": "tool", "content": json.dumps({"phone_number": "556-123-4567", "echo": PLANTED_PHONE})},
        {"role": "assistant", "content": "Your new line is 556-123-4567."},
    ]}
    [clean], report = scrub_rows([row])
    assert report.replacements == {"PHONE": 2} and report.synthetic_kept == {"PHONE": 2}
    assert clean["messages"][2]["content"] == "Your new line is 556-123-4567."
    assert json.loads(clean["messages"][1]["content"])["echo"] == "[REDACTED_PHONE]"
    # A token is the world's only if its initial state holds it (a tool could print the host's).
    key = CANARIES["HF_TOKEN"]
    [tok], _ = scrub_rows([{"messages": [{"role": "tool", "content": "HF_TOKEN=" + key}]}])
    assert key not in json.dumps(tok)
    [kept], _ = scrub_rows([{"messages": [{"role": "tool", "content": "HF_TOKEN=" + key}]}],
                           synthetic=Synthetic.of_texts(["seeded: " + key]))
    assert key in json.dumps(kept)


def test_planted_secret_gets_one_placeholder_everywhere() -> None:
    key, other = CANARIES["API_KEY"], CANARIES["API_KEY"][:-2] + "Yy"
    secret = _secret_part("AWS_SECRET_KEY", CANARIES["AWS_SECRET_KEY"])
    task = {
        "id": "task-1", "world": "retail", "target_state_hash": "abc",
        "initial_state": {"world": "retail", "seed": 1, "scale": 30, "patches": [], "state_hash": "abc"},
        "instruction": f"Store my key {key} (not {other}); the AWS secret is {secret}.",
        "reference_solution": [{"name": "save_note", "arguments": {"note": key}}],
        "target_diff": [],
    }
    row = {
        "messages": [
            {"role": "user", "content": f"My key is {key}, the old one {other}. " + CANARIES["AWS_SECRET_KEY"]},
            {"role": "assistant", "content": "", "tool_calls": [{"id": "c0", "type": "function", "function": {
                "name": "save_note", "arguments": json.dumps({"note": key})}}]},
            {"role": "tool", "tool_call_id": "c0", "name": "save_note", "content": json.dumps({"saved": key})},
        ],
        "task": canonical_json(task),
        "task_id": "task-1",
    }
    [clean], report = scrub_rows([row])
    dumped = json.dumps(clean)
    assert key not in dumped and other not in dumped and secret not in dumped
    user = clean["messages"][0]["content"]
    assert user.startswith("My key is [REDACTED_API_KEY], the old one [REDACTED_API_KEY_2]. aws_secret_access_key=")
    assert _calls(clean) == [("save_note", {"note": "[REDACTED_API_KEY]"})]
    assert json.loads(clean["messages"][2]["content"]) == {"saved": "[REDACTED_API_KEY]"}
    scrubbed = json.loads(clean["task"])
    assert clean["task"] == canonical_json(scrubbed)  # still canonical JSON
    # the same placeholders in the task JSON, also where no pattern matches (a secret without its label)
    assert scrubbed["instruction"] == ("Store my key [REDACTED_API_KEY] (not [REDACTED_API_KEY_2]); "
                                       "the AWS secret is [REDACTED_AWS_SECRET_KEY].")
    assert scrubbed["reference_solution"][0]["arguments"] == {"note": "[REDACTED_API_KEY]"}
    assert {k: scrubbed[k] for k in ("id", "initial_state", "target_state_hash")} == {
        k: task[k] for k in ("id", "initial_state", "target_state_hash")}
    assert report.replacements == {"API_KEY": 7, "AWS_SECRET_KEY": 2}  # 4 + 3 and 1 + 1
    assert report.by_column == {"messages": 5, "task": 4}


def test_scrubbed_row_that_fails_its_verifier_is_dropped_and_counted(
    world_tasks: dict[str, list[Task]], tmp_path: Any
) -> None:
    base = world_tasks["retail"][1]
    world = get_world("retail")
    env = world.env(base.initial_state)
    order = env.conn.execute("SELECT order_id FROM orders WHERE status = 'pending' LIMIT 1").fetchone()[0]
    env.close()
    # A write that stores a planted phone number: scrubbed, it no longer reaches the target.
    write = [ToolCall(name="modify_order_address",
                      arguments={"order_id": order, "address": "12 Elm Street, call " + PLANTED_PHONE})]
    task = base.model_copy(update={"reference_solution": write, "dialogue": [], "target_diff": [],
                                   "verification": base.verification.model_copy(update={"basis": ["DB"]})})
    task = task.model_copy(update={"target_state_hash": replay_hash(task, write)[0]}).with_id()
    # The planted number only in what the user says: scrubbed, the row still passes.
    chatty = base.model_copy(update={"instruction": base.instruction + " Or call me: " + PLANTED_PHONE}).with_id()
    turns = [base.dialogue[0].model_copy(update={"content": base.dialogue[0].content + " " + PLANTED_PHONE}),
             *base.dialogue[1:]]
    trajs = [build_trajectory(task, write), build_dialogue(chatty, turns)]
    rows, selection = _released([task, chatty], trajs)
    figures: dict[str, Any] = {}
    for name in ("sft", "rl"):
        clean, report = clean_rows(RunConfig(), tmp_path, name, rows[name], [task, chatty], selection)
        assert [r["task_id"] for r in clean] == [chatty.id], name
        assert PLANTED_PHONE not in json.dumps(clean)
        replay = report["replay"]
        assert (replay["checked"], replay["passed"], replay["dropped"]) == (2, 1, 1), replay
        assert replay["examples"][0]["row"] in (trajs[0].id, task.id)
        figures[name] = report
    card = run_sections({"hygiene": figures})
    assert card.count("2 re-judged, 1 dropped") == 2


def test_workspace_world_declares_its_files() -> None:
    """A workspace world's synthetic values are what its recipe writes (e.g. a contacts file)."""
    from data.records import StateRef
    from envs.workspace import recipe

    world = get_world("terminal")
    ref = StateRef(world="terminal", seed=0, scale=0, state_hash="-",
                   patches=recipe({"contacts.txt": "ana.li@uni.edu, +1 415 555 0199\n"}))
    known = Synthetic.of_texts(world.synthetic_values(ref))
    row = {"messages": [{"role": "assistant", "content": "", "tool_calls": [{"id": "c", "type": "function",
            "function": {"name": "run_shell", "arguments": json.dumps({"command": "grep ana.li@uni.edu x"})}}]}]}
    [clean], report = scrub_rows([row], synthetic=known)
    assert clean == row and report.synthetic_kept == {"EMAIL": 1}
