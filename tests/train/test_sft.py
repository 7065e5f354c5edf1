"""Supervised fine-tuning (`train.sft`): real SFT steps on a released dataset (slow: the
embedded SmolLM2, bf16 autocast, batch 1, about 1.5 minutes on 2 CPU cores; LoRA, packing
and checkpoints on the tiny model), the max-length check and the template's markers."""

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

    cfg = SFTStageConfig(max_steps=2, per_device_train_batch_size=1, bf16=True, gradient_checkpointing=False)
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

    cfg = SFTStageConfig(model=str(tiny_model), max_steps=2, per_device_train_batch_size=1, lora=True, lora_r=4,
                         packing=True, eval_steps=1, save_steps=1, save_total_limit=3, bf16=False,
                         gradient_checkpointing=False, learning_rate=1e-3)
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
