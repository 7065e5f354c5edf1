"""Supervised fine-tuning on an `sft` release with TRL's `SFTTrainer`.

`run_sft` writes into `out_dir`:

- `metrics.jsonl`: one JSON line per trainer log (every optimizer step: `loss`,
  `grad_norm`, `learning_rate`, ...; then eval and the final train summary line);
- `train_summary.json`: steps, losses, runtime, dataset path + manifest version, config,
  code version, token statistics;
- `final/`: the trained model and tokenizer (with LoRA: the merged model, so it loads like
  any model; the adapter alone goes to `adapter/`);
- `checkpoints/checkpoint-N/` every `save_steps` steps (when set);
- `curves.csv` / `curves.png`: loss, eval loss, learning rate per step;
- `run.json`: lineage (release name, version and checksums, config, code version; see
  `train.lineage`).

The shared plumbing (`resolve_model`, `hub_offline`, `metrics_callback`, `write_summary`) is
used by `train.grpo` too. torch, transformers, trl, peft and datasets are imported inside
functions.
"""

from __future__ import annotations

import contextlib
import json
import logging
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from data import store
from rollout.embedded import hub_offline
from train.config import SFTStageConfig, TrainerStageConfig
from train.curves import write_curves
from train.data import is_sft_kind, load_release, loss_marked_turns, release_files, to_trl_sft
from train.lineage import write_run_record

if TYPE_CHECKING:
    from datasets import Dataset
    from transformers import TrainerCallback

log = logging.getLogger(__name__)

METRICS_FILE = "metrics.jsonl"
SUMMARY_FILE = "train_summary.json"


def resolve_model(model: str) -> str:
    """`"embedded"` → the prepared SmolLM2 folder (made once, see `rollout.embedded`); else as given."""
    if model == "embedded":
        from rollout.embedded import prepare_embedded_model

        return str(prepare_embedded_model())
    return str(Path(model).expanduser()) if Path(model).expanduser().exists() else model


def load_model(name_or_path: str) -> tuple[Any, Any]:
    """Model with fp32 weights and its tokenizer, from local files only.

    fp32 master weights always: the embedded folder is bf16, and AdamW updates at
    learning rates like 1e-6 vanish in bf16 weights. `bf16=True` in a stage config means
    mixed precision (autocast), which is ~2.3x faster on this CPU (avx512_bf16).
    """
    tokenizer = load_tokenizer(name_or_path)
    return load_weights(name_or_path), tokenizer


def load_tokenizer(name_or_path: str) -> Any:
    """The tokenizer of a model, from local files only (pad token: eos when it has none)."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(name_or_path, local_files_only=True)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def load_weights(name_or_path: str) -> Any:
    """The causal LM with fp32 weights, from local files only (see `load_model`)."""
    import torch
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(name_or_path, dtype=torch.float32, local_files_only=True)


def use_chat_template(tokenizer: Any, path: str | None) -> None:
    """Replace the tokenizer's chat template with the one in file `path` (when given)."""
    if path is None:
        return
    p = Path(path).expanduser()
    if not p.is_file():
        raise FileNotFoundError(f"chat template {p} does not exist")
    tokenizer.chat_template = p.read_text(encoding="utf-8")


def check_generation_markers(tokenizer: Any) -> str:
    """How assistant-only loss will find the assistant tokens, or `ValueError`.

    Returns "template" when the chat template has `{% generation %}` markers, "trl" when
    it has none but TRL 1.16 ships a training version of it (`get_training_chat_template`,
    which SFTTrainer then swaps in: Qwen, Llama 3, Gemma, Phi, ...). Any other template
    needs `sft.chat_template_path` (see docs/training.md).
    """
    from trl.chat_template_utils import get_training_chat_template, has_generation_markers

    template = tokenizer.chat_template
    if template and has_generation_markers(template):
        messages = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]
        out = tokenizer.apply_chat_template(messages, tokenize=True, return_dict=True,
                                            return_assistant_tokens_mask=True)
        if not any(out.get("assistant_masks") or []):
            raise ValueError("the chat template's {% generation %} blocks mark no assistant token")
        return "template"
    try:
        patched = template and get_training_chat_template(tokenizer)
    except (ValueError, TypeError):
        patched = None
    if not patched:
        raise ValueError(
            "assistant_only_loss=True needs a chat template with {% generation %} ... {% endgeneration %} "
            "around assistant output; this model's template has none and TRL has no training version of it. "
            "Set sft.chat_template_path to a template that has them (docs/training.md) or "
            "sft.assistant_only_loss=false.")
    return "trl"


