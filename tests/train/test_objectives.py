"""The methods.md §5 objective options (`train.objectives`): success weighting, the
zero-variance filter and entropy-scaled clipping, as pure functions and applied in real TRL
GRPO steps on the tiny model (slow: on CPU a step costs tens of seconds)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest

from train.config import GRPOStageConfig
from train.objectives import (
    ObjectiveOptions,
    entropy_epsilon_high,
    success_weights,
    zero_variance_groups,
)


def test_success_weights_amplify_rare_outcomes() -> None:
    import torch

    rewards = torch.tensor([1.0, 0.0, 0.0, 0.0, 1.0, 1.0, 1.0, 0.0])  # groups of 4: p = 0.25, 0.75
    adv = rewards - rewards.view(-1, 4).mean(1).repeat_interleave(4)
    w = success_weights(rewards, adv, 4, alpha=1.0)
    assert w.tolist() == pytest.approx([1.75, 1.25, 1.25, 1.25, 1.25, 1.25, 1.25, 1.75])
    # zero advantages keep weight 1; alpha 0 is the identity
    assert success_weights(torch.ones(4), torch.zeros(4), 2, 2.0).tolist() == [1.0] * 4
    assert success_weights(rewards, adv, 4, 0.0).tolist() == [1.0] * 8
    with pytest.raises(ValueError):
        success_weights(rewards, adv, 3, 1.0)


def test_zero_variance_groups_and_entropy_clip_bounds() -> None:
    import torch

    flat = zero_variance_groups(torch.tensor([0.5, 0.5, 0.0, 1.0, float("nan"), float("nan")]), 2)
    assert flat.tolist() == [True, True, False, False, True, True]
    v = 49152
    eps = entropy_epsilon_high(torch.tensor([[0.0, math.log(v), 100.0]]), 0.2, 1.0, v)
    assert eps.tolist()[0] == pytest.approx([0.2, 0.4, 0.4])  # clamped at ln V
    with pytest.raises(ValueError):
        entropy_epsilon_high(torch.zeros(1), 0.2, 1.0, 1)
    assert not ObjectiveOptions().active and ObjectiveOptions(entropy_clip_beta=0.5).active


def _text_rows(n: int) -> Any:
    from datasets import Dataset

    return Dataset.from_list([{"prompt": f"Say something short about {w}.", "task_id": str(i)}
                              for i, w in enumerate(["cats", "dogs", "rain", "tea"][:n])])


def _run_text_grpo(tiny_model: Path, out: Path, reward: Any, **objective: Any) -> Any:
    from train.grpo import grpo_steps

    cfg = GRPOStageConfig(model=str(tiny_model), max_steps=1, per_device_train_batch_size=4, num_generations=2,
                          max_completion_length=6, bf16=False, gradient_checkpointing=False, multi_turn=False,
                          objective=ObjectiveOptions(**objective), **({"num_iterations": 2}
                                                                      if objective.get("entropy_clip_beta") else {}))
    trainer, *_ = grpo_steps(lambda tok: _text_rows(2), [reward], cfg, out)
    return [h for h in trainer.state.log_history if "loss" in h and "train_runtime" not in h]


@pytest.mark.slow
def test_trl_gives_zero_variance_groups_no_advantage_and_the_filter_drops_them(tiny_model: Path,
                                                                               tmp_path: Path) -> None:
    def constant(completions: list[Any], **kw: Any) -> list[float]:
        return [0.5] * len(completions)

    [plain] = _run_text_grpo(tiny_model, tmp_path / "plain", constant)
    # TRL's own behaviour: every group has zero reward variance -> advantage 0 -> loss 0
    assert plain["frac_reward_zero_std"] == 1.0 and plain["loss"] == 0.0
    [filtered] = _run_text_grpo(tiny_model, tmp_path / "filtered", constant, filter_zero_variance=True)
    assert filtered["filter/zero_variance_groups"] == 1.0 and filtered["loss"] == 0.0
    # nothing left to learn from: the policy's forward and backward are skipped, the gradient is 0
    assert filtered["filter/loss_skipped"] == 1.0 and filtered["grad_norm"] == 0.0


@pytest.mark.slow
def test_success_weighting_and_entropy_clipping_are_applied(tiny_model: Path, tmp_path: Path) -> None:
    def alternating(completions: list[Any], **kw: Any) -> list[float]:
        return [float(i % 2 == 0) for i in range(len(completions))]  # every group: one success, one failure

    logs = _run_text_grpo(tiny_model, tmp_path / "w", alternating, success_weighting=1.0, filter_zero_variance=True)
    assert logs[0]["advantage/success_weight_mean"] == pytest.approx(1.5)  # p = 0.5: 1 + 1·0.5 both ways
    assert logs[0]["filter/loss_skipped"] == 0.0  # groups with variance: the loss is computed
    assert logs[0]["frac_reward_zero_std"] == 0.0 and logs[0]["grad_norm"] > 0.0

    logs = _run_text_grpo(tiny_model, tmp_path / "e", alternating, entropy_clip_beta=1.0)
    eps = [h["clip/epsilon_high_mean"] for h in logs]
    assert eps and all(0.2 < e <= 0.4 for e in eps)
