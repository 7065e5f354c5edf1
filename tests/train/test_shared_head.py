"""SFT steps that run the rows' shared head once (`train.shared_head`): the grouping and the
cut (fast), and a step's loss, gradients and logged metrics equal to TRL's step on whole
released rows (slow: the tiny model)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from train.config import SFTStageConfig
from train.shared_head import (
    HeadGroupedSampler,
    Row,
    batch_rows,
    grouped_order,
    head_groups,
    head_key,
    head_length,
)


def test_head_length_stops_at_the_first_difference_and_before_the_first_label() -> None:
    a = Row([1, 2, 3, 4, 5, 6], [-100, -100, -100, -100, 5, 6])
    b = Row([1, 2, 3, 9, 5, 6], [-100, -100, -100, -100, -100, 6])
    c = Row([1, 2, 3, 4, 5, 7], [-100, -100, 3, 4, 5, 7])
    assert head_length([a, b]) == 3  # they differ at position 3
    assert head_length([a, c]) == 2  # c's first label is at 2: the token before it stays in the rest
    assert head_length([a, a]) == 4  # identical rows: up to a's first label
    assert head_length([Row([1, 2], [-100, -100]), Row([1, 2], [-100, -100])]) == 1  # one token left to run


def test_head_groups_join_rows_sharing_enough_of_their_opening() -> None:
    system_a, system_b = list(range(100)), list(range(1000, 1100))
    rows = [Row(system_a + [7, 8], [-100] * 100 + [7, 8]), Row(system_b + [9], [-100] * 100 + [9]),
            Row(system_a + [5, 6, 7], [-100] * 101 + [6, 7]), Row(list(range(10)) + [1], [-100] * 10 + [1])]
    groups = head_groups(rows, min_head=64)
    assert [([rows.index(r) for r in g], head) for g, head in groups] == [([0, 2], 100), ([1], 0), ([3], 0)]
    assert [len(g) for g, _ in head_groups(rows, min_head=101)] == [1, 1, 1, 1]


def test_grouped_order_batches_rows_that_open_alike_and_keeps_every_row_once() -> None:
    keys = ["a"] * 7 + ["b"] * 4 + ["c"]
    order = grouped_order(keys, 2, seed=3)
    assert sorted(order) == list(range(12))
    batches = [order[i:i + 2] for i in range(0, 12, 2)]
    alike = [b for b in batches if len({keys[i] for i in b}) == 1]
    assert len(alike) == 5  # a: 3 batches and one left over, b: 2, c: left over
    assert order == grouped_order(keys, 2, seed=3) and order != grouped_order(keys, 2, seed=4)
    sampler = HeadGroupedSampler(keys, 2, seed=3)
    first = list(sampler)
    sampler.set_epoch(1)
    assert len(sampler) == 12 and sorted(sampler) == sorted(first) and list(sampler) != first


def test_head_key_is_the_opening_before_the_first_label() -> None:
    assert head_key([1, 2, 3, 4], [-100, -100, 3, 4]) == (1, 2)
    assert head_key(list(range(2000)), [-100] * 2000)[-1] == 511


def test_batch_rows_strip_right_padding_and_refuse_any_other() -> None:
    torch = pytest.importorskip("torch")
    ids = torch.tensor([[5, 6, 7, 0], [5, 6, 0, 0]])
    labels = torch.tensor([[-100, 6, 7, -100], [-100, 6, -100, -100]])
    assert batch_rows(ids, labels, torch.tensor([[1, 1, 1, 0], [1, 1, 0, 0]])) == [
        Row([5, 6, 7], [-100, 6, 7]), Row([5, 6], [-100, 6])]
    assert batch_rows(ids, labels, torch.tensor([[1, 1, 1, 0], [0, 1, 1, 0]])) is None  # left padding


def _step(trainer: Any, step: Any, batch: dict[str, Any], items: Any) -> tuple[float, list[Any]]:
    model = trainer.model
    model.zero_grad()
    loss = step(trainer, model, dict(batch), items)
    return float(loss), [p.grad.clone() for p in model.parameters() if p.grad is not None]


@pytest.mark.slow
def test_a_shared_head_step_is_trls_step(releases: dict[str, Path], tiny_model: Path, tmp_path: Path) -> None:
    """Three whole released rows, two opening with the same system prompt and tool schemas and
    one whose opening was changed: the step runs the shared head once, the changed row whole,
    and gives TRL's loss and gradients (with and without a `num_items_in_batch`); the
    token-accuracy metric is logged as TRL logs it."""
    import torch
    from trl import SFTTrainer

    from train.sft import build_sft_trainer, hub_offline

    cfg = SFTStageConfig(model=str(tiny_model), per_device_train_batch_size=3, bf16=False, eval_split="none")
    assert cfg.shared_head
    with hub_offline():
        trainer, _ = build_sft_trainer(releases["sft"], cfg, tmp_path)
    trainer.current_gradient_accumulation_steps = 1  # set by the training loop
    rows = [dict(trainer.train_dataset[i]) for i in range(3)]
    rows[2] = {**rows[2], "input_ids": [rows[2]["input_ids"][0] + 1, *rows[2]["input_ids"][1:]]}
    batch = trainer._prepare_inputs(trainer.data_collator([{k: r[k] for k in ("input_ids", "labels")} for r in rows]))
    assert (batch["attention_mask"] == 0).any()
    groups = head_groups(batch_rows(batch["input_ids"], batch["labels"], batch["attention_mask"]))
    assert [len(g) for g, _ in groups] == [2, 1] and groups[0][1] > 1000 and groups[1][1] == 0

    calls: list[int] = []
    forward = trainer.model.forward

    def counting(*args: Any, **kwargs: Any) -> Any:
        calls.append(int(kwargs["input_ids"].numel()))
        return forward(*args, **kwargs)

    for items in (None, torch.tensor(5000)):
        trl_loss, trl_grads = _step(trainer, SFTTrainer.training_step, batch, items)
        trainer.model.forward = counting
        try:
            calls.clear()
            shared_loss, shared_grads = _step(trainer, type(trainer).training_step, batch, items)
        finally:
            trainer.model.forward = forward
        head = groups[0][1]
        lengths = [int(n) for n in batch["attention_mask"].sum(1)]
        assert calls == [head, lengths[0] - head, lengths[1] - head, lengths[2]]  # the head ran once
        assert shared_loss == pytest.approx(trl_loss, rel=1e-5)
        assert len(shared_grads) == len(trl_grads) > 0
        for a, b in zip(shared_grads, trl_grads, strict=True):
            torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-6)
    accuracy = trainer._metrics["train"]["mean_token_accuracy"]
    assert len(accuracy) >= 2 and accuracy[-1] == pytest.approx(accuracy[-2], abs=1e-6)
