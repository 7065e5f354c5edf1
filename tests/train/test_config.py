"""The training stage configs (`train.config`): `extra` keys checked against TRL's configs,
and the shipped CPU config's GRPO episode budget."""

from __future__ import annotations

import pytest

from data.records import Task
from envs.registry import get_world
from tests.paths import ROOT
from train.config import GRPOStageConfig, SFTStageConfig
from train.release_card import embedded_tokenizer


def test_extra_keys_are_checked_against_trls_configs_when_the_config_loads() -> None:
    """A misspelled `extra` key is an error naming it (and the field it resembles) at load
    time; TRL's own fields pass through, and no extra means no check (trl not imported)."""
    pytest.importorskip("trl")
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match=r"'lerning_rate' \(did you mean 'learning_rate'\?\)") as err:
        SFTStageConfig(extra={"lerning_rate": 1e-4})
    assert "SFTConfig" in str(err.value)
    with pytest.raises(ValidationError, match=r"GRPOConfig: 'num_generation' \(did you mean 'num_generations'\?\)"):
        GRPOStageConfig.model_validate({"extra": {"num_generation": 4}})
    assert SFTStageConfig(extra={"completion_only_loss": True, "warmup_steps": 2}).extra["warmup_steps"] == 2
    assert GRPOStageConfig(extra={"scale_rewards": "group"}).extra == {"scale_rewards": "group"}
    assert SFTStageConfig().extra == {} and GRPOStageConfig().extra == {}


def test_extra_keys_are_not_checked_without_trl(monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    from train.config import trl_config_fields

    monkeypatch.setitem(sys.modules, "trl", None)  # `import trl` raises ImportError
    trl_config_fields.cache_clear()
    try:
        assert SFTStageConfig(extra={"lerning_rate": 1e-4}).extra == {"lerning_rate": 1e-4}
        assert GRPOStageConfig(extra={"anything": 1}).extra == {"anything": 1}
    finally:
        trl_config_fields.cache_clear()


def test_cpu_config_validates_and_its_episode_budget_holds_a_reference_conversation(tasks: list[Task]) -> None:
    from pipelines.config import load_config
    from tests.train.test_conversation import _agent_turns, _opening, _row, _scripted
    from train.config import GRPOStageConfig
    from train.conversation import ConversationRollout

    cfg = load_config(ROOT / "configs" / "train-cpu.yaml")
    assert cfg.sft.model == cfg.grpo.model == "embedded" and cfg.sft.use_cpu and cfg.grpo.use_cpu
    assert cfg.grpo.multi_turn and cfg.grpo.per_device_train_batch_size % cfg.grpo.num_generations == 0
    assert cfg.grpo.user_channel == "text"
    assert GRPOStageConfig().max_completion_length == cfg.grpo.max_completion_length
    # The episode budget counts tool results and the user's replies too: it must hold each
    # task's whole reference conversation, played in plain text. 48 tokens, an old default,
    # cut every episode mid tool loop, so every GRPO group scored 0.
    tok = embedded_tokenizer()
    world = get_world("airline")
    rows = [_row(t, world) for t in tasks]
    generate, _ = _scripted(tok, {_opening(r): _agent_turns(t) for r, t in zip(rows, tasks, strict=True)})
    played = ConversationRollout(["airline"], max_turns=cfg.grpo.max_turns, turn_tokens=cfg.grpo.turn_tokens).play(
        rows, tok, generate, [tok.eos_token_id], cfg.grpo.max_completion_length)
    assert all(e.env.closing == "user_stop" for e in played)
    assert max(len(e.completion_ids) for e in played) > 1000  # the longest holds several lookups and a write


def test_sft_defaults_are_the_measured_cpu_settings() -> None:
    """SFT's defaults are bench/sft_speed.py's `new` arm (docs/training.md, "SFT speed"): two
    rows a step as before, in one batch whose shared head runs once (the rows one at a time
    after it), no checkpointing, the LM head over loss positions only; GRPO keeps the shared
    stage defaults."""
    sft, grpo = SFTStageConfig(), GRPOStageConfig()
    assert sft.per_device_train_batch_size * sft.gradient_accumulation_steps == 2
    assert sft.per_device_train_batch_size == 2 and sft.shared_head
    assert not sft.gradient_checkpointing and sft.lm_head_loss_positions_only
    assert grpo.per_device_train_batch_size == 2 and grpo.gradient_accumulation_steps == 1 and grpo.gradient_checkpointing
    args = sft.trainer_args(ROOT)
    assert (args["per_device_train_batch_size"], args["gradient_accumulation_steps"], args["gradient_checkpointing"]) == (2, 1, False)