def check_loss_marks(dataset_path: Path | str, cfg: SFTStageConfig, tokenizer: Any, marked: int,
                     chat_template: str | None = None) -> None:
    """`DatasetError` unless the loss leaves out the `marked` turns (``train: false``: an
    `sft_recovery` release's failed turns): that needs assistant-only loss and a chat
    template whose `{% generation %}` blocks skip a marked message (ours does; TRL's training
    templates do not). Probed with TRL's own call (`return_assistant_tokens_mask`) on a
    conversation whose failed turn must get no loss token while the recovery gets some."""
    if not marked:
        return
    why = None
    if not cfg.assistant_only_loss:
        why = "sft.assistant_only_loss=false would train every token, the failed turns' too"
    else:
        probe = [{"role": "user", "content": "Look up u1."},
                 {"role": "assistant", "content": "Looking u1 up, wrongly.", "train": False},
                 {"role": "user", "content": "That failed."},
                 {"role": "assistant", "content": "Found u1."}]
        masks = [tokenizer.apply_chat_template(msgs, tokenize=True, return_dict=True, chat_template=chat_template,
                                               return_assistant_tokens_mask=True)["assistant_masks"]
                 for msgs in (probe[:2], probe)]
        if any(masks[0]) or not any(masks[1]):
            why = ("the chat template puts assistant messages marked `train: false` inside its {% generation %} "
                   "blocks, so their tokens would carry loss")
    if why:
        raise store.DatasetError(
            f"{dataset_path}: {marked} failed assistant turns are marked `train: false`, but {why}. Train with "
            "sft.assistant_only_loss=true and a template that renders a marked message outside {% generation %} "
            "(rollout/templates/smollm2_tools.jinja does; sft.chat_template_path), or train on the `sft` config.")


def training_template(tokenizer: Any) -> str | None:
    """The template SFTTrainer swaps in for assistant-only loss (TRL's training version of the
    tokenizer's), or None when it keeps the tokenizer's own."""
    from trl.chat_template_utils import get_training_chat_template

    try:
        return get_training_chat_template(tokenizer)
    except (ValueError, TypeError):
        return None


def check_renders_tool_use(dataset_path: Path | str, tokenizer: Any, ds: Any, chat_template: str | None = None) -> None:
    """`DatasetError` when the chat template leaves the rows' tool schemas or tool calls out
    of the text (SmolLM2's own template does: training would see conversations with the
    calls cut out, silently). Checked on the first row that has both: the text must change
    when the tools, or the assistant turns' calls, are removed."""

    def render(messages: list[dict[str, Any]], tools: Any) -> str:
        return tokenizer.apply_chat_template(messages, tools=tools, chat_template=chat_template, tokenize=False)

    for row in ds:
        messages, tools = row["messages"], row.get("tools") or None
        if not tools or not any(m.get("tool_calls") for m in messages):
            continue
        first = next(i for i, m in enumerate(messages) if m["role"] == "assistant")
        no_calls = [{**m, "tool_calls": None, "content": m.get("content") or ""} if m.get("tool_calls") else m
                    for m in messages]
        dropped = [what for what, same in (
            ("tool schemas", render(messages[:first], tools) == render(messages[:first], None)),
            ("assistant tool calls", render(messages, None) == render(no_calls, None))) if same]
        if dropped:
            raise store.DatasetError(
                f"{dataset_path}: the chat template leaves the {' and '.join(dropped)} out of the text, so "
                "training would see the conversations without them. Use a template that renders `tools` and "
                "assistant `tool_calls` (sft.chat_template_path; docs/training.md, 'Bringing a template').")
        return


