"""Supervised fine-tuning (`train.sft`): real SFT steps on a released dataset (slow: the
embedded SmolLM2 with the default settings, one row a step; LoRA, packing and checkpoints on
the tiny model), the max-length check, the template's markers, the LM head scored at the loss
positions only (same loss and gradients), and training ids equal to what inference renders."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from data import store
from train.config import SFTStageConfig

MetricLines = Callable[[Path], list[dict[str, Any]]]


@pytest.mark.slow
def test_sft_runs_two_steps_on_a_released_dataset(releases: dict[str, Path], tmp_path: Path,
                                                 metric_lines: MetricLines) -> None:
    from train.sft import run_sft

    # the default settings (bf16 autocast, no checkpointing, LM head over the loss positions), one row a step
    cfg = SFTStageConfig(max_steps=2, gradient_accumulation_steps=1)
    s = run_sft(releases["sft"], cfg, tmp_path)
    assert s["steps"] == 2 and [x["step"] for x in s["losses"]] == [1, 2]
    assert all(math.isfinite(x["loss"]) and x["loss"] > 0 for x in s["losses"])
    lines = metric_lines(tmp_path)
    assert [x["step"] for x in lines if "loss" in x and "train_runtime" not in x] == [1, 2]
    assert any("train_runtime" in x for x in lines) and any("eval_loss" in x for x in lines)
    assert math.isfinite(s["eval"]["eval_loss"]) and s["dataset"]["eval_rows"] > 0
    # assistant-only loss: some, not all, tokens are trained on
    tokens = s["dataset"]["train_tokens"]
    assert 0 < tokens["loss_tokens"] < tokens["tokens"]
    saved = json.loads((tmp_path / "train_summary.json").read_text())
    assert saved["dataset"]["version"] == store.read_manifest(releases["sft"]).version
    assert saved["code_version"] and saved["config"]["max_steps"] == 2
    final = tmp_path / "final"
    assert (final / "model.safetensors").is_file() and (final / "chat_template.jinja").is_file()


def test_sft_refuses_a_max_length_that_cuts_every_assistant_turn(releases: dict[str, Path], tmp_path: Path) -> None:
    from train.sft import build_sft_trainer, hub_offline

    # the airline system prompt plus tool schemas is ~2300 tokens: 512 keeps no assistant token,
    # so every row would be dropped; refused (before the weights load) with the length needed
    with hub_offline(), pytest.raises(store.DatasetError, match=r"would drop (\d+) of \1 train rows.*at least \d+"):
        build_sft_trainer(releases["sft"], SFTStageConfig(max_length=512), tmp_path)


def test_an_unset_max_length_fits_the_longest_row_and_a_cut_is_warned(releases: dict[str, Path],
                                                                       caplog: pytest.LogCaptureFixture) -> None:
    from train.data import load_release, to_trl_sft
    from train.sft import (
        check_max_length,
        fitted_max_length,
        hub_offline,
        load_tokenizer,
        model_context,
        resolve_model,
    )

    with hub_offline():
        path = resolve_model("embedded")
        tok = load_tokenizer(path)
    splits = {"train": to_trl_sft(load_release(releases["sft"], "train"), tok)}
    assert model_context(path) == 8192 and model_context("/nonexistent") is None
    fit = check_max_length(releases["sft"], SFTStageConfig(), tok, splits, None, model_context(path))
    longest = fit["train"]["total_max"]
    assert fit["fitted"] and fit["max_length"] == fitted_max_length(longest, 8192)
    assert longest <= fit["max_length"] < longest + 256 and fit["max_length"] % 256 == 0
    assert fit["train"]["rows_truncated"] == 0 and not caplog.records
    # the model's positions cap the fit; the rows it cuts are counted and warned of
    with caplog.at_level("WARNING", logger="train.sft"):
        capped = check_max_length(releases["sft"], SFTStageConfig(), tok, splits, None, longest - 1)
    assert capped["max_length"] == longest - 1 and capped["train"]["rows_truncated"] >= 1
    assert "the model's" in caplog.text and "loses its last turns" in caplog.text
    assert "Only a model with more positions keeps them whole." in caplog.text
    caplog.clear()
    # a set max_length is kept, and a cut names the length that keeps every row whole
    with caplog.at_level("WARNING", logger="train.sft"):
        chosen = check_max_length(releases["sft"], SFTStageConfig(max_length=longest - 1), tok, splits, None, 8192)
    assert not chosen["fitted"] and chosen["max_length"] == longest - 1
    assert f"Set sft.max_length to {longest} to keep every row whole" in caplog.text


def test_assistant_only_loss_needs_generation_markers() -> None:
    import trl
    from transformers import AutoTokenizer

    from rollout.embedded import hub_offline, prepare_embedded_model
    from train.sft import check_generation_markers, use_chat_template

    with hub_offline():
        tok = AutoTokenizer.from_pretrained(prepare_embedded_model(), local_files_only=True)
    assert check_generation_markers(tok) == "template"  # ours: {% generation %} around assistant output
    # a template without markers that TRL does not know: a clear error
    tok.chat_template = "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
    with pytest.raises(ValueError, match="generation"):
        check_generation_markers(tok)
    # a template TRL 1.16 ships a training version of (Qwen2.5): SFTTrainer swaps it in
    use_chat_template(tok, str(Path(trl.__file__).parent / "chat_templates" / "qwen2_5.jinja"))
    assert check_generation_markers(tok) == "trl"
    with pytest.raises(FileNotFoundError):
        use_chat_template(tok, "/nonexistent/template.jinja")


@pytest.mark.slow
def test_sft_lora_packing_checkpoints_and_curves(releases: dict[str, Path], tiny_model: Path, tmp_path: Path,
                                                 metric_lines: MetricLines) -> None:
    from train.lineage import runs_on_release
    from train.sft import run_sft

    cfg = SFTStageConfig(model=str(tiny_model), max_steps=2, gradient_accumulation_steps=1, lora=True, lora_r=4,
                         packing=True, eval_steps=1, save_steps=1, save_total_limit=3, bf16=False,
                         learning_rate=1e-3)
    out = tmp_path / "train" / "sft-a"
    s = run_sft(releases["sft"], cfg, out)
    assert s["steps"] == 2 and len(s["losses"]) == 2 and all(math.isfinite(x["loss"]) for x in s["losses"])
    # evaluated during training (every step) and at the end, on the held-out split
    evals = [x for x in metric_lines(out) if "eval_loss" in x]
    assert [x["step"] for x in evals] == [1, 2, 2] and math.isfinite(s["eval"]["eval_loss"])
    assert [Path(c).name for c in s["checkpoints"]] == ["checkpoint-1", "checkpoint-2"]
    assert (out / "adapter" / "adapter_config.json").is_file() and (out / "final" / "model.safetensors").is_file()
    rows = (out / "curves.csv").read_text().splitlines()
    assert rows[0] == "step,loss,eval_loss,grad_norm,learning_rate" and len(rows) == 3
    # packing: fewer, longer rows than the release's train split
    assert s["dataset"]["train_tokens"]["rows"] <= s["dataset"]["train_rows"]
    [run] = runs_on_release(releases["sft"], tmp_path / "train")
    assert run["status"] == "done" and run["config"]["lora"] is True and run["final_loss"] == s["final_loss"]


def recovery_release(root: Path) -> Path:
    """An `sft_recovery` release of two recoveries (a mistyped id the tool rejected, then the
    right call and a reply), made by the release code."""
    from data.schema import RELEASE_SCHEMA_VERSION, SFT_RECOVERY_SCHEMA
    from tests.curation.test_release import configs, recovery_trajectory

    rows = configs(recovery_trajectory("r1"), recovery_trajectory("r2"))["sft_recovery"]
    with store.DatasetWriter(root, "sft_recovery", "sft_recovery", SFT_RECOVERY_SCHEMA, RELEASE_SCHEMA_VERSION) as w:
        w.write_rows(rows)
        return w.commit(store.Lineage())


def test_sft_on_an_sft_recovery_release_gives_its_failed_turns_no_loss(tiny_model: Path, tmp_path: Path) -> None:
    """SFTTrainer's labels over an `sft_recovery` release: the failed call (`mia_1X`) stays in
    the input, never in the loss; the recovery and the reply are trained. Without
    assistant-only loss, or with a template that ignores the mark (TRL's Qwen2.5 training
    template), training is refused before the weights load."""
    import trl

    from train.sft import build_sft_trainer, hub_offline

    path = recovery_release(tmp_path / "releases")
    cfg = SFTStageConfig(model=str(tiny_model), max_steps=1, per_device_train_batch_size=1,
                         gradient_checkpointing=False)
    with hub_offline():
        trainer, facts = build_sft_trainer(path, cfg, tmp_path / "run")
    tok = facts["tokenizer"]
    for ids, labels in zip(trainer.train_dataset["input_ids"], trainer.train_dataset["labels"], strict=True):
        trained = tok.decode([i for i, label in zip(ids, labels, strict=True) if label != -100])
        assert "mia_1X" in tok.decode(ids) and "mia_1X" not in trained
        assert '"user_id": "mia_1"' in trained and "Found you, Mia." in trained
    with hub_offline(), pytest.raises(store.DatasetError, match="2 failed assistant turns.*assistant_only_loss=false"):
        build_sft_trainer(path, cfg.model_copy(update={"assistant_only_loss": False}), tmp_path / "full")
    qwen = str(Path(trl.__file__).parent / "chat_templates" / "qwen2_5.jinja")
    with hub_offline(), pytest.raises(store.DatasetError, match="inside its \\{% generation %\\} blocks"):
        build_sft_trainer(path, cfg.model_copy(update={"chat_template_path": qwen}), tmp_path / "qwen")


def _loss_and_grads(trainer: Any, compute_loss: Callable[..., Any], batch: dict[str, Any]) -> tuple[Any, list[Any]]:
    model = trainer.model
    model.zero_grad()
    loss = compute_loss(trainer, model, dict(batch))
    loss.backward()
    return loss.detach(), [p.grad.clone() for p in model.parameters() if p.grad is not None]


@pytest.fixture(scope="module")
def tiny_trainer(releases: dict[str, Path], tiny_model: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, Any]:
    """An SFT trainer with the default settings on the tiny model (batch 2), and its facts."""
    from train.sft import build_sft_trainer, hub_offline

    cfg = SFTStageConfig(model=str(tiny_model), per_device_train_batch_size=2, bf16=False)
    with hub_offline():
        return build_sft_trainer(releases["sft"], cfg, tmp_path_factory.mktemp("tiny-sft"))


@pytest.mark.slow
def test_lm_head_on_loss_positions_keeps_loss_and_gradients(tiny_trainer: tuple[Any, Any],
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """The default SFT trainer projects only the loss positions through the LM head (TRL 1.16
    projects all of them off Triton devices): on a padded batch of two released rows' ends
    the loss and every gradient are TRL's own, and the head saw the loss positions alone."""
    import torch
    import trl.trainer.utils as trl_utils
    from trl import SFTTrainer

    trainer, _ = tiny_trainer
    assert SFTStageConfig().lm_head_loss_positions_only and type(trainer) is not SFTTrainer
    # each row's last 300 and 200 tokens (its last assistant turns): the whole rows' heads take minutes here
    ends = [{k: trainer.train_dataset[i][k][-n:] for k in ("input_ids", "labels")} for i, n in ((0, 300), (1, 200))]
    batch = trainer._prepare_inputs(trainer.data_collator(ends))
    assert (batch["attention_mask"] == 0).any()  # rows of different lengths: padding is scored too
    scored: list[int] = []
    real = trl_utils._ChunkedLogProbFunction

    class Spy:
        @staticmethod
        def apply(hidden: Any, *args: Any) -> Any:
            scored.append(hidden.shape[0])
            return real.apply(hidden, *args)

    monkeypatch.setattr(trl_utils, "_ChunkedLogProbFunction", Spy)
    every_loss, every_grads = _loss_and_grads(trainer, SFTTrainer.compute_loss, batch)
    kept_loss, kept_grads = _loss_and_grads(trainer, type(trainer).compute_loss, batch)
    loss_positions = int((batch["labels"][:, 1:] != -100).sum())
    assert scored == [batch["input_ids"].numel() - batch["input_ids"].shape[0], loss_positions]
    assert 0 < loss_positions < scored[0]
    torch.testing.assert_close(kept_loss, every_loss)
    assert len(kept_grads) == len(every_grads) > 0
    for a, b in zip(kept_grads, every_grads, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-7)
    assert trl_utils._use_triton(torch.device("cpu")) is False  # the switch is restored after each call


