"""A release used as a new user would: plain `datasets`, chat templates and TRL, no trajforge
conversion code.

One module fixture publishes real `sft` and `rl` releases of one version with the scripted
pipeline. The tests load both folders with `load_dataset(folder)`, render the released rows
through three template families, run one SFTTrainer and one GRPOTrainer step with plain TRL on
a tiny random Qwen2-architecture model (Qwen2.5 template), and run the code the cards show.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from data import store
from data.card import FOLDER
from data.schema import RL_SCHEMA, SFT_SCHEMA
from tests.tiny_model import tiny_qwen_with_qwen_template


@pytest.fixture(scope="module")
def released(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """`sft` and `rl` releases of one version from the scripted pipeline (some tasks fail,
    some rows hold malformed calls the policy recovered from), both with train and test rows."""
    from pipelines import stages
    from pipelines.config import load_config

    cfg = load_config(None, {"rollout.model.kind": "scripted", "rollout.model.noise": 0.6,
                             "rollout.trials": 2, "synthesis.n_tasks": 8})
    from tests.pipeline_run import curated_run

    out = tmp_path_factory.mktemp("usage")
    paths = stages.release(cfg, out, curated_run(cfg, out)[2])
    assert paths["sft"].name == paths["rl"].name  # one version
    for kind in ("sft", "rl"):
        splits = set(store.read_table(paths[kind]).column("split").to_pylist())
        assert splits == {"train", "test"}, (kind, splits)
    return paths


def _header(path: Path) -> dict[str, Any]:
    text = (path / "README.md").read_text()
    return yaml.safe_load(text.split("---\n")[1])


def _code_block(path: Path, marker: str) -> str:
    blocks = re.findall(r"```python\n(.*?)```", (path / "README.md").read_text(), re.DOTALL)
    [block] = [b for b in blocks if marker in b]
    return block


def _split_rows(path: Path) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for row in store.read_table(path).to_pylist():
        out.setdefault(row["split"], []).append(row["task_id"])
    return out


# --------------------------------------------------------------------------- cards and splits


def test_both_releases_of_a_version_load_with_plain_load_dataset(released: dict[str, Path], tmp_path: Path) -> None:
    from datasets import Features, load_dataset

    cache = tmp_path / "hf-cache"  # one cache for both, as a user has
    for kind, schema in (("sft", SFT_SCHEMA), ("rl", RL_SCHEMA), ("sft", SFT_SCHEMA)):
        ds = load_dataset(str(released[kind]), cache_dir=str(cache))
        assert set(ds) == {"train", "test"}
        assert ds["train"].column_names == schema.names
        for split, ids in _split_rows(released[kind]).items():
            assert ds[split]["task_id"] == ids and set(ds[split]["split"]) == {split}
        header = _header(released[kind])
        assert header["configs"] == [{"config_name": kind, "data_files": [
            {"split": "train", "path": "data/train-*.parquet"}, {"split": "test", "path": "data/test-*.parquet"}]}]
        assert header["license"] and header["language"] == ["en"] and header["pretty_name"]
        assert header["task_categories"][0] == {"sft": "text-generation", "rl": "reinforcement-learning"}[kind]
        assert header["size_categories"] == ["n<1K"]
        info = header["dataset_info"]
        assert info["config_name"] == kind and info["features"] == Features.from_arrow_schema(schema)._to_yaml_list()
        assert {s["name"]: s["num_examples"] for s in info["splits"]} == {
            s: len(ids) for s, ids in _split_rows(released[kind]).items()}
    # the rl rows name their environment
    rl = load_dataset(str(released["rl"]), cache_dir=str(cache), split="train")
    row = rl[0]
    assert row["environment"] == row["world"] == row["task"]["world"] == "airline"
    assert row["world_version"] and row["verifier"] == "composite" and row["verifier_version"]
    assert {c["name"] for c in row["reference_solution"]} <= set(row["write_tools"]) | {
        t["function"]["name"] for t in row["tools"]}


# --------------------------------------------------------------------------- chat templates


def _trl_template(name: str) -> str:
    import trl

    return (Path(trl.__file__).parent / "chat_templates" / name).read_text()


def _rendered(text: str, family: str) -> list[tuple[str, Any]]:
    if family == "llama3":
        bodies = re.findall(r"<\|start_header_id\|>assistant<\|end_header_id\|>\n\n(\{.*?\})<\|eot_id\|>", text, re.S)
        return [(v["name"], v["parameters"]) for v in map(json.loads, bodies)]
    turns = re.findall(r"<\|im_start\|>assistant(.*?)<\|im_end\|>", text, re.S)
    return [(v["name"], v["arguments"]) for t in turns
            for v in map(json.loads, re.findall(r"<tool_call>\s*(.*?)\s*</tool_call>", t, re.S))]


def test_released_tool_calls_render_once_in_three_template_families(released: dict[str, Path]) -> None:
    from datasets import load_dataset

    from train.release_card import embedded_tokenizer

    tok = embedded_tokenizer()
    families = {"embedded": tok.chat_template, "qwen2_5": _trl_template("qwen2_5_training.jinja"),
                "llama3": _trl_template("llama3_2.jinja")}
    ds = load_dataset(str(released["sft"]), split="train")
    checked = {f: 0 for f in families}
    tools_seen: set[str] = set()
    for row in ds:
        calls = [c["function"] for m in row["messages"] if m["role"] == "assistant" for c in m["tool_calls"] or []]
        texts = [m["content"] or "" for m in row["messages"] if m["role"] == "assistant"]
        if not calls or not all(isinstance(c["arguments"], dict) for c in calls) or any("{" in t for t in texts):
            continue  # a recovered malformed call keeps the model's text (the card counts these)
        want = [(c["name"], c["arguments"]) for c in calls]
        tools_seen |= {c["name"] for c in calls}
        for family, template in families.items():
            if family == "llama3" and any(len(m["tool_calls"] or []) > 1 for m in row["messages"]):
                continue
            text = tok.apply_chat_template(row["messages"], tools=row["tools"], chat_template=template, tokenize=False)
            got = _rendered(text, family)
            assert got == want, family  # equal objects: no double encoding, no other tool's keys
            assert '"arguments": "' not in text and '"parameters": "' not in text
            checked[family] += 1
    assert all(n >= 3 for n in checked.values()), checked
    assert len(tools_seen) >= 2  # calls of different tools, whose keys a struct would have merged
    # the card states the same check, row by row, with nothing wrong
    templates = store.read_manifest(released["sft"]).stats["training"]["templates"]
    assert {f: t["failed"] for f, t in templates.items()} == {"embedded": 0, "qwen2_5": 0, "llama3_2": 0}
    assert all(t["ok"] >= 3 for t in templates.values())
    # ... and that Llama 3.2's template, whose calls render right, has no assistant-only-loss path
    assert {f: t["assistant_only_loss"] for f, t in templates.items()} == {
        "embedded": True, "qwen2_5": True, "llama3_2": False}
    assert "No assistant-only-loss path with `llama3_2`" in (released["sft"] / "README.md").read_text()

    # the check can fail: arguments as a JSON string (schema version 1) double-encode under `| tojson`
    row = next(r for r in ds if any(m["tool_calls"] for m in r["messages"]) and all(
        isinstance(c["function"]["arguments"], dict) for m in r["messages"] for c in m["tool_calls"] or []))
    stringly = json.loads(json.dumps(row["messages"]))
    for m in stringly:
        for c in m["tool_calls"] or []:
            c["function"]["arguments"] = json.dumps(c["function"]["arguments"])
    text = tok.apply_chat_template(stringly, tools=row["tools"], chat_template=families["qwen2_5"], tokenize=False)
    assert '"arguments": "{\\"' in text and all(isinstance(a, str) for _, a in _rendered(text, "qwen2_5"))


# --------------------------------------------------------------------------- plain TRL


@pytest.mark.slow  # trains (~10 s: on CPU TRL scores every position over the 49k vocabulary)
def test_plain_trl_sft_step_on_the_sft_rows(released: dict[str, Path], tmp_path: Path) -> None:
    from datasets import load_dataset
    from trl import SFTConfig, SFTTrainer

    # the card's figure: the shortest max_length that keeps every row (TRL cuts the rest of
    # each row; a step costs tokens x vocabulary on CPU, so no longer than needed)
    need = store.read_manifest(released["sft"]).stats["training"]["token_lengths"]["min_max_length"]
    model, tok = tiny_qwen_with_qwen_template()
    ds = load_dataset(str(released["sft"]))
    trainer = SFTTrainer(model=model, processing_class=tok, train_dataset=ds["train"], args=SFTConfig(
        output_dir=str(tmp_path), max_steps=1, per_device_train_batch_size=1, assistant_only_loss=True,
        max_length=need + 64, use_cpu=True, bf16=False, report_to="none", logging_steps=1,
        save_strategy="no", disable_tqdm=True, gradient_checkpointing=False))
    # no row dropped; the trained spans hold the calls' arguments as objects, encoded once
    assert len(trainer.train_dataset) == len(ds["train"])
    trained = [tok.decode([t for t, lab in zip(r["input_ids"], r["labels"], strict=True) if lab != -100])
               for r in trainer.train_dataset]
    assert all(trained) and any('"arguments": {"' in t for t in trained)
    assert not any('"arguments": "{' in t for t in trained)
    result = trainer.train()
    assert trainer.state.global_step == 1 and math.isfinite(result.training_loss) and result.training_loss > 0


@pytest.mark.slow  # trains (~15 s, two ~2,400-token rollouts scored over the 49k vocabulary)
def test_plain_trl_grpo_step_with_the_cards_environment_lines(released: dict[str, Path], tmp_path: Path) -> None:
    from trl import GRPOConfig, GRPOTrainer

    code = _code_block(released["rl"], "environment_factories")
    namespace: dict[str, Any] = {}
    exec(code.replace(FOLDER, str(released["rl"])), namespace)  # exactly the card's lines
    rows, factory, rewards = namespace["rows"], namespace["environment_factory"], namespace["reward_funcs"]
    assert set(factory) == {"airline"}
    model, tok = tiny_qwen_with_qwen_template()
    trainer = GRPOTrainer(model=model, processing_class=tok, train_dataset=rows, reward_funcs=rewards,
                          environment_factory=factory, args=GRPOConfig(
                              output_dir=str(tmp_path), max_steps=1, per_device_train_batch_size=2,
                              num_generations=2, max_completion_length=8, max_tool_calling_iterations=1,
                              use_cpu=True, bf16=False, report_to="none", logging_steps=1, save_strategy="no",
                              disable_tqdm=True, gradient_checkpointing=False))
    # TRL renders the environment's tools (the world's and the user channel), as the `tools` column lists them
    assert {t.__name__ for t in trainer._env_tools["airline"]} == {t["function"]["name"] for t in rows[0]["tools"]}
    trainer.train()
    [log] = [h for h in trainer.state.log_history if "reward" in h]
    assert trainer.state.global_step == 1 and 0.0 <= log["reward"] <= 1.0 and "verifier/passed" in log
    episodes = [e for e in trainer.environments if e.task is not None]
    # the row's verifier, the composite, scores the conversation (the scripted user in the loop)
    assert episodes and all(e.verdict is not None and e.verdict.verifier == e.row_verifier == "composite"
                            for e in episodes)


@pytest.mark.slow  # trains (a few seconds: 8-token episodes on a tiny model)
def test_plain_trl_grpo_step_with_the_cards_plain_text_lines(released: dict[str, Path], tmp_path: Path) -> None:
    """The card's other way: the user in plain text through `rollout_func`; each episode's
    verdict is the row's verifier's, on a conversation with the scripted user in it."""
    from trl import GRPOConfig

    code = _code_block(released["rl"], "ConversationRollout")
    namespace: dict[str, Any] = {}
    exec(code.replace(FOLDER, str(released["rl"])), namespace)  # exactly the card's lines
    rows, rollout, trainer_cls = namespace["rows"], namespace["rollout_func"], namespace["Trainer"]
    model, tok = tiny_qwen_with_qwen_template()
    trainer = trainer_cls(model=model, processing_class=tok, train_dataset=rows, reward_funcs=namespace["reward_funcs"],
                          rollout_func=rollout, args=GRPOConfig(
                              output_dir=str(tmp_path), max_steps=1, per_device_train_batch_size=2,
                              num_generations=2, max_completion_length=8, use_cpu=True, bf16=False,
                              report_to="none", logging_steps=1, save_strategy="no", disable_tqdm=True,
                              gradient_checkpointing=False))
    trainer.train()
    [log] = [h for h in trainer.state.log_history if "reward" in h]
    assert trainer.state.global_step == 1 and 0.0 <= log["reward"] <= 1.0 and "verifier/passed" in log
    assert len(rollout.last) == 2 and all(e.env.verdict is not None and e.env.verdict.verifier == "composite"
                                          and e.env.closing is not None and len(e.completion_ids) <= 8
                                          for e in rollout.last)


def test_sft_rows_end_at_the_agents_reply_and_say_what_they_are(released: dict[str, Path]) -> None:
    """No end marker of the user simulator in a released row; every row ends with the
    agent's reply; each task keeps its reference dialogue unless a row as clean replaced
    it; rows with a failed call are marked as recoveries."""
    from rollout.user import MARKERS

    rows = store.read_table(released["sft"]).to_pylist()
    assert rows and not any(k in json.dumps(r["messages"]) for r in rows for k in MARKERS)
    for r in rows:
        last = r["messages"][-1]
        assert last["role"] == "assistant" and last["content"] and not last.get("tool_calls"), last
        failed = any('"error"' in (m.get("content") or "") for m in r["messages"] if m["role"] == "tool")
        assert r["recovery"] or not failed, r["trajectory_id"]
        assert r["selection_reason"]
    assert any(r["reference"] for r in rows)
    by_task: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        by_task.setdefault(r["task_id"], []).append(r)
    for task_rows in by_task.values():  # the task's first row is its cleanest
        assert not task_rows[0]["recovery"] or all(x["recovery"] for x in task_rows)


def test_released_text_holds_no_raw_control_token(released: dict[str, Path]) -> None:
    """The rendered columns of both releases hold no `<|...|>` token a template or tokenizer
    would read as one; the cards count the rows that hold an escaped one."""
    from rollout.control_tokens import ESCAPED, GENERIC

    for kind, column in (("sft", "messages"), ("rl", "prompt")):
        rows = store.read_table(released[kind]).to_pylist()
        text = json.dumps([r[column] for r in rows], ensure_ascii=False)
        assert not re.search(GENERIC, text)
        figures = store.read_manifest(released[kind]).stats["training"]
        assert figures["control_tokens_escaped"] == sum(bool(ESCAPED.search(json.dumps(r[column], ensure_ascii=False)))
                                                        for r in rows)
        assert "Rows holding an escaped token" in (released[kind] / "README.md").read_text()


def test_rl_prompts_open_as_every_rollout_does(released: dict[str, Path]) -> None:
    """An rl prompt is the system prompt and the scripted user's first message, as a rollout's:
    no detail the agent must ask for and no go-ahead given in advance (the user answers inside
    TRL's loop, through `send_message_to_user`)."""
    from data.records import Task
    from rollout.user import ScriptedUser

    rows = store.read_table(released["rl"]).to_pylist()
    assert rows
    for row in rows:
        task = Task.model_validate_json(row["task"])
        opening = json.loads(row["prompt"])[1] if isinstance(row["prompt"], str) else row["prompt"][1]
        assert opening["role"] == "user" and opening["content"] == ScriptedUser(task).first_message()
        assert "go-ahead" not in opening["content"] and "no need to ask" not in opening["content"]
        assert row["verifier"] == "composite"


def test_the_cards_portable_reward_needs_only_the_columns(released: dict[str, Path]) -> None:
    from train.release_card import embedded_tokenizer

    code = _code_block(released["rl"], "def action_match_reward")
    assert "import train" not in code and "from train" not in code  # no trajforge
    namespace: dict[str, Any] = {"tokenizer": embedded_tokenizer()}
    exec(code.replace(FOLDER, str(released["rl"])), namespace)
    rows, reward = namespace["rows"], namespace["action_match_reward"]
    # the prompts it renders carry the row's tool schemas
    assert all(t["function"]["name"] in rows[0]["prompt"] for t in rows[0]["tools"])

    def text(calls: list[dict[str, Any]]) -> str:
        return "\n".join("<tool_call>" + json.dumps({"name": c["name"], "arguments": c["arguments"]}) + "</tool_call>"
                         for c in calls)

    refs, writes = rows["reference_solution"], rows["write_tools"]
    gold = [text(r) for r in refs]
    conversational = [[{"role": "assistant", "content": "", "tool_calls": [
        {"type": "function", "function": {"name": c["name"], "arguments": json.dumps(c["arguments"])}}
        for c in r]}] for r in refs]
    assert reward(gold, refs, writes, prompts=list(rows["prompt"])) == [1.0] * len(refs)
    assert reward(conversational, refs, writes) == [1.0] * len(refs)
    needs_write = [i for i, r in enumerate(refs) if any(c["write"] for c in r)]
    assert needs_write
    i = needs_write[0]
    assert reward(["I cannot help with that."], [refs[i]], [writes[i]]) == [0.0]
    wrong = [dict(c, arguments={**c["arguments"], "extra": 1}) if c["write"] else c for c in refs[i]]
    assert reward([text(wrong)], [refs[i]], [writes[i]]) == [0.0]
    # the same completions pass the package's own action-match verifier
    from data.records import Step, Task, ToolCall, Trajectory
    from verifiers.base import get_verifier

    task = Task.model_validate(rows[i]["task"])
    steps = [Step(index=k, turn=k + 1, action=ToolCall(name=c["name"], arguments=c["arguments"]))
             for k, c in enumerate(refs[i])]
    verdict = get_verifier("action_match").verify(task, Trajectory(id="t", task_id=task.id, trial=0, model="m",
                                                                   steps=steps, termination="agent_stop"))
    assert verdict.passed


# --------------------------------------------------------------------------- lengths, versions


def test_train_sft_refuses_a_max_length_that_drops_rows(released: dict[str, Path], tmp_path: Path) -> None:
    from train.config import SFTStageConfig
    from train.sft import build_sft_trainer, hub_offline

    lengths = store.read_manifest(released["sft"]).stats["training"]["token_lengths"]
    need = lengths["min_max_length"]
    assert lengths["before_first_assistant"]["p50"] <= lengths["before_first_assistant"]["p95"] < need
    card = (released["sft"] / "README.md").read_text()
    assert f"at least {need} to keep every row" in card
    # TRL's default max_length (1024) would cut every airline row, and drop every one under
    # assistant-only loss: the card says so and what to set
    rows = lengths["rows"]
    assert lengths["over_trl_default"] == {"total": rows, "before_first_assistant": rows}
    assert f"TRL's default `max_length` is 1024 tokens, and {rows} of the {rows} rows measured are longer" in card
    assert f"Set `SFTConfig(max_length={lengths['total']['max']})`" in card
    with hub_offline(), pytest.raises(store.DatasetError, match=r"would drop .* at least \d+ ") as err:
        build_sft_trainer(released["sft"], SFTStageConfig(max_length=1024), tmp_path)
    # the check names what its split (train) needs; the card's figure covers every split
    named = int(re.search(r"at least (\d+) ", str(err.value)).group(1))
    assert 1024 < named <= need


def test_train_sft_refuses_a_template_that_drops_tool_use(released: dict[str, Path], tmp_path: Path) -> None:
    """A plain ChatML template without tool support (like SmolLM2's own): tools and tool calls
    would vanish from the text, silently, so the run stops before loading weights."""
    from train.config import SFTStageConfig
    from train.sft import build_sft_trainer, hub_offline

    plain = tmp_path / "chatml.jinja"
    plain.write_text("{% for m in messages %}{{ '<|im_start|>' + m['role'] + '\\n' + (m['content'] or '') + "
                     "'<|im_end|>\\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}"
                     "{% endif %}")
    cfg = SFTStageConfig(chat_template_path=str(plain), assistant_only_loss=False)
    with hub_offline(), pytest.raises(store.DatasetError, match="leaves the tool schemas and assistant tool calls out"):
        build_sft_trainer(released["sft"], cfg, tmp_path)


def test_an_environment_refuses_a_row_of_another_world_or_verifier_version(released: dict[str, Path]) -> None:
    from train.environments import environment_class

    row = store.read_table(released["rl"]).to_pylist()[0]
    env = environment_class("airline")()
    assert env.reset(**row) is None and env.row_verifier == row["verifier"]
    with pytest.raises(ValueError, match="world 'airline' version 0000"):
        env.reset(**{**row, "world_version": "0000"})
    # the environment judges by the whole verdict, the version the row names
    with pytest.raises(ValueError, match="judged by composite 0.0.1"):
        env.reset(**{**row, "verifier": "composite", "verifier_version": "0.0.1"})


def test_the_training_runs_section_keeps_the_card_loadable(released: dict[str, Path], tmp_path: Path) -> None:
    from datasets import load_dataset

    from train.lineage import RUNS_SECTION, write_run_record

    rel = released["sft"]
    before = (rel / "README.md").read_text()
    write_run_record(tmp_path / "train" / "sft-1", "sft", rel, store.read_manifest(rel), {}, status="done", steps=1,
                     final_loss=0.5)
    card = (rel / "README.md").read_text()
    assert card.count(f"## {RUNS_SECTION}") == 1 and card.index("## Training with it") < card.index(f"## {RUNS_SECTION}")
    assert card.split("---\n")[1] == before.split("---\n")[1]  # the YAML header is untouched
    assert load_dataset(str(rel), cache_dir=str(tmp_path / "cache"))["test"].num_rows > 0


def test_card_figures_measured_chunk_by_chunk_equal_one_pass(released: dict[str, Path],
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """The card measures its rows a chunk at a time (bounded memory); the figures it states
    are those of measuring every row at once, template failures numbered by release row."""
    from train import release_card

    tok = release_card.embedded_tokenizer()
    for kind in ("sft", "rl"):
        table = store.read_table(released[kind])
        schema = SFT_SCHEMA if kind == "sft" else RL_SCHEMA
        rows = [release_card.decode_row(r, schema) for r in table.to_pylist()]
        batches = [table.slice(i, 3) for i in range(0, table.num_rows, 3)]  # odd sizes cross chunk edges
        monkeypatch.setattr(release_card, "CHUNK_ROWS", 2)
        _, chunked = release_card.training_sections(kind, batches, total_rows=table.num_rows)
        chunks = list(release_card.decoded_chunks(batches, kind, chunk_rows=2))
        assert max(len(c) for c in chunks) == 2 and sum(len(c) for c in chunks) == len(rows)
        assert chunked["rows_measured"] == chunked["rows"] == len(rows)
        assert chunked["token_lengths"] == release_card.token_lengths(tok, rows, kind)
        if kind == "sft":
            assert chunked["templates"] == release_card.check_templates(tok, rows)
    # a failure found in a later chunk keeps its row number in the release
    merged = release_card.merge_template_checks(
        {"f": {"rows": 2, "ok": 2, "skipped": 0, "skipped_why": {}, "failed": 0, "failures": []}},
        {"f": {"rows": 2, "ok": 1, "skipped": 0, "skipped_why": {}, "failed": 1,
               "failures": [{"row": 3, "problem": "x"}]}})
    assert merged["f"]["rows"] == 4 and merged["f"]["failures"] == [{"row": 3, "problem": "x"}]


def test_token_counter_counts_like_the_tokenizer(released: dict[str, Path]) -> None:
    """The card's `TokenCounter` (added tokens plus cached counts of the pieces between them)
    gives each text the count of encoding it whole: rendered release rows, texts with added
    tokens side by side or at the ends, after pieces were evicted; a tokenizer whose added
    token strips the spaces beside it is counted whole."""
    from tokenizers import AddedToken

    from train import release_card

    tok = release_card.embedded_tokenizer()

    def whole(text: str) -> int:
        return len(tok(text, add_special_tokens=False)["input_ids"])

    texts: list[str] = []
    for kind in ("sft", "rl"):
        schema = SFT_SCHEMA if kind == "sft" else RL_SCHEMA
        rows = [release_card.decode_row(r, schema) for r in store.read_table(released[kind]).to_pylist()[:6]]
        texts += [t for r in rows for t in release_card.row_texts(tok, r, kind)]
    texts += ["<|im_start|><|im_end|>", "<|im_start|>user\n hi <|im_end|>\n", " <|endoftext|>", "plain text, no tokens",
              "", "<|im_start|>", "a<|im_end|>b<|im_end|>  c"]
    counter = release_card.TokenCounter(tok, max_pieces=5)  # most pieces evicted between calls
    assert counter.exact_pieces
    for _ in range(2):  # second pass: pieces come from the cache (those still in it)
        assert counter.counts(texts) == [whole(t) for t in texts]
    assert len(counter.pieces) <= 5
    rows = [release_card.decode_row(r, SFT_SCHEMA) for r in store.read_table(released["sft"]).to_pylist()[:4]]
    assert release_card.rows_lengths(tok, rows, "sft") == [release_card.row_lengths(tok, r, "sft") for r in rows]

    stripping = tok.__class__.from_pretrained(tok.name_or_path, local_files_only=True)
    stripping.add_tokens([AddedToken("<|tool|>", lstrip=True, special=True)])
    strip_counter = release_card.TokenCounter(stripping)
    assert not strip_counter.exact_pieces
    probe = ["x <|tool|> y", "<|im_start|>user  <|tool|>"]
    assert strip_counter.counts(probe) == [len(stripping(t, add_special_tokens=False)["input_ids"]) for t in probe]


# --------------------------------------------------------------------------- sft_recovery


def test_the_recoveries_are_their_own_config_and_no_row_trains_a_mistake(released: dict[str, Path],
                                                                         tmp_path: Path) -> None:
    """The noisy run's recoveries are published as `sft_recovery` beside `sft` and `rl` (one
    version): every row marks its failed assistant turns `train: false` (kept by plain
    `load_dataset`), `release_trained_failures` is 0 in both sft configs, and the card says
    which templates leave a marked turn out of the loss."""
    from datasets import load_dataset

    from curation.release import release_trained_failures
    from data.schema import SFT_RECOVERY_SCHEMA

    rec = released["sft_recovery"]
    assert rec.name == released["sft"].name and rec.parent.name == "sft_recovery"
    rows = store.read_table(rec).to_pylist()
    assert rows and all(r["recovery"] for r in rows)
    assert not any(r["recovery"] for r in store.read_table(released["sft"]).to_pylist())
    for r in rows:
        marks = [m["train"] for m in r["messages"] if m["role"] == "assistant"]
        assert False in marks and all(m["train"] is None for m in r["messages"] if m["role"] != "assistant")
    assert release_trained_failures(rec) == release_trained_failures(released["sft"]) == 0
    assert store.read_manifest(rec).stats["trained_failures"] == 0
    ds = load_dataset(str(rec), cache_dir=str(tmp_path / "cache"))
    assert ds["train"].column_names == SFT_RECOVERY_SCHEMA.names
    assert any(m["train"] is False for row in ds["train"]["messages"] for m in row)
    card = (rec / "README.md").read_text()
    assert _header(rec)["configs"][0]["config_name"] == "sft_recovery"
    assert "| embedded | yes |" in card and "| qwen2_5 | **no**: the marked turn would carry loss |" in card


def test_the_cards_data_quality_states_the_recoveries_and_trained_failures() -> None:
    from data.card import run_sections

    run = {"data_quality": {"rows": 4, "recovery_rows": 0, "clause_compliance": {}},
           "headline": {"sft_recovery_rows": 3, "trained_failures": 0}}
    text = run_sections(run)
    assert "| rows recovering from a failed call (the `sft_recovery` config) | 3 |" in text
    assert "| rows of both sft configs whose failed turn carries loss | 0 |" in text