FIT_STEP = 256  # a fitted max_length is the longest row rounded up to this


def model_context(model_path: str) -> int | None:
    """The positions the model at `model_path` takes (its text config's `max_position_embeddings`
    or `n_positions`), from local files only; None when unknown (e.g. a Hub id not on disk)."""
    from transformers import AutoConfig

    try:
        config = AutoConfig.from_pretrained(model_path, local_files_only=True).get_text_config()
    except (OSError, ValueError):
        return None
    for field in ("max_position_embeddings", "n_positions"):
        value = getattr(config, field, None)
        if isinstance(value, int) and value > 0:
            return value
    return None


def fitted_max_length(longest: int, context: int | None) -> int:
    """The longest row rounded up to `FIT_STEP`, no more than the model's `context`."""
    fit = -(-longest // FIT_STEP) * FIT_STEP
    return min(fit, context) if context else fit


def check_max_length(dataset_path: Path | str, cfg: SFTStageConfig, tokenizer: Any, splits: dict[str, Any],
                     chat_template: str | None = None, context: int | None = None) -> dict[str, Any]:
    """Token lengths of the rows SFTTrainer will see (before the first assistant turn and in
    total, with the template it will use) and the `max_length` to train with: `cfg.max_length`,
    or when that is None the longest row (`fitted_max_length`, at most the model's `context`).

    `DatasetError` when, with assistant-only loss, the length would leave rows without an
    assistant token (TRL drops them, or trains on nothing), naming the length needed. Rows it
    cuts are counted (`rows_truncated`) and logged as a warning: a cut row loses its last turns.
    """
    from train.release_card import row_lengths

    measured = {name: [row_lengths(tokenizer, row, "sft", chat_template) for row in ds]
                for name, ds in splits.items() if ds is not None}
    longest = max((t for pairs in measured.values() for _, t in pairs), default=1)
    limit = cfg.max_length or fitted_max_length(longest, context)
    out: dict[str, Any] = {"max_length": limit, "fitted": cfg.max_length is None}
    for name, pairs in measured.items():
        before, total = [p[0] for p in pairs], [p[1] for p in pairs]
        dropped = sum(b >= limit for b in before)
        cut = sum(t > limit for t in total)
        out[name] = {"rows": len(pairs), "before_first_assistant_max": max(before), "total_max": max(total),
                     "rows_truncated": cut, "rows_dropped": dropped if cfg.assistant_only_loss else 0}
        if cfg.assistant_only_loss and dropped:
            raise store.DatasetError(
                f"{dataset_path}: sft.max_length={limit} would drop {dropped} of {len(pairs)} {name} rows: "
                f"their first assistant turn starts at token {min(b for b in before if b >= limit)}"
                f"-{max(before)} with this tokenizer and template, and TRL drops a row left without assistant "
                f"tokens. Set sft.max_length to at least {max(before) + 1} ({max(total)} keeps every row whole).")
        if cut:
            why = (f"sft.max_length={limit}" if cfg.max_length
                   else f"the model's {context} positions (sft.max_length unset fits the longest row)")
            log.warning("%s: %s cuts %d of %d %s rows (longest %d tokens); a cut row loses its last turns. "
                        "%s", dataset_path, why, cut, len(pairs), name, max(total),
                        f"Set sft.max_length to {max(total)} to keep every row whole." if cfg.max_length
                        else "Only a model with more positions keeps them whole.")
    return out


def metrics_callback(path: Path) -> TrainerCallback:
    """A `TrainerCallback` appending every log dict, with `step` and `epoch`, to `path`."""
    from transformers import TrainerCallback

    class _JsonlMetrics(TrainerCallback):
        def __init__(self) -> None:
            self.path = path
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self.path.write_text("")
            self.started = time.monotonic()

        def on_log(self, args: Any, state: Any, control: Any, logs: dict | None = None, **kw: Any) -> None:
            if not logs or not state.is_world_process_zero:
                return
            row = {"step": state.global_step, "epoch": state.epoch,
                   "elapsed_s": round(time.monotonic() - self.started, 3), **logs}
            with self.path.open("a") as f:
                f.write(json.dumps(row, default=_jsonable) + "\n")

    return _JsonlMetrics()


def _jsonable(value: Any) -> Any:
    try:
        return float(value)
    except (TypeError, ValueError):
        return str(value)


def step_logs(log_history: list[dict[str, Any]], key: str) -> list[dict[str, Any]]:
    """`[{"step", key}]` for each per-step log that holds `key` (the final summary line excluded)."""
    return [{"step": h["step"], key: h[key]} for h in log_history
            if key in h and "train_runtime" not in h]


def write_summary(out: Path, summary: dict[str, Any], cfg: TrainerStageConfig, final: Path,
                  curves: Any) -> dict[str, Any]:
    """Write and return a stage's summary: `summary`, then what every stage's ends with (its
    config, the code version, the final model, the checkpoints, the metrics file, `curves`)."""
    summary = {
        **summary,
        "config": cfg.model_dump(),
        "code_version": store.code_version(),
        "final_model": str(final),
        "checkpoints": sorted(str(p) for p in (out / "checkpoints").glob("checkpoint-*")),
        "metrics_file": str(out / METRICS_FILE),
        "curves": curves,
    }
    (out / SUMMARY_FILE).write_text(json.dumps(summary, indent=2, default=_jsonable) + "\n")
    return summary


def save_final(trainer: Any, tokenizer: Any, out: Path, lora: bool) -> Path:
    """Save the trained model to `out/final` (merged when LoRA; adapter to `out/adapter`)."""
    final = out / "final"
    model = trainer.model
    if lora:
        model.save_pretrained(out / "adapter")
        model = model.merge_and_unload()
    model.save_pretrained(final)
    tokenizer.save_pretrained(final)
    return final


def token_stats(ds: Dataset | None) -> dict[str, Any]:
    """Rows, tokens and loss tokens of a dataset as SFTTrainer prepared it (truncated, maybe packed)."""
    if ds is None:
        return {"rows": 0}
    lengths = [len(ids) for ids in ds["input_ids"]]
    loss_tokens = sum(sum(t != -100 for t in labels) for labels in ds["labels"]) if "labels" in ds.column_names else None
    return {"rows": len(lengths), "tokens": sum(lengths), "tokens_max": max(lengths, default=0),
            "loss_tokens": loss_tokens}


@contextlib.contextmanager
def lm_head_on_loss_positions() -> Iterator[None]:
    """Within the block, TRL's fused LM head (`trl.trainer.utils.add_fused_lm_head`) projects
    only the positions whose label is kept, on every device.

    TRL 1.16 does that on Triton devices only; elsewhere it projects every position through
    the vocabulary (fixed tile shapes, for compilers such as Neuron's) and zeroes the masked
    ones afterwards. The per-token log-probabilities, entropy and accuracy of the kept
    positions are the same either way (`tests/train/test_sft.py` checks loss and gradients);
    under assistant-only loss on agent rows, fewer than 10% of the positions are kept. The
    kernel itself still picks its own CPU or Triton path. `RuntimeError` when TRL no longer
    has the switch this relies on.
    """
    import trl.trainer.utils as trl_utils

    original = getattr(trl_utils, "_use_triton", None)
    if original is None:
        raise RuntimeError("trl.trainer.utils._use_triton is gone: set sft.lm_head_loss_positions_only=false")
    trl_utils._use_triton = lambda device: True  # type: ignore[attr-defined]  # read as "score compactly"
    try:
        yield
    finally:
        trl_utils._use_triton = original  # type: ignore[attr-defined]


def sft_trainer_class(loss_positions_only: bool, shared_head: bool = False) -> type:
    """TRL's `SFTTrainer`, or a subclass: with `loss_positions_only` its loss runs inside
    `lm_head_on_loss_positions`; with `shared_head` a training step runs the head its rows
    share once (`train.shared_head`). Neither changes the loss or the gradient."""
    from trl import SFTTrainer

    if not loss_positions_only and not shared_head:
        return SFTTrainer

    def head_scope() -> contextlib.AbstractContextManager[None]:
        return lm_head_on_loss_positions() if loss_positions_only else contextlib.nullcontext()

    class FasterSFTTrainer(SFTTrainer):
        """`SFTTrainer` scoring only the loss positions through the LM head and/or running a
        step's shared head once (the same loss and gradient)."""

        def compute_loss(self, model: Any, inputs: Any, return_outputs: bool = False,
                         num_items_in_batch: Any = None) -> Any:
            with head_scope():
                return super().compute_loss(model, inputs, return_outputs=return_outputs,
                                            num_items_in_batch=num_items_in_batch)

        def training_step(self, model: Any, inputs: Any, num_items_in_batch: Any = None) -> Any:
            rows = self._shared_head_rows(inputs) if shared_head else None
            if rows is None:
                return super().training_step(model, inputs, num_items_in_batch)
            return self._shared_head_step(model, inputs, rows, num_items_in_batch)

        def _get_train_sampler(self, train_dataset: Any = None) -> Any:
            """With `shared_head`: batches of rows that open alike (`train.shared_head.grouped_order`)."""
            from train.shared_head import HeadGroupedSampler, head_key

            dataset = train_dataset if train_dataset is not None else self.train_dataset
            rows_per_batch = self.args.per_device_train_batch_size
            if not shared_head or rows_per_batch < 2 or dataset is None or "labels" not in dataset.column_names:
                return super()._get_train_sampler(train_dataset)
            keys = [head_key(r["input_ids"], r["labels"]) for r in dataset]
            return HeadGroupedSampler(keys, rows_per_batch, self.args.seed)

        def _shared_head_rows(self, inputs: Any) -> list[Any] | None:
            """The batch's rows, when the step can run their shared head once: at least two
            rows of plain token-level loss, right-padded, not packed. Else None (TRL's step)."""
            from train.shared_head import batch_rows

            plain = (self.compute_loss_func is None and self.label_smoother is None
                     and self.args.loss_type == "nll" and not self.aux_loss_enabled)
            if not plain or "position_ids" in inputs or "attention_mask" not in inputs or "labels" not in inputs:
                return None
            if inputs["input_ids"].shape[0] < 2:
                return None
            return batch_rows(inputs["input_ids"], inputs["labels"], inputs["attention_mask"])

        def _loss_scale(self, rows: list[Any], num_items_in_batch: Any) -> float:
            """The factor TRL's `compute_loss` and the Trainer's step put on the summed token
            loss: 1 / the step's loss tokens, and 1 / accumulation when not normalised by them."""
            count = (float(num_items_in_batch) if num_items_in_batch is not None
                     else sum(label != -100 for r in rows for label in r.labels[1:]))
            scale = 1.0 / max(count, 1.0)
            if self.args.average_tokens_across_devices and num_items_in_batch is not None:
                scale *= self.accelerator.num_processes // self.get_tp_size()
            scaled = self.loss_is_scaled_for_ga
            if scaled is None:
                scaled = (self.model_accepts_loss_kwargs and num_items_in_batch is not None) \
                    or self.compute_loss_func is not None
            return scale if scaled else scale / self.current_gradient_accumulation_steps

        def _shared_head_step(self, model: Any, inputs: Any, rows: list[Any], num_items_in_batch: Any) -> Any:
            import torch

            from train.shared_head import group_backward, head_groups

            model.train()
            if hasattr(self.optimizer, "train") and callable(self.optimizer.train):
                self.optimizer.train()
            scale = self._loss_scale(rows, num_items_in_batch)
            total = 0.0

            def backward(loss: Any) -> None:
                nonlocal total
                total += float(loss.detach())
                self.accelerator.backward(loss)

            def score(m: Any, ids: Any, shift: Any, cache: Any) -> Any:
                with head_scope():
                    return m(input_ids=ids, shift_labels=shift, fused_lm_head=True,
                             **({"cache": cache} if cache is not None else {}))

            outputs = []
            with self.compute_loss_context_manager():
                for group, head in head_groups(rows):
                    outputs += group_backward(model, group, head, scale, backward, score)
            valid = sum(int(o.label_mask.sum()) for o in outputs)
            if outputs and outputs[0].entropy is not None:
                entropy = sum(float(o.entropy.detach().sum()) for o in outputs)
                self._metrics["train"]["entropy"].append(entropy / valid if valid else 0.0)
            if outputs and outputs[0].is_top1 is not None:
                correct = sum(int(o.is_top1.sum()) for o in outputs)
                self._metrics["train"]["mean_token_accuracy"].append(correct / valid if valid else 0.0)
            self._total_train_tokens += int(inputs["attention_mask"].sum())
            self._metrics["train"]["num_tokens"] = [self._total_train_tokens]
            return torch.tensor(total)

    return FasterSFTTrainer


def build_sft_trainer(dataset_path: Path | str, cfg: SFTStageConfig, out_dir: Path | str,
                      callbacks: list[Any] | None = None) -> tuple[Any, dict[str, Any]]:
    """An `SFTTrainer` on a verified `sft` release, ready to `train()`, and facts for the summary.

    Call inside `hub_offline()`. An `sft_recovery` release's failed turns (`train: false`)
    get no loss: `check_loss_marks` refuses a setup that would train them. TRL truncates to `cfg.max_length` (keeping the start) and
    drops rows left without loss tokens; with packing it cuts overflow instead. Raises
    `DatasetError`, before loading the weights, when `cfg.max_length` would drop rows
    (`check_max_length`, naming the length needed), and when no loss token is left. The eval set is `cfg.eval_split` when it has rows.
    """
    from trl import SFTConfig

    out = Path(out_dir)
    manifest, _ = release_files(dataset_path)
    if not is_sft_kind(manifest.kind):
        raise store.DatasetError(f"{dataset_path} is a {manifest.kind!r} dataset, not an sft release")
    model_path = resolve_model(cfg.model)
    tokenizer = load_tokenizer(model_path)
    use_chat_template(tokenizer, cfg.chat_template_path)
    markers = check_generation_markers(tokenizer) if cfg.assistant_only_loss else None
    train_ds = to_trl_sft(load_release(dataset_path, "train"), tokenizer)
    if len(train_ds) == 0:
        raise store.DatasetError(f"{dataset_path}: the train split has no rows")
    eval_ds = to_trl_sft(load_release(dataset_path, cfg.eval_split), tokenizer) if cfg.eval_split else None
    eval_ds = eval_ds if eval_ds is not None and len(eval_ds) else None
    template = training_template(tokenizer) if markers == "trl" else None
    check_loss_marks(dataset_path, cfg, tokenizer,
                     sum(loss_marked_turns(d) for d in (train_ds, eval_ds) if d is not None), template)
    check_renders_tool_use(dataset_path, tokenizer, train_ds, template)
    lengths = check_max_length(dataset_path, cfg, tokenizer, {"train": train_ds, "eval": eval_ds}, template,
                               model_context(model_path))
    cfg = cfg.model_copy(update={"max_length": lengths["max_length"]})
    model = load_weights(model_path)

    peft_config = None
    if cfg.lora:
        from peft import LoraConfig

        peft_config = LoraConfig(r=cfg.lora_r, lora_alpha=cfg.lora_alpha or 2 * cfg.lora_r, lora_dropout=0.0,
                                 target_modules=cfg.lora_target_modules, task_type="CAUSAL_LM")
    args = SFTConfig(**{
        **cfg.trainer_args(out),
        "per_device_eval_batch_size": cfg.per_device_train_batch_size,
        "max_length": cfg.max_length,
        "assistant_only_loss": cfg.assistant_only_loss,
        "packing": cfg.packing,
        "eval_strategy": "steps" if cfg.eval_steps and eval_ds is not None else "no",
        "eval_steps": cfg.eval_steps,
        **cfg.extra,
    })
    trainer_class = sft_trainer_class(cfg.lm_head_loss_positions_only, cfg.shared_head)
    trainer = trainer_class(model=model, args=args, train_dataset=train_ds, eval_dataset=eval_ds,
                            processing_class=tokenizer, peft_config=peft_config,
                            callbacks=[metrics_callback(out / METRICS_FILE), *(callbacks or [])])
    train_tokens = token_stats(trainer.train_dataset)
    if not train_tokens["rows"] or train_tokens["loss_tokens"] == 0:
        # keep_start truncation (and packing's "bfd" overflow cut) can remove every assistant
        # token of long agent conversations; TRL then trains on nothing with a loss of 0.
        raise store.DatasetError(
            f"{dataset_path}: no loss tokens left after truncation to max_length={cfg.max_length} "
            f"(assistant_only_loss={cfg.assistant_only_loss}, packing={cfg.packing}): {train_tokens}")
    facts = {
        "manifest": manifest, "model_path": model_path, "tokenizer": tokenizer,
        "train_rows": len(train_ds), "eval_rows": len(eval_ds) if eval_ds is not None else 0,
        "train_tokens": train_tokens, "eval_tokens": token_stats(trainer.eval_dataset), "lengths": lengths,
    }
    return trainer, facts


def run_sft(dataset_path: Path | str, cfg: SFTStageConfig, out_dir: Path | str,
            callbacks: list[Any] | None = None) -> dict[str, Any]:
    """Fine-tune `cfg.model` on the `train` split of a verified `sft` release; returns the summary.

    Loss on assistant turns only when `cfg.assistant_only_loss` (our template has
    `{% generation %}` markers). Evaluates on `cfg.eval_split` after training when that
    split has rows. Nothing is downloaded from the Hub; logs go to `out_dir` only.
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    manifest, _ = release_files(dataset_path)
    write_run_record(out, "sft", dataset_path, manifest, cfg.model_dump())
    try:
        summary = _train_sft(dataset_path, cfg, out, started, callbacks)
    except BaseException as exc:
        write_run_record(out, "sft", dataset_path, manifest, cfg.model_dump(), status="failed",
                         error=f"{type(exc).__name__}: {exc}"[:1000])
        raise
    write_run_record(out, "sft", dataset_path, manifest, cfg.model_dump(), status="done",
                     steps=summary["steps"], final_loss=summary["final_loss"],
                     eval_loss=summary["eval"].get("eval_loss"), final_model=summary["final_model"],
                     wall_s=summary["wall_s"])
    return summary


def _train_sft(dataset_path: Path | str, cfg: SFTStageConfig, out: Path, started: float,
               callbacks: list[Any] | None) -> dict[str, Any]:
    with hub_offline():
        trainer, facts = build_sft_trainer(dataset_path, cfg, out, callbacks)
        result = trainer.train()
        has_eval = trainer.eval_dataset is not None and len(trainer.eval_dataset) > 0
        eval_metrics = trainer.evaluate() if has_eval else {}
        final = save_final(trainer, facts["tokenizer"], out, cfg.lora)

    manifest = facts["manifest"]
    losses = step_logs(trainer.state.log_history, "loss")
    curves = write_curves(out, ["loss", "eval_loss", "grad_norm", "learning_rate"], "SFT")
    return write_summary(out, {
        "stage": "sft",
        "steps": trainer.state.global_step,
        "losses": losses,
        "final_loss": losses[-1]["loss"] if losses else None,
        "train_runtime_s": result.metrics.get("train_runtime"),
        "seconds_per_step": round(result.metrics["train_runtime"] / max(trainer.state.global_step, 1), 3),
        "wall_s": round(time.monotonic() - started, 3),
        "eval": eval_metrics,
        "dataset": {"path": str(dataset_path), "name": manifest.name, "version": manifest.version,
                    "rows": manifest.rows, "train_rows": facts["train_rows"], "eval_rows": facts["eval_rows"],
                    "train_tokens": facts["train_tokens"], "eval_tokens": facts["eval_tokens"],
                    "lengths": facts["lengths"]},
        "model": {"requested": cfg.model, "path": facts["model_path"], "lora": cfg.lora},
    }, cfg, final, curves)