@pytest.mark.slow
def test_sft_trains_on_the_text_inference_renders_and_only_the_assistant_turns(
        releases: dict[str, Path], tiny_model: Path, tiny_trainer: tuple[Any, Any]) -> None:
    """What SFT trains on, token for token, is what the embedded backend feeds the model: at
    every assistant turn, the rendered prompt (`_Engine.render`: the inference template with
    the generation prompt) is a prefix of the row's training ids, and the tokens with loss are
    exactly the assistant turns that follow (their text and tool calls, through `<|im_end|>`).
    The embedded model trains with the template inference uses."""
    from types import SimpleNamespace

    from rollout.embedded_engine import _Engine
    from rollout.prepare import folder_template
    from train.data import clean_messages, load_release, to_trl_sft
    from train.sft import hub_offline, load_tokenizer, resolve_model

    with hub_offline():
        assert load_tokenizer(resolve_model("embedded")).chat_template == folder_template(None)
    trainer, facts = tiny_trainer
    tok = facts["tokenizer"]
    assert tok.chat_template == folder_template(tiny_model)
    engine = SimpleNamespace(tokenizer=tok)
    rows = to_trl_sft(load_release(releases["sft"], "train"), tok)
    assert len(rows) == len(trainer.train_dataset) > 0
    for row, example in zip(rows, trainer.train_dataset, strict=True):
        ids, labels = example["input_ids"], example["labels"]
        messages = clean_messages(row["messages"])
        expected: list[int] = []
        for k, m in enumerate(messages):
            if m["role"] != "assistant":
                continue
            prompt = _Engine.render(engine, SimpleNamespace(messages=messages[:k], tools=row["tools"]))
            assert ids[:len(prompt)] == prompt, f"turn {k}: the training ids diverge from the inference prompt"
            turn = tok(tok.apply_chat_template(messages[:k + 1], tools=row["tools"], tokenize=False),
                       add_special_tokens=False)["input_ids"]
            assert ids[:len(turn)] == turn and tok.decode(turn[-2:]) == "<|im_end|>\n"
            expected += range(len(prompt), len(turn) - 1)  # the turn through <|im_end|>, not the "\n" after it
        assert [i for i, label in enumerate(labels) if label != -100] == expected
        assert all(labels[i] == ids[i] for i in expected)
